"""The paradigm as data: reconstruct() and decompose(), including on a loss written in the test."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradlab
from gradlab.geometry import normalize
from gradlab.paradigm import Components, reconstruct


def _batch(seed, n=6, d=20):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d))
    return h, h + rng.normal(size=(n, d))


@pytest.mark.x64
@pytest.mark.parametrize("name", ["infonce", "arccon", "met", "mat", "mpt", "dcl"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decompose_recovers_closed_form_components(name, seed):
    """decompose recovers GD·W and R of the closed forms to 1e-8."""
    loss = gradlab.get_loss(name, **({"tau": 0.2} if "tau" in gradlab.get_loss(name).params else {}))
    h, hp = _batch(seed)
    dec = gradlab.decompose(loss.per_anchor, h, hp)
    c = loss.components(h, hp)
    gw = np.asarray(c.gd)[:, None] * np.asarray(c.weight)
    np.testing.assert_allclose(np.asarray(dec.gd_weight), gw, atol=1e-8 * max(1.0, np.abs(gw).max()))
    active = np.abs(gw).sum(axis=1) > 1e-6  # R is identified only where some negative carries weight
    r = np.broadcast_to(np.asarray(c.ratio), gw.shape)
    r_eff = (gw * r).sum(axis=1)[active] / gw.sum(axis=1)[active]
    np.testing.assert_allclose(np.asarray(dec.ratio)[active], r_eff, rtol=1e-8)
    assert float(dec.residual.max()) < 1e-10


@pytest.mark.x64
def test_decompose_a_loss_written_in_a_notebook():
    """A user-written per-anchor loss: a squared-hinge InfoNCE-like variant, decomposed numerically.

    L_i = Σ_j softplus((c_j − c_p) / τ) has the paradigm form with GD = 1,
    W_j = σ((c_j − c_p)/τ)/τ, R = 1 — derived by hand here, independent of gradlab.
    """
    tau = 0.3

    def per_anchor(h, hp):
        h, hp = normalize(h), normalize(hp)
        c = h @ hp.T
        cp = jnp.diag(c)
        off = ~jnp.eye(h.shape[0], dtype=bool)
        return jnp.sum(jnp.where(off, jax.nn.softplus((c - cp[:, None]) / tau), 0.0), axis=1)

    h, hp = _batch(4)
    dec = gradlab.decompose(per_anchor, h, hp)
    hn, hpn = np.asarray(normalize(h)), np.asarray(normalize(hp))
    c = hn @ hpn.T
    w = 1 / (1 + np.exp(-(c - np.diag(c)[:, None]) / tau)) / tau
    np.fill_diagonal(w, 0.0)
    np.testing.assert_allclose(np.asarray(dec.gd_weight), w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(dec.ratio), 1.0, rtol=1e-9)
    assert float(dec.residual.max()) < 1e-10


def test_decompose_reports_a_residual_for_a_non_paradigm_gradient():
    """A loss that pulls the anchor towards a fixed direction is not of the paradigm's form."""
    e = jnp.zeros(20).at[0].set(1.0)

    def per_anchor(h, hp):
        h = normalize(h)
        return -(h @ e) + gradlab.get_loss("infonce", tau=0.2).per_anchor(h, hp)

    dec = gradlab.decompose(per_anchor, *_batch(5))
    assert float(dec.residual.min()) > 1e-3


def test_reconstruct_uses_the_declared_negatives():
    h, hp = _batch(6, n=4, d=5)
    h, hp = normalize(h), normalize(hp)
    w = jnp.ones((4, 4)) - jnp.eye(4)
    c_prime = Components(jnp.ones(4), w, jnp.zeros((4, 1)), None, "h_prime")
    c_same = Components(jnp.ones(4), w, jnp.zeros((4, 1)), None, "h")
    g1, g2 = reconstruct(c_prime, h, hp), reconstruct(c_same, h, hp)
    exp1 = (w @ hp) - jnp.sum((w @ hp) * h, 1, keepdims=True) * h
    exp2 = (w @ h) - jnp.sum((w @ h) * h, 1, keepdims=True) * h
    np.testing.assert_allclose(np.asarray(g1), np.asarray(exp1), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g2), np.asarray(exp2), rtol=1e-12, atol=1e-14)


@pytest.mark.x64
def test_reconstruct_with_a_matrix_ratio_and_a_pull():
    rng = np.random.default_rng(0)
    n, d = 3, 4
    h, hp = normalize(rng.normal(size=(n, d))), normalize(rng.normal(size=(n, d)))
    w = jnp.asarray(rng.uniform(size=(n, n))) * (1 - jnp.eye(n))
    r = jnp.asarray(rng.normal(size=(n, d)))  # the diagonals of the per-anchor matrices R_i
    pull = jnp.asarray(rng.uniform(size=n))
    c = Components(jnp.full(n, 2.0), w, r, pull, "h", ratio_diagonal=True)
    g = reconstruct(c, h, hp)
    assert c.ratio_is_matrix and c.ratio_matrix().shape == (n, d, d)
    with pytest.raises(ValueError, match="matrix"):
        c.pull_coefficient()
    for i in range(n):
        r_i = np.diag(np.asarray(r[i]))
        raw = 2.0 * (sum(float(w[i, j]) * np.asarray(h[j]) for j in range(n)) - float(w[i].sum()) * (r_i @ np.asarray(hp[i])))
        raw = raw - float(pull[i]) * np.asarray(hp[i])
        hi = np.asarray(h[i])
        np.testing.assert_allclose(np.asarray(g[i]), raw - (raw @ hi) * hi, rtol=1e-12, atol=1e-13)


def test_decompose_input_errors():
    loss = gradlab.get_loss("infonce")
    with pytest.raises(ValueError, match="D > N"):
        gradlab.decompose(loss.per_anchor, *_batch(0, n=6, d=6))
    with pytest.raises(ValueError, match="negatives"):
        gradlab.decompose(loss.per_anchor, *_batch(0), negatives="both")
    with pytest.raises(ValueError, match=r"returns shape \(\).*loss.per_anchor"):
        gradlab.decompose(loss, *_batch(0))  # the loss object: a scalar mean, not (N,) L_i


def test_components_is_a_pytree_that_jits():
    loss = gradlab.get_loss("arccon")
    f = jax.jit(lambda tp, tn: loss.components_from_angles(tp, tn))
    c = f(jnp.full((2,), 0.5), jnp.full((2, 3), 1.0))
    assert isinstance(c, Components) and c.negatives == "h_prime"
    leaves = jax.tree_util.tree_leaves(c)
    assert len(leaves) == 3  # gd, weight, ratio (pull is None, negatives is static)
