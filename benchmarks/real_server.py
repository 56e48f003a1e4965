"""simulate against a real server: sweep it, fit, predict open-loop loads, measure the same loads, compare.

Any OpenAI-compatible URL (llama.cpp's llama-server, vLLM, SGLang, the emulator), or `--serve MODEL`: the
script starts `tokenroof serve` (a real PyTorch engine under tokenroof's own scheduler, one CPU thread) and stops
it at the end (`make real-server`: llama-123m, ~17 minutes on 2 cores):

1. a closed-loop sweep (`bench --concurrency`) up to the server's slot count;
2. the scheduler's model fitted to it (serving/replay.py, what `predict --save-model` writes), and the rate a
   replica kept full carries (`advise`'s and `plan`'s figure) as the predicted saturation;
3. Poisson loads at fractions of that rate, each measured with fresh prompts (`bench --request-rate`) and
   simulated with the same arrivals and lengths (`simulate --trace`);
4. per load: throughput, running batch, TTFT and TPOT p50/p90/p99, predicted beside measured, each over the
   window bench measured the load over, and the saturation the loads show (what the server completed at a load
   it fell behind, over the middle three fifths of the run: the estimator of the predicted saturation; or, where it
   kept up with a higher rate than any such load carried, that rate, said to be a floor) beside the predicted one
   and the one simulated on that load's arrivals.

`--kv-slots`: the server gives each slot its own KV stream (llama-server `-np N` without `--kv-unified`, its
default): the fit and the simulations run the scheduler with per-slot streams (a forward pass per run of consecutive
busy slots), and each load's simulation starts from the ring of slots the server will hand out as the load begins
(`slot_order`: one request per slot, one at a time, the slots they took in order; OUT/load-F/slots.json), turned by
bench's calibration requests (`ring_at_start`); without slots.json, after the sweep's and the earlier loads'
arrivals replayed. On llama-server TPOT p50 at 60 / 90% load was −50 / −42% without per-slot streams (the
2026-12-04 run), +1 / +2% with them (2026-12-05, examples/llama-server/README.md); the ring read by task id instead
of probed took TPOT p50 at 30% load to −32% where the log's ring gave +6% (examples/llama-server-2026-12-06a/). On
llama-server a batch cap is a restart with a new `-np`: with --kv-slots the run prints how to bench advise's cap on
the restarted server into OUT/advised-cCAP/, and reads it when run again.
The sweep should meet a freshly started server: its fit assumes fresh slots.

`--precondition N` runs a closed loop of N requests at the slot count before the sweep and before each load
(discarded, in OUT/precondition-*), so that every phase starts from one server state.

    python benchmarks/real_server.py URL|--serve MODEL [--slots 16] [--concurrency 1,2,4,8,16] [--input-len 128]
        [--output-len 64] [--loads 0.3,0.6,0.9,1.1] [--requests 80] [--seed 0] [--out real-server]
        [--model M --hardware H] [--budget N] [--kv-slots] [--precondition N]
    python benchmarks/real_server.py --offline --out COPY_OF_A_RUN [the run's flags]

Figures print as they arrive and go to OUT/report.json; every request is in OUT/*/requests.jsonl. A phase whose
files are already in OUT is not measured again; `--offline` re-scores a finished OUT (a copy of one of the examples/
folders) with the code as it stands, without a server: the fit, the simulated loads, advise's cap (benched only if
OUT holds it) and, where OUT has the engine's steps.jsonl, the step check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import random
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.fit.core import fit_table
from tokenroof.fit.predict import MeasuredWorkload as Measured
from tokenroof.fit.predict import prior_for
from tokenroof.io.measurements import read_table
from tokenroof.measure.http.run import WORDS, BenchConfig, run_bench
from tokenroof.serving.capacity import STEP_SENSITIVITY
from tokenroof.serving.deployment import Physics
from tokenroof.serving.emulate.process import server_process
from tokenroof.serving.engine.core import Server
from tokenroof.serving.replay import serving_fit
from tokenroof.serving.saturation import at_cap, carried_rate, saturation_rate
from tokenroof.serving.simulate import Lengths, Trace, simulate

STATS = ("p50", "p90", "p99")


def precondition(args: argparse.Namespace, folder: Path) -> None:
    """A closed loop at the slot count, its records kept apart: every phase starts from the same server state."""
    if args.precondition <= 0 or (folder / "summary.json").exists():
        return
    cfg = BenchConfig(
        url=args.url,
        concurrencies=[args.slots],
        input_len=args.input_len,
        output_len=args.output_len,
        warmup=0,
        requests_per_point=args.precondition,
        out_dir=folder,
        max_duration_s=args.max_duration,
        timeout_s=args.max_duration,
        max_failure_fraction=1.0,
    )
    asyncio.run(run_bench(cfg))


def offline_missing(args: argparse.Namespace, folder: Path) -> None:
    """--offline: a phase whose measurement is not in OUT cannot be re-scored."""
    if args.offline:
        sys.exit(f"--offline: {folder} holds no measurement to re-score (run against a server to measure it)")


def sweep(args: argparse.Namespace, out: Path) -> Path:
    folder = out / "sweep"
    if not (folder / "summary.csv").exists():
        offline_missing(args, folder)
        precondition(args, out / "precondition-sweep")
        cfg = BenchConfig(
            url=args.url,
            concurrencies=[int(c) for c in args.concurrency.split(",")],
            input_len=args.input_len,
            output_len=args.output_len,
            out_dir=folder,
            max_duration_s=args.max_duration,
            timeout_s=args.max_duration,
        )
        asyncio.run(run_bench(cfg, notice=lambda text: print(f"  note: {text}")))
    return folder


PROBE_WORDS = 128  # a probe's prompt: 129 tokens, so a cached prompt would need 13 in common to be picked by prefix


def slot_order(url: str) -> list[int] | None:
    """llama-server's slots from least to most recently used, as the next arrivals will take them; None where the
    server has no /slots or the probe failed.

    llama-server hands an arrival the idle slot released longest ago (`t_last_used`, set at release; never-used
    slots first, the highest id first), which its GET /slots does not show: it shows each slot's last task id,
    which orders the slots by when their last requests *arrived*. After a closed loop the two differ (requests
    running together end out of order: after the 2026-12-06a sweep the ring began 15, 12, 5, 7, 10 where the task
    ids said 15, 13, 14, 10, 11; TPOT p50 at 30% load simulated from the one −32%, from the other +6%). So one
    request per slot goes first, each sent when the one before has ended: each takes the least recently used slot
    and ends before the next arrives, so the slots the probes took, in order, are the ring, which they leave as it
    was. Each probe's prompt is fresh random words, so that no slot is picked by a cached prompt's prefix
    (llama-server's --slot-prompt-similarity, 0.1) instead; the slots they report (`id_slot`) must all differ.
    Without `id_slot` the ring is read from /slots after the probes, by task id, which the probes have put in
    that order."""
    try:
        with urllib.request.urlopen(f"{url}/slots", timeout=5) as answer:
            found = json.loads(answer.read())
        if not isinstance(found, list) or not found or not all(isinstance(s, dict) and "id" in s for s in found):
            return None
        taken = []
        for _ in found:
            words = " ".join(random.choice(WORDS) for _ in range(PROBE_WORDS))
            body = json.dumps({"prompt": words, "n_predict": 1, "cache_prompt": False}).encode()
            request = urllib.request.Request(f"{url}/completion", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                taken.append(json.loads(answer.read()).get("id_slot"))
        if all(isinstance(slot, int) for slot in taken):
            return taken if len(set(taken)) == len(taken) else None
        with urllib.request.urlopen(f"{url}/slots", timeout=5) as answer:
            found = json.loads(answer.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    if not isinstance(found, list) or not all(isinstance(s, dict) and "id" in s for s in found):
        return None
    used = sorted((s["id_task"], s["id"]) for s in found if isinstance(s.get("id_task"), int) and s["id_task"] >= 0)
    return [slot for _, slot in used] or None


def measure_load(args: argparse.Namespace, rate: float, folder: Path, draw: int = 0) -> dict[str, Any]:
    """One load, measured unless OUT holds it: its arrivals drawn with bench's seed `--seed` + `draw` (each load its
    own Poisson sample: with one seed for all, every load's arrivals are one pattern scaled by its rate, and every
    load meets the same bursts at the same places, as on every run until 2026-12-06d)."""
    if not (folder / "summary.json").exists():
        offline_missing(args, folder)
        precondition(args, folder.with_name(f"precondition-{folder.name}"))
        order = slot_order(args.url) if args.kv_slots else None
        if order is not None:  # the server's slot use as the load begins: where the simulation starts from
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "slots.json").write_text(json.dumps({"order": order}))
        elif args.kv_slots:
            print("  note: the server's slot ring could not be probed (no /slots, or a probe failed): this load is")
            print("  simulated after the sweep's and the earlier loads' arrivals replayed instead")
        cfg = BenchConfig(
            url=args.url,
            rates=[rate],
            input_len=args.input_len,
            output_len=args.output_len,
            requests_per_point=args.requests,
            seed=args.seed + draw,
            out_dir=folder,
            max_duration_s=args.max_duration,
            timeout_s=args.max_duration,
        )
        asyncio.run(run_bench(cfg))
    (point,) = json.loads((folder / "summary.json").read_text())["points"]
    return dict(point)


def ring_at_start(order: list[int], slots: int, requests: Path) -> list[int]:
    """The ring as the load's first request finds it: bench first sends its calibration requests (`calibration`
    records, each answered before the next is sent), and each takes a slot by llama-server's rule (never-used slots
    first, the highest id first; then the one released longest ago), moving it to the end of the ring. On 06b, TPOT
    p50 at 30 / 60% load went from −17 / −22% with the ring as probed to −3 / −12% with it turned."""
    calibrations = sum(bool(record.get("ok")) for record in bench_records(requests, "calibration"))
    released = dict.fromkeys(range(max(slots, max(order, default=-1) + 1)), -1)
    for rank, slot in enumerate(order):
        released[slot] = rank
    for rank in range(len(order), len(order) + calibrations):
        released[min(released, key=lambda s: (released[s], -s))] = rank
    return sorted((s for s in released if released[s] >= 0), key=released.__getitem__)


def load_traces(folder: Path) -> list[Trace]:
    """What the server was sent for a load, in order: its preconditioning closed loop's requests (if run), its own."""
    warm = folder.with_name(f"precondition-{folder.name}") / "requests.jsonl"
    return [Trace.read(path) for path in (warm, folder / "requests.jsonl") if path.exists()]


