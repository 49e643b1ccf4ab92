"""The Bjøntegaard delta rate of benchmarks/rate_distortion.py (issue #22): the figure its BD-rate target is read
from. Pure arithmetic on four (rate, PSNR) points per curve: no Ray, no encode."""

from __future__ import annotations

import pytest

from benchmarks.rate_distortion import bd_rate

# A plausible x264 curve: kbit/s and PSNR-Y at CRF 19, 23, 27, 31.
RATES = [5200.0, 3100.0, 1850.0, 1100.0]
PSNR = [44.1, 41.9, 39.6, 37.2]


def test_identical_curves_differ_by_nothing():
    assert bd_rate(RATES, PSNR, RATES, PSNR) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("factor, expected", [(1.1, 10.0), (0.9, -10.0)])
def test_every_rate_scaled_at_equal_psnr_is_that_much_more(factor, expected):
    scaled = [rate * factor for rate in RATES]
    assert bd_rate(RATES, PSNR, scaled, PSNR) == pytest.approx(expected, abs=0.01)
    # and the other way round: a against b is the inverse ratio
    assert bd_rate(scaled, PSNR, RATES, PSNR) == pytest.approx((1 / factor - 1) * 100, abs=0.01)


def test_only_the_shared_quality_range_counts():
    # Both curves lie on one cubic log-rate curve, b 10 % above it and measured over a narrower PSNR range.
    def rate(psnr: float, factor: float = 1.0) -> float:
        x = psnr - 40.0
        return factor * 10 ** (3.4 - 0.09 * x + 0.002 * x**2 - 0.0003 * x**3)

    b_psnr = [43.0, 41.0, 39.5, 38.0]
    assert bd_rate([rate(p) for p in PSNR], PSNR, [rate(p, 1.1) for p in b_psnr], b_psnr) == pytest.approx(
        10.0, abs=0.01
    )


def test_disjoint_curves_are_refused():
    with pytest.raises(ValueError):
        bd_rate(RATES, PSNR, RATES, [p + 20 for p in PSNR])
