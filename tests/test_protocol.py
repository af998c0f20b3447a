"""Protocol validation: the one home of the Monte-Carlo checks the CLI relies on."""

import math

import numpy as np
import pytest

from gradlab.simulate import Protocol


@pytest.mark.parametrize("bad, match", [
    (dict(mu_pos_range=(-0.1, 1.0)), r"mu_pos_range must lie within \[0, pi\]"),
    (dict(mu_neg_range=(0.1, math.pi + 1e-9)), r"mu_neg_range must lie within \[0, pi\]"),
    (dict(mu_neg_range=(5000.0, 5001.0)), r"mu_neg_range must lie within \[0, pi\]"),
    (dict(mu_pos_range=(1.0, 0.5)), "mu_pos_range is empty: low = 1 must be < high = 0.5"),
    (dict(mu_neg_range=(1.0, 1.0)), "mu_neg_range is empty"),
    (dict(mu_pos_range=(math.nan, 1.0)), "mu_pos_range must be finite"),
    (dict(mu_pos_range=(0.1, math.inf)), "mu_pos_range must be finite"),
    (dict(mu_pos_range="ab"), "mu_pos_range must be a .low, high. pair"),
    (dict(mu_pos_range=(0.1, 0.2, 0.3)), "mu_pos_range must be a .low, high. pair"),
    (dict(seed=-1), r"seed must be an int in \[0, 2\*\*31 - 1\]"),
    (dict(seed=2**31), r"seed must be an int in \[0, 2\*\*31 - 1\]"),
    (dict(seed=1.5), "seed must be an int"),
    (dict(batches=0), r"batches must be an int in \[1,"),
    (dict(batch_size=1), r"batch_size must be an int in \[2,"),
    (dict(batches=5, batch_size=10**11), "batch_size must be an int"),
    (dict(batches=2**16, batch_size=2**15), r"batches × batch_size .* below 2\*\*31"),
    (dict(sigma_pos=-1e-3), "sigma_pos must be a finite number >= 0"),
    (dict(sigma_neg=math.nan), "sigma_neg must be a finite number >= 0"),
    (dict(grid=0), "grid must be a positive int"),
    (dict(grid=True), "grid must be a positive int"),
])
def test_protocol_rejects_each_misuse_with_a_one_line_message(bad, match):
    with pytest.raises(ValueError, match=match) as info:
        Protocol(**bad)
    assert "\n" not in str(info.value)


def test_the_edges_of_the_valid_ranges_are_accepted():
    p = Protocol(grid=3, mu_pos_range=(0, math.pi), mu_neg_range=(0.0, math.pi))
    np.testing.assert_array_equal(p.mu_pos, [0.0, math.pi / 2, math.pi])
    # a single-point axis may have low == high; the other axis is unaffected
    q = Protocol(grid=(1, 4), mu_pos_range=(0.5, 0.5))
    np.testing.assert_array_equal(q.mu_pos, [0.5])
    assert q.mu_neg.shape == (4,)
    # 2**31 - 1 draws in one cell is the int32 limit itself, and is allowed
    assert Protocol(batches=1, batch_size=2**31 - 1).batch_size == 2**31 - 1
    assert Protocol(seed=2**31 - 1).seed == 2**31 - 1


def test_zero_spread_is_a_valid_protocol():
    """σ = 0 draws every angle at its mean: a deterministic protocol, not an error."""
    p = Protocol(sigma_pos=0, sigma_neg=0.0)
    assert (p.sigma_pos, p.sigma_neg) == (0.0, 0.0)
    assert isinstance(p.sigma_pos, float)


def test_ranges_are_stored_as_float_pairs():
    p = Protocol(mu_pos_range=[0, 1], mu_neg_range=(np.float32(0.5), 3))
    assert p.mu_pos_range == (0.0, 1.0) and p.mu_neg_range == (0.5, 3.0)
    assert all(type(x) is float for x in (*p.mu_pos_range, *p.mu_neg_range))
