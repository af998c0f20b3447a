"""Rho et al. 2023 ("Understanding contrastive learning through the lens of margins"): the analysis.

One anchor i, one positive l (target p_il = 1) and negatives h (p_ih = 0); angles θ_ij,
temperature τ, β of Eq. 3, angular margin m1 and subtractive margin m2 (Eq. 4):

    δ̃_ij = cos θ_ij / τ,   δ_ij = (cos(θ_ij + m1 p_ij) − m2 p_ij)/τ,
    q̃ = softmax(δ̃),  q = softmax(δ),  L_i = −Σ_j p_ij δ_ij + β Σ_j p_ij log Σ_k e^{δ_ik}   (Eq. 5)

Contents (every function is pure JAX, jit/vmap friendly; angles in radians):

* the gradient with respect to the angles, Eqs. 14–15: ∂L_i/∂θ_ij = (p_ij − β q_ij) sin(θ_ij + m1 p_ij)/τ;
* Theorem 4.1's two multipliers, Lemma 4.2 (ratio of sums of exponentiated logits),
  Lemma 4.3 (the subtractive-margin factor with η_il), Lemma 4.4 (the m2 → ∞ limit);
* the quantities of Figs. 1, 2 and 8 on grids (``fig1_gradient_magnitudes``,
  ``fig2_margin_multipliers``, ``fig8_ratio_maps``, and ``gradient_magnitudes_over_angles``
  for a concrete batch configuration);
* the gradient-scaling transforms of Eqs. 8–12 / Algorithms 2–6 as surrogate losses for
  training (``apply_transform``): same loss values, transformed gradients.

Angle-form conventions follow ``Loss.components_from_angles``: ``theta_pos`` (...,) is
the anchor–positive angle, ``theta_neg`` (..., M) the anchor–negative angles (every entry
a negative; the positive is not repeated among them).

Typos / readings of Rho et al. 2023 (see also docs/formulas.md §7):

* Lemma 4.2's statement writes q_il in its last expression; the proof (Eqs. 18–26) and
  the algebra need the margin-free q̃_il: (e^{δ̃_il}/q̃_il)/(e^{δ_il} + e^{δ̃_il}(1/q̃_il − 1)).
* Sec. 4.1's prose swaps the two factors' roles; the algebra (and the Fig. 2 caption) is
  unambiguous: sin(θ + m1 p)/sin θ is 1 for negatives (applies to positives only), and
  (p − βq)/(p − βq̃) multiplies positives and negatives (for β = 1 it is the same value,
  Σe^{δ̃}/Σe^{δ}, for both).
* Algorithm 3 writes ``(1/π − scales) × stop_gradient(logits)``; for the forward value to
  stay unchanged (as the text says, and as Eq. 9 writes) it must be ``(1 − scales)``.
* Algorithm 3 uses the curve s (1 − θ/π)^{1/c}, Eq. 10–11 the curve s |(1 − (θ/π)^c)^{1/c}|.
  Both are convex for c < 1, linear at c = 1 and constant 1 as c → ∞. ``curvature`` uses
  Eq. 10 by default and Algorithm 3's curve with ``curve="alg3"``.
* Algorithm 4 (scaling by the ratio) applies the ratio to the positive logit only
  (``(1 − p) × logits + p × ...``), while Sec. 5.4 says "multiply the gradients by the
  ratio" and Theorem 4.1 puts the ratio on every sample. ``ratio`` follows Algorithm 4
  by default (``targets="positive"``); ``targets="all"`` scales every logit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from gradlab._validation import check_angles, check_pair, check_param
from gradlab.geometry import cosine_matrix, fold_angle, normalize, safe_arccos, sin_from_cos

__all__ = [
    "margin_logits",
    "probabilities",
    "angle_gradient",
    "angular_multiplier",
    "probability_ratio",
    "theorem41_multipliers",
    "lemma42_ratio",
    "lemma42_closed_form",
    "eta",
    "lemma43_multiplier",
    "lemma44_limit",
    "ratio_from_positive",
    "fig1_gradient_magnitudes",
    "fig2_margin_multipliers",
    "fig8_ratio_maps",
    "gradient_magnitudes_over_angles",
    "TRANSFORMS",
    "GradientTransform",
    "apply_transform",
    "transform_loss_from_logits",
]

_sg = jax.lax.stop_gradient


def _float(x: ArrayLike, dtype=None) -> Array:
    """x as a floating JAX array: ``dtype`` if given, else x's own float dtype, else float32."""
    if dtype is not None:
        return jnp.asarray(x, dtype=dtype)
    dt = getattr(x, "dtype", None)
    if dt is not None and jnp.issubdtype(dt, jnp.floating):
        return jnp.asarray(x)
    return jnp.asarray(x, dtype=jnp.float32)


def _check_tau_beta(tau, beta):
    check_param("margins", "tau", tau, "positive")
    if beta is not None:
        check_param("margins", "beta", beta, "positive")


