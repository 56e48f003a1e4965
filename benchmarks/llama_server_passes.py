"""What one more forward pass costs llama-server when each slot has its own KV stream (issue 28).

llama-server without `--kv-unified` gives each slot a KV stream, and llama.cpp then splits a step's batch into
ubatches of consecutive sequence ids (`split_equal(n_ubatch, sequential=true)` in llama-context.cpp): busy slots
{0, 1, 2, 5} decode in two forward passes, {0, 1, 2} and {5}. The scheduler (serving/engine/core.py) prices each
pass past the first as an empty step (the fixed overhead and the weights' read, `step_s(0, 0)`), on top of the
step of the whole batch. This script measures what a pass costs: k streams pinned to slots (`id_slot`, the native
`/completion` endpoint), contiguous (one pass) against the same k spread over the ring (several), each step timed
from the streams' token arrivals while all k decode:

    python benchmarks/llama_server_passes.py http://127.0.0.1:8040 [--reps 3] [--tokens 48] [--seed 0] [--out F]

Start the server as the protocol does (`llama-server -m MODEL -np 16 -c 8192 -t 1`), nothing else loading it.
Prints, per set of slots, the median step and the sum of its passes' steps measured contiguous (the "sum" column):
where a step costs what its passes cost apart, the two agree.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from tokenroof.measure.http.run import WORDS  # bench's prompt words, a token each

# slot sets: contiguous (one pass) and spread over the ring (several): name → slots
SETS = {
    "1": [0],
    "2": [0, 1],
    "2 as 1+1": [0, 8],
    "4": [0, 1, 2, 3],
    "4 as 1+1+1+1": [0, 4, 8, 12],
    "8": list(range(8)),
    "8 as 4+4": [0, 1, 2, 3, 8, 9, 10, 11],
    "8 as 2+2+2+2": [0, 1, 4, 5, 8, 9, 12, 13],
    "8 as 1×8": list(range(0, 16, 2)),
    "12": list(range(12)),
    "12 as 4+4+4": [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13],
    "16": list(range(16)),
}


SETTLE_S = 1.0  # between sets, for the slots to be released
TRIES = 3  # a set whose streams come back short (now and then one ends at once, unexplained) runs again


class ShortStream(Exception):
    pass


def passes(slots: list[int]) -> list[int]:
    """The sizes of the runs of consecutive ids: the forward passes llama.cpp splits the step into."""
    ordered, sizes = sorted(slots), []
    for i, slot in enumerate(ordered):
        if i and ordered[i - 1] == slot - 1:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


async def stream(session: aiohttp.ClientSession, url: str, slot: int, rng: random.Random, tokens: int) -> list[float]:
    """One request pinned to `slot` (a fresh prompt, no prompt cache): the arrival time of each streamed token."""
    body = {
        "prompt": " ".join(rng.choice(WORDS) for _ in range(128)),
        "n_predict": tokens,
        "ignore_eos": True,
        "stream": True,
        "id_slot": slot,
        "cache_prompt": False,
        "temperature": 0.0,
    }
    times: list[float] = []
    async with session.post(url + "/completion", json=body) as response:
        if response.status != 200:
            raise SystemExit(f"{url}/completion: HTTP {response.status}: {(await response.text())[:200]}")
        async for line in response.content:
            if line.startswith(b"data:"):
                event = json.loads(line[5:])
                if "error" in event:
                    raise SystemExit(f"{url}/completion (slot {slot}): {event['error']}")
                if event.get("stop"):
                    break
                times.append(time.perf_counter())
    return times


async def step_ms(session: aiohttp.ClientSession, url: str, slots: list[int], rng: random.Random, tokens: int) -> float:
    """The median gap between tokens while every stream decodes (after the last first token, before the first
    last one)."""
    arrivals = await asyncio.gather(*(stream(session, url, s, rng, tokens) for s in slots))
    if min(len(t) for t in arrivals) < 2:
        raise ShortStream(f"slots {slots}: a stream sent {min(len(t) for t in arrivals)} tokens of {tokens}")
    start, end = max(t[1] for t in arrivals), min(t[-1] for t in arrivals)
    gaps = [b - a for t in arrivals for a, b in itertools.pairwise(t) if a >= start and b <= end]
    if not gaps:
        raise SystemExit(f"slots {slots}: the streams never decoded together; raise --tokens")
    return statistics.median(gaps) * 1e3


async def measure(url: str, reps: int, tokens: int, seed: int) -> dict[str, float]:
    rng, found = random.Random(seed), {name: [] for name in SETS}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await step_ms(session, url, [0, 1], rng, 8)  # warm up
        for rep in range(reps):
            for name, slots in SETS.items():
                for attempt in range(TRIES):
                    await asyncio.sleep(SETTLE_S)
                    try:
                        found[name].append(await step_ms(session, url, slots, rng, tokens))
                        break
                    except ShortStream as exc:
                        if attempt == TRIES - 1:
                            raise SystemExit(f"{exc} ({TRIES} tries)") from None
                        print(f"  {exc}: again", file=sys.stderr)
                print(f"  rep {rep} {name:14s} {found[name][-1]:6.1f} ms", file=sys.stderr, flush=True)
    return {name: statistics.median(values) for name, values in found.items()}


def table(steps: dict[str, float]) -> list[dict[str, object]]:
    """Each set's step beside the sum of its passes' steps measured contiguous (None where a size was not)."""
    alone = {len(SETS[name]): ms for name, ms in steps.items() if len(passes(SETS[name])) == 1}
    rows = []
    for name, ms in steps.items():
        sizes = passes(SETS[name])
        total = sum(alone[s] for s in sizes) if all(s in alone for s in sizes) else None
        rows.append({"slots": name, "passes": sizes, "step_ms": ms, "sum_of_passes_ms": total})
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48, help="tokens each stream generates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the table here as JSON")
    args = parser.parse_args(argv)
    rows = table(asyncio.run(measure(args.url.rstrip("/"), args.reps, args.tokens, args.seed)))
    print(f"{'slots':14s} {'passes':14s} {'step ms':>8s} {'sum':>8s}")
    for r in rows:
        total = r["sum_of_passes_ms"]
        print(
            f"{r['slots']:14s} {'+'.join(map(str, r['passes'])):14s} {r['step_ms']:8.1f} "
            + (f"{total:8.1f} ({r['step_ms'] / total - 1:+.0%})" if total is not None else "")
        )
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
