"""Lemma 1 of Li et al. 2024 (Sec. 3.1.3, App. C): when does a step bring the anchor closer to its positive?

On the tangent plane at h_i, with s = sin θ_ii', t = sin θ_ij' and α the angle between
the planes O h_i h_i' and O h_i h_j', the step λ (r h_i' − h_j') does not increase the
anchor–positive distance exactly when r lies in [r_low, r_high]:

    r = 1/λ + t cos α / s ∓ √(s² − λ² t² sin²α) / (λ s)

which needs s² ≥ λ² t² sin²α. The paper states only the lower end; both ends and the
feasibility condition are the two roots of the same quadratic.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from gradlab import defaults
from gradlab.geometry import safe_arccos, safe_sqrt

__all__ = ["lemma1_bounds", "SphereCheck", "sphere_cosines", "lemma1_sphere_check", "summarize_min_ratio"]


def lemma1_bounds(theta_pos: ArrayLike, theta_neg: ArrayLike, alpha: ArrayLike, lam: ArrayLike):
    """The Lemma-1 interval [low, high] of static ratios r, and whether it exists.

    Args:
      theta_pos: anchor–positive angle θ_ii' (radians).
      theta_neg: anchor–negative angle θ_ij' (radians).
      alpha: angle between the planes O h_i h_i' and O h_i h_j' (radians).
      lam: step size λ > 0. All four arguments broadcast against each other.

    Returns:
      ``(low, high, feasible)``: float arrays of the broadcast shape (NaN where not
      feasible) and a boolean array. ``low`` is the minimum ratio of the lemma.

    Numerics: with x = t cos α / s, y = t² sin²α / s² and 1/λ large, the textbook
    r_low = 1/λ + x − √(1/λ² − y) subtracts two numbers near 1/λ and loses their
    leading digits. ``low`` is computed as x + y / (1/λ + √(1/λ² − y)) (the same root,
    rationalized) and the discriminant as (s − λ t |sin α|)(s + λ t |sin α|) / (λ s)², so
    the error stays within a few ulp of |x| + |y / (1/λ + √·)|, except next to the edge of
    feasibility, where the square root itself amplifies the inputs' rounding.

    Examples:
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
    u = lam * t * jnp.abs(jnp.sin(alpha))
    # s² − λ²t²sin²α as a product of two differences: accurate down to the edge s = u
    gap = s - u
    feasible = (gap >= 0) & (s > 0)
    root = safe_sqrt(jnp.where(feasible, gap, 0) * (s + u))
    s_safe = jnp.where(s > 0, s, 1.0)
    # r_low = 1/λ + x − √(1/λ² − y) rationalized: x + y / (1/λ + √(1/λ² − y)), with
    # x = t cos α / s and y = (u / (λ s))²; no difference of two large numbers is formed
    low = (t * jnp.cos(alpha) + lam * (t * jnp.sin(alpha)) ** 2 / (s_safe + root)) / s_safe
    high = 1 / lam + (t * jnp.cos(alpha) + root / lam) / s_safe
    low = jnp.where(feasible, low, jnp.nan)
    high = jnp.where(feasible, high, jnp.nan)
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


def sphere_cosines(theta_pos: ArrayLike, theta_neg: ArrayLike, alpha: ArrayLike, lam: ArrayLike, r: ArrayLike):
    """cos θ_ii' before and after the step h_i + λ (I − h_i h_iᵀ)(r h_i' − h_j'), retracted to the sphere.

    In the frame h_i = e1, h_i' = (cos θ_ii', sin θ_ii', 0) and
    h_j' = (cos θ_ij', sin θ_ij' cos α, sin θ_ij' sin α), the tangential step is
    λ (0, r sin θ_ii' − sin θ_ij' cos α, −sin θ_ij' sin α) = (0, x₂, x₃), so the retracted
    point is (1, x₂, x₃) / ‖(1, x₂, x₃)‖ and

        cos θ_after = (cos θ_ii' + x₂ sin θ_ii') / √(1 + x₂² + x₃²).

    Closed form, no 3-vectors: a map evaluates it for every batch and ratio. The angle
    terms broadcast as given, so ``theta_*`` of shape (B, 1) against ``r`` of shape (R,)
    take their sines and cosines once per batch.

    Returns:
      ``(cos_before, cos_after)`` of the broadcast shape.

    Examples:
      >>> import jax.numpy as jnp
      >>> before, after = sphere_cosines(jnp.pi / 2, jnp.pi / 2, jnp.pi / 2, 1.0, 1.0)  # x₂ = x₃ = 1
      >>> round(float(after), 5), bool(after > before)  # 1/√3: the step brought h_i closer to h_i'
      (0.57735, True)
    """
    theta_pos, theta_neg, alpha, lam, r = (jnp.asarray(x, dtype=jnp.result_type(float, x))
                                           for x in (theta_pos, theta_neg, alpha, lam, r))
    cp, sp, sn = jnp.cos(theta_pos), jnp.sin(theta_pos), jnp.sin(theta_neg)
    x2 = lam * (r * sp - sn * jnp.cos(alpha))
    x3 = lam * sn * jnp.sin(alpha)
    after = (cp + x2 * sp) / jnp.hypot(1.0, jnp.hypot(x2, x3))
    return jnp.broadcast_to(cp, after.shape), after


