"""A Hugging Face model id (`meta-llama/Llama-3.1-8B-Instruct`) read from the local Hugging Face cache.

Nothing is downloaded: the config.json must already be in the cache, where `huggingface-cli download`,
`transformers` or vLLM put it — `<hub>/models--<org>--<name>/snapshots/<commit>/config.json`, the snapshot
that `refs/main` names, else the newest. The hub folder is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
`$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub` (huggingface_hub's own order).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from tokenroof.errors import TokenroofError

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def looks_like_repo_id(name: str) -> bool:
    """`org/name` with Hugging Face's characters, and not a config file's name."""
    return bool(REPO_ID.match(name)) and not name.endswith(".json") and ".." not in name


def hub_cache(env: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache folder the environment names."""
    env = os.environ if env is None else env
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return Path(env[key]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "huggingface" / "hub"


def cached_config(repo_id: str, env: Mapping[str, str] | None = None) -> Path:
    """The cached config.json of `repo_id`; an error says where it looked and how to fetch it."""
    folder = hub_cache(env) / f"models--{repo_id.replace('/', '--')}"
    snapshots = folder / "snapshots"
    ref = folder / "refs" / "main"
    if ref.is_file():
        main = snapshots / ref.read_text(encoding="utf-8").strip() / "config.json"
        if main.is_file():
            return main
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    if found:
        return found[-1]
    raise TokenroofError(
        f"model '{repo_id}' is not a preset and its config.json is not in the Hugging Face cache "
        f"(looked in {folder}); tokenroof does not download: run "
        f"`huggingface-cli download {repo_id} config.json` (or set HF_HOME / HF_HUB_CACHE), or give a config.json path"
    )
