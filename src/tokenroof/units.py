"""SI units and conversions: the only module with 1e12 and friends.

Inside tokenroof every quantity is SI (seconds, bytes, FLOPs) with the unit in its
name; milliseconds and tera-prefixes appear only at input and output.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15
GIB = 2**30
MS_PER_S = 1e3


def s_to_ms(seconds: ArrayLike) -> NDArray[np.float64]:
    """Seconds to milliseconds."""
    return np.asarray(seconds, dtype=float) * MS_PER_S


def ms_to_s(milliseconds: ArrayLike) -> NDArray[np.float64]:
    """Milliseconds to seconds."""
    return np.asarray(milliseconds, dtype=float) / MS_PER_S


def tpot_s_to_throughput_tok_s(batch: ArrayLike, tpot_s: ArrayLike) -> NDArray[np.float64]:
    """Decode throughput (tokens/s) of `batch` sequences each emitting one token per `tpot_s`."""
    return np.asarray(batch, dtype=float) / np.asarray(tpot_s, dtype=float)


def throughput_tok_s_to_tpot_s(batch: ArrayLike, throughput_tok_s: ArrayLike) -> NDArray[np.float64]:
    """Time per output token (s) of each of `batch` sequences at an aggregate `throughput_tok_s`."""
    return np.asarray(batch, dtype=float) / np.asarray(throughput_tok_s, dtype=float)
