"""Shared numerics of the loss zoo: a leaf module (it imports no family and no registry).

Masked reductions over negatives, the hardest negative, divisor floors, the shifted
positive cosine of ArcCon / the margin InfoNCE, the Gaussian-potential uniformity, and
the triplet gate of MPT / MET / MAT with its inverse (the threshold angle).

Conventions: ``c_pos`` (...,) is an anchor's cosine to its positive, ``c_neg`` (..., M)
its cosines to M candidate negatives, ``valid`` (..., M) marks the negatives that exist.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.geometry import cosine_matrix, distance_from_cos, sin_from_cos

__all__ = [
    "masked_logsumexp",
    "masked_softmax",
    "masked_lse_all",
    "pair_softmax",
    "hardest",
    "hardest_cos",
    "floor_tiny",
    "ratio_to_positive",
    "fraction_gd",
    "chord_ratio",
    "sine_ratio",
    "offdiag",
    "offdiag_gather",
    "offdiag_kernel",
    "sq_dist_pos",
    "shifted_cos",
    "angular_factor",
    "log_mean_gaussian",
    "TripletMetric",
    "TRIPLET_METRICS",
    "triplet_gate",
    "threshold_angle",
]

NEG_INF = -jnp.inf


# --- masked reductions -----------------------------------------------------------------
def masked_logsumexp(x, valid):
    """log Σ_{valid} exp(x) over the last axis, (...,) (−inf where nothing is valid)."""
    return jax.nn.logsumexp(jnp.where(valid, x, NEG_INF), axis=-1)


def masked_softmax(x, valid):
    """Softmax over the valid entries of the last axis, (..., M); exactly 0 on invalid ones."""
    return jax.nn.softmax(jnp.where(valid, x, NEG_INF), axis=-1, where=valid)


def masked_lse_all(x, mask):
    """log Σ_{mask} exp(x) over *all* entries (a scalar)."""
    return jax.nn.logsumexp(jnp.where(mask, x, NEG_INF))


def pair_softmax(logits, mask):
    """exp(x_kl) / Σ_{mask} exp(x_kl) on the mask, 0 elsewhere, (N, N)."""
    lse = masked_lse_all(logits, mask)
    return jnp.where(mask, jnp.exp(jnp.where(mask, logits, 0.0) - lse), 0.0)


def hardest(c_neg, valid):
    """One-hot (..., M) of the hardest negative: the largest cosine (nearest), first on ties."""
    idx = jnp.argmax(jnp.where(valid, c_neg, NEG_INF), axis=-1)
    return jax.nn.one_hot(idx, c_neg.shape[-1], dtype=c_neg.dtype)


def hardest_cos(c_neg, valid):
    """max_{valid k} c_k, the hardest negative's cosine, (...,)."""
    return jnp.max(jnp.where(valid, c_neg, NEG_INF), axis=-1)


def floor_tiny(x):
    """Keep a divisor away from 0 (θ → 0 guards): max(x, smallest normal of x's dtype)."""
    return jnp.maximum(x, jnp.finfo(jnp.result_type(x)).tiny)


