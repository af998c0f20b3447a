"""Zhang et al. 2022: the center / residual decomposition of l2-normalized embeddings, a collapse alarm.

For a batch Z of M l2-normalized embeddings (rows), the center vector is the batch
mean and the residuals are what is left of each row:

    o = (1/M) Σ_m Z_m,        r_m = Z_m − o,
    m_o = ‖o‖ / ‖z‖,          m_r = ‖r‖ / ‖z‖.

With unit rows ‖z‖ = 1, so m_o = ‖o‖ and m_r is the mean residual norm over the
batch. Collapse (every row equal to o) drives m_o → 1 and m_r → 0. Since
‖o‖² + mean_m ‖r_m‖² = 1 exactly for unit rows, m_r ≤ √(1 − m_o²).

The extra gradient G_e (Zhang et al. 2022, Sec. 3.2–3.5) splits the same way: a gradient
that is a linear combination Σ_k a_k Z_k of batch vectors has center part
(Σ_k a_k) o and residual part Σ_k a_k r_k. For InfoNCE, G_e = −Σ_k λ_k Z_k with
λ = softmax over all keys (positive included), so o_e = −o and r_e = −Σ_k λ_k r_k.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from gradlab.geometry import normalize, safe_norm

__all__ = [
    "center_residual",
    "collapse_ratios",
    "combination_split",
    "infonce_extra_gradient",
]


def _rows(z: ArrayLike, name: str = "z") -> Array:
    z = jnp.asarray(z)
    if z.ndim != 2 or z.shape[0] < 1:
        raise ValueError(f"{name} must have shape (M, D) with M >= 1; got {tuple(z.shape)}")
    if not jnp.issubdtype(z.dtype, jnp.floating):
        z = z.astype(jnp.float32)
    return z


def center_residual(z: ArrayLike, *, normalized: bool = False) -> tuple[Array, Array]:
    """The center vector and the residuals of a batch.

    Args:
      z: (M, D) embeddings; rows are l2-normalized first unless ``normalized``.
      normalized: the rows are already unit vectors (skip the normalization).

    Returns:
      ``(o, r)``: the center (D,) and the residuals (M, D), with ``z = o + r``.

    Examples:
      >>> import jax.numpy as jnp
      >>> o, r = center_residual(jnp.eye(2))
      >>> o.tolist(), r[0].tolist()
      ([0.5, 0.5], [0.5, -0.5])
    """
    z = _rows(z)
    if not normalized:
        z = normalize(z)
    o = jnp.mean(z, axis=0)
    return o, z - o


def collapse_ratios(z: ArrayLike, *, normalized: bool = False) -> tuple[Array, Array]:
    """Zhang et al. 2022's m_o = ‖o‖/‖z‖ and m_r = ‖r‖/‖z‖ for a batch (both scalars).

    Per-row ratios are averaged over the batch; with unit rows (‖z_m‖ = 1) this is
    m_o = ‖o‖ and m_r = mean_m ‖r_m‖.

    Args:
      z: (M, D) embeddings (l2-normalized inside unless ``normalized``).
      normalized: the rows are already unit vectors.

    Returns:
      ``(m_o, m_r)``, scalars in [0, 1]. Collapse: m_o → 1, m_r → 0.
    """
    o, r = center_residual(z, normalized=normalized)
    return safe_norm(o), jnp.mean(safe_norm(r, axis=-1))


def combination_split(coeffs: ArrayLike, z: ArrayLike, *, normalized: bool = False) -> tuple[Array, Array]:
    """Center and residual parts of vectors that are linear combinations of the batch.

    For G_n = Σ_k a_nk Z_k, returns o_n = (Σ_k a_nk) o and r_n = Σ_k a_nk r_k, so
    that G = o + r exactly (Zhang et al. 2022's G_e = o_e + r_e).

    Args:
      coeffs: (..., M) combination coefficients a.
      z: (M, D) batch (l2-normalized inside unless ``normalized``).

    Returns:
      ``(o_part, r_part)``, each of shape (..., D).
    """
    coeffs = jnp.asarray(coeffs)
    z = _rows(z)
    if coeffs.shape[-1:] != z.shape[:1]:
        raise ValueError(
            f"coeffs (..., M) must match z (M, D) in M; got {tuple(coeffs.shape)} and {tuple(z.shape)}"
        )
    o, r = center_residual(z, normalized=normalized)
    o_part = jnp.sum(coeffs, axis=-1, keepdims=True) * o
    r_part = coeffs @ r
    return o_part, r_part


def infonce_extra_gradient(h: ArrayLike, h_prime: ArrayLike, *, tau: float = 0.05):
    """Zhang et al. 2022's extra gradient of InfoNCE and its split, per anchor.

    With λ_ik = softmax_k(h_i·h_k'/τ) over all N keys (the positive k = i included),
    the negative gradient on h_i is ∝ h_i' + G_e with G_e,i = −Σ_k λ_ik h_k';
    o_e = −o' (the keys' center) and r_e,i = −Σ_k λ_ik r_k'.

    Args:
      h: (N, D) anchors; h_prime: (N, D) keys (both normalized inside).
      tau: temperature τ > 0.

    Returns:
      ``(g_e, o_e, r_e)``, each (N, D), with g_e = o_e + r_e.
    """
    if not tau > 0:
        raise ValueError(f"tau must be > 0; got {tau!r}")
    h, hp = normalize(_rows(h, "h")), normalize(_rows(h_prime, "h_prime"))
    if h.shape != hp.shape:
        raise ValueError(f"h and h_prime must have the same shape; got {tuple(h.shape)} and {tuple(hp.shape)}")
    lam = jax.nn.softmax(h @ hp.T / tau, axis=-1)
    o_e, r_e = combination_split(-lam, hp, normalized=True)
    return -lam @ hp, o_e, r_e
