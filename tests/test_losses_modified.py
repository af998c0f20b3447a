"""Modified losses (Li et al. 2024 Sec. 4, App. E Eqs. 13-19, Table 4) and the paradigm baseline (Eq. 5).

Witnesses: ``jax.grad`` of the per-anchor losses (others fixed) and of the training
objective against the paradigm's reconstruction; loop-based NumPy references written
from the paper for the values and for Eqs. 16-19's components; ``gradlab.decompose``
for mB's closed form.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradlab
from gradlab.geometry import normalize, tangent_project
from gradlab.losses import Loss, get_spec
from tests._batches import assert_paradigm_close, edge_batches, paradigm_scale
from tests._batches import batch as _batch
from tests._reference_effective import unit

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

GATED = ["mmhe", "mmhs", "mb", "mv"]
ALL_MODIFIED = GATED + ["baseline"]
SHAPES = [(2, 3), (6, 9)]
PARAMS = {
    "m": st.floats(0.0, 2.0),
    "tau": st.floats(1e-3, 10.0),
    "r": st.floats(0.0, 3.0),
}


@functools.cache
def _pair_fn(name):
    """jit: (h, hp, params) -> (∂L_i/∂h_i tangential, paradigm, objective gradient (tangential), scale)."""
    spec = get_spec(name)

    @jax.jit
    def f(h, hp, params):
        loss = Loss(spec, params)
        hn, hpn = normalize(h), normalize(hp)
        g_obj = tangent_project(hn, jax.grad(lambda x: loss._objective(x, hpn))(hn))
        c = loss.components(h, hp)
        return (
            loss.anchor_gradient(h, hp),
            loss.paradigm_gradient(h, hp),
            g_obj,
            paradigm_scale(c),
            c.gd,
        )

    return f


def _run(name, h, hp, **params):
    p = {**get_spec(name).defaults, **params}
    out = _pair_fn(name)(jnp.asarray(h), jnp.asarray(hp), {k: jnp.float64(v) for k, v in p.items()})
    return p, [np.asarray(x) for x in out]


def _check_exact(name, h, hp, **params):
    p, (auto, par, g_obj, scale, _) = _run(name, h, hp, **params)
    assert_paradigm_close(f"{name} {p}", auto, par, scale)
    if name in GATED:
        # the training objective's gradient w.r.t. h_i is (1/N) × Eq. 16-19
        assert_paradigm_close(f"{name} objective {p}", g_obj, par / h.shape[0], scale)


# --- exactness ------------------------------------------------------------------------
@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("name", ALL_MODIFIED)
def test_paradigm_is_exact_on_random_batches(name, data):
    n, d = data.draw(st.sampled_from(SHAPES), label="shape")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    noise = data.draw(st.floats(0.05, 3.0), label="noise")
    params = {k: data.draw(PARAMS[k], label=k) for k in get_spec(name).defaults}
    h, hp = _batch(n, d, seed, noise)
    _check_exact(name, h, hp, **params)


@pytest.mark.parametrize("case", list(edge_batches(6)))
@pytest.mark.parametrize("name", ALL_MODIFIED)
def test_paradigm_is_exact_at_the_edges(name, case):
    h, hp = edge_batches(6)[case]
    _check_exact(name, h, hp)


@pytest.mark.parametrize("tau", [1e-3, 1e-2, 1.0, 10.0])
@pytest.mark.parametrize("name", ["mmhe", "mb", "mv", "baseline"])
def test_exact_over_the_temperature_range(name, tau):
    h, hp = _batch(6, 9, 5, noise=1.0)
    _check_exact(name, h, hp, tau=tau)


def test_gates_are_mixed_in_the_edge_and_property_batches():
    # guard against a vacuous test: the default batch has anchors on both sides of the gate
    h, hp = _batch(6, 9, 5, noise=1.0)
    _, out = _run("mb", h, hp, m=0.3)
    gd = out[-1]
    assert 0 < gd.sum() < len(gd), gd


# --- the gate is a stop-gradient, not a factor on a batch loss ---------------------------------
@pytest.mark.parametrize("name", GATED)
def test_gated_anchors_receive_no_gradient_from_the_objective(name):
    h, hp = _batch(6, 9, 5, noise=1.0)
    loss = gradlab.get_loss(name, m=0.3)
    hn, hpn = normalize(jnp.asarray(h)), normalize(jnp.asarray(hp))
    g = np.asarray(jax.jit(jax.grad(lambda x: loss._objective(x, hpn)))(hn))
    gd = np.asarray(loss.components(h, hp).gd)
    assert 0 < gd.sum() < len(gd)
    assert np.all(g[gd == 0] == 0)
    assert np.all(np.linalg.norm(g[gd == 1], axis=1) > 0)
    # whereas the plain mean of the per-anchor values would leak gradient into them
    g_naive = np.asarray(jax.jit(jax.grad(lambda x: jnp.mean(loss._per_anchor(x, hpn))))(hn))
    assert np.abs(g_naive[gd == 0]).max() > 1e-6


@pytest.mark.parametrize("name", GATED)
def test_objective_value_is_the_mean_of_the_per_anchor_values(name):
    h, hp = _batch(6, 9, 5, noise=1.0)
    loss = gradlab.get_loss(name)
    assert float(loss(h, hp)) == pytest.approx(
        float(np.mean(loss.per_anchor(h, hp))), rel=1e-14, abs=1e-15
    )


# --- loop-based references (Li et al. 2024 Eqs. 5, 6, 13-15; Eqs. 16-19 for the components) ----------
def _dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def _sq(a, b):
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def ref_gate(h, hp, m):
    n = len(h)
    return [
        1.0 if _dot(h[i], hp[i]) - max(_dot(h[i], hp[k]) for k in range(n) if k != i) < m else 0.0
        for i in range(n)
    ]


def ref_exp_weights(x, tau, pairs):
    """e^{x_i·x_j/τ} / Σ_{pairs} e^{x_k·x_l/τ}, as nested lists (0 on the diagonal)."""
    n = len(x)
    if pairs == "k<l":
        z = sum(math.exp(_dot(x[k], x[l]) / tau) for k in range(n) for l in range(k + 1, n))
    else:
        z = sum(math.exp(_dot(x[k], x[l]) / tau) for k in range(n) for l in range(n) if k != l)
    return [
        [0.0 if i == j else math.exp(_dot(x[i], x[j]) / tau) / z for j in range(n)]
        for i in range(n)
    ]


def ref_mb_mv(h, hp, m, tau, r, source):
    n = len(h)
    d = ref_gate(h, hp, m)
    w = ref_exp_weights(hp if source == "hp" else h, tau, "k≠l")
    out = []
    for i in range(n):
        wp = r * sum(w[i][j] for j in range(n) if j != i)
        li = -wp * _dot(h[i], hp[i]) + sum(w[i][j] * _dot(h[i], h[j]) for j in range(n) if j != i)
        out.append(d[i] * li)
    return out


def ref_mmhe(h, hp, m, tau, r):
    n = len(h)
    d = ref_gate(h, hp, m)
    z = sum(math.exp(_dot(h[k], h[l]) / tau) for k in range(n) for l in range(k + 1, n))
    uni = math.log(
        2
        * sum(math.exp(-_sq(h[k], h[l]) / (2 * tau)) for k in range(n) for l in range(k + 1, n))
        / (n * (n - 1))
    )
    out = []
    for i in range(n):
        coef = r * sum(math.exp(_dot(h[i], h[j]) / tau) for j in range(n) if j != i) / (2 * tau * z)
        out.append(d[i] * (coef * _sq(h[i], hp[i]) + uni))
    return out


def ref_mmhs(h, hp, m, r):
    n = len(h)
    d = ref_gate(h, hp, m)
    out = []
    for i in range(n):
        dmin = min(
            math.sqrt(_sq(h[i], h[j])) for j in range(n) if j != i
        )  # "min" (docs/formulas.md typo note)
        out.append(d[i] * (r / (2 * dmin) * _sq(h[i], hp[i]) - dmin))
    return out


def ref_baseline(h, hp, m, tau, r):
    n = len(h)
    out = []
    for i in range(n):
        c_p = _dot(h[i], hp[i])
        c = {j: _dot(h[i], hp[j]) for j in range(n) if j != i}
        gd = 1.0 if c_p - max(c.values()) < m else 0.0
        s = sum(math.exp(v / tau) for v in c.values())
        out.append(gd * sum(math.exp(c[j] / tau) / s * (c[j] - r * c_p) for j in c))
    return out


REFS = {
    "mb": lambda h, hp, p: ref_mb_mv(h, hp, source="hp", **p),
    "mv": lambda h, hp, p: ref_mb_mv(h, hp, source="h", **p),
    "mmhe": lambda h, hp, p: ref_mmhe(h, hp, **p),
    "mmhs": lambda h, hp, p: ref_mmhs(h, hp, **p),
    "baseline": lambda h, hp, p: ref_baseline(h, hp, **p),
}


@pytest.mark.parametrize("name", ALL_MODIFIED)
def test_per_anchor_values_match_loop_references(name):
    h, hp = _batch(6, 8, 21, noise=0.4)
    params = {
        k: v for k, v in {"m": 0.5, "tau": 0.2, "r": 1.3}.items() if k in get_spec(name).defaults
    }
    loss = gradlab.get_loss(name, **params)
    want = REFS[name](unit(h), unit(hp), params)
    assert 0 < sum(1 for v in want if v != 0) < len(want) or name == "baseline"
    np.testing.assert_allclose(np.asarray(loss.per_anchor(h, hp)), want, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("name", ["mb", "mv", "mmhe", "mmhs"])
def test_components_match_eqs_16_to_19(name):
    m, tau, r = 0.5, 0.2, 1.3
    h, hp = _batch(6, 8, 22, noise=0.4)
    params = {k: v for k, v in {"m": m, "tau": tau, "r": r}.items() if k in get_spec(name).defaults}
    c = gradlab.get_loss(name, **params).components(h, hp)
    u, up = unit(h), unit(hp)
    n = len(u)
    if name == "mb":
        w = ref_exp_weights(up, tau, "k≠l")
    elif name == "mv":
        w = ref_exp_weights(u, tau, "k≠l")
    elif name == "mmhe":
        w = [[x / tau for x in row] for row in ref_exp_weights(u, tau, "k<l")]
    else:
        w = [[0.0] * n for _ in range(n)]
        for i in range(n):
            j = min((k for k in range(n) if k != i), key=lambda k: _sq(u[i], u[k]))
            w[i][j] = 1.0 / math.sqrt(_sq(u[i], u[j]))
    np.testing.assert_allclose(np.asarray(c.weight), w, rtol=1e-11, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(c.gd), ref_gate(u, up, m))
    np.testing.assert_array_equal(np.broadcast_to(np.asarray(c.ratio), (n, n)), r)
    assert c.negatives == "h"


def test_baseline_components_are_eq5():
    m, tau, r = 0.5, 0.2, 1.3
    h, hp = _batch(6, 8, 23, noise=0.4)
    c = gradlab.get_loss("baseline", m=m, tau=tau, r=r).components(h, hp)
    u, up = unit(h), unit(hp)
    n = len(u)
    for i in range(n):
        s = sum(math.exp(_dot(u[i], up[k]) / tau) for k in range(n) if k != i)
        for j in range(n):
            want = 0.0 if i == j else math.exp(_dot(u[i], up[j]) / tau) / s  # no extra 1/τ
            assert float(c.weight[i, j]) == pytest.approx(want, rel=1e-12, abs=1e-15)
    np.testing.assert_array_equal(np.asarray(c.gd), ref_gate(u, up, m))
    assert np.all(np.asarray(c.ratio) == r) and c.negatives == "h_prime"


def test_baseline_angle_form_matches_embedding_form():
    loss = gradlab.get_loss("baseline", m=0.5, tau=0.1, r=1.2)
    h, hp = _batch(5, 8, 24, noise=0.5)
    u, up = unit(h), unit(hp)
    c = loss.components(h, hp)
    cos = u @ up.T
    n = len(u)
    theta_pos = np.arccos(np.clip(np.diag(cos), -1, 1))
    theta_neg = np.stack([np.arccos(np.clip(np.delete(cos[i], i), -1, 1)) for i in range(n)])
    ca = loss.components_from_angles(theta_pos, theta_neg)
    np.testing.assert_allclose(np.asarray(ca.gd), np.asarray(c.gd))
    w_emb = np.stack([np.delete(np.asarray(c.weight[i]), i) for i in range(n)])
    np.testing.assert_allclose(np.asarray(ca.weight), w_emb, rtol=1e-10)


@pytest.mark.parametrize("name", ["mb", "mv", "mmhe"])
def test_whole_batch_normalizers_have_no_angle_form(name):
    assert not get_spec(name).kind == "cosine"
    with pytest.raises(NotImplementedError, match="no angle form"):
        gradlab.get_loss(name).components_from_angles(np.zeros(2), np.ones((2, 3)))


# --- decompose recovers mB's closed form --------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decompose_recovers_mb_closed_form(seed):
    loss = gradlab.get_loss("mb", m=0.6, tau=0.1, r=1.5)
    h, hp = _batch(6, 14, 60 + seed, noise=0.4)
    dec = jax.jit(lambda a, b: gradlab.decompose(loss.per_anchor, a, b, negatives="h"))(h, hp)
    c = loss.components(h, hp)
    gd = np.asarray(c.gd)
    assert gd.sum() > 0
    np.testing.assert_allclose(
        np.asarray(dec.gd_weight), gd[:, None] * np.asarray(c.weight), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(dec.ratio)[gd == 1], 1.5, rtol=1e-8)
    assert float(np.max(dec.residual)) < 1e-8


# --- finite values and gradients --------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ALL_MODIFIED)
def test_finite_at_identical_and_antipodal_views(name, dtype):
    loss = (
        gradlab.get_loss(name, tau=1e-3)
        if "tau" in get_spec(name).defaults
        else gradlab.get_loss(name)
    )
    h, _ = _batch(4, 6, 51, dtype=dtype)
    fn = jax.jit(jax.value_and_grad(lambda a, b: loss(a, b), argnums=(0, 1)))
    for hp in (h.copy(), -h):
        v, (ga, gb) = fn(h, hp)
        assert v.dtype == dtype
        assert np.isfinite(float(v)) and np.all(np.isfinite(ga)) and np.all(np.isfinite(gb))


# --- parameters ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, params, match",
    [
        ("mb", dict(tau=0.0), "'tau' must be > 0"),
        ("mv", dict(tau=-0.05), "'tau'"),
        ("mmhe", dict(m=-0.1), "'m' must be >= 0"),
        ("baseline", dict(m=-1.0), "'m'"),
        ("mmhs", dict(r=-1.0), "'r'"),
        ("mmhs", dict(tau=0.05), "valid: m, r"),
        ("baseline", dict(u=0.1), "valid: m, tau, r"),
    ],
)
def test_bad_parameters_raise(name, params, match):
    with pytest.raises(ValueError, match=match):
        gradlab.get_loss(name, **params)


def test_defaults_are_table4_and_eq5():
    assert dict(get_spec("mmhe").defaults) == {"m": 0.30, "tau": 0.05, "r": 1.75}
    assert dict(get_spec("mmhs").defaults) == {"m": 0.30, "r": 1.75}
    assert dict(get_spec("mb").defaults) == {"m": 0.30, "tau": 0.05, "r": 1.5}
    assert dict(get_spec("mv").defaults) == {"m": 0.30, "tau": 0.05, "r": 1.5}
    assert dict(get_spec("baseline").defaults) == {"m": 0.30, "tau": 0.05, "r": 1.0}
    assert set(gradlab.list_losses("modified")) == set(ALL_MODIFIED)
