"""Ineffective objectives (Li et al. 2024 Sec. 4 / Table 2 / App. D.2; Nie et al. 2023 Sec. 2.2; Farina et al. 2023).

Witnesses: ``jax.grad`` (the tangential autodiff gradient) against the paradigm's
reconstruction, loop-based NumPy references written from the papers for the values
and for Table 2's components, and ``gradlab.decompose`` for the residual of the
approximate decompositions.
"""

from __future__ import annotations

import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradlab
from gradlab.geometry import normalize
from gradlab.losses import Loss, get_spec
from tests._batches import assert_paradigm_close, edge_batches, paradigm_scale
from tests._batches import batch as _batch
from tests._reference_effective import unit

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

EXACT = ["alignment", "uniformity", "align_uniform", "align_mhe", "align_mhs", "barlow_twins"]
APPROX = ["barlow_twins_pearson", "vicreg", "vicreg_nc"]
ALL_INEFFECTIVE = EXACT + APPROX
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "losses.md"

# Parameter strategies per loss (the papers' ranges, widened).
POS = st.floats(1e-3, 10.0)
PARAMS = {
    "alignment": dict(alpha=st.floats(0.5, 3.0)),
    "uniformity": dict(t=POS),
    "align_uniform": dict(
        lam=st.floats(0.0, 1.0), alpha=st.floats(0.5, 3.0), t=st.floats(1e-3, 10.0)
    ),
    "align_mhe": dict(nu=st.floats(0.0, 5.0)),
    "align_mhs": dict(nu=st.floats(0.0, 5.0)),
    "barlow_twins": dict(nu=st.floats(1e-3, 2.0)),
}
SHAPES = [(2, 3), (5, 9)]


# --- helpers -----------------------------------------------------------------------
@functools.cache
def _pair_fn(name):
    """jit: (h, hp, params) -> (tangential jax.grad, paradigm reconstruction, scale); params traced."""
    spec = get_spec(name)

    @jax.jit
    def f(h, hp, params):
        loss = Loss(spec, params)
        return (
            loss.anchor_gradient(h, hp),
            loss.paradigm_gradient(h, hp),
            paradigm_scale(loss.components(h, hp)),
        )

    return f


def _check_exact(name, h, hp, **params):
    """max |jax.grad − paradigm| within ``assert_paradigm_close``'s bound."""
    p = {**get_spec(name).defaults, **params}
    auto, par, scale = _pair_fn(name)(
        jnp.asarray(h), jnp.asarray(hp), {k: jnp.float64(v) for k, v in p.items()}
    )
    assert_paradigm_close(f"{name} {p}", auto, par, scale)


# --- exactness: property tests and edges ---------------------------------------------------
@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("name", EXACT)
def test_paradigm_is_exact_on_random_batches(name, data):
    n, d = data.draw(st.sampled_from(SHAPES), label="shape")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    noise = data.draw(st.floats(0.05, 3.0), label="noise")
    params = {k: data.draw(s, label=k) for k, s in PARAMS[name].items()}
    h, hp = _batch(n, d, seed, noise)
    _check_exact(name, h, hp, **params)


@pytest.mark.parametrize("case", list(edge_batches(5)))
@pytest.mark.parametrize("name", EXACT)
def test_paradigm_is_exact_at_the_edges(name, case):
    h, hp = edge_batches(5)[case]
    _check_exact(name, h, hp)


@pytest.mark.parametrize("t", [1e-3, 0.1, 10.0])
@pytest.mark.parametrize("name", ["uniformity", "align_uniform"])
def test_exact_over_the_temperature_range(name, t):
    h, hp = _batch(5, 9, 5)
    _check_exact(name, h, hp, t=t)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_alignment_small_and_large_alpha_at_identical_views(alpha):
    h, _ = _batch(4, 6, 2)
    _check_exact("alignment", h, h.copy(), alpha=alpha)
    _check_exact("align_uniform", h, h.copy(), alpha=alpha, lam=0.5)