# --- logits, probabilities, the angle gradient (Eqs. 2, 4, 14, 15) -----------------------------
def margin_logits(theta: ArrayLike, p: ArrayLike, *, tau: float, m1: float = 0.0, m2: float = 0.0) -> Array:
    """δ_ij = (cos(θ_ij + m1 p_ij) − m2 p_ij)/τ (Rho et al. 2023 Eq. 4, Algorithm 2); m1 = m2 = 0 gives Eq. 2.

    Args:
      theta: angles θ_ij, shape (..., K).
      p: target probabilities p_ij (one-hot for the positive), broadcastable to ``theta``.
      tau: temperature τ > 0.
      m1, m2: angular and subtractive margins.

    Returns:
      The logits, shape (..., K).
    """
    theta = _float(theta)
    p = jnp.asarray(p, dtype=theta.dtype)
    return (jnp.cos(theta + m1 * p) - m2 * p) / tau


def _config_logits(theta_pos, theta_neg, tau, m1, m2):
    """(δ_il (...,), δ_ih (..., M)) for one positive and M negatives."""
    pos = (jnp.cos(theta_pos + m1) - m2) / tau
    return pos, jnp.cos(theta_neg) / tau


def probabilities(theta_pos, theta_neg, *, tau: float, m1: float = 0.0, m2: float = 0.0):
    """q_il (...,) and q_ih (..., M): softmax of Eq. 4's logits over {l} ∪ negatives.

    With m1 = m2 = 0 these are the margin-free q̃ of Eq. 2.
    """
    theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
    pos, neg = _config_logits(theta_pos, theta_neg, tau, m1, m2)
    q = jax.nn.softmax(jnp.concatenate([pos[..., None], neg], axis=-1), axis=-1)
    return q[..., 0], q[..., 1:]


def angle_gradient(theta_pos, theta_neg, *, tau: float, beta: float = 1.0, m1: float = 0.0, m2: float = 0.0):
    """∂L_i/∂θ_ij = (p_ij − β q_ij) sin(θ_ij + m1 p_ij)/τ (Rho et al. 2023 Eq. 15; Eq. 14 at m1 = m2 = 0).

    Args:
      theta_pos: θ_il, shape (...,).
      theta_neg: θ_ih, shape (..., M).
      tau, beta, m1, m2: as in Eq. 5.

    Returns:
      ``(g_pos, g_neg)``: (1 − β q_il) sin(θ_il + m1)/τ of shape (...,), and
      −β q_ih sin θ_ih/τ of shape (..., M).
    """
    _check_tau_beta(tau, beta)
    theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
    return _angle_gradient_core(theta_pos, theta_neg, tau, beta, m1, m2)


@jax.jit
def _angle_gradient_core(theta_pos, theta_neg, tau, beta, m1, m2):
    pos, neg = _config_logits(theta_pos, theta_neg, tau, m1, m2)
    x = pos - jax.nn.logsumexp(neg, axis=-1)
    one_minus_bq = jax.nn.sigmoid(-x) + (1.0 - beta) * jax.nn.sigmoid(x)  # 1 − β q_il, no cancellation
    q_neg = jax.nn.softmax(jnp.concatenate([pos[..., None], neg], axis=-1), axis=-1)[..., 1:]
    g_pos = one_minus_bq * jnp.sin(theta_pos + m1) / tau
    g_neg = -beta * q_neg * jnp.sin(theta_neg) / tau
    return g_pos, g_neg


# --- Theorem 4.1 and Lemmas 4.2–4.4 ------------------------------------------------------
def angular_multiplier(theta: ArrayLike, *, m1: float) -> Array:
    """sin(θ + m1)/sin θ: Theorem 4.1's angular-margin factor for a positive (1 for negatives).

    Returned as computed: ±inf / NaN at sin θ = 0 (θ ∈ {0, π}), where the margin-free
    gradient sin θ (1 − β q̃)/τ vanishes; grids should avoid those endpoints.
    """
    theta = _float(theta)
    return jnp.sin(theta + m1) / jnp.sin(theta)


def _one_minus_bq(x, beta):
    """1 − β σ(x), written as σ(−x) + (1 − β) σ(x) (exact near σ(x) = 1 when β = 1)."""
    return jax.nn.sigmoid(-x) + (1.0 - beta) * jax.nn.sigmoid(x)


def probability_ratio(theta_pos, theta_neg, *, tau: float, beta: float = 1.0, m1: float = 0.0, m2: float = 0.0):
    """Theorem 4.1's second factor (p_ij − β q_ij)/(p_ij − β q̃_ij) for the positive and the negatives.

    Returns:
      ``(r_pos, r_neg)``: (1 − β q_il)/(1 − β q̃_il), shape (...,), and q_ih/q̃_ih = Σe^{δ̃}/Σe^{δ},
      shape (...,) (the same for every negative h, since δ_ih = δ̃_ih). For β = 1 both equal
      Lemma 4.2's ratio. ``r_pos`` is ±inf / NaN where 1 = β q̃_il (possible only for β ≥ 1 and
      q̃_il = 1/β), i.e. where the margin-free positive gradient is zero.
    """
    _check_tau_beta(tau, beta)
    theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
    return _probability_ratio_core(theta_pos, theta_neg, tau, beta, m1, m2)