def lemma1_sphere_check(theta_pos: ArrayLike, theta_neg: ArrayLike, alpha: ArrayLike, lam: ArrayLike, r: ArrayLike) -> SphereCheck:
    """Check Lemma 1's tangent-plane approximation on the sphere itself.

    Places h_i, h_i', h_j' in R³ with θ_ii' = theta_pos, θ_ij' = theta_neg and the
    angle ``alpha`` between the planes O h_i h_i' and O h_i h_j'; takes the step
    h_i + λ (I − h_i h_iᵀ)(r h_i' − h_j') (the tangential direction the paradigm gradient
    has), retracts it to the sphere (normalizes), and measures the true change of the
    angle to h_i' (``sphere_cosines``). The lemma's prediction is
    ``feasible & (low <= r <= high)``. ``true_closer`` compares the cosines (arccos is
    decreasing), so no rounding of arccos decides a near tie.

    Args:
      theta_pos, theta_neg, alpha, lam, r: broadcasting arrays (radians; λ > 0).

    Returns:
      ``SphereCheck`` of the broadcast shape.

    Examples:
      >>> chk = lemma1_sphere_check(jnp.pi / 6, jnp.pi / 3, 0.0, 0.1, 1.8)
      >>> bool(chk.approx_closer), bool(chk.true_closer)
      (True, True)
    """
    low, high, feasible = lemma1_bounds(theta_pos, theta_neg, alpha, lam)
    approx = feasible & (low <= r) & (r <= high)
    before, after = sphere_cosines(theta_pos, theta_neg, alpha, lam, r)
    delta = safe_arccos(after) - safe_arccos(before)
    true = after >= before
    return SphereCheck(approx, true, delta, approx != true)


DEFAULT_BIN_EDGES = tuple(float(x) for x in np.linspace(-2.0, 4.0, 61))


def summarize_min_ratio(samples, lams, *, bins=None, quantiles=defaults.MIN_RATIO_QUANTILES, meta=None,
                        return_samples: bool = False, ratios=defaults.LEMMA1_RATIOS):
    """Summarize minimum-ratio samples (one row per λ, NaN where infeasible) as a ``Result``.

    The one home of the Fig. 8a summary, shared by the simulated distribution
    (``gradlab.simulate.min_ratio_distribution``) and the measured one
    (``gradlab.monitor.min_ratio_distribution``).

    Args:
      samples: (L, S) r_low per λ and sample; NaN marks an infeasible sample.
      lams: (L,) the step sizes.
      bins: histogram edges (default: 60 bins on [-2, 4]).
      quantiles: the quantiles to report.
      meta: metadata for the Result.
      return_samples: keep the samples as ``extra["samples"]``.
      ratios: static ratios r at which to report the empirical CDF of r_low.

    Returns:
      ``Result`` with dims (lam,): ``mean`` r_low over feasible samples, ``stderr``; extra
      ``feasible`` (lam,), ``histogram`` (lam, bin) as a density over ``bin_edges``,
      ``below`` / ``above`` (lam,) fractions outside the bins, ``quantiles`` (lam, q),
      ``cdf`` (lam, ratio): the fraction of feasible samples with r_low ≤ r (NaN where
      nothing is feasible); ``mask`` where no sample is feasible.
    """
    from gradlab.io import Result

    s = np.asarray(samples, dtype=float)
    lams = np.asarray(lams, dtype=float)
    edges = np.asarray(DEFAULT_BIN_EDGES if bins is None else bins, dtype=float)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins must be increasing edges (at least 2); got shape {edges.shape}")
    qs = np.asarray(quantiles, dtype=float)
    rs = np.atleast_1d(np.asarray(ratios, dtype=float))
    rows = [row[~np.isnan(row)] for row in s]
    n = np.array([r.size for r in rows])

    def per_row(fn, empty=np.nan):
        return np.array([fn(r) if r.size else empty for r in rows])

    hist = np.stack([np.histogram(r, bins=edges)[0] for r in rows]).astype(float)
    density = np.where(n[:, None] > 0, hist / np.maximum(n, 1)[:, None] / np.diff(edges), np.nan)
    extra = {
        "feasible": (n / s.shape[1]) if s.shape[1] else np.full(len(rows), np.nan),
        "histogram": density,
        "bin_edges": edges,
        "quantiles": np.stack([np.quantile(r, qs) if r.size else np.full(qs.shape, np.nan) for r in rows]),
        "below": per_row(lambda r: (r < edges[0]).mean()),
        "above": per_row(lambda r: (r > edges[-1]).mean()),
        "cdf": np.stack([(r[:, None] <= rs).mean(0) if r.size else np.full(rs.shape, np.nan) for r in rows]),
    }
    extra_dims = {"feasible": ("lam",), "histogram": ("lam", "bin"), "quantiles": ("lam", "q"), "cdf": ("lam", "ratio")}
    if return_samples:
        extra["samples"] = s
        extra_dims["samples"] = ("lam", "sample")
    return Result(
        dims=("lam",),
        coords={"lam": lams, "q": qs, "ratio": rs},
        mean=per_row(np.mean),
        stderr=np.array([r.std(ddof=1) / np.sqrt(r.size) if r.size > 1 else np.nan for r in rows]),
        mask=n == 0,
        extra=extra,
        extra_dims=extra_dims,
        meta=dict(meta or {}),
    )