@pytest.mark.parametrize("param", ["nu"])
@pytest.mark.parametrize("name", ["align_mhe", "align_mhs"])
def test_zero_weight_keeps_the_pull_explicit(name, param):
    # nu = 0: no negative carries weight, the alignment pull stays in Components.pull.
    h, hp = _batch(5, 9, 6)
    _check_exact(name, h, hp, **{param: 0.0})
    c = gradlab.get_loss(name, **{param: 0.0}).components(h, hp)
    np.testing.assert_allclose(np.asarray(c.pull), 2.0 / 5, rtol=1e-15)


# --- loop-based references written from the papers -------------------------------------------
def _sq(a, b):
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def ref_alignment(h, hp, alpha):
    return [_sq(h[i], hp[i]) ** (alpha / 2) for i in range(len(h))]


def ref_uniformity(h, hp, t):
    n = len(h)
    s = 0.0
    for i in range(n):
        for j in range(n):
            if j != i:
                s += math.exp(-t * _sq(h[i], hp[j]))
    return math.log(s / (n * (n - 1)))


def ref_mhe(h):
    n = len(h)
    s = 0.0
    for k in range(n):
        for l in range(k + 1, n):
            s += math.exp(-_sq(h[k], h[l]))
    return math.log(2.0 / (n * (n - 1)) * s)


def ref_align_mhs(h, hp, nu):
    n = len(h)
    out = []
    for i in range(n):
        dmin = min(math.sqrt(_sq(h[i], h[j])) for j in range(n) if j != i)
        out.append(_sq(h[i], hp[i]) / n - nu * dmin)
    return out


def ref_barlow_twins(h, hp, nu):
    n, d = h.shape
    c = [[sum(h[i][k] * hp[i][l] for i in range(n)) / n for l in range(d)] for k in range(d)]
    on = sum((c[k][k] - 1.0) ** 2 for k in range(d))
    off = sum(c[k][l] ** 2 for k in range(d) for l in range(d) if k != l)
    return on + nu * off


def _mean_col(x, k):
    return sum(x[i][k] for i in range(len(x))) / len(x)


def ref_barlow_twins_pearson(h, hp, lambda_bt):
    n, d = h.shape

    def std(x, k):
        mu = _mean_col(x, k)
        return math.sqrt(sum((x[i][k] - mu) ** 2 for i in range(n)) / n)

    rho = [[0.0] * d for _ in range(d)]
    for k in range(d):
        for l in range(d):
            mk, ml = _mean_col(h, k), _mean_col(hp, l)
            cov = sum((h[i][k] - mk) * (hp[i][l] - ml) for i in range(n)) / n
            rho[k][l] = cov / (std(h, k) * std(hp, l))
    return sum((1 - rho[k][k]) ** 2 for k in range(d)) + lambda_bt * sum(
        rho[k][l] ** 2 for k in range(d) for l in range(d) if k != l
    )


def _cov(x):
    n, d = x.shape
    mu = [_mean_col(x, k) for k in range(d)]
    return [
        [sum((x[i][k] - mu[k]) * (x[i][l] - mu[l]) for i in range(n)) / (n - 1) for l in range(d)]
        for k in range(d)
    ]


def ref_vicreg(h, hp, nu1, nu2, gamma):
    n, d = h.shape
    align = sum(_sq(h[i], hp[i]) for i in range(n)) / n
    total = align
    for x in (h, hp):
        c = _cov(x)
        total += nu1 * sum(c[k][l] ** 2 for k in range(d) for l in range(d) if k != l) / d
        total += nu2 * sum(max(0.0, gamma - math.sqrt(c[k][k])) for k in range(d)) / d
    return total


def ref_vicreg_nc(h, hp, lambda_i, lambda_v, lambda_c, eps):
    n, d = h.shape
    total = lambda_i / n * sum(_sq(h[i], hp[i]) for i in range(n))
    for x in (h, hp):
        c = _cov(x)
        total += lambda_v / d * sum(max(0.0, 1.0 - math.sqrt(c[k][k] + eps)) for k in range(d))
        total += lambda_c / d * sum(c[k][l] ** 2 for k in range(d) for l in range(d) if k != l)
    return total