@jax.jit
def _probability_ratio_core(theta_pos, theta_neg, tau, beta, m1, m2):
    pos, neg = _config_logits(theta_pos, theta_neg, tau, m1, m2)
    pos0 = jnp.cos(theta_pos) / tau
    lse_neg = jax.nn.logsumexp(neg, axis=-1)
    r_neg = jnp.exp(jnp.logaddexp(pos0, lse_neg) - jnp.logaddexp(pos, lse_neg))  # S̃/S
    general = _one_minus_bq(pos - lse_neg, beta) / _one_minus_bq(pos0 - lse_neg, beta)
    # β = 1: (1 − q)/(1 − q̃) = σ(−x)/σ(−x̃) = S̃/S exactly (Lemma 4.2), no 0/0 as q̃ → 1.
    r_pos = jnp.where(beta == 1.0, r_neg, general)
    return r_pos, r_neg


def theorem41_multipliers(theta_pos, theta_neg, *, tau: float, beta: float = 1.0, m1: float = 0.0, m2: float = 0.0):
    """Theorem 4.1 (Eq. 6): ∂L_i/∂θ_ij = ∂L̃_i/∂θ_ij · sin(θ_ij + m1 p_ij)/sin θ_ij · (p_ij − βq_ij)/(p_ij − βq̃_ij).

    Args:
      theta_pos: (...,); theta_neg: (..., M); tau, beta, m1, m2 as in Eq. 5.

    Returns:
      dict of arrays: ``angular_pos`` (...,) = sin(θ_il + m1)/sin θ_il; ``angular_neg`` (..., M)
      = 1; ``ratio_pos`` (...,); ``ratio_neg`` (..., M); ``total_pos`` (...,) and ``total_neg``
      (..., M), the products (what ∂L/∂θ is divided by ∂L̃/∂θ).
    """
    theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
    r_pos, r_neg = probability_ratio(theta_pos, theta_neg, tau=tau, beta=beta, m1=m1, m2=m2)
    a_pos = angular_multiplier(theta_pos, m1=m1)
    r_neg = jnp.broadcast_to(r_neg[..., None], theta_neg.shape)
    a_neg = jnp.ones_like(theta_neg)
    return dict(
        angular_pos=a_pos, angular_neg=a_neg, ratio_pos=r_pos, ratio_neg=r_neg,
        total_pos=a_pos * r_pos, total_neg=a_neg * r_neg,
    )


def lemma42_ratio(theta_pos, theta_neg, *, tau: float, m1: float = 0.0, m2: float = 0.0) -> Array:
    """Lemma 4.2 (β = 1): Σ_k e^{δ̃_ik} / Σ_k e^{δ_ik}, the ratio of sums of exponentiated logits, (...,)."""
    _check_tau_beta(tau, None)
    theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
    return _probability_ratio_core(theta_pos, theta_neg, tau, 1.0, m1, m2)[1]


def eta(theta_pos: ArrayLike, *, tau: float, m1: float = 0.0, m2: float = 0.0) -> Array:
    """η_il = exp((cos(θ_il + m1) − cos θ_il − m2)/τ) = e^{δ_il}/e^{δ̃_il} (Rho et al. 2023 App. A.3, Eq. 31)."""
    theta_pos = _float(theta_pos)
    return jnp.exp((jnp.cos(theta_pos + m1) - jnp.cos(theta_pos) - m2) / tau)


def lemma42_closed_form(theta_pos: ArrayLike, q_tilde_pos: ArrayLike, *, tau: float, m1: float = 0.0, m2: float = 0.0):
    """Lemma 4.2's closed form (Eq. 26): (e^{δ̃_il}/q̃_il) / (e^{δ_il} + e^{δ̃_il}(1/q̃_il − 1)).

    A function of the positive alone: its angle θ_il and margin-free probability q̃_il
    (the statement's q_il is a typo for q̃_il, see the module doc). Divided through by
    e^{δ̃_il}: (1/q̃)/(η + 1/q̃ − 1). Shapes broadcast.
    """
    q = _float(q_tilde_pos)
    inv_q = 1.0 / q
    return inv_q / (eta(theta_pos, tau=tau, m1=m1, m2=m2) + inv_q - 1.0)


def lemma43_multiplier(theta_pos: ArrayLike, q_tilde_pos: ArrayLike, *, tau: float, m1: float = 0.0, m2: float = 0.0):
    """Lemma 4.3 (Eq. 7, β = 1): 1 / (1 − (1 − η_il) q̃_il), the factor on every sample's gradient.

    Equal to Lemma 4.2's ratio; it grows with q̃_il when η_il < 1 (e.g. m2 > 0), which is
    how the subtractive margin counters the vanishing gradient as q̃_il → 1. Shapes broadcast.
    """
    q = _float(q_tilde_pos)
    return 1.0 / (1.0 - (1.0 - eta(theta_pos, tau=tau, m1=m1, m2=m2)) * q)


def lemma44_limit(theta_pos: ArrayLike, *, tau: float, m1: float = 0.0) -> Array:
    """Lemma 4.4: lim_{m2→∞} ∂L_i/∂θ_il = sin(θ_il + m1)/τ (β = 1), independent of q̃ and the negatives."""
    return jnp.sin(_float(theta_pos) + m1) / tau


