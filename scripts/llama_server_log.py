"""llama-server's log (its INFO lines) as one CSV row per task: the slot it took, when it was launched and released,
and the server's own prompt and decode timings: the server-slots.csv of examples/llama-server-*/.

    python scripts/llama_server_log.py SERVER_LOG > server-slots.csv

The log's clock is minutes.seconds.milliseconds.microseconds since the server started (llama.cpp's common/log.cpp);
a task the log did not finish (no release line) has its missing fields empty.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

LINE = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) I slot +(\w+): id +(\d+) \| task (\d+) \| (.*)$")
PROMPT = re.compile(r"prompt eval time = +([\d.]+) ms / +(\d+) tokens")
DECODE = re.compile(r"^ *eval time = +([\d.]+) ms / +(\d+) tokens")
FIELDS = ("task", "slot", "launch_s", "release_s", "prompt_tokens", "prompt_ms", "output_tokens", "eval_ms")


def seconds(minutes: str, secs: str, millis: str, micros: str) -> float:
    return int(minutes) * 60 + int(secs) + int(millis) / 1e3 + int(micros) / 1e6


def tasks(log: str) -> list[dict[str, str]]:
    """One row per task, in the order the tasks were launched."""
    rows: dict[int, dict[str, str]] = {}
    for line in log.splitlines():
        match = LINE.match(line)
        if match is None:
            continue
        *clock, what, slot, task, text = match.groups()
        row = rows.setdefault(int(task), dict.fromkeys(FIELDS, "") | {"task": task, "slot": slot})
        if what == "launch_slot_":
            row["launch_s"] = f"{seconds(*clock):.6f}"
        elif what == "release":
            row["release_s"] = f"{seconds(*clock):.6f}"
        elif (prompt := PROMPT.search(text)) is not None:
            row["prompt_ms"], row["prompt_tokens"] = prompt.groups()
        elif (decode := DECODE.search(text)) is not None:
            row["eval_ms"], row["output_tokens"] = decode.groups()
    return [rows[task] for task in sorted(rows, key=lambda t: float(rows[t]["launch_s"] or "inf"))]


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    print(
        "# from llama-server's own log (its INFO lines), one row per task: the slot it took, when it was launched and "
        "released (seconds since the server started), and the server's own prompt and decode timings"
    )
    writer = csv.DictWriter(sys.stdout, FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(tasks(Path(argv[0]).read_text(errors="replace")))


if __name__ == "__main__":
    main(sys.argv[1:])