VALUE_CASES = [
    ("alignment", dict(alpha=1.3), lambda h, hp, p: np.mean(ref_alignment(h, hp, **p))),
    ("uniformity", dict(t=2.5), lambda h, hp, p: ref_uniformity(h, hp, **p)),
    (
        "align_uniform",
        dict(lam=0.3, alpha=2.0, t=6.0),
        lambda h, hp, p: (
            (1 - p["lam"]) * np.mean(ref_alignment(h, hp, p["alpha"]))
            + p["lam"] * ref_uniformity(h, hp, p["t"])
        ),
    ),
    (
        "align_mhe",
        dict(nu=0.7),
        lambda h, hp, p: np.mean(ref_alignment(h, hp, 2.0)) + p["nu"] * ref_mhe(h),
    ),
    ("align_mhs", dict(nu=0.7), lambda h, hp, p: np.mean(ref_align_mhs(h, hp, **p))),
    ("barlow_twins", dict(nu=0.3), lambda h, hp, p: ref_barlow_twins(h, hp, **p)),
    (
        "barlow_twins_pearson",
        dict(lambda_bt=0.2),
        lambda h, hp, p: ref_barlow_twins_pearson(h, hp, **p),
    ),
    ("vicreg", dict(nu1=0.5, nu2=2.0, gamma=1.0), lambda h, hp, p: ref_vicreg(h, hp, **p)),
    (
        "vicreg_nc",
        dict(lambda_i=1.0, lambda_v=3.0, lambda_c=0.5, eps=1e-4),
        lambda h, hp, p: ref_vicreg_nc(h, hp, **p),
    ),
]


@pytest.mark.parametrize("name, params, ref", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_match_loop_references(name, params, ref):
    h, hp = _batch(5, 7, 21, noise=0.7)
    got = float(gradlab.get_loss(name, **params)(h, hp))
    want = ref(unit(h), unit(hp), params)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-13)


def test_alignment_and_mhs_per_anchor_values():
    h, hp = _batch(5, 7, 22)
    np.testing.assert_allclose(
        np.asarray(gradlab.get_loss("alignment", alpha=0.8).per_anchor(h, hp)),
        ref_alignment(unit(h), unit(hp), 0.8),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        np.asarray(gradlab.get_loss("align_mhs", nu=1.3).per_anchor(h, hp)),
        ref_align_mhs(unit(h), unit(hp), 1.3),
        rtol=1e-12,
    )


def test_nie2023_identical_embeddings_closed_form():
    # All h_i = h_j' = e: uniformity = log 1 = 0, alignment = 0.
    e = np.tile(np.eye(1, 6), (4, 1)) + 0.0
    assert float(gradlab.get_loss("uniformity")(e, e)) == pytest.approx(0.0, abs=1e-15)
    assert float(gradlab.get_loss("alignment")(e, e)) == 0.0


# --- components against Table 2 (loop references) ------------------------------------------
def test_align_mhe_components_match_table2():
    nu = 0.8
    h, hp = _batch(5, 9, 31)
    c = gradlab.get_loss("align_mhe", nu=nu).components(h, hp)
    u = unit(h)
    n = len(u)
    z = sum(math.exp(2 * _dot(u[k], u[l])) for k in range(n) for l in range(k + 1, n))
    for i in range(n):
        for j in range(n):
            want = 0.0 if i == j else 2 * nu * math.exp(2 * _dot(u[i], u[j])) / z
            assert float(c.weight[i, j]) == pytest.approx(want, rel=1e-12)
        r = z / (nu * n * sum(math.exp(2 * _dot(u[i], u[k])) for k in range(n) if k != i))
        assert float(c.ratio[i, 0]) == pytest.approx(r, rel=1e-12)
    assert c.negatives == "h"


def test_align_mhs_components_match_table2():
    nu = 1.7
    h, hp = _batch(5, 9, 32)
    c = gradlab.get_loss("align_mhs", nu=nu).components(h, hp)
    u = unit(h)
    n = len(u)
    for i in range(n):
        j = max((k for k in range(n) if k != i), key=lambda k: _dot(u[i], u[k]))
        dist = math.sqrt(_sq(u[i], u[j]))
        row = np.asarray(c.weight[i])
        assert row[j] == pytest.approx(nu / dist, rel=1e-12)
        assert np.count_nonzero(row) == 1
        assert float(c.ratio[i, 0]) == pytest.approx(2 * dist / (nu * n), rel=1e-12)