def ratio_from_positive(theta_pos: ArrayLike, q_tilde_pos: ArrayLike, *, tau: float, beta: float = 1.0,
                        m1: float = 0.0, m2: float = 0.0):
    """Theorem 4.1's (p − βq)/(p − βq̃) as a function of the positive's θ_il and q̃_il only (Sec. 4.1).

    With D = 1 − (1 − η_il) q̃_il: q_il = q̃_il η_il / D, q_ih = q̃_ih / D, so

        r_pos = ((1 − q̃) + (1 − β) q̃ η) / (D ((1 − q̃) + (1 − β) q̃)),   r_neg = 1/D.

    For β = 1 both are 1/D (Lemmas 4.2 and 4.3). Shapes broadcast.

    Returns:
      ``(r_pos, r_neg)``.
    """
    _check_tau_beta(tau, beta)
    return _ratio_from_positive_core(_float(theta_pos), _float(q_tilde_pos), tau, beta, m1, m2)


@jax.jit
def _ratio_from_positive_core(theta_pos, q, tau, beta, m1, m2):
    e = jnp.exp((jnp.cos(theta_pos + m1) - jnp.cos(theta_pos) - m2) / tau)
    d = 1.0 - (1.0 - e) * q
    r_neg = 1.0 / d
    general = ((1.0 - q) + (1.0 - beta) * q * e) / (d * ((1.0 - q) + (1.0 - beta) * q))
    r_pos = jnp.where(beta == 1.0, r_neg, general)  # β = 1: exactly 1/D (no 0/0 at q̃ = 1)
    return tuple(jnp.broadcast_arrays(r_pos, r_neg))


# --- the figures' quantities -----------------------------------------------------------------
def _grid2(theta_grid, q_grid, dtype):
    t = _float(theta_grid, dtype).reshape(-1)
    q = _float(q_grid, dtype or t.dtype).reshape(-1)
    return t, q, t[:, None], q[None, :]


def fig1_gradient_magnitudes(theta_grid: ArrayLike, q_grid: ArrayLike, *, tau: float = 0.25, beta: float = 1.0,
                             dtype=None) -> dict[str, Array]:
    """Rho et al. 2023 Fig. 1: |∂L̃_i/∂θ_ij| without margins (Eq. 14) over angle × estimated probability.

    The paper plots two maps (β = 1, τ = 0.25): for a positive, |1 − β q⁺| sin θ⁺/τ over
    (θ⁺, q⁺); for a negative, β q⁻ sin θ⁻/τ over (θ⁻, q⁻). Both vanish as q approaches
    its target p (1 for the positive, 0 for negatives).

    Args:
      theta_grid: angles, shape (T,) (flattened), radians.
      q_grid: estimated probabilities in [0, 1], shape (Q,).
      tau, beta: Eq. 3's temperature and β.
      dtype: float dtype of the output (default: the grid's, float32 for Python lists).

    Returns:
      dict: ``theta`` (T,), ``q`` (Q,), ``positive`` (T, Q), ``negative`` (T, Q); rows index θ.
    """
    _check_tau_beta(tau, beta)
    t, q, tt, qq = _grid2(theta_grid, q_grid, dtype)
    s = jnp.sin(tt)
    return dict(theta=t, q=q, positive=jnp.abs(1.0 - beta * qq) * s / tau, negative=beta * qq * s / tau)


def fig2_margin_multipliers(theta_pos_grid: ArrayLike, q_pos_grid: ArrayLike, *, tau: float = 0.25,
                            beta: float = 1.0, m1: float = 0.4, m2: float = 0.0, dtype=None) -> dict[str, Array]:
    """Rho et al. 2023 Fig. 2: the two Theorem-4.1 multipliers of the angular margin over (θ⁺, q̃⁺).

    The paper (β = 1, τ = 0.25, m1 = 0.4) shows left the factor that applies to positives
    only, sin(θ⁺ + m1)/sin θ⁺, and right the factor on positives and negatives,
    (p − βq)/(p − βq̃), with green contours where each equals 1. Here both are given on
    the same (θ⁺, q̃⁺) grid (the left one is constant along q̃⁺).

    Args:
      theta_pos_grid: positive angles θ⁺, shape (T,); avoid 0 and π (angular factor ±inf there).
      q_pos_grid: margin-free positive probabilities q̃⁺ in (0, 1], shape (Q,).
      tau, beta, m1, m2: Eq. 4–5 parameters (Fig. 2 uses m2 = 0).
      dtype: output float dtype (default: the grid's, float32 for Python lists).

    Returns:
      dict: ``theta_pos`` (T,), ``q_pos`` (Q,), ``angular`` (T, Q), ``ratio_pos`` (T, Q),
      ``ratio_neg`` (T, Q), ``total_pos`` (T, Q) = angular · ratio_pos. Rows index θ⁺.
    """
    _check_tau_beta(tau, beta)
    t, q, tt, qq = _grid2(theta_pos_grid, q_pos_grid, dtype)
    r_pos, r_neg = ratio_from_positive(tt, qq, tau=tau, beta=beta, m1=m1, m2=m2)
    ang = jnp.broadcast_to(angular_multiplier(tt, m1=m1), r_pos.shape)
    return dict(theta_pos=t, q_pos=q, angular=ang, ratio_pos=r_pos, ratio_neg=r_neg, total_pos=ang * r_pos)


