"""Batches and the paradigm-identity check shared by the loss tests."""

import jax.numpy as jnp
import numpy as np


def batch(n, d, seed, noise=1.0, dtype=np.float64):
    """(h, h_prime) of shape (n, d): h standard normal, h_prime = h + noise · normal."""
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d))
    hp = h + noise * rng.normal(size=(n, d))
    return h.astype(dtype), hp.astype(dtype)


def edge_batches(n, d=9, seed=11):
    """θ_ii' within 1e-7 of 0 and of π, identical and antipodal views, N = 2."""
    h, _ = batch(n, d, seed)
    tiny = 1e-7 * np.random.default_rng(3).normal(size=h.shape)
    hn = h / np.linalg.norm(h, axis=1, keepdims=True)
    return {
        "theta_near_0": (h, hn + tiny),
        "theta_near_pi": (h, -hn + tiny),
        "identical_views": (h, h.copy()),
        "antipodal_views": (h, -h),
        "n_equals_2": batch(2, 3, 4),
    }


def paradigm_scale(c):
    """max_i |GD_i| Σ_j |W_ij| (1 + |R_ij|) + |pull_i|: the size of the untangented paradigm
    vector (a matrix ratio counts by its largest entry). Traceable."""
    w = jnp.abs(c.weight)
    r = jnp.max(jnp.abs(c.ratio), axis=-1)[:, None] if c.ratio_is_matrix else jnp.abs(c.ratio)
    pull = 0.0 if c.pull is None else jnp.abs(c.pull)
    return jnp.max(jnp.abs(c.gd) * jnp.sum(w * (1.0 + r), axis=-1) + pull)


def assert_paradigm_close(label, a, b, scale):
    """max |a − b| ≤ 1e-9 max |a| + 1e-13 × scale (``paradigm_scale``).

    The second term is the rounding floor of a tangent projection: where the true
    tangential gradient vanishes (identical or antipodal views), both sides are
    rounding noise of that size.
    """
    a, b = np.asarray(a), np.asarray(b)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.isfinite(float(scale)), label
    diff = np.abs(a - b).max()
    bound = 1e-9 * np.abs(a).max() + 1e-13 * float(scale)
    assert diff <= bound, f"{label}: off by {diff:.3g} (bound {bound:.3g}, |a| {np.abs(a).max():.3g})"