def test_barlow_twins_components_match_table2():
    nu = 0.4
    h, hp = _batch(4, 6, 33)
    c = gradlab.get_loss("barlow_twins", nu=nu).components(h, hp)
    u, up = unit(h), unit(hp)
    n, d = u.shape
    cdiag = [sum(u[i][k] * up[i][k] for i in range(n)) / n for k in range(d)]
    for i in range(n):
        s = sum(_dot(up[i], up[k]) for k in range(n) if k != i)
        for j in range(n):
            want = 0.0 if i == j else 2 * nu * _dot(up[i], up[j]) / n**2
            assert float(c.weight[i, j]) == pytest.approx(want, rel=1e-12, abs=1e-15)
        want_r = np.diag([n * (1 - (1 - nu) * cdiag[k]) / (nu * s) for k in range(d)])
        np.testing.assert_allclose(np.asarray(c.ratio_matrix()[i]), want_r, rtol=1e-12, atol=1e-15)
    assert c.ratio_is_matrix and c.ratio.shape == (n, d)


def test_barlow_twins_gradient_matches_formulas_eq10():
    # docs/formulas.md §3: tangential ∂L^B/∂h_i = (2/N)(−A h_i' + ν Σ_{j≠i} (h_i'·h_j'/N) h_j).
    nu = 0.3
    h, hp = _batch(4, 6, 34)
    u, up = unit(h), unit(hp)
    n, d = u.shape
    g = np.asarray(gradlab.get_loss("barlow_twins", nu=nu).anchor_gradient(h, hp))
    cdiag = np.array([sum(u[i][k] * up[i][k] for i in range(n)) / n for k in range(d)])
    for i in range(n):
        v = -(1 - (1 - nu) * cdiag) * up[i]
        for j in range(n):
            if j != i:
                v = v + nu * _dot(up[i], up[j]) / n * u[j]
        v = 2 / n * v
        v = v - _dot(v, u[i]) * u[i]
        np.testing.assert_allclose(g[i], v, rtol=1e-11, atol=1e-14)


def test_uniformity_components_match_nie2023_appendix_c():
    t = 3.0
    h, hp = _batch(4, 7, 35)
    c = gradlab.get_loss("uniformity", t=t).components(h, hp)
    u, up = unit(h), unit(hp)
    n = len(u)
    s = sum(math.exp(-t * _sq(u[k], up[l])) for k in range(n) for l in range(n) if k != l)
    for i in range(n):
        for j in range(n):
            want = 0.0 if i == j else 2 * t * math.exp(-t * _sq(u[i], up[j])) / s
            assert float(c.weight[i, j]) == pytest.approx(want, rel=1e-12)
    assert np.all(np.asarray(c.ratio) == 0) and c.negatives == "h_prime"


def test_alignment_pull_is_alpha_d_to_alpha_minus_2():
    alpha = 1.5
    h, hp = _batch(4, 7, 36)
    c = gradlab.get_loss("alignment", alpha=alpha).components(h, hp)
    want = [alpha * _sq(a, b) ** ((alpha - 2) / 2) for a, b in zip(unit(h), unit(hp), strict=True)]
    np.testing.assert_allclose(np.asarray(c.pull), want, rtol=1e-12)
    assert np.all(np.asarray(c.weight) == 0)


def test_vicreg_components_are_table2():
    nu1 = 0.3
    h, hp = _batch(5, 8, 37)
    c = gradlab.get_loss("vicreg", nu1=nu1).components(h, hp)
    u = unit(h)
    n, d = u.shape
    for i in range(n):
        s = sum(_dot(u[i], u[k]) for k in range(n) if k != i)
        for j in range(n):
            want = 0.0 if i == j else 4 * nu1 * _dot(u[i], u[j]) / (d * (n - 1) ** 2)
            assert float(c.weight[i, j]) == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert float(c.ratio[i, 0]) == pytest.approx(
            d * (n - 1) ** 2 / (2 * n * nu1 * s), rel=1e-10
        )


@functools.cache
def _decompose_fn(name, negatives):
    """jit: (h, hp) -> (decompose of ∂L/∂h_i, tangential jax.grad, paradigm gradient, components)."""
    loss = gradlab.get_loss(name)
    spec = get_spec(name)

    @jax.jit
    def f(h, hp):
        hn, hpn = normalize(h), normalize(hp)
        grad = jax.grad(lambda x: spec.batch(x, hpn, **loss.params))(hn)
        dec = gradlab.decompose(loss.per_anchor, h, hp, negatives=negatives, gradient=grad)
        return (
            dec,
            loss.anchor_gradient(h, hp),
            loss.paradigm_gradient(h, hp),
            loss.components(h, hp),
        )

    return f


