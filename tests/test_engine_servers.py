"""The engines table's servers (specs/data/engines/*.toml `[server]`): every flag and gauge name spelled as the
engines' own sources spell them (written out by hand here, checked against the TOML's [source] citations), and
the two readers of that table — advise's engine flags and bench's running-batch scraper."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from tests.schemas import load
from tokenroof.errors import TokenroofError
from tokenroof.measure.http.scrape import GAUGES, running_from_metrics
from tokenroof.serving.advise import engine_flags
from tokenroof.specs.engines import (
    Metric,
    ServerFlags,
    ServerMetrics,
    Setting,
    list_engines,
    load_engine,
    server_flags,
    server_metrics,
)

VLLM_FLAGS = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "memory_fraction": "--gpu-memory-utilization",
}
VLLM_METRICS = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "preemptions": "vllm:num_preemptions_total",
}
VLLM_V1_METRICS = {  # V1's spec-decode counters (vllm/v1/spec_decode/metrics.py)
    **VLLM_METRICS,
    "spec_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "spec_accepted_by_position": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    # V1's prefix-cache counters (vllm/v1/metrics/loggers.py), in tokens
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
}

VLLM_RESERVE = {  # vLLM's start-up profile (what determine_available_memory subtracts), per GPU
    "driver_bytes": 0.64e9,
    "non_torch_bytes": 0.1e9,
    "non_torch_bytes_per_tp_doubling": 0.7e9,
    "profile_tokens": 2048,
    "profile_seqs": 256,
    "large_gpu_bytes": None,
    "large_gpu_profile_tokens": None,
    "large_gpu_profile_seqs": None,
    "large_gpu_excludes": [],
}
VLLM_V0_RESERVE = {**VLLM_RESERVE, "sampler_bytes_per_logit": 4.0, "whole_context_up_to": 32768}
VLLM_V1_RESERVE = {
    **VLLM_RESERVE,
    "sampler_bytes_per_logit": 12.0,
    "whole_context_up_to": None,
    "large_gpu_bytes": 75.16e9,  # 70 GiB, A100s aside: 8,192 tokens and 1,024 sequences
    "large_gpu_profile_tokens": 8192,
    "large_gpu_profile_seqs": 1024,
    "large_gpu_excludes": ["A100"],
}

# profile → its [server] table as the engines document it; None: no server of its own
SERVERS: dict[str, dict[str, Any] | None] = {
    "vllm-v0": {
        "name": "vllm",
        "memory_fraction_of": "memory",
        "reserve": VLLM_V0_RESERVE,
        "flags": VLLM_FLAGS,
        "metrics": VLLM_METRICS,
        "defaults": {"max_num_seqs": 256, "memory_fraction": 0.9},
    },
    "vllm-v1": {
        "name": "vllm",
        "memory_fraction_of": "memory",
        "reserve": VLLM_V1_RESERVE,
        "flags": VLLM_FLAGS,
        "metrics": VLLM_V1_METRICS,
        "defaults": {"memory_fraction": 0.9},
    },
    "sglang": {
        "name": "sglang",
        "memory_fraction_of": "memory",
        "reserve": None,
        "flags": {
            "max_num_seqs": "--max-running-requests",
            "max_num_batched_tokens": "--chunked-prefill-size",
            "memory_fraction": "--mem-fraction-static",
        },
        "metrics": {"running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs"},
        "defaults": {},
    },
    "tgi": {
        "name": "tgi",
        "memory_fraction_of": "memory",
        "reserve": None,
        "flags": {
            "max_num_seqs": "--max-batch-size",
            "max_num_batched_tokens": "--max-batch-prefill-tokens",
            "memory_fraction": "--cuda-memory-fraction",
        },
        "metrics": {"running": "tgi_batch_current_size", "waiting": "tgi_queue_size"},
        "defaults": {"memory_fraction": 1.0},
    },
    "tensorrt-llm": {
        "name": "tensorrt-llm",
        "memory_fraction_of": "free",
        "reserve": None,
        "flags": {
            "max_num_seqs": "--max_batch_size",
            "max_num_batched_tokens": "--max_num_tokens",
            "memory_fraction": "--kv_cache_free_gpu_memory_fraction",
        },
        "metrics": {"running": "trtllm_num_requests_running", "waiting": "trtllm_num_requests_waiting"},
        "defaults": {"memory_fraction": 0.9},
    },
    "llama-cpp": {
        "name": "llama-cpp",
        "memory_fraction_of": "memory",
        "reserve": None,
        "flags": {"max_num_seqs": "--parallel", "max_num_batched_tokens": "--batch-size"},
        "metrics": {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred"},
        "defaults": {"max_num_seqs": 1},
    },
    "lmdeploy": {
        "name": "lmdeploy",
        "memory_fraction_of": "free",
        "reserve": None,
        "flags": {
            "max_num_seqs": "--max-batch-size",
            "max_num_batched_tokens": "--max-prefill-token-num",
            "memory_fraction": "--cache-max-entry-count",
        },
        "metrics": {"running": "lmdeploy:num_requests_running", "waiting": "lmdeploy:num_requests_waiting"},
        "defaults": {"memory_fraction": 0.8},
    },
    "fastertransformer": None,  # Triton's config.pbtxt, not command-line flags
    "generic": None,
    "pytorch-eager": None,
}


def test_every_shipped_profile_is_spelled_out_here() -> None:
    assert set(SERVERS) == set(list_engines())


def test_the_settings_and_metrics_asked_for_are_the_keys_a_file_may_give() -> None:
    assert (
        get_args(Setting)
        == tuple(ServerFlags.model_fields)
        == ("max_num_seqs", "max_num_batched_tokens", "memory_fraction")
    )
    assert (
        get_args(Metric)
        == tuple(ServerMetrics.model_fields)
        == (
            "running",
            "waiting",
            "preemptions",
            "spec_drafts",
            "spec_draft_tokens",
            "spec_accepted",
            "spec_accepted_by_position",
            "prefix_cache_queries",
            "prefix_cache_hits",
        )
    )


@pytest.mark.parametrize("key", sorted(SERVERS))
def test_each_profiles_server_table_by_hand(key: str) -> None:
    server = load_engine(key).server
    assert (None if server is None else server.to_dict()) == SERVERS[key]
    assert load_engine(key).to_dict()["server"] == SERVERS[key]  # roofline --json carries it with the profile


def test_one_flag_per_server_for_each_setting() -> None:
    assert server_flags("max_num_batched_tokens") == {
        "llama-cpp": "--batch-size",
        "lmdeploy": "--max-prefill-token-num",
        "sglang": "--chunked-prefill-size",
        "tensorrt-llm": "--max_num_tokens",
        "tgi": "--max-batch-prefill-tokens",
        "vllm": "--max-num-batched-tokens",
    }
    assert server_flags("memory_fraction") == {  # llama.cpp sizes its KV cache in tokens: no such flag
        "lmdeploy": "--cache-max-entry-count",
        "sglang": "--mem-fraction-static",
        "tensorrt-llm": "--kv_cache_free_gpu_memory_fraction",
        "tgi": "--cuda-memory-fraction",
        "vllm": "--gpu-memory-utilization",
    }


def test_advise_prints_every_servers_batch_cap_flag() -> None:
    assert engine_flags(297) == {
        "llama-cpp": "--parallel 297",
        "lmdeploy": "--max-batch-size 297",
        "sglang": "--max-running-requests 297",
        "tensorrt-llm": "--max_batch_size 297",
        "tgi": "--max-batch-size 297",
        "vllm": "--max-num-seqs 297",
    }


def test_the_json_contract_names_exactly_the_servers_advise_prints() -> None:
    every, speculating, named = load("common")["$defs"]["engine_flags"]["oneOf"]
    assert set(every["properties"]) == set(every["required"]) == set(engine_flags(1))
    # an answer for a named --engine: any one server's flag, that one alone
    assert set(named["properties"]) == set(engine_flags(1)) and named["minProperties"] == named["maxProperties"] == 1
    assert all(engine_flags(1, server=server) == {server: flag} for server, flag in engine_flags(1).items())
    from tokenroof.model.speculative import SpeculativeConfig

    spec = SpeculativeConfig("eagle", 3, (0.7,))
    # a speculating answer: the servers whose speculation tokenroof spells
    assert (
        set(speculating["required"])
        == set(speculating["properties"])
        == set(engine_flags(1, spec))
        == {
            "vllm",
            "sglang",
        }
    )


def test_the_scraper_reads_every_servers_running_gauge() -> None:
    assert server_metrics("running") == {
        "llama-cpp": "llamacpp:requests_processing",
        "lmdeploy": "lmdeploy:num_requests_running",
        "sglang": "sglang:num_running_reqs",
        "tensorrt-llm": "trtllm_num_requests_running",
        "tgi": "tgi_batch_current_size",
        "vllm": "vllm:num_requests_running",
    }
    assert list(GAUGES) == [  # bench's scraper: the first of these found on /metrics
        "llamacpp:requests_processing",
        "lmdeploy:num_requests_running",
        "sglang:num_running_reqs",
        "trtllm_num_requests_running",
        "tgi_batch_current_size",
        "vllm:num_requests_running",  # the emulator's too (emulate/server.py)
    ]


@pytest.mark.parametrize(
    ("exposition", "running"),
    [
        ('lmdeploy:num_requests_running{model_name="m",engine="0"} 5.0\nlmdeploy:num_requests_waiting 2\n', 5.0),
        ('# TYPE trtllm_num_requests_running gauge\ntrtllm_num_requests_running{model_name="m"} 7\n', 7.0),
        ("sglang:num_queue_reqs 4\nsglang:num_running_reqs 9\n", 9.0),  # the queue is not the batch
        ("tgi_queue_size 3\n", None),  # no running-batch gauge: the client-side estimate stands
    ],
)
def test_running_from_metrics_takes_the_tables_gauges(exposition: str, running: float | None) -> None:
    assert running_from_metrics(exposition) == running


# -- one server, one spelling; a bad [server] table is one line ----------------------------------------------
MINE = """
name = "my engine"
versions = "1.x"
prefill = "chunked"
[accuracy]
log_error = 0.0
log_error_low = -0.1
log_error_high = 0.2
[server]
name = "mine"
[server.flags]
max_num_seqs = "--max-seqs"
[server.metrics]
running = "mine:running"
[server.defaults]
max_num_seqs = 64
[source]
numbers = "measured by me"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_server_file_of_ones_own_is_read(tmp_path: Path) -> None:
    server = load_engine(str(write(tmp_path, "mine", MINE))).server
    assert server is not None and server.name == "mine"
    assert dict(server.flags) == {"max_num_seqs": "--max-seqs"} and dict(server.metrics) == {"running": "mine:running"}
    assert dict(server.defaults) == {"max_num_seqs": 64}


