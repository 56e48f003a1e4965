"""The public API: every name in tokenroof.__all__ resolves, lazily (importing tokenroof loads no numpy)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tokenroof


@pytest.mark.parametrize("name", tokenroof.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(tokenroof, name) is not None


def test_importing_tokenroof_is_light() -> None:
    code = "import sys, tokenroof; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tokenroof.nope  # noqa: B018
