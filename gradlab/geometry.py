"""Geometry on the unit sphere: safe norms, angles, distances and tangent projections.

Every function here keeps values *and gradients* finite at the singular points of
the sphere (identical vectors, antipodal vectors, zero vectors) by the
"double ``where``" idiom: the unsafe branch is fed a harmless value wherever it
would not be selected, so its gradient there is zero instead of NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

__all__ = [
    "safe_sqrt",
    "safe_norm",
    "normalize",
    "safe_arccos",
    "sin_from_cos",
    "distance_from_cos",
    "fold_angle",
    "cosine_matrix",
    "tangent_project",
]


def safe_sqrt(x: ArrayLike) -> Array:
    """``sqrt(max(x, 0))`` whose gradient is 0 (not inf/NaN) where ``x <= 0``."""
    x = jnp.asarray(x)
    positive = x > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1.0)), 0.0)


def safe_norm(x: ArrayLike, axis: int = -1, keepdims: bool = False) -> Array:
    """Euclidean norm along ``axis`` with a finite (zero) gradient at the origin."""
    return safe_sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=keepdims))


def normalize(x: ArrayLike, axis: int = -1) -> Array:
    """Project rows onto the unit sphere. A zero row stays zero (and finite).

    Rows are first divided by their largest absolute entry (held constant: the map is
    scale-invariant, so value and gradient are unchanged), so that the sum of squares
    neither underflows for tiny rows nor overflows for huge ones (float32: 1e-23, 1e30).
    """
    x = jnp.asarray(x)
    scale = jax.lax.stop_gradient(jnp.max(jnp.abs(x), axis=axis, keepdims=True))
    x = x / jnp.where(scale > 0, scale, 1.0)
    norm = safe_norm(x, axis=axis, keepdims=True)
    return x / jnp.where(norm > 0, norm, 1.0)


def safe_arccos(c: ArrayLike) -> Array:
    """``arccos`` of a cosine, clamped to [-1, 1], with a zero gradient at |c| >= 1.

    At |c| = 1 the true derivative ``-1/sqrt(1 - c^2)`` is infinite; returning 0
    there keeps training and autodiff finite at identical / antipodal vectors.
    """
    c = jnp.asarray(c)
    inside = jnp.abs(c) < 1
    theta = jnp.arccos(jnp.where(inside, c, 0.0))
    pole = jnp.where(c > 0, 0.0, jnp.pi)
    return jnp.where(inside, theta, jnp.where(jnp.isnan(c), c, pole))  # NaN stays NaN


def sin_from_cos(c: ArrayLike) -> Array:
    """``sin(arccos(c)) = sqrt((1 - c)(1 + c))``, accurate near c = ±1, finite gradient."""
    c = jnp.asarray(c)
    return safe_sqrt((1 - c) * (1 + c))


def distance_from_cos(c: ArrayLike) -> Array:
    """Chord length ``||a - b|| = sqrt(2 - 2 cos)`` between unit vectors, finite gradient."""
    return safe_sqrt(2 - 2 * jnp.asarray(c))


def fold_angle(theta: ArrayLike) -> Array:
    """Map any real angle to the geometric angle in [0, π] it represents: ``arccos(cos θ)``.

    The paper's normal sampling law can leave [0, π]; a loss sees the angle between
    two vectors, which is this folded value. Exact (no arccos round trip).
    """
    theta = jnp.asarray(theta)
    return jnp.abs(jnp.mod(theta + jnp.pi, 2 * jnp.pi) - jnp.pi)


def cosine_matrix(a: ArrayLike, b: ArrayLike) -> Array:
    """``C[i, j] = a_i · b_j`` for row-normalized ``a`` (N, D), ``b`` (M, D).

    Not clipped: rounding may put a value a few ulps outside [-1, 1]; every function
    that needs an angle, a sine or a distance (``safe_arccos``, ``sin_from_cos``,
    ``distance_from_cos``) clamps on its own, and clipping here would zero gradients.
    """
    return jnp.asarray(a) @ jnp.asarray(b).T


def tangent_project(h: ArrayLike, g: ArrayLike) -> Array:
    """Tangential part ``(I - h hᵀ) g`` of vectors ``g`` at unit points ``h`` (row-wise).

    ``g`` may carry extra leading axes after the batch axis broadcasting against ``h``.
    """
    h = jnp.asarray(h)
    g = jnp.asarray(g)
    return g - jnp.sum(g * h, axis=-1, keepdims=True) * h
