"""requests.jsonl: a settings header, then every request as it ends, point starts and point summaries; resume.

Lines, by `type`:
- header: the measurement settings (a resumed run must keep them);
- start: a point begins (its attempt number; an interrupted or invalid point is measured again);
- sent: one request, written the moment it is sent (flushed): a crash (SIGKILL) cannot lose it; the run that
  resumes records each one that never ended as cancelled, cut by the crash;
- request: one request, written the moment it ends (flushed);
- point: a point's summary, written when it ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenroof.errors import ParameterError, TokenroofError, verbatim
from tokenroof.io.measurements import read_jsonl
from tokenroof.measure.http.client import RequestRecord
from tokenroof.measure.http.redact import Redactor

Notice = Callable[[str], None]
# the settings --resume checks, each named by the parameter that sets it (the prompts file by its contents' hash);
# the URL is not one of them (a server restarted on another port is the same measurement), though the header keeps it
SETTINGS = (
    "endpoint",
    "model",
    "input_len",
    "output_len",
    "prompts_sha256",
    "ignore_eos",
    "burstiness",
    "warmup",
    "requests_per_point",
    "seed",
    "ttft_slo_ms",
    "tpot_slo_ms",
    "max_failure_fraction",
)
HASHED = {"prompts_sha256": "prompts"}  # a setting kept as a hash: the parameter it is the hash of


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


@dataclass
class Previous:
    """What an earlier run left in requests.jsonl."""

    header: dict[str, Any] | None = None
    points: dict[str, dict[str, Any]] = field(default_factory=dict)  # the last summary of each point
    attempts: dict[str, int] = field(default_factory=dict)
    next_index: dict[str, int] = field(default_factory=dict)  # first unused request index of each point
    sent: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)  # sent, never ended (a crash)
    lines: int = 0

    def add(self, obj: Any, where: str = "requests.jsonl") -> None:
        """One line of an earlier run, checked: what --resume keeps must be what a run writes (a point's summary
        against bench's schema); anything else is one line naming the file, the line and the key."""
        if not isinstance(obj, dict):
            raise TokenroofError(f"{where}: not a JSON object ({type(obj).__name__}); not a line tokenroof bench wrote")
        kind, label = obj.get("type"), obj.get("point")
        if kind == "header":
            self.header = obj
            return
        if kind == "calibration":  # the requests that sized the prompts (run.calibrate_words): never measured
            return
        if not isinstance(label, str):
            raise TokenroofError(
                f"{where}: a {kind!r} line whose point is {short(label)}, not a name like 'concurrency=8'"
            )
        if kind == "start":
            attempt = obj.get("attempt")
            if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
                raise TokenroofError(f"{where}: a start line whose attempt is {short(attempt)}, not a count from 1")
            self.attempts[label] = max(self.attempts.get(label, 0), attempt)
        elif kind in ("request", "sent"):
            index = obj.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                raise TokenroofError(f"{where}: a {kind} line whose index is {short(index)}, not an integer")
            self.attempts.setdefault(label, 1)
            self.next_index[label] = max(self.next_index.get(label, 0), index + 1)
            if kind == "sent":
                self.sent[(label, index)] = obj
            else:
                self.sent.pop((label, index), None)
        elif kind == "point":
            from tokenroof.io.contract import check

            self.points[label] = check("bench-point", obj, where)
        else:
            raise TokenroofError(
                f"{where}: a line of type {short(kind)}; tokenroof bench writes header, calibration, start, sent, "
                "request and point lines"
            )

    def valid_points(self) -> dict[str, dict[str, Any]]:
        return {label: p for label, p in self.points.items() if not p.get("invalid")}


def repair_cut_line(path: Path, notice: Notice) -> None:
    """A crash mid-write leaves a last line without its newline: drop it (saying so) so appends start clean."""
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    with path.open("r+b") as f:
        f.truncate(keep)
    notice(f"{path}: dropped a cut last line ({len(data) - keep} bytes, written when a run stopped mid-write)")


def read_previous(path: Path, notice: Notice) -> Previous:
    """Repair a cut last line, then read every line (a broken line elsewhere is an error: it is not a cut)."""
    previous = Previous()
    if not path.exists():
        return previous
    repair_cut_line(path, notice)
    for number, obj in read_jsonl(path):
        previous.add(obj, f"{path}:{number}")
        previous.lines += 1
    return previous


def check_settings(previous: Previous, settings: dict[str, Any], path: Path) -> None:
    """--resume continues a run only under the settings it was measured with; names the first that differs."""
    if previous.header is None:
        if previous.lines:
            raise ParameterError(
                f"{verbatim(path)} has no settings header (an older tokenroof wrote it), so {{}} cannot check it: "
                "give another {}",
                "resume",
                "out",
            )
        return
    old = previous.header.get("settings", {})
    if not isinstance(old, dict):
        raise ParameterError(
            f"{verbatim(path)}: its header's settings are {type(old).__name__}, not an object: {{}} cannot check them "
            "(give "
            "another {})",
            "resume",
            "out",
        )
    for key in SETTINGS:
        if old.get(key) != settings.get(key):
            parameter = HASHED.get(key, key)
            what = " (file contents)" if key in HASHED else ""
            was, now, where = verbatim(short(old.get(key))), verbatim(short(settings.get(key))), verbatim(path)
            raise ParameterError(
                f"{{}}: {{}}{what} was {was} in {where}, now {now}; a resumed run keeps its measurement settings "
                "(give another {} to measure with new ones)",
                "resume",
                parameter,
                "out",
            )


class Recorder:
    """Appends to requests.jsonl, one flushed line per object, every string redacted."""

    def __init__(self, path: Path, redactor: Redactor) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.redactor = redactor
        self.file = path.open("a")

    def request(self, record: RequestRecord) -> None:
        self.write({"type": "request", **record.to_json()})

    def write(self, obj: dict[str, Any]) -> None:
        if self.file.closed:
            return
        line = json.dumps(obj)
        if self.redactor.needed(line):
            line = json.dumps(self.redactor.value(obj))
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
