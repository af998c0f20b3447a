"""Rho et al. 2023 ("Understanding contrastive learning through the lens of margins"): the analysis.

One anchor i, one positive l (target p_il = 1) and negatives h (p_ih = 0); angles θ_ij,
temperature τ, β of Eq. 3, angular margin m1 and subtractive margin m2 (Eq. 4):

    δ̃_ij = cos θ_ij / τ,   δ_ij = (cos(θ_ij + m1 p_ij) − m2 p_ij)/τ,
    q̃ = softmax(δ̃),  q = softmax(δ),  L_i = −Σ_j p_ij δ_ij + β Σ_j p_ij log Σ_k e^{δ_ik}   (Eq. 5)

Contents (every function is pure JAX, jit/vmap friendly; angles in radians):

* the gradient with respect to the angles, Eqs. 14–15: ∂L_i/∂θ_ij = (p_ij − β q_ij) sin(θ_ij + m1 p_ij)/τ;
* Theorem 4.1's two multipliers, Lemma 4.2 (ratio of sums of exponentiated logits),
  Lemma 4.3 (the subtractive-margin factor with η_il), Lemma 4.4 (the m2 → ∞ limit);
* the same quantities on (angle × probability) grids (``free_gradient_grid``,
  ``multiplier_grid``, ``ratio_grid``; drawn by ``gradlab.plot``'s Rho et al. 2023 recipes),
  and ``gradient_magnitudes_over_angles`` for a concrete batch configuration.

The margin logits (Eq. 4), the closed-form angle gradient and the gradient-scaling
transforms of Eqs. 8–12 / Algorithms 2–6 live next to the margin loss, in
``gradlab.losses`` (``apply_transform``, ``GradientTransform``, ``margin_logits``); this
module imports them. The angular factor sin(θ + m1)/sin θ is ArcCon's ratio
(``gradlab.losses._effective.angular_factor``), a function of c = cos θ. Both evaluate
sin θ as √((1 − c)(1 + c)), so angles are taken in [0, π], and near θ = 0 the relative
error grows like ε/θ² (float32 at θ = 0.01: about 1e-4 in the angular factor).

Angle-form conventions follow ``Loss.components_from_angles``: ``theta_pos`` (...,) is
the anchor–positive angle, ``theta_neg`` (..., M) the anchor–negative angles (every entry
a negative; the positive is not repeated among them).

Typos / readings of Rho et al. 2023 (see also §7 of the Formulas page of the documentation):

* Lemma 4.2's statement writes q_il in its last expression; the proof (Eqs. 18–26) and
  the algebra need the margin-free q̃_il: (e^{δ̃_il}/q̃_il)/(e^{δ_il} + e^{δ̃_il}(1/q̃_il − 1)).
* Sec. 4.1's prose swaps the two factors' roles; the algebra (and the Fig. 2 caption) is
  unambiguous: sin(θ + m1 p)/sin θ is 1 for negatives (applies to positives only), and
  (p − βq)/(p − βq̃) multiplies positives and negatives (for β = 1 it is the same value,
  Σe^{δ̃}/Σe^{δ}, for both).
* The transforms' readings of Algorithms 3 and 4 are listed in ``gradlab.losses._transforms``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from gradlab import defaults
from gradlab._validation import check_angles, check_param
from gradlab.losses import angle_logits, angular_factor, margin_angle_gradient, margin_logits
from gradlab.losses import one_minus_beta_q as _one_minus_bq

__all__ = [
    "probabilities",
    "angle_gradient",
    "probability_ratio",
    "theorem41_multipliers",
    "lemma42_ratio",
    "lemma42_closed_form",
    "eta",
    "lemma43_multiplier",
    "lemma44_limit",
    "ratio_from_positive",
    "free_gradient_grid",
    "multiplier_grid",
    "ratio_grid",
    "gradient_magnitudes_over_angles",
]


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


# --- probabilities and the angle gradient (Eqs. 2, 4, 14, 15) ------------------------------------
def probabilities(theta_pos, theta_neg, *, tau: float, m1: float = 0.0, m2: float = 0.0):
    """q_il (...,) and q_ih (..., M): softmax of Eq. 4's logits over {l} ∪ negatives.

    With m1 = m2 = 0 these are the margin-free q̃ of Eq. 2.
    """
    theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
    pos, neg = angle_logits(theta_pos, theta_neg, tau, m1, m2)
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
    return margin_angle_gradient(theta_pos, theta_neg, tau, beta, m1, m2)


# --- Theorem 4.1 and Lemmas 4.2–4.4 ------------------------------------------------------
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
    pos, neg = angle_logits(theta_pos, theta_neg, tau, m1, m2)
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
    a_pos = angular_factor(jnp.cos(theta_pos), m1)
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
    return _eta(_float(theta_pos), tau, m1, m2)


def _eta(theta_pos, tau, m1, m2):
    c = jnp.cos(theta_pos)
    return jnp.exp(margin_logits(c, 1.0, tau=tau, m1=m1, m2=m2) - c / tau)


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
    e = _eta(theta_pos, tau, m1, m2)
    d = 1.0 - (1.0 - e) * q
    r_neg = 1.0 / d
    general = ((1.0 - q) + (1.0 - beta) * q * e) / (d * ((1.0 - q) + (1.0 - beta) * q))
    r_pos = jnp.where(beta == 1.0, r_neg, general)  # β = 1: exactly 1/D (no 0/0 at q̃ = 1)
    return tuple(jnp.broadcast_arrays(r_pos, r_neg))


# --- the same quantities on (angle × probability) grids ----------------------------------------
def _grid2(theta_grid, q_grid, dtype):
    t = _float(theta_grid, dtype).reshape(-1)
    q = _float(q_grid, dtype or t.dtype).reshape(-1)
    return t, q, t[:, None], q[None, :]


def free_gradient_grid(theta_grid: ArrayLike, q_grid: ArrayLike, *, tau: float, beta: float = 1.0,
                       dtype=None) -> dict[str, Array]:
    """|∂L̃_i/∂θ_ij| without margins (Rho et al. 2023 Eq. 14) over angle × estimated probability.

    The probability is a free axis here: for a positive |1 − β q⁺| sin θ⁺/τ over (θ⁺, q⁺),
    for a negative β q⁻ sin θ⁻/τ over (θ⁻, q⁻). Both vanish as q approaches its target p
    (1 for the positive, 0 for negatives). Rho et al. 2023 Fig. 1 draws these maps
    (``gradlab.plot.margin_gradients``).

    Args:
      theta_grid: angles, shape (T,) (flattened), radians.
      q_grid: estimated probabilities in [0, 1], shape (Q,).
      tau, beta: Eq. 3's temperature and β.
      dtype: float dtype of the output (default: the grid's, float32 for Python lists).

    Returns:
      dict: ``theta`` (T,), ``q`` (Q,), ``positive`` (T, Q), ``negative`` (T, Q); rows index θ.

    Examples:
      >>> d = free_gradient_grid([0.5, 1.0], [0.0, 1.0], tau=0.25)
      >>> d["positive"].shape, float(d["positive"][0, 1]), float(d["negative"][0, 0])
      ((2, 2), 0.0, 0.0)
    """
    _check_tau_beta(tau, beta)
    t, q, tt, qq = _grid2(theta_grid, q_grid, dtype)
    s = jnp.sin(tt)
    return dict(theta=t, q=q, positive=jnp.abs(1.0 - beta * qq) * s / tau, negative=beta * qq * s / tau)


def multiplier_grid(theta_pos_grid: ArrayLike, q_pos_grid: ArrayLike, *, tau: float, beta: float = 1.0,
                    m1: float = 0.0, m2: float = 0.0, dtype=None) -> dict[str, Array]:
    """Theorem 4.1's two multipliers over the positive's (θ⁺, q̃⁺).

    The angular factor sin(θ⁺ + m1)/sin θ⁺ applies to positives only (constant along q̃⁺);
    the probability ratio (p − βq)/(p − βq̃) multiplies positives and negatives
    (``ratio_from_positive``). Rho et al. 2023 Fig. 2 draws both
    (``gradlab.plot.margin_multipliers``).

    Args:
      theta_pos_grid: positive angles θ⁺ in [0, π], shape (T,).
      q_pos_grid: margin-free positive probabilities q̃⁺ in (0, 1], shape (Q,).
      tau, beta, m1, m2: Eq. 4–5 parameters.
      dtype: output float dtype (default: the grid's, float32 for Python lists).

    Returns:
      dict: ``theta_pos`` (T,), ``q_pos`` (Q,), ``angular`` (T, Q), ``ratio_pos`` (T, Q),
      ``ratio_neg`` (T, Q), ``total_pos`` (T, Q) = angular · ratio_pos. Rows index θ⁺.

    Examples:
      >>> import math
      >>> d = multiplier_grid([(math.pi - 0.4) / 2], [0.5], tau=0.25, m1=0.4)
      >>> round(float(d["angular"][0, 0]), 5)  # = 1 where θ⁺ = (π − m1)/2
      1.0
    """
    _check_tau_beta(tau, beta)
    t, q, tt, qq = _grid2(theta_pos_grid, q_pos_grid, dtype)
    r_pos, r_neg = ratio_from_positive(tt, qq, tau=tau, beta=beta, m1=m1, m2=m2)
    ang = jnp.broadcast_to(angular_factor(jnp.cos(tt), m1), r_pos.shape)
    return dict(theta_pos=t, q_pos=q, angular=ang, ratio_pos=r_pos, ratio_neg=r_neg, total_pos=ang * r_pos)


def ratio_grid(theta_pos_grid: ArrayLike, q_pos_grid: ArrayLike, *, m1_values, tau_values,
               beta: float = 1.0, m2: float = 0.0, dtype=None) -> dict[str, Array]:
    """(p − βq)/(p − βq̃) over (θ⁺, q̃⁺) for several angular margins m1 and temperatures τ.

    As m1 grows the emphasised band moves to lower θ⁺ (its centre is θ⁺ = (π − m1)/2,
    where 1 − η is largest) and broadens. Rho et al. 2023 Fig. 8 (App. B) draws this
    sweep (``gradlab.plot.margin_ratio_grid``).

    Args:
      theta_pos_grid: (T,); q_pos_grid: (Q,) in (0, 1].
      m1_values: (A,) angular margins; tau_values: (B,) temperatures.
      beta, m2: Eq. 5's β and the subtractive margin.

    Returns:
      dict: ``theta_pos`` (T,), ``q_pos`` (Q,), ``m1`` (A,), ``tau`` (B,), ``ratio_pos``
      (A, B, T, Q), ``ratio_neg`` (A, B, T, Q) (equal when β = 1).

    Examples:
      >>> ratio_grid([0.5, 1.0, 2.0], [0.5], m1_values=(0.2, 0.4), tau_values=(0.25,))["ratio_pos"].shape
      (2, 1, 3, 1)
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


def gradient_magnitudes_over_angles(theta_pos_grid: ArrayLike, theta_neg_grid: ArrayLike, *, tau: float = defaults.RHO2023_TAU,
                                    beta: float = 1.0, m1: float = 0.0, m2: float = 0.0, n_neg: int = 255,
                                    dtype=None) -> dict[str, Array]:
    """|∂L_i/∂θ| (Eq. 15) for a batch with one positive at θ⁺ and ``n_neg`` negatives all at θ⁻.

    The concrete-configuration counterpart of ``free_gradient_grid`` / ``multiplier_grid``: the probabilities are not free
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
        pos = margin_logits(jnp.cos(tt), 1.0, tau=tau, m1=a, m2=b)
        x = pos - (neg + log_n)
        q_pos = jax.nn.sigmoid(x)
        q_one_neg = jnp.exp(neg - jnp.logaddexp(pos, neg + log_n))
        out["positive" + suffix] = jnp.abs(_one_minus_bq(x, beta) * jnp.sin(tt + a)) / tau
        out["negative" + suffix] = beta * q_one_neg * jnp.abs(jnp.sin(uu)) / tau
        out["q_pos" + suffix] = q_pos
    return out