def ratio_to_positive(num, den):
    """num / den with den the positive's sine or distance; 0 where den = 0 (the pull direction vanishes)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def fraction_gd(pos, c_neg, valid, tau):
    """InfoNCE's GD 1 / (1 + e^{pos/τ} / S), S = Σ_{valid j} e^{c_j/τ}, (...,); ``pos`` the positive's cosine (or ArcCon's shift)."""
    return jax.nn.sigmoid(masked_logsumexp(c_neg / tau, valid) - pos / tau)


def chord_ratio(c_pos, c_neg):
    """MET's ratio ‖h_i − n_j‖ / ‖h_i − h_i'‖ = √((1 − c_j)/(1 − c_p)), (..., M); 0 where the positive coincides."""
    return ratio_to_positive(distance_from_cos(c_neg), distance_from_cos(c_pos)[..., None])


def sine_ratio(c_pos, c_neg):
    """MAT's ratio sin θ_j / sin θ_p, (..., M); 0 where sin θ_p = 0."""
    return ratio_to_positive(sin_from_cos(c_neg), sin_from_cos(c_pos)[..., None])


def offdiag(n: int):
    """(n, n) boolean mask, True off the diagonal (the negatives j ≠ i of anchor i)."""
    return ~jnp.eye(n, dtype=bool)


def _skip_index(excluded, n: int):
    """(rows, n − 1) column indices of each row in order, skipping its ``excluded`` column (rows,)."""
    k = jnp.arange(n - 1)[None, :]
    return k + (k >= excluded[:, None])


def _offdiag_index(n: int):
    """(n, n − 1) column indices of the off-diagonal entries of each row, in order."""
    return _skip_index(jnp.arange(n), n)


def offdiag_gather(x):
    """The off-diagonal entries of a square (N, N) array, row by row: (N, N − 1).

    Examples:
      >>> import jax.numpy as jnp
      >>> offdiag_gather(jnp.arange(9.0).reshape(3, 3)).tolist()
      [[1.0, 2.0], [3.0, 5.0], [6.0, 7.0]]
    """
    return jnp.take_along_axis(x, _offdiag_index(x.shape[0]), axis=-1)


@functools.cache
def offdiag_kernel(kernel: Callable) -> Callable:
    """A cosine kernel on the embedding form: ``(c_pos (R,), c (R, N), valid) -> (gd, W, R)``.

    Each row of ``c`` holds one anchor's cosines to all N keys, one of which is its own
    positive: the column where ``valid`` is False (without ``valid``, c is square and the
    positive is on the diagonal). The kernel sees only the N − 1 other columns; W comes back
    (R, N) with a zero at the positive's column, the ratio as (R, 1) or (R, N). Rows need not
    be all N anchors: the monitor passes row blocks. One wrapper per kernel (cached: a stable
    hashable for jit configurations).
    """

    def embedding_kernel(c_pos, c, valid=None, **params):
        rows, n = c.shape
        excluded = jnp.arange(rows) if valid is None else jnp.argmin(valid, axis=-1)
        index = _skip_index(excluded, n)
        c_neg = jnp.take_along_axis(c, index, axis=-1)
        gd, weight, ratio = kernel(c_pos, c_neg, jnp.ones(c_neg.shape, bool), **params)

        def scatter(x):
            return jnp.zeros((rows, n), x.dtype).at[jnp.arange(rows)[:, None], index].set(x)

        if ratio.shape[-1] != 1:
            ratio = scatter(jnp.broadcast_to(ratio, weight.shape))
        return gd, scatter(weight), ratio

    return embedding_kernel


def sq_dist_pos(h, hp):
    """‖h_i − h_i'‖², (N,), from the difference (exact 0 for identical rows)."""
    return jnp.sum(jnp.square(h - hp), axis=-1)


# --- the shifted positive (ArcCon; Rho et al. 2023's angular margin) --------------------
def shifted_cos(c_pos, shift):
    """cos(θ_p + shift) from c_p = cos θ_p: c_p cos(shift) − sin θ_p sin(shift) (no arccos round trip)."""
    return c_pos * jnp.cos(shift) - sin_from_cos(c_pos) * jnp.sin(shift)


def angular_factor(c_pos, shift):
    """sin(θ_p + shift) / sin θ_p = cos(shift) + sin(shift) cot θ_p = ∂ cos(θ_p + shift) / ∂ c_p.

    Where sin θ_p = 0 to working precision (h_i' = ±h_i) the cot term is dropped: the
    pull direction P_i h_i' vanishes there, and this is what autodiff of ``shifted_cos``
    (a zero-gradient ``safe_sqrt`` at the pole) gives, so gradient and paradigm agree.
    """
    s = sin_from_cos(c_pos)
    ok = s > 0
    return jnp.cos(shift) + jnp.sin(shift) * jnp.where(ok, c_pos / jnp.where(ok, s, 1.0), 0.0)


# --- uniformity: the Gaussian potential --------------------------------------------------
def gaussian_logits(cos, t):
    """−t ‖a − b‖² for unit vectors a, b from their cosine (‖a − b‖² = 2 − 2 a·b): the Gaussian
    kernel inside every uniformity term (``log_mean_gaussian``; the monitor's row-block form)."""
    return -t * (2.0 - 2.0 * cos)


def log_mean_gaussian(a, b, t, pairs: str = "k<l"):
    """log mean_{pairs} exp(−t ‖a_k − b_l‖²) for unit rows a, b (N, D): a scalar.

    ``pairs="k<l"`` (a = b: each unordered same-view pair once) is the uniformity of
    Wang & Isola 2020 and, with t = 1/(2τ), the MHE uniformity of Li et al. 2024 Sec. 4
    (τ = 1/2) and App. E (tempered). ``pairs="k≠l"`` with a ≠ b is the cross-view
    uniformity of Nie et al. 2023 App. C. On unit rows ‖a_k − b_l‖² = 2 − 2 a_k·b_l.

    Examples:
      >>> import jax.numpy as jnp
      >>> x = jnp.eye(3)  # three orthogonal unit vectors: every ‖x_k − x_l‖² = 2
      >>> round(float(log_mean_gaussian(x, x, 0.5)), 6)
      -1.0
    """
    n = a.shape[0]
    if pairs == "k<l":
        mask, count = jnp.triu(jnp.ones((n, n), dtype=bool), k=1), n * (n - 1) / 2
    elif pairs == "k≠l":
        mask, count = offdiag(n), n * (n - 1)
    else:
        raise ValueError(f"pairs must be 'k<l' or 'k≠l'; got {pairs!r}")
    return masked_lse_all(gaussian_logits(cosine_matrix(a, b), t), mask) - math.log(count)


# --- the triplet gate of MPT / MET / MAT -------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TripletMetric:
    """The distance d in which a triplet loss measures its margin, in three exact forms.

    Each triplet loss (MPT, MET, MAT; Li et al. 2024 Table 1, Nie et al. 2023 Table 2)
    compares the hardest negative with the positive in its own metric d; its gate is
    open when d(hardest) − d(positive) < m (``triplet_gate``).

    Attributes:
      name: the loss, ``"mpt"``, ``"met"`` or ``"mat"``.
      of_cos: d from a cosine c, ``(c, xp) -> d``.
      of_angle: d from an angle θ in [0, π], ``(theta, xp) -> d``.
      angle_of: the exact inverse of ``of_angle`` on [0, π]: the angle at distance d,
        +inf beyond the largest distance (no angle is that far), ``(d, xp) -> theta``.

    ``xp`` is the array module (``numpy`` or ``jax.numpy``): the float64 NumPy
    quadrature and the JAX kernels evaluate the same expressions.
    """

    name: str
    of_cos: Callable
    of_angle: Callable
    angle_of: Callable


def _beyond(d, limit, theta, xp):
    return xp.where(d > limit, xp.inf, theta)


TRIPLET_METRICS = {
    # MPT: d = −cos θ (the cosine margin), d ∈ [−1, 1].
    "mpt": TripletMetric(
        "mpt",
        of_cos=lambda c, xp=jnp: -c,
        of_angle=lambda theta, xp=jnp: -xp.cos(theta),
        angle_of=lambda d, xp=jnp: _beyond(d, 1.0, xp.arccos(xp.clip(-d, -1.0, 1.0)), xp),
    ),
    # MET: d = ‖a − b‖ = √(2 − 2c) = 2 sin(θ/2) (the chord), d ∈ [0, 2].
    "met": TripletMetric(
        "met",
        of_cos=lambda c, xp=jnp: xp.sqrt(xp.maximum(2.0 - 2.0 * c, 0.0)),
        of_angle=lambda theta, xp=jnp: 2.0 * xp.sin(theta / 2.0),
        angle_of=lambda d, xp=jnp: _beyond(d, 2.0, 2.0 * xp.arcsin(xp.clip(d / 2.0, 0.0, 1.0)), xp),
    ),
    # MAT: d = θ (the arc), d ∈ [0, π].
    "mat": TripletMetric(
        "mat",
        of_cos=lambda c, xp=jnp: xp.arccos(xp.clip(c, -1.0, 1.0)),
        of_angle=lambda theta, xp=jnp: theta,
        angle_of=lambda d, xp=jnp: _beyond(d, math.pi, d, xp),
    ),
}


def triplet_gate(d_hardest, d_pos, m):
    """The triplet gate: True where d(hardest negative) − d(positive) < m (the hinge is active).

    Examples:
      >>> import numpy as np
      >>> metric = TRIPLET_METRICS["mat"]
      >>> bool(triplet_gate(metric.of_angle(1.0, np), metric.of_angle(0.9, np), 0.2))
      True
    """
    return d_hardest - d_pos < m


def threshold_angle(name: str, theta_pos, m, xp=np):
    """a(θ_pos) = d⁻¹(d(θ_pos) + m): the gate is open iff the hardest negative's angle is < a.

    θ_pos is a geometric angle in [0, π]; +inf means the gate is always open. The
    inverse of ``triplet_gate`` for a fixed positive (d increases on [0, π]).

    Examples:
      >>> round(float(threshold_angle("mat", 1.0, 0.5)), 6)
      1.5
    """
    if name not in TRIPLET_METRICS:
        raise ValueError(f"no triplet metric for {name!r}; choose from {tuple(TRIPLET_METRICS)}")
    metric = TRIPLET_METRICS[name]
    return metric.angle_of(metric.of_angle(theta_pos, xp) + m, xp)