def predicted_load(
    model: Any, folder: Path, slots: int, budget: int | None, per_slot_kv: bool, history: Sequence[Trace]
) -> dict[str, Any]:
    """The fitted model run on the measured load's own arrivals and lengths. With per-slot KV streams the slots a
    request takes depend on the server's earlier use: the simulation starts from the slots as the server's /slots
    showed them when the load began (`slots.json`, turned by bench's calibration requests: `ring_at_start`), else
    after the server's earlier traffic (`history`: the sweep's and the earlier loads' own arrivals, replayed, and
    this load's preconditioning)."""
    *warm, trace = load_traces(folder)
    snapshot = folder / "slots.json"
    order = json.loads(snapshot.read_text())["order"] if per_slot_kv and snapshot.exists() else None
    if order is not None:
        order = ring_at_start(order, slots, folder / "requests.jsonl")
    run = trace if order is not None else Trace.after([*history, *warm], trace)
    result = simulate(
        model, run, slots, 0, None, max_num_batched_tokens=budget, per_slot_kv=per_slot_kv, slot_order=order
    )
    ends = [s.finished_s or 0.0 for s in result.sequences[result.first_measured :]]
    return result.summary() | {"carried_req_s": rate_of(ends)}


FELL_BEHIND = 0.95  # a load whose requests completed at under this share of the rate they were sent at fell behind