FIG8_M1 = (0.2, 0.4, 0.8, 1.6)
FIG8_TAU = (0.1, 0.25, 0.5)


def fig8_ratio_maps(theta_pos_grid: ArrayLike, q_pos_grid: ArrayLike, *, m1_values=FIG8_M1, tau_values=FIG8_TAU,
                    beta: float = 1.0, m2: float = 0.0, dtype=None) -> dict[str, Array]:
    """Rho et al. 2023 Fig. 8 (App. B): (p − βq)/(p − βq̃) over (θ⁺, q̃⁺) for several m1 and τ.

    The paper's panels vary m1 and τ; its text does not list the values, so the defaults
    are ours: m1 ∈ {0.2, 0.4, 0.8, 1.6} (the m1 of Sec. 5.4 / Table 8) and τ ∈ {0.1, 0.25,
    0.5}. Paper's reading: as m1 grows the emphasised band moves to lower θ⁺ (its centre
    is θ⁺ = (π − m1)/2, where 1 − η is largest) and broadens; green contour where ratio = 1.

    Args:
      theta_pos_grid: (T,); q_pos_grid: (Q,) in (0, 1].
      m1_values: (A,) angular margins; tau_values: (B,) temperatures.
      beta, m2: Eq. 5's β and the subtractive margin (Fig. 8: β = 1, m2 = 0).

    Returns:
      dict: ``theta_pos`` (T,), ``q_pos`` (Q,), ``m1`` (A,), ``tau`` (B,), ``ratio_pos``
      (A, B, T, Q), ``ratio_neg`` (A, B, T, Q) (equal when β = 1).
    """
    t, q, tt, qq = _grid2(theta_pos_grid, q_pos_grid, dtype)
    m1s = [float(m) for m in np.atleast_1d(m1_values)]
    taus = [float(x) for x in np.atleast_1d(tau_values)]
    pos_rows, neg_rows = [], []
    for m in m1s:
        rp, rn = zip(*(ratio_from_positive(tt, qq, tau=tau, beta=beta, m1=m, m2=m2) for tau in taus), strict=True)
        pos_rows.append(jnp.stack(rp))
        neg_rows.append(jnp.stack(rn))
    return dict(theta_pos=t, q_pos=q, m1=jnp.asarray(m1s, t.dtype), tau=jnp.asarray(taus, t.dtype),
                ratio_pos=jnp.stack(pos_rows), ratio_neg=jnp.stack(neg_rows))


def gradient_magnitudes_over_angles(theta_pos_grid: ArrayLike, theta_neg_grid: ArrayLike, *, tau: float = 0.25,
                                    beta: float = 1.0, m1: float = 0.0, m2: float = 0.0, n_neg: int = 255,
                                    dtype=None) -> dict[str, Array]:
    """|∂L_i/∂θ| (Eq. 15) for a batch with one positive at θ⁺ and ``n_neg`` negatives all at θ⁻.

    The concrete-configuration counterpart of Figs. 1–2: the probabilities are not free
    axes but follow from the angles, q̃⁺ = e^{cos θ⁺/τ} / (e^{cos θ⁺/τ} + n e^{cos θ⁻/τ}).
    Default n_neg = 255 (batch 256, Rho et al. 2023 App. C.1).

    Args:
      theta_pos_grid: (T,); theta_neg_grid: (U,); tau, beta, m1, m2: Eq. 5.
      n_neg: number of negatives (≥ 1).

    Returns:
      dict with (T, U) arrays (rows index θ⁺): ``positive`` |∂L/∂θ⁺|, ``negative`` |∂L/∂θ⁻|
      (one negative), their margin-free versions ``positive_free`` / ``negative_free``
      (Eq. 14), ``q_pos`` (with margins), ``q_pos_free``; and the grids ``theta_pos``, ``theta_neg``.
    """
    _check_tau_beta(tau, beta)
    if int(n_neg) != n_neg or n_neg < 1:
        raise ValueError(f"n_neg must be an integer >= 1; got {n_neg!r}")
    t, u, tt, uu = _grid2(theta_pos_grid, theta_neg_grid, dtype)
    log_n = math.log(n_neg)
    neg = jnp.cos(uu) / tau
    out = dict(theta_pos=t, theta_neg=u)
    for suffix, a, b in (("", m1, m2), ("_free", 0.0, 0.0)):
        pos = (jnp.cos(tt + a) - b) / tau
        x = pos - (neg + log_n)
        q_pos = jax.nn.sigmoid(x)
        q_one_neg = jnp.exp(neg - jnp.logaddexp(pos, neg + log_n))
        out["positive" + suffix] = jnp.abs(_one_minus_bq(x, beta) * jnp.sin(tt + a)) / tau
        out["negative" + suffix] = beta * q_one_neg * jnp.abs(jnp.sin(uu)) / tau
        out["q_pos" + suffix] = q_pos
    return out


# --- gradient-scaling transforms (Eqs. 8–12, Algorithms 1–6) -------------------------------------
def _scale_grad(logits, w):
    """Eq. 9: δ w + sg(δ)(1 − w) — the value of δ, the gradient of δ times sg(w)."""
    w = _sg(w)
    return w * logits + (1.0 - w) * _sg(logits)


