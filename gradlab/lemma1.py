"""Lemma 1 of seed 000 (Sec. 3.1.3, App. C): when does a step bring the anchor closer to its positive?

On the tangent plane at h_i, with s = sin θ_ii', t = sin θ_ij' and α the angle between
the planes O h_i h_i' and O h_i h_j', the step λ (r h_i' − h_j') does not increase the
anchor–positive distance exactly when r lies in [r_low, r_high]:

    r = 1/λ + t cos α / s ∓ √(s² − λ² t² sin²α) / (λ s)

which needs s² ≥ λ² t² sin²α. The paper states only the lower end; both ends and the
feasibility condition are the two roots of the same quadratic (formulas.md §6).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from gradlab.geometry import safe_sqrt

__all__ = ["lemma1_bounds"]


def lemma1_bounds(theta_pos: ArrayLike, theta_neg: ArrayLike, alpha: ArrayLike, lam: ArrayLike):
    """The Lemma-1 interval [low, high] of static ratios r, and whether it exists.

    Args:
      theta_pos: anchor–positive angle θ_ii' (radians).
      theta_neg: anchor–negative angle θ_ij' (radians).
      alpha: angle between the planes O h_i h_i' and O h_i h_j' (radians).
      lam: step size λ > 0.
      All four broadcast against each other.

    Returns:
      ``(low, high, feasible)``: float arrays of the broadcast shape (NaN where not
      feasible) and a boolean array. ``low`` is the minimum ratio of the lemma.

    Example:
      >>> import jax.numpy as jnp
      >>> low, high, ok = lemma1_bounds(jnp.pi / 6, jnp.pi / 3, 0.0, 0.1)
      >>> bool(ok), round(float(low), 4)
      (True, 1.7321)
    """
    theta_pos, theta_neg, alpha, lam = jnp.broadcast_arrays(
        *(jnp.asarray(x, dtype=jnp.result_type(float, x)) for x in (theta_pos, theta_neg, alpha, lam))
    )
    s = jnp.abs(jnp.sin(theta_pos))
    t = jnp.abs(jnp.sin(theta_neg))
    disc = s**2 - (lam * t * jnp.sin(alpha)) ** 2
    feasible = (disc >= 0) & (s > 0)
    s_safe = jnp.where(s > 0, s, 1.0)
    centre = 1 / lam + t * jnp.cos(alpha) / s_safe
    half = safe_sqrt(disc) / (lam * s_safe)
    low = jnp.where(feasible, centre - half, jnp.nan)
    high = jnp.where(feasible, centre + half, jnp.nan)
    return low, high, feasible
