"""Nie et al. 2023 gradient-norm maps (gradlab.norms) against independent witnesses.

Witness 1 (jax.grad): a batch is built at prescribed angles — every anchor h_i at θ_p
from its positive and at θ_n from *every* other h_j' (the paper's "all θ_ij' are the
same") — and the autodiff gradient of the registered loss (gradlab.get_loss) w.r.t. the
anchor is split, by least squares (gradlab.decompose), into its component along the
positive and its components along each negative. Their tangential lengths are the
paper's ‖∇^pos‖ and ‖∇^{neg_j}‖.

Witness 2 (the loss's own GD / W / R kernel): ‖∇^pos‖ = GD Σ_j W_j R_j sin θ_p and
‖∇^{neg_j}‖ = GD W_j sin θ_n, on a dense grid with K = 64 negatives.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradlab
from gradlab import norms
from gradlab.geometry import normalize

K = 3  # negatives in the embedding witness (N = K + 1 anchors, D = 2N + 1)


def symmetric_batch(theta_pos: float, theta_neg: float, n: int):
    """h_i = e_i; h_j' = cos θ_p e_j + cos θ_n Σ_{k≠j} e_k + c e_{n+j}: every h_i·h_j' = cos θ_n (i≠j)."""
    a, b = math.cos(theta_pos), math.cos(theta_neg)
    c2 = 1 - a * a - (n - 1) * b * b
    if c2 < 0:
        return None
    d = 2 * n + 1
    h = np.eye(n, d)
    hp = np.zeros((n, d))
    for j in range(n):
        hp[j, :n] = b
        hp[j, j] = a
        hp[j, n + j] = math.sqrt(c2)
    return jnp.asarray(h), jnp.asarray(hp)


# (θ_p, θ_n) pairs with cos²θ_p + K cos²θ_n <= 1; gates both open and closed for every loss.
PAIRS = [(1.2, 1.3), (0.9, 1.9), (1.4, 1.2), (0.7, 1.57), (1.1, 2.0), (1.5, 1.75), (0.5, 1.45), (1.3, 1.05)]


def witness_parts(grad_fn_or_loss, theta_pos, theta_neg, n=K + 1, batch=False):
    """(‖∇^pos‖, [‖∇^{neg_j}‖]) of anchor 0 from the autodiff gradient."""
    h, hp = symmetric_batch(theta_pos, theta_neg, n)
    if batch:
        g = jax.grad(lambda x: grad_fn_or_loss(normalize(x), hp))(h)
        d = gradlab.decompose(lambda a, b: jnp.zeros(a.shape[0]), h, hp, gradient=g)
    else:
        d = gradlab.decompose(grad_fn_or_loss, h, hp)
    pos = abs(float(d.pull[0])) * math.sin(theta_pos)
    neg = np.abs(np.asarray(d.gd_weight[0, 1:])) * math.sin(theta_neg)
    return pos, neg


def test_batch_builder_puts_every_pair_at_its_angle():
    h, hp = symmetric_batch(0.9, 1.9, 4)
    c = np.asarray(h @ hp.T)
    np.testing.assert_allclose(np.diag(c), math.cos(0.9), atol=1e-15)
    off = c[~np.eye(4, dtype=bool)]
    np.testing.assert_allclose(off, math.cos(1.9), atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(hp), axis=1), 1.0, atol=1e-15)


@pytest.mark.x64
@pytest.mark.parametrize(
    "loss,params",
    [("infonce", {"tau": 0.05}), ("infonce", {"tau": 0.5}), ("dcl", {"tau": 0.03}), ("dcl+", {"tau": 0.17}),
     ("dcl+", {"tau": 0.6}), ("mpt", {"m": 0.23}), ("met", {"m": 0.45}), ("mat", {"m": 0.15 * math.pi})],
)
def test_registered_losses_match_jax_grad(loss, params):
    per_anchor = gradlab.get_loss(loss, **params).per_anchor
    hardest_only = loss in ("mpt", "met", "mat")
    opened = closed = 0
    for tp, tn in PAIRS:
        want_pos, want_neg = witness_parts(per_anchor, tp, tn)
        got_pos = float(norms.norm_map(loss, tp, tn, part="pos", negatives=K, **params))
        got_neg = float(norms.norm_map(loss, tp, tn, part="neg", negatives=K, **params))
        np.testing.assert_allclose(got_pos, want_pos, rtol=1e-9, atol=1e-12, err_msg=f"pos at {(tp, tn)}")
        # one negative's share. Triplet losses push only the hardest negative; with all K at
        # the same angle jax.grad of max() splits that push evenly over the tied negatives,
        # so their sum is the hardest negative's norm.
        want = want_neg.sum() if hardest_only else want_neg.max()
        np.testing.assert_allclose(got_neg, want, rtol=1e-9, atol=1e-12, err_msg=f"neg at {(tp, tn)}")
        if not hardest_only:
            np.testing.assert_allclose(want_neg, want_neg[0], rtol=1e-9, atol=1e-12)
        opened += want_pos > 0
        closed += want_pos == 0
    if loss in ("mpt", "met", "mat", "dcl+"):
        assert opened and closed, "the test pairs must exercise both sides of the gate"


def _align_per_anchor(h, hp, alpha):
    return (2 - 2 * jnp.sum(h * hp, axis=-1)) ** (alpha / 2)


def _uniform_batch(h, hp, t):
    """Nie et al. 2023 Eq. 29: log (1/(N(N−1))) Σ_i Σ_{j≠i} exp(−t ‖ĥ_i − ĥ_j'‖²)."""
    n = h.shape[0]
    d2 = jnp.sum((h[:, None, :] - hp[None, :, :]) ** 2, axis=-1)
    off = ~jnp.eye(n, dtype=bool)
    return jnp.log(jnp.sum(jnp.where(off, jnp.exp(-t * d2), 0.0)) / (n * (n - 1)))


@pytest.mark.x64
@pytest.mark.parametrize("alpha", [2.0, 3.0, 1.5])
def test_alignment_matches_jax_grad(alpha):
    for tp, tn in PAIRS:
        want, neg = witness_parts(lambda a, b: _align_per_anchor(a, b, alpha), tp, tn)
        np.testing.assert_allclose(float(norms.align_pos(tp, tn, alpha=alpha)), want, rtol=1e-9)
        np.testing.assert_allclose(neg, 0.0, atol=1e-12)


@pytest.mark.x64
@pytest.mark.parametrize("t", [6.0, 2.0])
def test_uniformity_matches_jax_grad(t):
    for tp, tn in PAIRS:
        pos, neg = witness_parts(lambda a, b: _uniform_batch(a, b, t), tp, tn, batch=True)
        got = float(norms.norm_map("uniform", tp, tn, part="neg", negatives=K, t=t))
        np.testing.assert_allclose(neg, got, rtol=1e-9)
        assert pos < 1e-12


@pytest.mark.x64
@pytest.mark.parametrize("loss", ["infonce", "dcl", "dcl+", "mpt", "met", "mat"])
def test_kernel_witness_on_a_dense_grid(loss):
    k = 64
    spec_loss = gradlab.get_loss(loss)
    axis = np.linspace(0.01, math.pi - 0.01, 61)
    tp, tn = np.meshgrid(axis, axis, indexing="ij")
    comp = spec_loss.components_from_angles(jnp.asarray(tp), jnp.repeat(jnp.asarray(tn)[..., None], k, axis=-1))
    weight = np.asarray(comp.weight)
    ratio = np.broadcast_to(np.asarray(comp.ratio), weight.shape)
    gd = np.asarray(comp.gd)
    want_pos = gd * np.sum(weight * ratio, axis=-1) * np.sin(tp)
    want_neg = gd * weight.max(axis=-1) * np.sin(tn)
    got_pos = np.asarray(norms.norm_map(loss, tp, tn, part="pos", negatives=k))
    got_neg = np.asarray(norms.norm_map(loss, tp, tn, part="neg", negatives=k))
    # gates can flip on cells within rounding of the threshold: compare away from them
    agree = np.isclose(got_pos, want_pos, rtol=1e-9, atol=1e-12)
    assert agree.mean() > 0.995, loss
    agree = np.isclose(got_neg, want_neg, rtol=1e-9, atol=1e-12)
    assert agree.mean() > 0.995, loss


def test_closed_forms_at_simple_points():
    # K = 1, τ = 1, θ_p = θ_n = π/2: GD = 1/2, ‖∇pos‖ = 1/2, ‖∇neg‖ = 1/2
    assert float(norms.infonce_pos(math.pi / 2, math.pi / 2, negatives=1, tau=1.0)) == pytest.approx(0.5)
    assert float(norms.infonce_neg(math.pi / 2, math.pi / 2, negatives=1, tau=1.0)) == pytest.approx(0.5)
    # α = 2: 2 sin θ
    assert float(norms.align_pos(0.7, 0.0)) == pytest.approx(2 * math.sin(0.7))
    assert float(norms.dcl_pos(math.pi / 2, tau=0.5)) == 2.0
    assert float(norms.dcl_neg(0.0, math.pi / 2, negatives=4, tau=0.5)) == pytest.approx(0.5)
    assert float(norms.mat_pos(0.3, 0.3 + 0.1, m=0.2)) == 1.0
    assert float(norms.mat_pos(0.3, 0.3 + 0.3, m=0.2)) == 0.0
    assert float(norms.met_pos(0.0, 0.0)) == 1.0  # cos(0) with the gate open
    assert float(norms.uniform_neg(0.0, math.pi / 2, negatives=3, t=6.0)) == pytest.approx(12 / 12)


def test_infonce_tends_to_dcl_as_negatives_grow():
    """Nie et al. 2023: ‖∇_cl^pos‖ approaches ‖∇_dcl^pos‖ (same τ) as K → ∞; the weak region shrinks."""
    axis = np.linspace(0.05, math.pi - 0.05, 80)
    tp, tn = np.meshgrid(axis, axis, indexing="ij")
    dcl = np.asarray(norms.dcl_pos(tp, tn, tau=0.05))
    gaps, weak = [], []
    for k in (64, 512, 4096, 32768, 10**8):
        cl = np.asarray(norms.infonce_pos(tp, tn, negatives=k, tau=0.05))
        assert np.all(cl <= dcl + 1e-6)
        gaps.append(np.abs(cl - dcl).max())
        weak.append(np.mean(cl < 0.1 * dcl))
    assert all(a >= b for a, b in zip(gaps, gaps[1:], strict=False))
    assert all(a >= b for a, b in zip(weak, weak[1:], strict=False)) and weak[0] > weak[-1]


def test_edges_are_finite_and_dtype_is_kept():
    axis = jnp.asarray([0.0, 1e-8, math.pi / 2, math.pi - 1e-8, math.pi], dtype=jnp.float32)
    tp, tn = axis[:, None], axis[None, :]
    for loss in norms.NORM_LOSSES:
        for part in norms.PARTS:
            if (loss, part) in (("align", "neg"), ("uniform", "pos")):
                continue
            out = norms.norm_map(loss, tp, tn, part=part, negatives=64)
            assert out.shape == (5, 5) and out.dtype == jnp.float32, (loss, part)
            assert bool(jnp.all(jnp.isfinite(out))), (loss, part)
            assert bool(jnp.all(out >= 0)), (loss, part)


def test_extreme_temperatures_are_stable():
    out = norms.infonce_pos(jnp.asarray([0.1, 3.0]), jnp.asarray([3.0, 0.1]), negatives=64, tau=1e-4)
    assert bool(jnp.all(jnp.isfinite(out)))
    np.testing.assert_allclose(np.asarray(out)[0], 0.0, atol=1e-30)  # fully dissipated
    np.testing.assert_allclose(np.asarray(out)[1], math.sin(3.0) / 1e-4, rtol=1e-6)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: norms.norm_map("nope", 0.1, 0.2), "no gradient-norm map"),
        (lambda: norms.norm_map("infonce", 0.1, 0.2, part="mid"), "part must be"),
        (lambda: norms.norm_map("infonce", 0.1, 0.2, negatives=0), "negatives must be"),
        (lambda: norms.norm_map("infonce", 0.1, 0.2, negatives=2.5), "negatives must be"),
        (lambda: norms.norm_map("infonce", 0.1, 0.2, tau=0.0), "tau must be"),
        (lambda: norms.norm_map("infonce", 0.1, 0.2, m=0.1), "unknown parameter"),
        (lambda: norms.norm_map("mpt", 0.1, 0.2, m=-1.0), "m must be"),
        (lambda: norms.norm_grid(1), "at least 2"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_alias_names_and_a_and_u_pair():
    a = norms.norm_map("alignment", 0.5, 1.0)
    b = norms.norm_map("uniform", 0.5, 1.0, part="pos")  # the a&u pair's positive part
    assert float(a) == float(b) == pytest.approx(2 * math.sin(0.5))
    assert float(norms.norm_map("cl", 0.5, 1.0)) == float(norms.norm_map("infonce", 0.5, 1.0))


@pytest.mark.x64
def test_norm_on_mu_grid_is_the_closed_form_at_the_mean_angles():
    from gradlab.simulate import Protocol

    p = Protocol(grid=(4, 5), batch_size=9)
    r = norms.norm_on_mu_grid(gradlab.get_loss("dcl", tau=0.5), p)
    assert r.dims == ("mu_pos", "mu_neg") and r.mean.shape == (4, 5)
    np.testing.assert_allclose(r.mean, np.broadcast_to(np.sin(p.mu_pos)[:, None] / 0.5, (4, 5)), rtol=1e-6)
    # InfoNCE's negative part with K = N − 1 = 8: e^{c_n/τ} sin θ_ij' / (τ (e^{c_p/τ} + 8 e^{c_n/τ}))
    r = norms.norm_on_mu_grid("infonce", p, part="neg")
    cp, cn = np.cos(p.mu_pos)[:, None], np.cos(p.mu_neg)[None, :]
    want = np.exp(cn / 0.05) * np.sin(p.mu_neg)[None, :] / (0.05 * (np.exp(cp / 0.05) + 8 * np.exp(cn / 0.05)))
    np.testing.assert_allclose(r.mean, want, rtol=2e-5, atol=1e-30)
    assert r.meta["negatives"] == 8 and r.meta["loss"] == "infonce" and r.meta["params"] == {"tau": 0.05}
    # the registry's names for the a&u pair; a part the loss does not have is an error
    np.testing.assert_allclose(norms.norm_on_mu_grid("alignment", p).mean[:, 0], 2 * np.sin(p.mu_pos), rtol=1e-6)
    with pytest.raises(ValueError, match="no 'neg' gradient-norm map for loss 'alignment'"):
        norms.norm_on_mu_grid("alignment", p, part="neg")
    with pytest.raises(ValueError, match="'arccon'"):
        norms.norm_on_mu_grid("arccon", p)


def test_norm_panels_follow_nie_figures():
    panels = norms.norm_panels(parts=["pos"], grid=3)
    keys = [(r.meta["loss"], r.meta["negatives"]) for r in panels]
    # Fig. 2: InfoNCE once per K, then one panel per other loss with a positive part, K = 64
    assert keys == [("infonce", 64), ("infonce", 512), ("infonce", 4096), ("infonce", 32768), ("align", 64),
                    ("dcl", 64), ("dcl+", 64), ("mpt", 64), ("met", 64), ("mat", 64)]
    two = norms.norm_panels(["uniform", "mat"], parts=["pos", "neg"], negatives=[8], grid=3, t=3.0, m=0.2)
    # "uniform" names the a&u pair: alignment is its positive part
    assert [(r.meta["part"], r.meta["loss"]) for r in two] == [("pos", "align"), ("pos", "mat"), ("neg", "uniform"),
                                                               ("neg", "mat")]
    assert two[2].meta["params"] == {"t": 3.0} and two[3].meta["params"] == {"m": 0.2}
    np.testing.assert_allclose(two[2].mean, norms.norm_result("uniform", part="neg", negatives=8, grid=3, t=3.0).mean)
    with pytest.raises(ValueError, match="unknown parameter 'tau'"):
        norms.norm_panels(["mat"], tau=0.1)
    with pytest.raises(ValueError, match="no gradient-norm map for loss 'nope'"):
        norms.norm_panels(["nope"])
