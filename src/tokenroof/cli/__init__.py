"""The `tokenroof` command: parse, call one library function, print a table or JSON.

Commands live in `specs_cmds` (roofline, models, hardware), `measured` (predict, advise),
`serving` (emulate, bench), `capacity` (simulate, plan) and `local` (bench-local, calibrate); each
registers on `app` (`common`: what they share).
"""

# ruff: noqa: I001  (the commands register on `app` in the order `tokenroof --help` lists them)
from __future__ import annotations

import sys
from collections.abc import Sequence

from tokenroof.cli.common import FLAG_RANGES, app, check_flags, normalize_argv, parse_numbers
from tokenroof.cli import specs_cmds
from tokenroof.cli import measured
from tokenroof.cli import serving
from tokenroof.cli import capacity
from tokenroof.cli import local
from tokenroof.cli import report_cmds


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point."""
    args = normalize_argv(sys.argv[1:] if argv is None else argv)
    app(args=args, prog_name="tokenroof")


__all__ = [
    "FLAG_RANGES",
    "app",
    "capacity",
    "check_flags",
    "local",
    "main",
    "measured",
    "normalize_argv",
    "parse_numbers",
    "report_cmds",
    "serving",
    "specs_cmds",
]
