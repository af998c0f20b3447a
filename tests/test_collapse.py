"""Zhang et al. 2022's center / residual decomposition: m_o, m_r and G_e = o_e + r_e, against loops."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from gradlab.collapse import (
    center_residual,
    collapse_ratios,
    combination_split,
    infonce_extra_gradient,
)


def _unit_rows(x):
    return [np.asarray(r, float) / math.sqrt(float(np.dot(r, r))) for r in x]


def _ref_m(x):
    z = _unit_rows(x)
    o = sum(z) / len(z)
    m_o = _mean_norm([o])  # ‖o‖ / ‖z‖ with ‖z‖ = 1
    m_r = _mean_norm([zi - o for zi in z])
    return m_o, m_r


def _mean_norm(vs):
    return sum(math.sqrt(float(np.dot(v, v))) for v in vs) / len(vs)


@pytest.mark.x64
def test_ratios_match_loop_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(17, 6)) * rng.uniform(0.1, 5, size=(17, 1))  # normalization matters
    m_o, m_r = collapse_ratios(x)
    ref = _ref_m(x)
    assert float(m_o) == pytest.approx(ref[0], rel=1e-12)
    assert float(m_r) == pytest.approx(ref[1], rel=1e-12)
    # identity for unit rows: ‖o‖² + mean ‖r‖² = 1, hence m_r ≤ √(1 − m_o²)
    o, r = center_residual(x)
    assert float(o @ o + np.mean(np.sum(np.asarray(r) ** 2, axis=1))) == pytest.approx(1.0, abs=1e-12)
    assert float(m_r) <= math.sqrt(1 - float(m_o) ** 2) + 1e-12


def test_collapse_extremes():
    # collapse: every row the same direction -> m_o = 1, m_r = 0
    x = np.tile([[3.0, 4.0, 0.0]], (5, 1)) * np.arange(1, 6)[:, None]
    m_o, m_r = collapse_ratios(x)
    assert float(m_o) == pytest.approx(1.0, abs=1e-12) and float(m_r) == pytest.approx(0.0, abs=1e-12)
    # antipodal pairs: center 0 -> m_o = 0, m_r = 1
    y = np.concatenate([np.eye(4), -np.eye(4)])
    m_o, m_r = collapse_ratios(y)
    assert float(m_o) == pytest.approx(0.0, abs=1e-12) and float(m_r) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.x64
def test_combination_split_is_exact_and_matches_loop():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(7, 5))
    a = rng.normal(size=(3, 7))
    o_part, r_part = combination_split(a, z)
    zu = _unit_rows(z)
    o = sum(zu) / len(zu)
    for n in range(3):
        g = sum(a[n, k] * zu[k] for k in range(7))
        np.testing.assert_allclose(np.asarray(o_part[n]), sum(a[n]) * o, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(o_part[n] + r_part[n]), g, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="match z"):
        combination_split(np.ones(3), z)


@pytest.mark.x64
def test_infonce_extra_gradient_zhang2022():
    """G_e = −Σ_k λ_k h_k' with λ = softmax over all keys; o_e = −o'; and the InfoNCE gradient
    is −(h_i' + G_e)/τ (Zhang et al. 2022 Sec. 3.5) — checked with jax.grad."""
    rng = np.random.default_rng(2)
    h = rng.normal(size=(6, 4))
    hp = rng.normal(size=(6, 4))
    tau = 0.3
    g_e, o_e, r_e = infonce_extra_gradient(h, hp, tau=tau)
    np.testing.assert_allclose(np.asarray(o_e + r_e), np.asarray(g_e), atol=1e-12)
    hpu = np.stack(_unit_rows(hp))
    np.testing.assert_allclose(np.asarray(o_e), np.tile(-hpu.mean(0), (6, 1)), atol=1e-12)
    hu = np.stack(_unit_rows(h))

    def loss_i(x, i):  # InfoNCE on the raw dot product of a (fixed-norm) anchor
        logits = hpu @ x / tau
        return jax.nn.logsumexp(logits) - logits[i]

    for i in range(6):
        grad = np.asarray(jax.grad(loss_i)(hu[i], i))
        np.testing.assert_allclose(-tau * grad, hpu[i] + np.asarray(g_e[i]), atol=1e-12)
    with pytest.raises(ValueError, match="tau"):
        infonce_extra_gradient(h, hp, tau=0.0)


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"\(M, D\)"):
        collapse_ratios(np.ones(3))