def saturation_shown(loads: list[dict[str, Any]]) -> tuple[float, dict[str, Any] | None, bool]:
    """The saturation the loads show: (the rate, the load that shows it, whether it is only a floor). A load the server
    fell behind (completions under FELL_BEHIND of the rate sent, each over the middle of its own events) carried about
    its saturation; a load it kept up with carried what was sent, a floor of it. A load that fell behind but carried
    less than another load was sent and kept up with is one draw's noise (over 60 requests a burst reads as a queue),
    not the saturation: the floor is the figure then, said to be one (None: no load, NaN). A load too short to tell a
    rate from (NaN: under five events) is left out."""
    told = [x for x in loads if math.isfinite(x["sent_req_s"]) and math.isfinite(x["carried_req_s"])]
    behind = [x for x in told if x["carried_req_s"] < FELL_BEHIND * x["sent_req_s"]]
    kept = [x for x in told if x not in behind]
    top = max(behind, key=lambda x: x["carried_req_s"], default=None)
    up = max(kept, key=kept_up_with, default=None)
    if up is not None and (top is None or kept_up_with(up) > top["carried_req_s"]):
        return kept_up_with(up), up, True
    return (math.nan, None, False) if top is None else (top["carried_req_s"], top, False)


def kept_up_with(load: dict[str, Any]) -> float:
    """The rate a load the server kept up with shows it can carry: what was sent, or what completed where less (within
    FELL_BEHIND of it)."""
    return float(min(load["sent_req_s"], load["carried_req_s"]))