def _curve(x, c, kind):
    x = jnp.clip(x, 0.0, 1.0)
    if kind == "alg3":
        return (1.0 - x) ** (1.0 / c)
    return jnp.abs((1.0 - x**c) ** (1.0 / c))  # Eq. 10


def _one_minus_alpha_qpos(base, p, valid, alpha):
    """1 − α q̃_il = (1 − α) + α Σ_{h valid, p=0} q̃_ih (per anchor, (..., 1)), floored at tiny."""
    q = jax.nn.softmax(jnp.where(valid, base, -jnp.inf), axis=-1, where=valid)
    rest = jnp.sum(jnp.where(valid & (p == 0), q, 0.0), axis=-1, keepdims=True)
    d = (1.0 - alpha) + alpha * rest
    return jnp.maximum(d, jnp.finfo(d.dtype).tiny)


def _transform_logits(name, c, theta, p, valid, tau, prm):
    """Transformed logits (..., K). ``c`` carries the gradient; ``theta`` is only used under sg."""
    base = c / tau
    theta = _sg(theta)
    if name == "none":  # Algorithm 1
        return base
    if name == "margins":  # Algorithm 2 / Eq. 4
        m1, m2 = prm["m1"], prm["m2"]
        cos_m = c * jnp.cos(m1 * p) - sin_from_cos(c) * jnp.sin(m1 * p)
        return (cos_m - m2 * p) / tau
    if name == "emphasize":  # Eqs. 8–9
        w = (1.0 - p) + prm["s"] * p
    elif name == "curvature":  # Eqs. 10–11 / Algorithm 3
        w = (1.0 - p) + _curve(theta / math.pi, prm["c"], prm["curve"]) * prm["s"] * p
    elif name == "ratio":  # Algorithm 4 (Sec. 5.4)
        m1, m2 = prm["m1"], prm["m2"]
        new = (c * jnp.cos(m1 * p) - sin_from_cos(c) * jnp.sin(m1 * p) - m2 * p) / tau
        lse = lambda z: jax.nn.logsumexp(jnp.where(valid, z, -jnp.inf), axis=-1, keepdims=True)  # noqa: E731
        scale = jnp.exp(lse(base) - lse(new))  # Σ e^{δ̃} / Σ e^{δ}
        w = (1.0 - p) + p * scale if prm["targets"] == "positive" else jnp.broadcast_to(scale, base.shape)
    elif name == "attenuate_i":  # Eq. 12 type I / Algorithm 5
        w = jnp.broadcast_to(1.0 / _one_minus_alpha_qpos(base, p, valid, prm["alpha"]), base.shape)
    elif name == "attenuate_ii":  # Eq. 12 type II / Algorithm 6
        w = (1.0 - p) + p / _one_minus_alpha_qpos(base, p, valid, prm["alpha"])
    else:  # pragma: no cover - names are validated in apply_transform
        raise ValueError(name)
    return _scale_grad(base, w)


def transform_loss_from_logits(logits: ArrayLike, p: ArrayLike, valid: ArrayLike | None = None, *,
                               beta: float = 1.0) -> Array:
    """Eq. 5 on given logits: L_i = −Σ_j p_ij δ_ij + β Σ_j p_ij log Σ_{k valid} e^{δ_ik}, shape (...,).

    Args:
      logits: δ, shape (..., K) (e.g. a transform's output).
      p: target probabilities, broadcastable to (..., K).
      valid: optional mask (..., K) of entries that exist; invalid ones are left out of
        the sum and must have p = 0.
      beta: Eq. 3's β.
    """
    logits = jnp.asarray(logits)
    p = jnp.asarray(p, dtype=logits.dtype)
    valid = jnp.ones(logits.shape, bool) if valid is None else jnp.broadcast_to(valid, logits.shape)
    lse = jax.nn.logsumexp(jnp.where(valid, logits, -jnp.inf), axis=-1)
    return -jnp.sum(jnp.where(valid, p * logits, 0.0), axis=-1) + beta * jnp.sum(p, axis=-1) * lse


# name -> {param: (default, rule)}; string options separately.
TRANSFORMS: Mapping[str, Mapping[str, tuple[float, str]]] = MappingProxyType({
    "none": {},
    "margins": {"m1": (0.5, "real"), "m2": (0.4, "real")},
    "emphasize": {"s": (1.125, "positive")},
    "curvature": {"s": (2.5, "positive"), "c": (0.7, "positive")},
    "ratio": {"m1": (0.2, "real"), "m2": (0.0, "real")},
    "attenuate_i": {"alpha": (0.25, "unit")},
    "attenuate_ii": {"alpha": (1.0, "unit")},
})
_OPTIONS = {"curvature": {"curve": ("eq10", "alg3")}, "ratio": {"targets": ("positive", "all")}}