def test_two_versions_of_one_server_must_spell_a_flag_alike(tmp_path: Path) -> None:
    old = load_engine(str(write(tmp_path, "old", MINE)))
    new = load_engine(str(write(tmp_path, "new", MINE.replace('"--max-seqs"', '"--max-batch"'))))
    assert server_flags("max_num_seqs", [old, old]) == {"mine": "--max-seqs"}
    assert server_metrics("running", [old, new]) == {"mine": "mine:running"}  # they agree there
    with pytest.raises(TokenroofError) as info:
        server_flags("max_num_seqs", [old, new])
    assert str(info.value) == (
        "engine profiles old and new are both server 'mine' but give its [server.flags] max_num_seqs as "
        "'--max-seqs' and '--max-batch'; one server has one spelling"
    )


BAD_SERVERS = [
    ('"--max-seqs"', '"max-seqs"', 'server.flags.max_num_seqs = "max-seqs"; must be a command-line flag, as --name'),
    ('"--max-seqs"', '"--max seqs"', 'server.flags.max_num_seqs = "--max seqs"; must be a command-line flag'),
    ('"mine:running"', '"mine running"', 'server.metrics.running = "mine running"; must be a Prometheus metric name'),
    ('name = "mine"', 'name = "Mine"', 'server.name = "Mine"; must be a lower-case name such as vllm or llama-cpp'),
    ('max_num_seqs = "--max-seqs"', 'max_seqs = "--max-seqs"', "server.flags: unknown key 'max_seqs' (known: max_num"),
    (
        "max_num_seqs = 64",
        "memory_fraction = 0.9",
        "server: a default for memory_fraction without its flag in [server.",
    ),
    ("max_num_seqs = 64", "max_num_seqs = 0", "server.defaults.max_num_seqs = 0; must be a positive integer"),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD_SERVERS)
def test_a_bad_server_table_is_one_line_naming_the_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = write(tmp_path, "mine", MINE.replace(old, new))
    with pytest.raises(TokenroofError) as info:
        load_engine(str(path))
    assert str(info.value).startswith(f"{path}: {message}") and "\n" not in str(info.value)


def test_a_memory_fraction_given_as_a_percentage_is_refused(tmp_path: Path) -> None:
    text = MINE.replace('max_num_seqs = "--max-seqs"', 'max_num_seqs = "--max-seqs"\nmemory_fraction = "--mem"')
    assert load_engine(str(write(tmp_path, "ok", text))).server is not None
    path = write(tmp_path, "pct", text.replace("max_num_seqs = 64", "memory_fraction = 90"))
    with pytest.raises(TokenroofError) as info:
        load_engine(str(path))
    assert str(info.value) == (
        f"{path}: server.defaults.memory_fraction = 90; must be in (0, 1], a fraction of the GPU's memory (0.9 for 90%)"
    )