def rate_of(times_s: list[float]) -> float:
    """saturation.carried_rate, NaN where too few events (a load of a handful of requests) to tell."""
    try:
        return carried_rate(times_s)
    except TokenroofError:
        return math.nan


def carried(folder: Path) -> tuple[float, float]:
    """(the rate a load's requests were sent at, every one; the rate the server completed them), each over the middle
    three fifths of its own events (saturation.carried_rate, the estimator of the predicted saturation)."""
    measured = [r for r in bench_records(folder / "requests.jsonl", "request") if r.get("index", 0) >= 0]
    ends = [float(r["end_s"]) for r in measured if r.get("ok") and r.get("end_s") is not None]
    return rate_of([float(r["start_s"]) for r in measured]), rate_of(ends)


def bench_records(path: Path, kind: str) -> list[dict[str, Any]]:
    """A bench requests.jsonl's records of one type ("request", "calibration"); a line that does not parse (cut by a
    crash) passes over."""
    found = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("type") == kind:
                found.append(record)
    return found


def row(name: str, got: dict[str, Any]) -> str:
    ttft = "/".join(f"{got['ttft_ms'][s]:.0f}" for s in STATS)
    tpot = "/".join(f"{got['tpot_ms'][s]:.1f}" for s in STATS)
    batch = got.get("running_batch", got.get("batch"))
    return (
        f"    {name:9} {got['throughput_tok_s']:8.1f} tok/s  batch {batch:5.2f}  TTFT {ttft:>17} ms  TPOT {tpot:>15} ms"
    )


def errors(predicted: dict[str, Any], measured: dict[str, Any]) -> dict[str, float]:
    """Relative error of each compared figure (predicted / measured − 1)."""
    found = {"throughput": predicted["throughput_tok_s"] / measured["throughput_tok_s"] - 1}
    for metric in ("ttft_ms", "tpot_ms"):
        for stat in STATS:
            found[f"{metric.removesuffix('_ms')} {stat}"] = predicted[metric][stat] / measured[metric][stat] - 1
    return found


@contextlib.contextmanager
def served(model: str, slots: int, max_model_len: int, log: Path) -> Iterator[str]:
    """`tokenroof serve MODEL` on a free port in its own process (one torch thread); its URL, stopped after."""
    args = ["serve", "--model", model, "--max-num-seqs", str(slots), "--max-model-len", str(max_model_len)]
    args += ["--threads", "1", "--step-log", str(log.with_name("steps.jsonl"))]
    try:
        with server_process(args, log, start_timeout_s=120) as url:
            print(f"0. {log.read_text().strip()} (log: {log})")
            yield url
    except TokenroofError as exc:
        sys.exit(str(exc))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="the server's base URL (or --serve MODEL)")
    parser.add_argument("--serve", metavar="MODEL", help="start `tokenroof serve --model MODEL` and measure it")
    parser.add_argument("--slots", type=int, default=16, help="the server's running-batch cap (llama-server -np)")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--input-len", type=int, default=128, help="prompt tokens, as the server counts them")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--loads", default="0.3,0.6,0.9,1.1", help="fractions of the predicted saturation rate")
    parser.add_argument("--requests", type=int, default=80, help="requests per load")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the loads' arrival draws: the first load's bench --seed, the next load's SEED + 1, and so on",
    )
    parser.add_argument("--max-duration", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=Path("real-server"))
    parser.add_argument("--model", "-m")
    parser.add_argument("--hardware", "-H")
    parser.add_argument("--budget", type=int, help="the server's prompt tokens per step, if known")
    parser.add_argument(
        "--kv-slots",
        action="store_true",
        help="the server gives each slot its own KV stream (llama-server -np N without --kv-unified)",
    )
    parser.add_argument(
        "--precondition", type=int, default=0, help="requests at the slot count before each phase (0: none)"
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="re-score the measurements already in OUT with this code's fit and simulator (no server)",
    )
    parser.add_argument("--tpot-slo-ms", type=float, help="5. advise a cap for this p99 TPOT, then bench it")
    parser.add_argument("--ttft-slo-ms", type=float, help="... and this p99 TTFT")
    args = parser.parse_args(argv)
    if args.offline:
        if args.url is not None or args.serve is not None:
            parser.error("--offline re-scores OUT's measurements: give no URL or --serve")
        if not args.out.is_dir():
            parser.error(f"--offline: {args.out} is not a folder of measurements")
        args.url = "(offline)"
        run(args)
        return
    if (args.url is None) == (args.serve is None):
        parser.error("give a server URL or --serve MODEL")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.serve is None:
        run(args)
        return
    max_model_len = 2 * (args.input_len + args.output_len) + 64
    with served(args.serve, args.slots, max_model_len, args.out / "serve.log") as url:
        args.url = url
        run(args)