@dataclasses.dataclass(frozen=True)
class GradientTransform:
    """A Rho et al. 2023 gradient transform as a surrogate loss: Eq. 5 on transformed logits.

    The loss values are those of plain InfoNCE-with-β (except ``margins``, which changes
    the logits); only the gradients change. Every method is pure and jit-friendly.

    Attributes:
      name: one of ``TRANSFORMS``.
      params: the transform's parameters (validated, defaults filled in).
      tau: temperature τ; beta: Eq. 3's β; symmetric: average both directions in ``__call__``.
    """

    name: str
    params: Mapping[str, Any]
    tau: float = 0.25
    beta: float = 1.0
    symmetric: bool = False

    def __hash__(self):
        return hash((self.name, tuple(self.params.items()), self.tau, self.beta, self.symmetric))

    def _prepare(self, c, p, valid, theta):
        c = jnp.asarray(c)
        if not jnp.issubdtype(c.dtype, jnp.floating):
            c = c.astype(jnp.float32)
        p = jnp.broadcast_to(jnp.asarray(p, dtype=c.dtype), c.shape)
        valid = jnp.ones(c.shape, bool) if valid is None else jnp.broadcast_to(jnp.asarray(valid, bool), c.shape)
        theta = safe_arccos(_sg(c)) if theta is None else jnp.broadcast_to(jnp.asarray(theta, c.dtype), c.shape)
        return c, p, valid, theta

    def logits(self, c: ArrayLike, p: ArrayLike, valid: ArrayLike | None = None, *, theta: ArrayLike | None = None):
        """Transformed logits (..., K) from cosines ``c`` (..., K) and one-hot targets ``p``.

        ``theta`` (the angles, used only under stop_gradient for the scales) defaults to
        arccos(c). Invalid entries come out as −inf.
        """
        return _logits_jit(self, *self._prepare(c, p, valid, theta))

    def loss_from_cosines(self, c, p, valid=None, *, theta=None) -> Array:
        """Per-anchor surrogate losses (...,) from cosines (..., K), targets p and mask."""
        return _loss_jit(self, *self._prepare(c, p, valid, theta))

    def from_angles(self, theta_pos: ArrayLike, theta_neg: ArrayLike) -> Array:
        """Per-anchor surrogate losses (...,) from θ_il (...,) and θ_ih (..., M); differentiable in θ."""
        theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
        return _from_angles_jit(self, theta_pos, theta_neg)

    def per_anchor(self, h: ArrayLike, h_prime: ArrayLike) -> Array:
        """(N,) per-anchor surrogate losses: anchor h_i, positive h_i', negatives h_j' (normalized inside)."""
        h, h_prime = check_pair(h, h_prime)
        return _embed_jit(self, h, h_prime, "per_anchor")

    def __call__(self, h: ArrayLike, h_prime: ArrayLike) -> Array:
        """Scalar training objective: the mean of the per-anchor surrogate (both directions if symmetric)."""
        h, h_prime = check_pair(h, h_prime)
        return _embed_jit(self, h, h_prime, "objective")

    def scales(self, theta_pos: ArrayLike, theta_neg: ArrayLike):
        """The multipliers w the transform puts on ∂L/∂θ: ``(w_pos (...,), w_neg (..., M))``.

        ``none``: 1; ``emphasize``: s on the positive (Eq. 8); ``curvature``: s γ(θ⁺/π, c) on the
        positive (Eq. 11); ``ratio``: Σe^{δ̃}/Σe^{δ} on the positive (all samples with
        ``targets="all"``); ``attenuate_i``: 1/(1 − α q̃⁺) on all; ``attenuate_ii``: on the positive.
        Not defined for ``margins``, which changes the logits (use ``angle_gradient``).
        """
        if self.name == "margins":
            raise ValueError("'margins' changes the logits, not only the gradient scale: use angle_gradient()")
        theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
        return _scales_jit(self, theta_pos, theta_neg)

    def angle_gradient(self, theta_pos: ArrayLike, theta_neg: ArrayLike):
        """The transformed gradient in closed form: ∂L/∂θ_ij = (p_ij − β q̃_ij) w_ij sin θ_ij/τ.

        For ``margins``: Rho et al. 2023 Eq. 15 with the transform's m1, m2. Returns
        ``(g_pos (...,), g_neg (..., M))``.
        """
        if self.name == "margins":
            return angle_gradient(theta_pos, theta_neg, tau=self.tau, beta=self.beta, **self.params)
        g_pos, g_neg = angle_gradient(theta_pos, theta_neg, tau=self.tau, beta=self.beta)
        w_pos, w_neg = self.scales(theta_pos, theta_neg)
        return g_pos * w_pos, g_neg * w_neg


def _one_hot_first(shape, dtype):
    return jnp.zeros(shape, dtype).at[..., 0].set(1.0)


@functools.partial(jax.jit, static_argnums=0)
def _logits_jit(tr, c, p, valid, theta):
    out = _transform_logits(tr.name, jnp.where(valid, c, 0.0), theta, p, valid, tr.tau, tr.params)
    return jnp.where(valid, out, -jnp.inf)


@functools.partial(jax.jit, static_argnums=0)
def _loss_jit(tr, c, p, valid, theta):
    return transform_loss_from_logits(_logits_jit(tr, c, p, valid, theta), p, valid, beta=tr.beta)


@functools.partial(jax.jit, static_argnums=0)
def _from_angles_jit(tr, theta_pos, theta_neg):
    theta = jnp.concatenate([theta_pos[..., None], theta_neg], axis=-1)
    p = _one_hot_first(theta.shape, theta.dtype)
    valid = jnp.ones(theta.shape, bool)
    return _loss_jit(tr, jnp.cos(theta), p, valid, fold_angle(theta))


