"""stats.py by hand: the arrival process simulate and bench both draw, and the latency summary both print."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokenroof.stats import STATISTICS, arrival_times, open_loop_window, percentiles, typical_lifetime_s


def test_a_constant_rate_arrives_every_one_over_rate_seconds_and_draws_nothing() -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert arrival_times(4.0, math.inf, 5, rng).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert rng.bit_generator.state == state


def test_gamma_gaps_start_at_zero_with_mean_one_over_rate_and_shape_burstiness() -> None:
    """The gaps are the generator's own gamma draws (shape k, scale 1/(rate·k)), the first arrival moved to 0."""
    times = arrival_times(2.0, 0.5, 4, np.random.default_rng(7))
    gaps = np.random.default_rng(7).gamma(shape=0.5, scale=1.0 / (2.0 * 0.5), size=4)
    assert times[0] == 0.0
    np.testing.assert_allclose(times, np.cumsum(gaps) - gaps[0])
    long = np.diff(arrival_times(2.0, 0.5, 200_000, np.random.default_rng(1)))
    assert long.mean() == pytest.approx(0.5, rel=0.01)  # 1 / rate
    assert long.var() / long.mean() ** 2 == pytest.approx(1 / 0.5, rel=0.05)  # squared CV = 1 / shape
    poisson = np.diff(arrival_times(2.0, 1.0, 200_000, np.random.default_rng(2)))
    assert poisson.var() / poisson.mean() ** 2 == pytest.approx(1.0, rel=0.03)  # exponential gaps


def test_percentiles_scale_to_ms_leave_out_nan_and_say_none_when_empty() -> None:
    # 1..100 ms as seconds: mean 50.5; numpy's linear percentiles: p50 50.5, p90 90.1, p99 99.01
    values = [i / 1000 for i in range(1, 101)] + [math.nan]
    got = percentiles(values)
    assert got == pytest.approx({"mean": 50.5, "p50": 50.5, "p90": 90.1, "p99": 99.01})
    assert percentiles([2.0, 4.0], scale=1.0) == {"mean": 3.0, "p50": 3.0, "p90": 3.8, "p99": 3.98}
    assert percentiles([]) == percentiles([math.nan]) == dict.fromkeys(STATISTICS)
    assert tuple(percentiles([1.0])) == STATISTICS == ("mean", "p50", "p90", "p99")


def test_a_typical_lifetime_is_the_median_of_the_second_halfs_and_leaves_out_what_did_not_end() -> None:
    """Sent at 0..5 s: the second half (2.5 s on) lived 4, 6 and (still running) NaN s: median 5; the first half's
    1 s lives are the ramp's, left out."""
    arrivals = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    ends = [1.0, 2.0, 3.0, 7.0, 10.0, math.nan]
    assert typical_lifetime_s(arrivals, ends) == 5.0
    assert typical_lifetime_s(arrivals[:2], [math.nan, math.nan]) == 0.0
    assert typical_lifetime_s([0.0, 1.0, 2.0], [1.0, 5.0, 9.0]) == 5.5  # the median request's own life counts
    assert typical_lifetime_s([], []) == 0.0


def test_an_open_loop_window_starts_a_lifetime_in_or_10_percent_in_whichever_is_later() -> None:
    """Twenty arrivals 0..19 s: 10% in is the arrival at 2 s; with a 5 s lifetime the window opens at 5 s; with 1 s
    at 2 s; it closes at the last arrival. A lifetime longer than what is left (19 − 15 < 15): the whole run, first
    arrival to last end."""
    arrivals = np.arange(20.0)[::-1]  # in any order
    assert open_loop_window(arrivals, 5.0, 30.0) == (5.0, 19.0)
    assert open_loop_window(arrivals, 1.0, 30.0) == (2.0, 19.0)
    assert open_loop_window(arrivals, 15.0, 30.0) == (0.0, 30.0)
    assert open_loop_window([3.0], 0.0, 3.0) == (3.0, 3.0)  # one arrival that took no time: that instant
    assert open_loop_window([4.0, 3.0], 5.0, 0.0) == (3.0, 3.0 + 1e-9)  # nothing ended: not an empty span