def run(args: argparse.Namespace) -> None:
    print(f"1. sweep {args.url} at concurrency {args.concurrency} ({args.input_len} in / {args.output_len} out)")
    table = read_table([sweep(args, args.out)])
    if args.kv_slots:  # llama-server without --kv-unified: one KV stream per slot
        table = replace(table, semantics=replace(table.semantics, kv_slots=args.slots))
    per_slot_kv = bool(args.kv_slots)
    physics = Physics(args.model, args.hardware)
    prior = prior_for(table, physics, Measured()) if physics.known else None
    fit = fit_table(table, prior, n_samples=0)
    budget: int | str | None = args.budget if args.budget is not None else "fit"
    serving = serving_fit(fit, table, None, None, budget)
    if serving is None:
        sys.exit("the sweep measured no TTFT and no --model/--hardware price its prefill: nothing to simulate")
    model = serving.model
    print(
        f"2. fitted on the scheduler: {serving.describe()}; replays the sweep within TPOT {serving.tpot_rms:.1%}, "
        f"TTFT {serving.ttft_rms or 0:.1%} rms; {model}"
    )
    inputs = table.semantics.input_len or args.input_len
    lengths = Lengths(round(inputs)), Lengths(args.output_len)
    server = Server(None, serving.max_num_batched_tokens, per_slot_kv)
    full = at_cap(model, *lengths, args.slots, server)
    saturation = saturation_rate(model, *lengths, args.slots, server)
    print(
        f"   one replica kept full at {args.slots} slots by a closed loop: {full.throughput_tok_s:.1f} tok/s; "
        f"Poisson arrivals past saturation: {saturation:.3f} req/s carried (the loads' 100%)"
    )

    report: dict[str, Any] = {"url": args.url, "fit": serving.to_dict(), "predicted_saturation_req_s": saturation}
    loads = []
    warm = args.out / "precondition-sweep" / "requests.jsonl"
    history = [Trace.read(path) for path in (warm, args.out / "sweep" / "requests.jsonl") if path.exists()]
    for draw, fraction in enumerate(float(f) for f in args.loads.split(",")):
        rate = fraction * saturation
        folder = args.out / f"load-{fraction:g}"
        print(f"3. load {fraction:.0%} of the predicted saturation: {rate:.3f} req/s, {args.requests} requests")
        measured = measure_load(args, rate, folder, draw)
        predicted = predicted_load(model, folder, args.slots, serving.max_num_batched_tokens, per_slot_kv, history)
        # how far the simulated TTFT rests on the step time (simulate's own check): steps 3% slower, same arrivals
        slowed = model.scaled(1 + STEP_SENSITIVITY)
        slower = predicted_load(slowed, folder, args.slots, serving.max_num_batched_tokens, per_slot_kv, history)
        history += load_traces(folder)
        print(row("measured", measured))
        print(row("simulated", predicted))
        moved = slower["ttft_ms"]["p50"] / predicted["ttft_ms"]["p50"] - 1
        print(
            f"    simulated with every step {STEP_SENSITIVITY:.0%} slower: TTFT p50 {slower['ttft_ms']['p50']:.0f} ms "
            f"({moved:+.0%})"
        )
        if measured.get("invalid"):
            print(f"    (measured point invalid: {measured['invalid']})")
        found = errors(predicted, measured)
        print("    error: " + ", ".join(f"{k} {v:+.0%}" for k, v in found.items()))
        sent, done = carried(folder)
        loads.append(
            {
                "fraction": fraction,
                "rate_req_s": rate,
                "sent_req_s": sent,
                "carried_req_s": done,
                "simulated_carried_req_s": predicted["carried_req_s"],
                "errors": found,
                "measured": measured,
                "predicted": {k: predicted[k] for k in ("throughput_tok_s", "ttft_ms", "tpot_ms", "running_batch")},
                "predicted_ttft_p50_ms_at_slower_steps": slower["ttft_ms"]["p50"],
            }
        )
    measured_saturation, top, floor = saturation_shown(loads)
    report["loads"] = loads
    report["measured_saturation_req_s"] = measured_saturation
    report["measured_saturation_is_floor"] = floor
    below = [x for x in loads if x["fraction"] < 1.0]
    if below:
        summary = {k: float(np.median([abs(x["errors"][k]) for x in below])) for k in below[0]["errors"]}
        report["below_saturation_median_abs_error"] = summary
        print("4. below saturation, median |error|: " + ", ".join(f"{k} {v:.0%}" for k, v in summary.items()))
    if top is not None and floor:
        print(
            f"   saturation: at least {measured_saturation:.3f} req/s, the rate the server kept up with at "
            f"{top['fraction']:.0%} load (sent {top['sent_req_s']:.3f}, completed {top['carried_req_s']:.3f}; no load "
            f"it fell behind carried more); predicted {saturation:.3f}, "
            + (
                f"{saturation / measured_saturation - 1:+.0%} over that floor (only a prediction under it misses)"
                if saturation >= measured_saturation
                else f"{saturation / measured_saturation - 1:+.0%}: under what the server carried"
            )
        )
    elif top is not None:
        simulated = top["simulated_carried_req_s"]
        report["simulated_saturation_req_s"] = simulated
        print(
            f"   saturation: the server carried {measured_saturation:.3f} req/s at {top['fraction']:.0%} load (sent "
            f"{top['sent_req_s']:.3f}; completions over the run's middle three fifths); predicted {saturation:.3f} "
            f"({saturation / measured_saturation - 1:+.0%}), simulated on that load's arrivals {simulated:.3f} "
            f"({simulated / measured_saturation - 1:+.0%})"
        )
    if args.tpot_slo_ms is not None:
        report["advise"] = advise_check(args, args.out, round(inputs))
    if (args.out / "steps.jsonl").exists():
        report["steps"] = step_check(model, args.out / "steps.jsonl")
    (args.out / "report.json").write_text(json.dumps(report, indent=2, default=float))
    print(f"report: {args.out / 'report.json'}")


