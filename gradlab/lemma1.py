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
from typing import NamedTuple

from jax import Array
from jax.typing import ArrayLike

from gradlab.geometry import normalize, safe_arccos, safe_sqrt, tangent_project

__all__ = ["lemma1_bounds", "SphereCheck", "lemma1_sphere_check"]


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


class SphereCheck(NamedTuple):
    """The tangent-plane prediction of Lemma 1 against the step taken on the sphere.

    Attributes:
      approx_closer: the lemma says the step does not increase the distance
        (feasible and low <= r <= high).
      true_closer: on the sphere, the angle to the positive did not increase.
      delta: the true change of the anchor–positive angle (radians; < 0 is closer).
      disagree: ``approx_closer != true_closer``.
    """

    approx_closer: Array
    true_closer: Array
    delta: Array
    disagree: Array


def _frame(theta_pos, theta_neg, alpha):
    """Unit vectors h_i, h_i', h_j' in R³ with the given angles (h_i = e1)."""
    zero, one = jnp.zeros_like(theta_pos), jnp.ones_like(theta_pos)
    h = jnp.stack([one, zero, zero], axis=-1)
    hp = jnp.stack([jnp.cos(theta_pos), jnp.sin(theta_pos), zero], axis=-1)
    st = jnp.sin(theta_neg)
    hn = jnp.stack([jnp.cos(theta_neg), st * jnp.cos(alpha), st * jnp.sin(alpha)], axis=-1)
    return h, hp, hn


def lemma1_sphere_check(theta_pos: ArrayLike, theta_neg: ArrayLike, alpha: ArrayLike, lam: ArrayLike, r: ArrayLike) -> SphereCheck:
    """Check Lemma 1's tangent-plane approximation on the sphere itself.

    Builds h_i, h_i', h_j' in R³ with θ_ii' = theta_pos, θ_ij' = theta_neg and the
    angle ``alpha`` between the planes O h_i h_i' and O h_i h_j'; takes the step
    h_i + λ (I − h_i h_iᵀ)(r h_i' − h_j') (the tangential direction the paradigm gradient
    has), retracts it to the sphere (normalizes), and measures the true change of the
    angle to h_i'. The lemma's prediction is ``feasible & (low <= r <= high)``.

    Args:
      theta_pos, theta_neg, alpha, lam, r: broadcasting arrays (radians; λ > 0).

    Returns:
      ``SphereCheck`` of the broadcast shape.

    Example:
      >>> chk = lemma1_sphere_check(jnp.pi / 6, jnp.pi / 3, 0.0, 0.1, 1.8)
      >>> bool(chk.approx_closer), bool(chk.true_closer)
      (True, True)
    """
    theta_pos, theta_neg, alpha, lam, r = jnp.broadcast_arrays(
        *(jnp.asarray(x, dtype=jnp.result_type(float, x)) for x in (theta_pos, theta_neg, alpha, lam, r))
    )
    low, high, feasible = lemma1_bounds(theta_pos, theta_neg, alpha, lam)
    approx = feasible & (low <= r) & (r <= high)
    h, hp, hn = _frame(theta_pos, theta_neg, alpha)
    step = lam[..., None] * tangent_project(h, r[..., None] * hp - hn)
    h_new = normalize(h + step)
    before = safe_arccos(jnp.sum(h * hp, axis=-1))
    after = safe_arccos(jnp.sum(h_new * hp, axis=-1))
    delta = after - before
    true = delta <= 0
    return SphereCheck(approx, true, delta, approx != true)
