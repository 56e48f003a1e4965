"""The one conversion the whole package shares: seconds inside, milliseconds at input and output.

Inside tokenroof every quantity is SI (seconds, bytes, FLOPs) with the unit in its name
(`step_time_s`, `memory_bandwidth_bytes_per_s`); only TPOT/TTFT are read and shown in ms.
Hardware and model numbers are stored in SI too, so no other prefix needs converting.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

MS_PER_S = 1e3


def ms_to_s(milliseconds: ArrayLike) -> NDArray[np.float64]:
    """Milliseconds to seconds."""
    return np.asarray(milliseconds, dtype=float) / MS_PER_S