def step_check(model: Any, path: Path) -> dict[str, Any]:
    """The fitted step model against every step the engine logged (`serve --step-log`): where the simulation
    misses, is it the step time or the scheduling around it? Decode-only steps by batch, and steps with a prompt."""
    steps = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows: dict[str, list[tuple[float, float]]] = {}
    for s in steps:
        predicted = model.step_s(s["batch"], s["context_tokens"], s["prefill_tokens"], s["prefill_sq"])
        key = f"decode b={s['batch']}" if s["prefill_tokens"] == 0 else "with a prompt"
        rows.setdefault(key, []).append((predicted, s["wall_s"]))
    print(f"6. the fitted step model against the {len(steps)} steps the engine logged (wall time per step):")
    found = {}
    for key in sorted(rows, key=lambda k: (k.startswith("with"), int(k.split("=")[1]) if "=" in k else 0)):
        predicted, wall = (np.array(x) for x in zip(*rows[key], strict=True))
        found[key] = {
            "steps": len(wall),
            "measured_median_ms": float(np.median(wall) * 1e3),
            "predicted_median_ms": float(np.median(predicted) * 1e3),
            "median_error": float(np.median(predicted / wall - 1)),
        }
        f = found[key]
        print(
            f"   {key:14} {f['steps']:6} steps: measured {f['measured_median_ms']:7.1f} ms, predicted "
            f"{f['predicted_median_ms']:7.1f} ms, median error {f['median_error']:+.0%}"
        )
    return found