def _per_anchor_unit(tr, h, hp):
    c = cosine_matrix(h, hp)  # anchor h_i against h_k' (positive on the diagonal)
    p = jnp.eye(h.shape[0], dtype=c.dtype)
    return _loss_jit(tr, c, p, jnp.ones(c.shape, bool), safe_arccos(_sg(c)))


@functools.partial(jax.jit, static_argnums=(0, 3))
def _embed_jit(tr, h, hp, kind):
    h, hp = normalize(h), normalize(hp)
    per = _per_anchor_unit(tr, h, hp)
    if kind == "per_anchor":
        return per
    out = jnp.mean(per)
    return 0.5 * (out + jnp.mean(_per_anchor_unit(tr, hp, h))) if tr.symmetric else out


@functools.partial(jax.jit, static_argnums=0)
def _scales_jit(tr, theta_pos, theta_neg):
    theta = jnp.concatenate([theta_pos[..., None], theta_neg], axis=-1)
    c = jnp.cos(theta)
    p = _one_hot_first(theta.shape, theta.dtype)
    valid = jnp.ones(theta.shape, bool)
    # the gradient of _scale_grad w.r.t. its logits is w: read it off with a VJP of ones.
    f = lambda cc: _transform_logits(tr.name, cc, fold_angle(theta), p, valid, tr.tau, tr.params)  # noqa: E731
    w = jax.vjp(f, c)[1](jnp.ones_like(c))[0] * tr.tau  # ∂δ/∂c = w/τ
    return w[..., 0], w[..., 1:]


def apply_transform(name: str, *, tau: float = 0.25, beta: float = 1.0, symmetric: bool = False,
                    **params: Any) -> GradientTransform:
    """A Rho et al. 2023 gradient transform, ready for a JAX training loop.

    Names and parameters (defaults: SimCLR on CIFAR-10 in Rho et al. 2023's App. C tables):

    * ``"none"`` — Algorithm 1: δ = cos θ/τ (InfoNCE with β).
    * ``"margins"`` (m1 = 0.5, m2 = 0.4; Table 5) — Algorithm 2 / Eq. 4: the margin logits
      (values change; the loss is ``margin_infonce``).
    * ``"emphasize"`` (s = 1.125; Table 6) — Eqs. 8–9: positive gradients × s.
    * ``"curvature"`` (s = 2.5, c = 0.7; Table 7; ``curve="eq10"`` or ``"alg3"``) — Eqs. 10–11 /
      Algorithm 3: positive gradients × s γ(θ⁺/π, c).
    * ``"ratio"`` (m1 = 0.2; Table 8; m2 = 0; ``targets="positive"`` or ``"all"``) —
      Algorithm 4: gradients × Σe^{δ̃}/Σe^{δ} (Lemma 4.2's ratio).
    * ``"attenuate_i"`` (α = 0.25) — Eq. 12 type I / Algorithm 5: all gradients × 1/(1 − α q̃⁺).
    * ``"attenuate_ii"`` (α = 1; Table 1, the better α of the two for SimCLR / CIFAR-10) —
      Eq. 12 type II / Algorithm 6: positive gradient × 1/(1 − α q̃⁺).

    Every scale is computed under stop_gradient from the margin-free logits, and applied
    as δ w + sg(δ)(1 − w) (Eq. 9), so loss values are unchanged. Targets are one-hot
    (one positive per anchor). 1 − α q̃⁺ is computed as (1 − α) + α Σ_h q̃_h and floored at
    the dtype's smallest normal number, so α = 1 stays finite as q̃⁺ → 1.

    Args:
      name: one of ``TRANSFORMS``.
      tau: temperature τ > 0 (Rho et al. 2023 App. C: 0.25).
      beta: Eq. 3's β > 0.
      symmetric: average both directions in the scalar loss.
      **params: the transform's parameters (unknown keys raise ``ValueError``).

    Example:
      >>> import jax
      >>> loss = apply_transform("emphasize", s=2.0, tau=0.05)
      >>> h, hp = jax.random.normal(jax.random.key(0), (2, 8, 16))
      >>> grads = jax.grad(loss)(h, hp)
    """
    if name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r}; valid choices: {', '.join(TRANSFORMS)}")
    spec = TRANSFORMS[name]
    options = _OPTIONS.get(name, {})
    unknown = set(params) - set(spec) - set(options)
    if unknown:
        valid = ", ".join([*spec, *options]) or "(none)"
        raise ValueError(f"transform {name!r}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {valid}")
    merged: dict[str, Any] = {k: check_param(name, k, params.get(k, d), r) for k, (d, r) in spec.items()}
    for k, choices in options.items():
        v = params.get(k, choices[0])
        if v not in choices:
            raise ValueError(f"transform {name!r}: {k} must be one of {choices}; got {v!r}")
        merged[k] = v
    tau = check_param(name, "tau", tau, "positive")
    beta = check_param(name, "beta", beta, "positive")
    return GradientTransform(name, MappingProxyType(merged), tau, beta, bool(symmetric))
