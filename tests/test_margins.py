"""Rho et al. 2023: the margin InfoNCE loss (exact GD / W / R), gradlab.margins (analysis) and the transforms.

Witnesses: loop-based NumPy references written from Rho et al. 2023's equations (math-module
functions, float64), jax.grad of independently written losses, and closed forms.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradlab
from gradlab import losses as L
from gradlab import margins as M
from gradlab.losses import angular_factor

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

# --- loop-based NumPy references (Rho et al. 2023 Eqs. 4–5) -----------------------------------------


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _acos(c):
    return math.acos(max(-1.0, min(1.0, c)))


def ref_per_anchor(h, hp, *, tau, beta, m1, m2):
    """L_i = −δ_ii + β log Σ_k exp δ_ik with δ_ij = (cos(θ_ij + m1 p_ij) − m2 p_ij)/τ."""
    h, hp = _unit(h), _unit(hp)
    n = len(h)
    out = []
    for i in range(n):
        deltas = []
        for k in range(n):
            p = 1.0 if k == i else 0.0
            theta = _acos(float(np.dot(h[i], hp[k])))
            deltas.append((math.cos(theta + m1 * p) - m2 * p) / tau)
        mx = max(deltas)
        lse = mx + math.log(sum(math.exp(d - mx) for d in deltas))
        out.append(-deltas[i] + beta * lse)
    return np.array(out)


def ref_components(h, hp, *, tau, beta, m1, m2):
    """GD = β(1 − q_ii), W_j = q_ij/(τ(1 − q_ii)), R = (1 − βq_ii) sin(θ+m1)/(β(1 − q_ii) sin θ)."""
    h, hp = _unit(h), _unit(hp)
    n = len(h)
    gd, weight, ratio = np.zeros(n), np.zeros((n, n)), np.zeros(n)
    for i in range(n):
        theta = [_acos(float(np.dot(h[i], hp[k]))) for k in range(n)]
        deltas = [(math.cos(theta[k] + (m1 if k == i else 0.0)) - (m2 if k == i else 0.0)) / tau for k in range(n)]
        mx = max(deltas)
        z = sum(math.exp(d - mx) for d in deltas)
        q = [math.exp(d - mx) / z for d in deltas]
        gd[i] = beta * (1 - q[i])
        for j in range(n):
            if j != i:
                weight[i, j] = q[j] / (tau * (1 - q[i]))
        ratio[i] = (1 - beta * q[i]) * math.sin(theta[i] + m1) / (beta * (1 - q[i]) * math.sin(theta[i]))
    return gd, weight, ratio


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _batch(seed, n, d, dtype=jnp.float64):
    h, hp = jax.random.normal(jax.random.key(seed), (2, n, d), dtype=dtype)
    return h, hp


# --- the registered loss -------------------------------------------------------------------------


def test_registered_with_paper_defaults():
    assert "margin_infonce" in gradlab.list_losses("margin")
    loss = gradlab.get_loss("margin_infonce")
    assert dict(loss.params) == {"tau": 0.25, "beta": 1.0, "m1": 0.5, "m2": 0.4}
    row = next(r for r in gradlab.loss_table() if r["name"] == "margin_infonce")
    assert row["family"] == "margin" and "Table 5" in row["reference"]


@pytest.mark.parametrize(
    "params",
    [dict(tau=0.0), dict(tau=-1.0), dict(beta=0.0), dict(beta=-0.5), dict(m1=float("nan")), dict(gamma=1.0)],
)
def test_bad_parameters_raise(params):
    with pytest.raises(ValueError, match="margin_infonce"):
        gradlab.get_loss("margin_infonce", **params)


def test_negative_margins_allowed():
    loss = gradlab.get_loss("margin_infonce", m1=-0.3, m2=-0.5)
    h, hp = _batch(3, 5, 8)
    assert _rel(loss.per_anchor(h, hp), ref_per_anchor(h, hp, tau=0.25, beta=1.0, m1=-0.3, m2=-0.5)) < 1e-12


@pytest.mark.parametrize(
    "params",
    [
        dict(),
        dict(tau=0.05, beta=1.0, m1=0.2, m2=0.0),
        dict(tau=0.5, beta=0.3, m1=-0.4, m2=0.7),
        dict(tau=2.0, beta=3.0, m1=1.2, m2=-0.3),
        dict(tau=0.1, beta=1.0, m1=2.5, m2=0.1),  # θ_p + m1 beyond π: applied literally
    ],
)
def test_values_and_components_match_numpy_reference(params):
    loss = gradlab.get_loss("margin_infonce", **params)
    p = dict(loss.params)
    h, hp = _batch(11, 6, 9)
    assert _rel(loss.per_anchor(h, hp), ref_per_anchor(h, hp, **p)) < 1e-12
    assert float(loss(h, hp)) == pytest.approx(float(np.mean(ref_per_anchor(h, hp, **p))), rel=1e-12)
    comp = loss.components(h, hp)
    gd, weight, ratio = ref_components(h, hp, **p)
    assert _rel(comp.gd, gd) < 1e-10
    assert _rel(comp.weight, weight) < 1e-10
    assert np.allclose(np.diagonal(np.asarray(comp.weight)), 0.0)
    assert _rel(np.broadcast_to(comp.ratio, (6, 6))[:, 0], ratio) < 1e-10


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tau=st.floats(1e-2, 10.0),
    beta=st.floats(0.05, 4.0),
    m1=st.floats(-1.0, 1.5),
    m2=st.floats(-1.0, 1.0),
    shape=st.sampled_from([(2, 8), (5, 8), (6, 9)]),  # shapes other tests compile too (jit cache)
    seed=st.integers(0, 2**16),
)
def test_paradigm_exact_property(tau, beta, m1, m2, shape, seed):
    loss = gradlab.get_loss("margin_infonce", tau=tau, beta=beta, m1=m1, m2=m2)
    h, hp = _batch(seed, *shape)
    auto = loss.anchor_gradient(h, hp)
    para = loss.paradigm_gradient(h, hp)
    assert np.all(np.isfinite(np.asarray(para)))
    assert _rel(para, auto) < 1e-9


def _edge_batches():
    """θ_p near 0 / π (1e-3 … 1e-2), identical and antipodal views, N = 2."""
    rng = np.random.default_rng(17)
    n, d = 5, 8
    h = _unit(rng.normal(size=(n, d)))
    hp = _unit(rng.normal(size=(n, d)))
    near0, nearpi = hp.copy(), hp.copy()
    for i, eps in enumerate([1e-3, 3e-3, 1e-2]):
        v = rng.normal(size=d)
        v -= v @ h[i] * h[i]
        v /= np.linalg.norm(v)
        near0[i] = math.cos(eps) * h[i] + math.sin(eps) * v
        nearpi[i] = -math.cos(eps) * h[i] + math.sin(eps) * v
    return {
        "identical": (h, h),
        "antipodal": (h, -h),
        "near_zero": (h, near0),
        "near_pi": (h, nearpi),
        "n2": (h[:2], hp[:2]),
    }


def _bracket_scale(loss, h, hp):
    """Σ_j |GD W_j| (1 + |R|): the size of the terms the gradient is assembled from.

    Autodiff reaches a dissipated or nearly tangent-free gradient through cancellations,
    so its rounding error lives on this scale (as in tests/test_losses_effective.py).
    """
    c = loss.components(h, hp)
    w = np.abs(np.asarray(c.gd))[:, None] * np.abs(np.asarray(c.weight))
    r = np.abs(np.broadcast_to(np.asarray(c.ratio), w.shape))
    return float((w * (1 + r)).sum(axis=1).max())


EDGE_PARAMS = [dict(tau=1e-3, beta=1.0, m1=0.5, m2=0.4), dict(tau=1e-3, beta=0.5, m1=0.3, m2=-0.2),
               dict(tau=10.0, beta=2.0, m1=-0.5, m2=0.4), dict(tau=0.05, beta=1e-3, m1=1.0, m2=1.0)]


@pytest.mark.parametrize("edge", list(_edge_batches()))
def test_paradigm_exact_at_edges(edge):
    h, hp = _edge_batches()[edge]
    for params in EDGE_PARAMS:
        loss = gradlab.get_loss("margin_infonce", **params)
        auto = np.asarray(loss.anchor_gradient(h, hp))
        para = np.asarray(loss.paradigm_gradient(h, hp))
        comp = loss.components(h, hp)
        for x in (auto, para, comp.gd, comp.weight, comp.ratio, loss.per_anchor(h, hp)):
            assert np.all(np.isfinite(np.asarray(x))), params
        scale = max(np.max(np.abs(auto)), _bracket_scale(loss, h, hp), 1e-300)
        tol = 1e-9 * scale
        if edge in ("identical", "antipodal"):
            # θ_p ∈ {0, π}: the pull direction P h_i' is rounding noise (~eps) and the rounded
            # cosine decides whether A = cos m1 (c = ±1) or A ≈ sin m1 / sqrt(2 eps) (c one ulp
            # inside): the two computations may differ by ~ sqrt(2 eps) |sin m1| × the pull factor.
            tol += 1e-7 * scale / abs(math.cos(params["m1"]))
        assert np.max(np.abs(para - auto)) <= tol, params


def test_tiny_positive_angle_is_finite():
    # θ_p ≈ 1e-7: sin θ_p from the cosine carries a ~2% rounding error (1 − c ≈ 5e-15), in
    # autodiff and in the kernel alike: only finiteness and the rough size can be asked for.
    h, hp = _batch(5, 5, 8)
    hp = h + 1e-7 * hp
    loss = gradlab.get_loss("margin_infonce", tau=1e-3)
    auto, para = np.asarray(loss.anchor_gradient(h, hp)), np.asarray(loss.paradigm_gradient(h, hp))
    assert np.all(np.isfinite(para)) and np.all(np.isfinite(auto))
    assert np.max(np.abs(para - auto)) <= 0.1 * np.max(np.abs(auto))


def test_large_logit_gap_with_beta_not_one_stays_exact():
    # τ = 1e-3 with a close positive and far negatives: x = δ_ii − log S ≈ 1900, beyond exp's range.
    h = jnp.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    hp = jnp.array([[0.99, 0.1, 0.0], [-0.99, -0.1, 0.0]])
    loss = gradlab.get_loss("margin_infonce", tau=1e-3, beta=0.6, m1=0.1, m2=0.0)
    auto, para = loss.anchor_gradient(h, hp), loss.paradigm_gradient(h, hp)
    assert float(jnp.max(jnp.abs(auto))) > 1.0  # the (1 − β) pull survives
    assert _rel(para, auto) < 1e-9


def test_angle_form_matches_embedding_form():
    loss = gradlab.get_loss("margin_infonce", tau=0.2, beta=0.7, m1=0.4, m2=0.3)
    h, hp = _batch(21, 5, 8)
    hn, hpn = _unit(h), _unit(hp)
    comp = loss.components(h, hp)
    n = 5
    theta = np.arccos(np.clip(hn @ hpn.T, -1, 1))
    off = ~np.eye(n, dtype=bool)
    ang = loss.components_from_angles(jnp.diagonal(theta), theta[off].reshape(n, n - 1))
    assert _rel(ang.gd, comp.gd) < 1e-12
    assert _rel(ang.weight, np.asarray(comp.weight)[off].reshape(n, n - 1)) < 1e-12
    assert _rel(np.asarray(ang.ratio)[:, 0], np.asarray(comp.ratio)[:, 0]) < 1e-12
    # jit and vmap friendly
    f = jax.jit(jax.vmap(lambda a, b: loss.components_from_angles(a, b).ratio))
    assert _rel(f(jnp.diagonal(theta)[:, None], theta[off].reshape(n, 1, n - 1))[:, 0, 0],
                np.asarray(ang.ratio)[:, 0]) < 1e-12


def test_reduces_to_infonce():
    tau = 0.17
    marg = gradlab.get_loss("margin_infonce", tau=tau, beta=1.0, m1=0.0, m2=0.0)
    info = gradlab.get_loss("infonce", tau=tau)
    h, hp = _batch(7, 6, 9)
    assert _rel(marg.per_anchor(h, hp), info.per_anchor(h, hp)) < 1e-14
    a, b = marg.components(h, hp), info.components(h, hp)
    assert _rel(a.gd, b.gd) < 1e-14
    assert _rel(a.weight, b.weight) < 1e-14
    assert _rel(jnp.broadcast_to(a.ratio, (6, 6)), jnp.broadcast_to(b.ratio, (6, 6))) < 1e-14
    # ... also at identical views (θ_p = 0), where R must stay exactly 1.
    assert np.allclose(np.asarray(marg.components(h, h).ratio), 1.0, rtol=0, atol=0)


def test_reduces_to_arccon():
    marg = gradlab.get_loss("margin_infonce", tau=0.05, beta=1.0, m1=0.2, m2=0.0)
    arc = gradlab.get_loss("arccon", tau=0.05, u=0.2)
    h, hp = _batch(8, 5, 8)
    assert _rel(marg.per_anchor(h, hp), arc.per_anchor(h, hp)) < 1e-12
    a, b = marg.components(h, hp), arc.components(h, hp)
    assert _rel(a.gd, b.gd) < 1e-12 and _rel(a.ratio, b.ratio) < 1e-12


def test_decompose_recovers_components():
    loss = gradlab.get_loss("margin_infonce", tau=0.3, beta=0.6, m1=0.3, m2=0.2)
    h, hp = _batch(9, 5, 8)
    dec = gradlab.decompose(loss.per_anchor, h, hp)
    comp = loss.components(h, hp)
    assert _rel(dec.gd_weight, comp.gd[:, None] * comp.weight) < 1e-8
    assert _rel(dec.ratio, comp.ratio[:, 0]) < 1e-8
    assert float(dec.residual.max()) < 1e-8


@pytest.mark.parametrize("params", [dict(), dict(tau=0.01, beta=0.5, m1=1.0, m2=-0.5), dict(tau=5.0, beta=3.0)])
def test_float32_finite(params):
    loss = gradlab.get_loss("margin_infonce", **params)
    h, hp0 = _batch(4, 5, 8, dtype=jnp.float32)
    for hp in (h, -h, h + 1e-4 * hp0, hp0):  # identical, antipodal, θ_p ≈ 1e-4, random
        outs = [loss(h, hp), jax.grad(lambda x, hp=hp: loss(x, hp))(h), loss.paradigm_gradient(h, hp)]
        comp = loss.components(h, hp)
        for x in (*outs, comp.gd, comp.weight, comp.ratio):
            assert x.dtype == jnp.float32
            assert np.all(np.isfinite(np.asarray(x)))
    ang = loss.components_from_angles(jnp.array([0.0, 1e-3, 1.5, math.pi], jnp.float32),
                                      jnp.array([[0.0, math.pi]] * 4, jnp.float32))
    for x in (ang.gd, ang.weight, ang.ratio):
        assert x.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(x)))


# --- gradlab.margins: Eq. 15, Theorem 4.1, Lemmas ------------------------------------------------


def _loss_theta(theta_pos, theta_neg, tau, beta, m1, m2):
    """Eq. 5 written in angles, independently of gradlab (sum over anchors)."""
    pos = (jnp.cos(theta_pos + m1) - m2) / tau
    all_logits = jnp.concatenate([pos[..., None], jnp.cos(theta_neg) / tau], axis=-1)
    return jnp.sum(-pos + beta * jax.nn.logsumexp(all_logits, axis=-1))


_grad_theta = jax.jit(jax.grad(lambda tp, tn, tau, beta, m1, m2: _loss_theta(tp, tn, tau, beta, m1, m2),
                               argnums=(0, 1)))


def _angles(seed, batch=(4,), m=5):  # one shape everywhere: eager ops compile once per shape
    k1, k2 = jax.random.split(jax.random.key(seed))
    tp = jax.random.uniform(k1, batch, jnp.float64, 0.05, math.pi - 0.05)
    tn = jax.random.uniform(k2, (*batch, m), jnp.float64, 0.05, math.pi - 0.05)
    return tp, tn


PARAMS = [dict(tau=0.25, beta=1.0, m1=0.4, m2=0.0), dict(tau=0.1, beta=0.6, m1=0.3, m2=0.5),
          dict(tau=0.5, beta=1.7, m1=-0.2, m2=-0.3)]


@pytest.mark.parametrize("p", PARAMS)
def test_angle_gradient_matches_autodiff(p):
    tp, tn = _angles(1)
    g_pos, g_neg = _grad_theta(tp, tn, **p)
    e_pos, e_neg = M.angle_gradient(tp, tn, **p)
    assert _rel(e_pos, g_pos) < 1e-12 and _rel(e_neg, g_neg) < 1e-12


@pytest.mark.parametrize("p", PARAMS)
def test_theorem41_multipliers_match_grad_ratios(p):
    tp, tn = _angles(2)
    g_pos, g_neg = _grad_theta(tp, tn, **p)
    f_pos, f_neg = _grad_theta(tp, tn, p["tau"], p["beta"], 0.0, 0.0)
    mult = M.theorem41_multipliers(tp, tn, **p)
    assert _rel(mult["total_pos"], g_pos / f_pos) < 1e-10
    assert _rel(mult["total_neg"], g_neg / f_neg) < 1e-10
    assert _rel(mult["angular_pos"], np.sin(tp + p["m1"]) / np.sin(tp)) < 1e-12
    assert np.all(np.asarray(mult["angular_neg"]) == 1.0)


def test_lemmas_42_43_agree_and_match_theorem():
    tau, m1, m2 = 0.25, 0.4, 0.3
    tp, tn = _angles(3)
    q_pos_free, _ = M.probabilities(tp, tn, tau=tau)
    ratio = M.lemma42_ratio(tp, tn, tau=tau, m1=m1, m2=m2)
    r_pos, r_neg = M.probability_ratio(tp, tn, tau=tau, beta=1.0, m1=m1, m2=m2)
    # the sum ratio from scratch
    s_free = np.exp(np.cos(tp) / tau) + np.exp(np.cos(tn) / tau).sum(-1)
    s_marg = np.exp((np.cos(tp + m1) - m2) / tau) + np.exp(np.cos(tn) / tau).sum(-1)
    assert _rel(ratio, s_free / s_marg) < 1e-12
    assert _rel(r_pos, ratio) < 1e-12 and _rel(r_neg, ratio) < 1e-12
    assert _rel(M.lemma42_closed_form(tp, q_pos_free, tau=tau, m1=m1, m2=m2), ratio) < 1e-12
    assert _rel(M.lemma43_multiplier(tp, q_pos_free, tau=tau, m1=m1, m2=m2), ratio) < 1e-12
    rp, rn = M.ratio_from_positive(tp, q_pos_free, tau=tau, beta=1.0, m1=m1, m2=m2)
    assert _rel(rp, ratio) < 1e-12 and _rel(rn, ratio) < 1e-12


@pytest.mark.parametrize("beta", [0.4, 1.0, 2.5])
def test_ratio_from_positive_general_beta(beta):
    tau, m1, m2 = 0.3, 0.5, 0.2
    tp, tn = _angles(4)
    q_free, _ = M.probabilities(tp, tn, tau=tau)
    q_marg, q_marg_neg = M.probabilities(tp, tn, tau=tau, m1=m1, m2=m2)
    _, q_free_neg = M.probabilities(tp, tn, tau=tau)
    rp, rn = M.ratio_from_positive(tp, q_free, tau=tau, beta=beta, m1=m1, m2=m2)
    assert _rel(rp, (1 - beta * q_marg) / (1 - beta * q_free)) < 1e-10
    assert _rel(rn, (q_marg_neg / q_free_neg)[:, 0]) < 1e-10
    pr, nr = M.probability_ratio(tp, tn, tau=tau, beta=beta, m1=m1, m2=m2)
    assert _rel(pr, rp) < 1e-10 and _rel(nr, rn) < 1e-10


def test_lemma44_limit():
    tau, m1 = 0.25, 0.4
    tp, tn = _angles(5)
    g_pos, _ = M.angle_gradient(tp, tn, tau=tau, beta=1.0, m1=m1, m2=50.0)
    assert _rel(g_pos, M.lemma44_limit(tp, tau=tau, m1=m1)) < 1e-12
    assert _rel(M.lemma44_limit(tp, tau=tau, m1=m1), np.sin(tp + m1) / tau) < 1e-14


def test_margin_logits_algorithm2():
    theta = jnp.array([[0.3, 1.0, 2.0]])
    p = jnp.array([[1.0, 0.0, 0.0]])
    out = L.margin_logits(jnp.cos(theta), p, tau=0.5, m1=0.2, m2=0.1)
    exp = [(math.cos(0.5) - 0.1) / 0.5, math.cos(1.0) / 0.5, math.cos(2.0) / 0.5]
    assert _rel(out[0], exp) < 1e-6  # float32 grid (Python list -> float32 by default)
    assert out.dtype == jnp.float32 or out.dtype == jnp.float64


# --- the grid functions -------------------------------------------------------------------------


def test_free_gradient_grid():
    theta = np.linspace(0.1, 3.0, 7)
    q = np.linspace(0.0, 1.0, 5)
    out = M.free_gradient_grid(theta, q, tau=0.25, beta=1.0)
    assert out["positive"].shape == (7, 5) and out["negative"].shape == (7, 5)
    assert np.allclose(out["positive"][:, -1], 0.0)  # q⁺ → p⁺ = 1
    assert np.allclose(out["negative"][:, 0], 0.0)  # q⁻ → p⁻ = 0
    i, j = 3, 2
    assert out["positive"][i, j] == pytest.approx((1 - q[j]) * math.sin(theta[i]) / 0.25, rel=1e-12)
    assert out["negative"][i, j] == pytest.approx(q[j] * math.sin(theta[i]) / 0.25, rel=1e-12)
    assert M.free_gradient_grid([0.5], [0.5], tau=0.25)["positive"].dtype == jnp.float32


def test_multiplier_grid_and_green_lines():
    m1 = 0.4
    theta = np.linspace(0.05, math.pi - 0.05, 301)
    q = np.linspace(0.01, 0.99, 9)
    out = M.multiplier_grid(theta, q, tau=0.25, beta=1.0, m1=m1)
    assert out["angular"].shape == (301, 9)
    # angular factor = 1 at θ⁺ = (π − m1)/2
    t0 = (math.pi - m1) / 2
    assert float(angular_factor(math.cos(t0), m1)) == pytest.approx(1.0, abs=1e-6)
    # ratio (β = 1, m2 = 0) is largest where 1 − η is largest: θ⁺ = (π − m1)/2; = 1 at θ⁺ = π − m1/2
    j = 8
    assert abs(theta[int(np.argmax(np.asarray(out["ratio_pos"][:, j])))] - t0) < 0.02
    r_green = M.ratio_from_positive(math.pi - m1 / 2, q, tau=0.25, m1=m1)[0]
    assert np.allclose(np.asarray(r_green), 1.0, atol=1e-6)
    assert np.allclose(out["ratio_pos"], out["ratio_neg"])
    assert np.allclose(out["total_pos"], out["angular"] * out["ratio_pos"])


def test_ratio_grid_shapes_and_values():
    theta = np.linspace(0.1, 3.0, 11)
    q = np.linspace(0.05, 0.95, 4)
    out = M.ratio_grid(theta, q, m1_values=(0.2, 0.8), tau_values=(0.1, 0.25, 0.5))
    assert out["ratio_pos"].shape == (2, 3, 11, 4)
    expected = M.lemma43_multiplier(theta[:, None], q[None, :], tau=0.25, m1=0.8)
    assert _rel(out["ratio_pos"][1, 1], expected) < 1e-12


def test_gradient_magnitudes_over_angles_matches_explicit_batch():
    tp = np.linspace(0.2, 2.8, 4)
    tn = np.linspace(0.3, 2.9, 3)
    n_neg, p = 5, dict(tau=0.2, beta=0.8, m1=0.3, m2=0.2)
    out = M.gradient_magnitudes_over_angles(tp, tn, n_neg=n_neg, **p)
    for a in range(4):
        for b in range(3):
            g_pos, g_neg = M.angle_gradient(jnp.array(tp[a]), jnp.full((n_neg,), tn[b]), **p)
            assert out["positive"][a, b] == pytest.approx(abs(float(g_pos)), rel=1e-12)
            assert out["negative"][a, b] == pytest.approx(abs(float(g_neg[0])), rel=1e-12)
            f_pos, _ = M.angle_gradient(jnp.array(tp[a]), jnp.full((n_neg,), tn[b]), tau=0.2, beta=0.8)
            assert out["positive_free"][a, b] == pytest.approx(abs(float(f_pos)), rel=1e-12)
    with pytest.raises(ValueError, match="n_neg"):
        M.gradient_magnitudes_over_angles(tp, tn, n_neg=0)


# --- gradient-scaling transforms (Eqs. 8–12, Algorithms 3–6) -----------------------------------


def _np_expected_grad(name, tp, tn, tau, beta, prm):
    """∂L/∂θ = (p − β q̃) w sin θ / τ with w from Eqs. 8–12 / Algs. 3–6, in NumPy, per anchor."""
    tp, tn = np.asarray(tp), np.asarray(tn)
    g_pos, g_neg = np.zeros_like(tp), np.zeros_like(tn)
    for a in range(tp.shape[0]):
        theta = np.concatenate([[tp[a]], tn[a]])
        p = np.zeros_like(theta)
        p[0] = 1.0
        base = np.cos(theta) / tau
        q = np.exp(base - base.max())
        q /= q.sum()
        if name == "emphasize":
            w = (1 - p) + prm["s"] * p
        elif name == "curvature":
            x = theta / math.pi
            gamma = (1 - x) ** (1 / prm["c"]) if prm.get("curve") == "alg3" else np.abs((1 - x ** prm["c"]) ** (1 / prm["c"]))
            w = (1 - p) + gamma * prm["s"] * p
        elif name == "ratio":
            new = (np.cos(theta + p * prm["m1"]) - p * prm.get("m2", 0.0)) / tau
            r = np.exp(base).sum() / np.exp(new).sum()
            w = (1 - p) + p * r if prm.get("targets", "positive") == "positive" else np.full_like(p, r)
        elif name == "attenuate_i":
            w = np.full_like(p, 1 / (1 - prm["alpha"] * q[0]))
        elif name == "attenuate_ii":
            w = (1 - p) + p / (1 - prm["alpha"] * q[0])
        else:
            w = np.ones_like(p)
        g = (p - beta * q) * w * np.sin(theta) / tau
        g_pos[a], g_neg[a] = g[0], g[1:]
    return g_pos, g_neg


TRANSFORM_CASES = [
    ("none", {}),
    ("emphasize", dict(s=20.0)),
    ("curvature", dict(s=2.5, c=0.7)),
    ("curvature", dict(s=10.0, c=1.5, curve="alg3")),
    ("ratio", dict(m1=0.2)),
    ("ratio", dict(m1=1.6, m2=0.3, targets="all")),
    ("attenuate_i", dict(alpha=0.25)),
    ("attenuate_ii", dict(alpha=1.0)),
]


@pytest.mark.parametrize("name,prm", TRANSFORM_CASES)
@pytest.mark.parametrize("beta", [1.0, 0.7])
def test_transform_gradients_match_formulas(name, prm, beta):
    tau = 0.25
    t = L.apply_transform(name, tau=tau, beta=beta, **prm)
    tp, tn = _angles(6)
    g = jax.grad(lambda a, b: jnp.sum(t.from_angles(a, b)), argnums=(0, 1))(tp, tn)
    full = dict(L.TRANSFORMS[name])
    merged = {k: v[0] for k, v in full.items()} | prm
    e_pos, e_neg = _np_expected_grad(name, tp, tn, tau, beta, merged)
    assert _rel(g[0], e_pos) < 1e-10 and _rel(g[1], e_neg) < 1e-10
    c_pos, c_neg = t.angle_gradient(tp, tn)
    assert _rel(c_pos, e_pos) < 1e-10 and _rel(c_neg, e_neg) < 1e-10
    # values unchanged: the surrogate is InfoNCE-with-β
    plain = L.apply_transform("none", tau=tau, beta=beta)
    assert _rel(t.from_angles(tp, tn), plain.from_angles(tp, tn)) < 1e-14


def test_emphasize_s1_and_curvature_large_c_are_identity():
    tp, tn = _angles(7)
    base = jax.grad(lambda a: jnp.sum(L.apply_transform("none").from_angles(a, tn)))(tp)
    for t in (L.apply_transform("emphasize", s=1.0), L.apply_transform("curvature", s=1.0, c=1e6)):
        g = jax.grad(lambda a, t=t: jnp.sum(t.from_angles(a, tn)))(tp)
        assert _rel(g, base) < 1e-5


def test_attenuate_type_i_with_margin_alpha_equals_subtractive_margin():
    # Sec. 5.5: α = 1 − exp((cos(θ+m1) − cos θ − m2)/τ) makes type I the margin gradient ÷ angular factor.
    tau, m2 = 0.25, 0.6
    tp, tn = _angles(8)
    alpha = float(1 - M.eta(tp[0], tau=tau, m1=0.0, m2=m2))
    t = L.apply_transform("attenuate_i", tau=tau, alpha=alpha)
    g = jax.grad(lambda a, b: jnp.sum(t.from_angles(a, b)), argnums=(0, 1))(tp, tn)
    e = M.angle_gradient(tp, tn, tau=tau, beta=1.0, m1=0.0, m2=m2)
    assert _rel(g[0], e[0]) < 1e-10 and _rel(g[1], e[1]) < 1e-10


def test_margins_transform_equals_margin_infonce():
    t = L.apply_transform("margins", tau=0.1, beta=0.8, m1=0.3, m2=0.2)
    loss = gradlab.get_loss("margin_infonce", tau=0.1, beta=0.8, m1=0.3, m2=0.2)
    h, hp = _batch(12, 6, 9)
    assert _rel(t.per_anchor(h, hp), loss.per_anchor(h, hp)) < 1e-12
    assert _rel(jax.grad(t)(h, hp), jax.grad(loss)(h, hp)) < 1e-10
    tp, tn = _angles(9)
    g = jax.grad(lambda a, b: jnp.sum(t.from_angles(a, b)), argnums=(0, 1))(tp, tn)
    e = t.angle_gradient(tp, tn)
    assert _rel(g[0], e[0]) < 1e-10 and _rel(g[1], e[1]) < 1e-10


@pytest.mark.parametrize("name,prm", TRANSFORM_CASES)
def test_transform_embedding_path(name, prm):
    # On embeddings the gradient w.r.t. the cosine matrix is w ⊙ (β q − p)/τ (diagonal = positive).
    tau, beta = 0.2, 0.9
    t = L.apply_transform(name, tau=tau, beta=beta, **prm)
    h, hp = _batch(13, 5, 8)
    hn, hpn = _unit(h), _unit(hp)
    c = jnp.asarray(hn @ hpn.T)
    p = jnp.eye(5)
    gc = jax.grad(lambda cc: jnp.sum(t.loss_from_cosines(cc, p)))(c)
    full = {k: v[0] for k, v in L.TRANSFORMS[name].items()} | prm
    theta = np.arccos(np.clip(np.asarray(c), -1, 1))
    tp = np.diagonal(theta)[:, None]
    tn = theta[~np.eye(5, dtype=bool)].reshape(5, 4)
    g_pos, g_neg = _np_expected_grad(name, tp[:, 0], tn, tau, beta, full)
    # ∂L/∂c = −(∂L/∂θ)/sin θ
    exp = np.zeros((5, 5))
    exp[np.eye(5, dtype=bool)] = -g_pos / np.sin(tp[:, 0])
    exp[~np.eye(5, dtype=bool)] = (-g_neg / np.sin(tn)).ravel()
    assert _rel(gc, exp) < 1e-9
    assert float(t(h, hp)) == pytest.approx(float(jnp.mean(t.per_anchor(h, hp))), rel=1e-14)
    sym = L.apply_transform(name, tau=tau, beta=beta, symmetric=True, **prm)
    assert float(sym(h, hp)) == pytest.approx(0.5 * float(t(h, hp) + t(hp, h)), rel=1e-12)


@pytest.mark.parametrize(
    "name",
    L.TRANSFORMS,
)
def test_transforms_float32_finite_and_jittable(name):
    t = L.apply_transform(name, tau=0.05)
    h, hp = _batch(14, 5, 8, dtype=jnp.float32)
    for views in ((h, hp), (h, h), (h, -h)):
        val, grad = jax.jit(jax.value_and_grad(t))(*views)
        assert val.dtype == jnp.float32 and grad.dtype == jnp.float32
        assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(grad)))


def test_masked_negatives_are_left_out():
    t = L.apply_transform("attenuate_ii", tau=0.3)
    c = jnp.array([[0.9, 0.1, -0.2, 0.5]])
    p = jnp.array([[1.0, 0.0, 0.0, 0.0]])
    valid = jnp.array([[True, True, True, False]])
    a = t.loss_from_cosines(c, p, valid)
    b = t.loss_from_cosines(c[:, :3], p[:, :3])
    assert _rel(a, b) < 1e-14
    ga = jax.grad(lambda cc: jnp.sum(t.loss_from_cosines(cc, p, valid)))(c)
    assert float(ga[0, 3]) == 0.0 and np.all(np.isfinite(np.asarray(ga)))


@pytest.mark.parametrize(
    "name,kw,match",
    [
        ("nope", {}, "unknown transform"),
        ("emphasize", dict(s=0.0), "'s'"),
        ("emphasize", dict(c=1.0), "unknown parameter"),
        ("curvature", dict(curve="spline"), "curve"),
        ("ratio", dict(targets="negatives"), "targets"),
        ("attenuate_i", dict(alpha=1.5), "alpha"),
        ("none", dict(tau=0.0), "tau"),
        ("none", dict(beta=-1.0), "beta"),
    ],
)
def test_transform_validation(name, kw, match):
    with pytest.raises(ValueError, match=match):
        L.apply_transform(name, **kw)


def test_scales_not_defined_for_margins():
    with pytest.raises(ValueError, match="margins"):
        L.apply_transform("margins").scales(jnp.array([0.5]), jnp.array([[1.0]]))


# --- a configured transform is a pytree: a jit argument, differentiable in its numbers -------------


def test_transform_is_a_pytree_with_static_name_and_options():
    t = L.apply_transform("curvature", tau=0.35, beta=0.9, s=2.0, c=0.5, curve="alg3")
    leaves, treedef = jax.tree_util.tree_flatten(t)
    assert leaves == [0.35, 0.9, 2.0, 0.5]  # τ, β, then the parameters in TRANSFORMS order
    assert jax.tree_util.tree_unflatten(treedef, leaves) == t
    other = L.apply_transform("curvature", tau=0.1, s=2.0, c=0.5, curve="eq10")
    assert jax.tree_util.tree_structure(other) != treedef  # the option is static
    doubled = jax.tree_util.tree_map(lambda x: 2 * x, t)
    assert doubled.tau == 0.7 and doubled.params["s"] == 4.0 and doubled.params["curve"] == "alg3"


def test_transform_is_a_jit_argument_and_a_new_tau_does_not_recompile():
    traces = []

    @jax.jit
    def objective(t, h, hp):
        traces.append(None)  # runs once per trace
        return t(h, hp)

    h, hp = _batch(15, 6, 8)
    for tau in (0.1, 0.2, 0.35):
        t = L.apply_transform("ratio", tau=tau, m1=0.3, targets="all")
        assert float(objective(t, h, hp)) == pytest.approx(float(t(h, hp)), rel=1e-12)
    assert len(traces) == 1
    from gradlab.losses import _transforms as T  # private on purpose: the compiled program's cache

    L.apply_transform("emphasize", tau=0.1)(h, hp)
    n = T._embed_jit._cache_size()
    L.apply_transform("emphasize", tau=0.3, s=3.0)(h, hp)  # new τ and s: the library's own program is reused
    assert T._embed_jit._cache_size() == n


def _central(f, x, eps=1e-6):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


@pytest.mark.parametrize("name,prm", [("none", {}), ("margins", dict(m1=0.3, m2=0.2))])
def test_grad_with_respect_to_transform_numbers_matches_central_difference(name, prm):
    # no scale on the gradient: the surrogate is the loss itself, so d/dτ of its value is the witness.
    h, hp = _batch(16, 6, 8)
    t = L.apply_transform(name, tau=0.2, beta=0.9, **prm)
    g = jax.grad(lambda tr: tr(h, hp))(t)
    value = lambda **kw: float(dataclasses.replace(t, **kw)(h, hp))  # noqa: E731
    assert float(g.tau) == pytest.approx(_central(lambda x: value(tau=x), 0.2), rel=1e-7)
    assert float(g.beta) == pytest.approx(_central(lambda x: value(beta=x), 0.9), rel=1e-7)
    for k in prm:
        fd = _central(lambda x, k=k: value(params={**t.params, k: x}), t.params[k])
        assert float(g.params[k]) == pytest.approx(fd, rel=1e-7)


def test_grad_with_respect_to_tau_of_a_scaled_transform_is_scaled():
    # emphasize: ∂L/∂τ = mean_i Σ_j (β q̃_ij − p_ij) w_ij (−c_ij/τ²), w = s on the positive (Eq. 9), NumPy.
    tau, beta, s = 0.2, 0.9, 2.0
    h, hp = _batch(17, 5, 7)
    c = _unit(h) @ _unit(hp).T
    q = np.exp(c / tau) / np.exp(c / tau).sum(axis=1, keepdims=True)
    p = np.eye(5)
    w = 1.0 + (s - 1.0) * p
    expected = np.mean(np.sum((beta * q - p) * w * (-c / tau**2), axis=1))
    t = L.apply_transform("emphasize", tau=tau, beta=beta, s=s)
    g = jax.grad(lambda tr: tr(h, hp))(t)
    assert float(g.tau) == pytest.approx(expected, rel=1e-10)
    assert float(g.params["s"]) == 0.0  # s only acts under stop_gradient


def test_transform_stays_hashable_and_comparable():
    a = L.apply_transform("ratio", tau=0.2, m1=0.3)
    b = L.apply_transform("ratio", tau=0.2, m1=0.3)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != L.apply_transform("ratio", tau=0.3, m1=0.3)
