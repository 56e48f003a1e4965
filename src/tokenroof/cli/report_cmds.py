"""report and ui: looking at the answers instead of reading them."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from tokenroof.cli.common import app, err, handle_errors


@app.command()
@handle_errors
def report(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Bench folders, predict/advise/simulate/plan/roofline --json files and measurement tables (CSV/JSON)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
    title: Annotated[str, typer.Option(help="The page's title.")] = "tokenroof report",
) -> None:
    """One self-contained HTML page (plotly.js inlined, no network to view it): decode curve, advice, bench levels,
    simulate, plan, warnings and provenance."""
    from tokenroof.report import write_report

    command = shlex.join(["tokenroof", "report", *map(str, runs), "--out", str(out), "--title", title])
    count = write_report(runs, out, command, title)
    err.print(f"wrote {out} ({count} input(s)); open it in a browser", highlight=False)


@app.command()
@handle_errors
def ui(
    host: Annotated[str, typer.Option(help="Address to listen on (anything but loopback is reachable by others).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """A local page to explore first principles and fit a measurement file, served by this process."""
    from tokenroof.serving.emulate.checks import check_port
    from tokenroof.ui import serve

    check_port(port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err.print(f"warning: listening on {host}: anyone who can reach it can use the page", highlight=False)
    err.print(f"tokenroof ui on http://{host}:{port}/ (Ctrl-C stops it)", highlight=False)
    serve(host, port)
