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
    """Console entry point: `--config FILE` (anywhere) gives any command's flags from TOML (cli/config.py)."""
    import typer.main
    from rich.markup import escape

    from tokenroof.cli.common import err
    from tokenroof.cli.config import default_map, split_config
    from tokenroof.errors import TokenroofError

    args = normalize_argv(sys.argv[1:] if argv is None else argv)
    try:
        args, config = split_config(args)
        group = typer.main.get_command(app)
        running = next((a for a in args if a in group.commands), None)  # type: ignore[attr-defined]
        defaults = None if config is None else default_map(config, group, running)
    except TokenroofError as exc:
        err.print(f"[bold red]error:[/] {escape(exc.as_flags())}", highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    app(args=args, prog_name="tokenroof", default_map=defaults)


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