def test_decompose_recovers_align_mhe():
    h, hp = _batch(5, 12, 38)
    dec, _, _, c = _decompose_fn("align_mhe", "h")(h, hp)
    np.testing.assert_allclose(
        np.asarray(dec.gd_weight), np.asarray(c.weight), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(dec.ratio), np.asarray(c.ratio[:, 0]), rtol=1e-8)
    assert float(np.max(dec.residual)) < 1e-8


# --- approximate decompositions: the residual is reported, not hidden ---------------------------
@pytest.mark.parametrize("name", APPROX)
def test_approximate_decompositions_have_a_clear_residual(name):
    assert not get_spec(name).exact
    h, hp = _batch(6, 16, 41, noise=0.5)
    dec, auto, par, _ = _decompose_fn(name, "h")(h, hp)
    residual = np.asarray(dec.residual)
    assert float(np.median(residual)) > 1e-2, f"{name}: residual {residual}"
    # the components it returns do not reproduce the gradient either (by at least the fit's residual)
    auto, par = np.asarray(auto), np.asarray(par)
    own = np.linalg.norm(auto - par, axis=1) / np.linalg.norm(auto, axis=1)
    assert np.all(own >= residual * (1 - 1e-6))
    if name == "barlow_twins_pearson":
        # its W / R are the least-squares fit itself: exactly decompose's residual
        np.testing.assert_allclose(own, residual, rtol=1e-6)


# --- finite values and gradients, float32 and float64 ----------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ALL_INEFFECTIVE)
def test_finite_at_identical_and_antipodal_views(name, dtype):
    loss = gradlab.get_loss(name)
    h, _ = _batch(4, 6, 51, dtype=dtype)
    fn = jax.jit(jax.value_and_grad(lambda a, b: loss(a, b), argnums=(0, 1)))
    for hp in (h.copy(), -h):
        v, (ga, gb) = fn(h, hp)
        assert v.dtype == dtype
        assert np.isfinite(float(v)) and np.all(np.isfinite(ga)) and np.all(np.isfinite(gb))


# --- parameters ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, params, match",
    [
        ("uniformity", dict(t=0.0), "'t' must be > 0"),
        ("uniformity", dict(t=-1.0), "'t'"),
        ("alignment", dict(alpha=0.0), "'alpha'"),
        ("align_uniform", dict(lam=1.5), "'lam' must lie in"),
        ("align_mhe", dict(nu=-0.1), "'nu' must be >= 0"),
        ("barlow_twins", dict(nu=0.0), "'nu' must be > 0"),
        ("vicreg", dict(gamma=-1.0), "'gamma'"),
        ("vicreg_nc", dict(eps=-1e-4), "'eps'"),
        ("vicreg", dict(tau=0.1), "valid: nu1, nu2, gamma"),
        ("vicreg_nc", dict(lam=1.0), "valid: lambda_i, lambda_v, lambda_c, eps"),
        ("barlow_twins_pearson", dict(nu=1.0), "valid: lambda_bt"),
    ],
)
def test_bad_parameters_raise(name, params, match):
    with pytest.raises(ValueError, match=match):
        gradlab.get_loss(name, **params)


def test_defaults_follow_the_papers():
    assert get_spec("align_uniform").defaults == {
        "lam": 0.1,
        "alpha": 2.0,
        "t": 6.0,
    }  # Nie et al. 2023 Table 2
    assert get_spec("uniformity").defaults == {"t": 6.0}
    assert get_spec("alignment").defaults == {"alpha": 2.0}
    assert all(get_spec(n).family == "ineffective" for n in ALL_INEFFECTIVE)
    assert set(gradlab.list_losses("ineffective")) == set(ALL_INEFFECTIVE)


def test_docs_table_lists_every_registered_loss():
    text = DOCS.read_text(encoding="utf-8")
    missing = [n for n in gradlab.list_losses() if f"`{n}`" not in text]
    assert not missing, f"docs/losses.md does not list: {missing}"
