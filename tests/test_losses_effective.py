"""Effective losses (Li et al. 2024 Table 1; Nie et al. 2023): values, exact components, angle form, edges.

Witnesses: loop-based NumPy references (tests/_reference_effective.py) for values and
Table 1's closed forms; jax.grad (``Loss.anchor_gradient``) for the paradigm identity.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradlab
from tests import _reference_effective as ref

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

EFFECTIVE = ["infonce", "arccon", "mpt", "met", "mat", "dcl", "dcl+"]
PAPER_DEFAULTS = {
    "infonce": {"tau": 0.05},
    "arccon": {"tau": 0.05, "u": math.pi / 18},
    "mpt": {"m": 0.23},
    "met": {"m": 0.45},
    "mat": {"m": 0.15 * math.pi},
    "dcl": {"tau": 0.03},
    "dcl+": {"tau": 0.17},
}


def batch(seed, n=8, d=16, dtype=np.float64):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d))
    hp = h + 0.8 * rng.normal(size=(n, d))  # positives correlated with anchors, as in training
    return h.astype(dtype), hp.astype(dtype)


def bracket_scale(loss, h, hp):
    """Size of the undissipated bracket Σ_j |W_j| (1 + |R_j|): the scale rounding errors live on.

    Autodiff computes a dissipated gradient (GD ≈ 1e-12) through the cancellation
    1 − p_i, so its absolute error is set by this scale, not by the tiny result.
    """
    c = loss.components(h, hp)
    w = np.abs(np.asarray(c.weight))
    r = np.abs(np.broadcast_to(np.asarray(c.ratio), w.shape))
    return float((w * (1 + r)).sum(axis=1).max())


def assert_grad_close(g_auto, g_par, rtol=1e-9, scale=0.0):
    """Equal to ``rtol`` relative to max(|gradient|, bracket scale)."""
    g_auto, g_par = np.asarray(g_auto), np.asarray(g_par)
    scale = max(np.abs(g_auto).max(), scale, np.finfo(g_auto.dtype).tiny)
    np.testing.assert_allclose(g_par, g_auto, rtol=rtol, atol=rtol * scale)


def test_registry_has_effective_losses_with_paper_defaults():
    assert set(EFFECTIVE) <= set(gradlab.list_losses("effective"))
    for name, defaults in PAPER_DEFAULTS.items():
        assert dict(gradlab.get_loss(name).params) == pytest.approx(defaults)


@pytest.mark.parametrize("name", EFFECTIVE)
@pytest.mark.parametrize("seed", [0, 1])
def test_values_match_numpy_loop_reference(name, seed):
    h, hp = batch(seed)
    params = dict(PAPER_DEFAULTS[name])
    if "tau" in params:
        params["tau"] = 0.2  # keep exp() of the reference away from overflow
    loss = gradlab.get_loss(name, **params)
    expected = ref.value(name, h, hp, **params)
    np.testing.assert_allclose(np.asarray(loss.per_anchor(h, hp)), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(loss(h, hp)), expected.mean(), rtol=1e-12)


@pytest.mark.parametrize("name", EFFECTIVE)
def test_components_match_table1_closed_forms(name):
    h, hp = batch(3)
    params = dict(PAPER_DEFAULTS[name])
    if "tau" in params:
        params["tau"] = 0.2
    c = gradlab.get_loss(name, **params).components(h, hp)
    gd, w, r = ref.components(name, h, hp, **params)
    np.testing.assert_allclose(np.asarray(c.gd), gd, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(c.weight), w, rtol=1e-12, atol=1e-14)
    ratio = np.broadcast_to(np.asarray(c.ratio), w.shape)
    off = ~np.eye(len(h), dtype=bool)
    np.testing.assert_allclose(ratio[off], r[off], rtol=1e-11)
    assert np.all(np.diag(np.asarray(c.weight)) == 0)


@pytest.mark.parametrize("name", EFFECTIVE)
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.sampled_from([2, 5, 9]),
    d=st.sampled_from([2, 7, 16]),
    log_tau=st.floats(math.log(1e-3), math.log(10.0)),
    u=st.floats(0.0, math.pi / 4),
    m=st.floats(0.0, 1.0),
)
def test_paradigm_identity_holds_exactly(name, seed, n, d, log_tau, u, m):
    """Tangential jax.grad == GD Σ_j W_j (h_j' − R h_i') to 1e-9 relative, float64."""
    spec_params = gradlab.get_loss(name).params
    params = {k: v for k, v in dict(tau=math.exp(log_tau), u=u, m=m).items() if k in spec_params}
    loss = gradlab.get_loss(name, **params)
    h, hp = batch(seed, n, d)
    scale = bracket_scale(loss, h, hp)
    assert_grad_close(loss.anchor_gradient(h, hp), loss.paradigm_gradient(h, hp), scale=scale)


def _edge_batches():
    """θ near 0 and π, identical views, N = 2: configurations the identity must survive."""
    rng = np.random.default_rng(7)
    n, d = 6, 12
    h = rng.normal(size=(n, d))
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    hp = rng.normal(size=(n, d))
    hp /= np.linalg.norm(hp, axis=1, keepdims=True)
    out = {}
    near0 = hp.copy()
    for i, eps in enumerate([1e-3, 3e-3, 1e-2]):  # positives within a small angle of the anchor
        v = rng.normal(size=d)
        v -= v @ h[i] * h[i]
        v /= np.linalg.norm(v)
        near0[i] = math.cos(eps) * h[i] + math.sin(eps) * v
    out["theta_pos_near_0"] = (h, near0)
    nearpi = hp.copy()
    for i, eps in enumerate([1e-3, 1e-2]):  # negatives almost antipodal to the anchor 0
        v = rng.normal(size=d)
        v -= v @ h[0] * h[0]
        v /= np.linalg.norm(v)
        nearpi[i + 1] = -math.cos(eps) * h[0] + math.sin(eps) * v
    out["theta_neg_near_pi"] = (h, nearpi)
    out["n_equals_2"] = (h[:2], hp[:2])
    return out


@pytest.mark.parametrize("name", EFFECTIVE)
@pytest.mark.parametrize("case", list(_edge_batches()))
def test_paradigm_identity_at_the_edges(name, case):
    h, hp = _edge_batches()[case]
    for tau in (1e-3, 0.05, 10.0):
        params = {"tau": tau} if "tau" in gradlab.get_loss(name).params else {}
        loss = gradlab.get_loss(name, **params)
        scale = bracket_scale(loss, h, hp)
        assert_grad_close(loss.anchor_gradient(h, hp), loss.paradigm_gradient(h, hp), rtol=1e-8, scale=scale)


@pytest.mark.parametrize("name", EFFECTIVE)
def test_angle_form_equals_embedding_form(name):
    h, hp = batch(11, n=7, d=9)
    loss = gradlab.get_loss(name)
    hn, hpn = ref.unit(h), ref.unit(hp)
    c = hn @ hpn.T
    off = ~np.eye(len(h), dtype=bool)
    theta_pos = np.arccos(np.diag(c))
    theta_neg = np.arccos(c[off].reshape(len(h), -1))
    ang = loss.components_from_angles(theta_pos, theta_neg)
    emb = loss.components(h, hp)
    np.testing.assert_allclose(np.asarray(ang.gd), np.asarray(emb.gd), rtol=1e-9, atol=1e-12)
    w_emb = np.asarray(emb.weight)[off].reshape(len(h), -1)
    np.testing.assert_allclose(np.asarray(ang.weight), w_emb, rtol=1e-9, atol=1e-12)
    r_emb = np.broadcast_to(np.asarray(emb.ratio), c.shape)[off].reshape(len(h), -1)
    r_ang = np.broadcast_to(np.asarray(ang.ratio), w_emb.shape)
    np.testing.assert_allclose(r_ang, r_emb, rtol=1e-9)


@pytest.mark.parametrize("name", EFFECTIVE)
def test_angle_form_is_jit_and_vmap_friendly_and_folds_angles(name):
    loss = gradlab.get_loss(name)
    rng = np.random.default_rng(0)
    theta_pos = rng.uniform(0.1, 1.5, size=(4, 3)).astype(np.float32)
    theta_neg = rng.uniform(0.2, 3.0, size=(4, 3, 5)).astype(np.float32)
    f = jax.jit(jax.vmap(lambda tp, tn: loss.components_from_angles(tp, tn)))
    c = f(theta_pos, theta_neg)
    assert c.gd.shape == (4, 3) and c.weight.shape == (4, 3, 5)
    assert c.gd.dtype == jnp.float32
    direct = loss.components_from_angles(theta_pos, theta_neg)
    np.testing.assert_allclose(np.asarray(c.gd), np.asarray(direct.gd), rtol=1e-5)
    # θ and −θ, and θ and 2π − θ, are the same geometric angle.
    a = loss.components_from_angles(theta_pos.astype(np.float64), theta_neg.astype(np.float64))
    b = loss.components_from_angles(-theta_pos.astype(np.float64), 2 * np.pi - theta_neg.astype(np.float64))
    np.testing.assert_allclose(np.asarray(b.gd), np.asarray(a.gd), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(b.weight), np.asarray(a.weight), rtol=1e-9)


def test_infonce_closed_form_for_identical_embeddings():
    """All 2N vectors equal: L_i = log N exactly (every logit ties)."""
    h = np.tile(np.array([[1.0, 2.0, 2.0]]), (5, 1))
    loss = gradlab.get_loss("infonce", tau=0.3)
    np.testing.assert_allclose(float(loss(h, h)), math.log(5), rtol=1e-14)
    c = loss.components(h, h)
    np.testing.assert_allclose(np.asarray(c.gd), 4 / 5, rtol=1e-14)  # 1 / (1 + 1/4)


def test_gd_dissipates_when_positive_is_far_closer_than_negatives():
    """Li et al. 2024 Fig. 2 pattern at one point: μ_pos ≪ μ_neg ⇒ GD → 0; μ_pos ≈ μ_neg ⇒ GD ≈ 1."""
    theta_neg = np.full((1, 127), np.pi / 2)
    far = gradlab.get_loss("infonce").components_from_angles(np.array([0.1]), theta_neg)
    close = gradlab.get_loss("infonce").components_from_angles(np.array([np.pi / 2]), theta_neg)
    assert float(far.gd[0]) < 1e-5
    assert float(close.gd[0]) == pytest.approx(127 / 128)


def test_symmetric_variant_averages_both_directions():
    h, hp = batch(5)
    one = gradlab.get_loss("infonce")
    sym = gradlab.get_loss("infonce", symmetric=True)
    np.testing.assert_allclose(float(sym(h, hp)), 0.5 * (float(one(h, hp)) + float(one(hp, h))), rtol=1e-14)


def test_float32_defaults_stay_float32_and_match_float64():
    h, hp = batch(2, dtype=np.float32)
    for name in EFFECTIVE:
        loss = gradlab.get_loss(name)
        v32 = loss.per_anchor(h, hp)
        assert v32.dtype == jnp.float32
        v64 = loss.per_anchor(h.astype(np.float64), hp.astype(np.float64))
        np.testing.assert_allclose(np.asarray(v32), np.asarray(v64), rtol=2e-4, atol=2e-5)