def advise_check(args: argparse.Namespace, out: Path, input_len: int) -> dict[str, Any]:
    """`advise` on the sweep with the targets, then the advised cap benched (a closed loop that keeps it full, as
    advise assumes): does the server meet both targets at the cap it was told to set?"""
    table = out / "sweep" / "summary.csv"
    if args.kv_slots:  # the fit the loads were simulated with: per-slot KV streams stated in the table's header
        first, *rest = table.read_text().splitlines()
        table = out / "advise-table.csv"
        table.write_text("\n".join([f"{first} kv_slots={args.slots}", *rest]) + "\n")
    cmd = [sys.executable, "-m", "tokenroof", "advise", str(table), "--input-len", str(input_len)]
    cmd += ["--output-len", str(args.output_len), "--tpot-slo-ms", str(args.tpot_slo_ms), "--json"]
    if args.ttft_slo_ms is not None:
        cmd += ["--ttft-slo-ms", str(args.ttft_slo_ms)]
    answer = subprocess.run(cmd, capture_output=True, text=True)
    if answer.returncode != 0:
        sys.exit(f"advise failed: {answer.stderr.strip()}")
    advice = json.loads(answer.stdout)
    cap = int(advice["max_num_seqs"])
    print(f"5. advise: p99 TPOT <= {args.tpot_slo_ms:g} ms, p99 TTFT <= {args.ttft_slo_ms} ms: cap {cap}")
    folder = out / f"advised-c{cap}"
    if not (folder / "summary.json").exists() and args.offline:
        benched = sorted(p.name for p in out.glob("advised-c*"))
        print(f"   (--offline: cap {cap} was not benched; OUT holds {', '.join(benched) or 'no advised cap'})")
        return {"cap": cap, "slo": advice["slo"], "met": None, "benched": False}
    if not (folder / "summary.json").exists() and args.kv_slots:
        # llama-server: a cap is -np, a restarted server; benching this one at `cap` streams is not that server
        print(f"   llama-server's cap is a restart: start it with -np {cap} (-c: {cap} × the context per slot, the")
        print("   rest of its flags as before), bench it, and run this again to read the result:")
        print(f"   tokenroof bench URL --concurrency {cap} --input-len {args.input_len} --output-len {args.output_len}")
        print(f"       --num-requests {max(40, 4 * cap)} --out {folder}")
        return {"cap": cap, "slo": advice["slo"], "met": None, "benched": False}
    if not (folder / "summary.json").exists():
        cfg = BenchConfig(
            url=args.url,
            concurrencies=[cap],
            input_len=args.input_len,
            output_len=args.output_len,
            requests_per_point=max(40, 4 * cap),
            out_dir=folder,
            max_duration_s=args.max_duration,
            timeout_s=args.max_duration,
        )
        asyncio.run(run_bench(cfg))
    (measured,) = json.loads((folder / "summary.json").read_text())["points"]
    predicted = advice["at_cap"]
    checks = {"tpot": args.tpot_slo_ms, "ttft": args.ttft_slo_ms}
    found: dict[str, Any] = {"cap": cap, "slo": advice["slo"], "met": True}
    for metric, target in checks.items():
        if target is None:
            continue
        got, said = measured[f"{metric}_ms"]["p99"], predicted[f"{metric}_ms"]["p99"]
        met = got <= target
        found["met"] = found["met"] and met
        found[metric] = {"target_ms": target, "predicted_p99_ms": said, "measured_p99_ms": got, "met": met}
        phases = predicted.get("phases")  # llama-server's staggered streams: the cap checked over their start phases
        band = ""
        if phases is not None:
            low, high = phases[f"{metric}_ms_low"], phases[f"{metric}_ms_high"]
            found[metric] |= {"predicted_p99_low_ms": low, "predicted_p99_high_ms": high}
            band = f" (over {phases['runs']} start phases {low:.1f}-{high:.1f})"
        verdict = "met" if met else "MISSED"
        head = f"   {metric.upper()} p99 at cap {cap}"
        print(f"{head}: measured {got:.1f} ms, predicted {said:.1f}{band}, target {target:g}: {verdict}")
    return found


if __name__ == "__main__":
    main(sys.argv[1:])
