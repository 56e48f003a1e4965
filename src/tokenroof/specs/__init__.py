"""Specs as data: models (Hugging Face config.json), hardware (TOML), precision.

`load_model` and `load_hardware` take a preset name (exact, case-insensitive)
or a path to the user's own file; an unknown name lists the known ones. `load_model`
also takes a Hugging Face id (`org/name`) whose config.json is in the local cache.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tokenroof.errors import TokenroofError
from tokenroof.specs.engines import EngineProfile, list_engines, load_engine
from tokenroof.specs.hardware import HardwareSpec, read_hardware_toml
from tokenroof.specs.hub import cached_config, looks_like_repo_id
from tokenroof.specs.model import ModelSpec, read_model_config
from tokenroof.specs.precision import Precision

__all__ = [
    "EngineProfile",
    "HardwareSpec",
    "ModelSpec",
    "Precision",
    "list_engines",
    "list_hardware",
    "list_models",
    "load_engine",
    "load_hardware",
    "load_model",
]

DATA = resources.files("tokenroof.specs") / "data"


def _presets(folder: str, suffix: str) -> dict[str, Path]:
    root = Path(str(DATA / folder))
    return {p.name[: -len(suffix)]: p for p in sorted(root.glob(f"*{suffix}"))}


def list_models() -> list[str]:
    """Names of the shipped model presets."""
    return list(_presets("models", ".json"))


def list_hardware() -> list[str]:
    """Names of the shipped hardware presets."""
    return list(_presets("hardware", ".toml"))


def _looks_like_path(name: str, suffix: str) -> bool:
    return name.endswith(suffix) or "/" in name or Path(name).exists()


def load_model(name_or_path: str) -> ModelSpec:
    """A model preset by name, a config.json path (or a folder with one), or a Hugging Face id in the cache."""
    presets = _presets("models", ".json")
    key = name_or_path.strip().lower()
    if key in presets:
        return read_model_config(presets[key], key)
    path = Path(name_or_path).expanduser()
    if not path.exists() and looks_like_repo_id(name_or_path.strip()):
        return read_model_config(cached_config(name_or_path.strip()), name_or_path.strip())
    if _looks_like_path(name_or_path, ".json"):
        if not path.exists():
            raise TokenroofError(f"model file not found: {path}")
        return read_model_config(path)
    raise TokenroofError(
        f"unknown model '{name_or_path}'; known presets: {', '.join(presets)} "
        "(or a config.json path, or a Hugging Face id in the local cache)"
    )


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A hardware preset by name, or a path to a hardware TOML."""
    presets = _presets("hardware", ".toml")
    key = name_or_path.strip().lower()
    if key in presets:
        return read_hardware_toml(presets[key], key)
    if _looks_like_path(name_or_path, ".toml"):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise TokenroofError(f"hardware file not found: {path}")
        return read_hardware_toml(path)
    raise TokenroofError(
        f"unknown hardware '{name_or_path}'; known presets: {', '.join(presets)} (or a hardware .toml path)"
    )
