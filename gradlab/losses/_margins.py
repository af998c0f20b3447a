"""The generalized margin InfoNCE of Rho et al. 2023 (Eqs. 3–5), with its exact GD / W / R.

For anchor i with positive h_i' (angle θ_p, cosine c_p) and negatives n_j (cosines c_j),
Rho et al. 2023 Eq. 4 puts an angular margin m1 and a subtractive margin m2 on the positive only:

    δ_ii = (cos(θ_p + m1) − m2)/τ,   δ_ij = c_j/τ (j ≠ i),   q_ik = softmax_k δ_ik
    L_i  = −δ_ii + β log Σ_k exp δ_ik                                  (Eq. 5, p one-hot)

The sum over k runs over the positive and every negative (Rho et al. 2023 writes k ∈ X).
β = 1, m1 = m2 = 0 is InfoNCE; β = 1, m2 = 0 is ArcCon with u = m1.

Gradient (∂ cos(θ_p + m1)/∂h_i = A · h_i' on the sphere, A = sin(θ_p + m1)/sin θ_p):

    ∂L_i/∂h_i = (β/τ) Σ_{j≠i} q_ij n_j − (1 − β q_ii) A h_i'/τ

which is the paradigm's GD Σ_j W_j (n_j − R h_i') with

    GD = β (1 − q_ii),   W_j = q_ij / (τ (1 − q_ii)) = E_j/(τ S),   Σ_j W_j = 1/τ,
    R  = (1 − β q_ii) A / (β (1 − q_ii)) = A · (1 + (1 − β) e^x)/β,
    x  = δ_ii − log S,  S = Σ_{j≠i} e^{c_j/τ},  E_j = e^{c_j/τ}.

R is fixed by the gradient (pull over total push), not by a convention: the split of
GD·W_j between GD and W is the usual one (W is the softmax over negatives, over τ).

Numerics (documented guards):

* cos(θ_p + m1) is evaluated as c_p cos m1 − sin θ_p sin m1 with sin θ_p = √((1−c_p)(1+c_p))
  (``sin_from_cos``): no arccos, exact at m1 = 0, and the same formula feeds the value and R.
  A = cos m1 + sin m1 · c_p / sin θ_p. At sin θ_p = 0 exactly (θ_p ∈ {0, π}, where the pull
  direction h_i' is normal to the sphere and the tangential pull vanishes) the cot term is
  set to 0, so A = cos m1: this is the derivative of the value as implemented (``safe_sqrt``
  has a zero gradient at 0), so the paradigm form and autodiff agree there too.
* GD = β σ(log S − δ_ii) (no 1 − q cancellation); W is a masked softmax over negatives.
* β = 1: R = A exactly. β ≠ 1: as x → ∞ the push GD·W → 0 while the pull tends to
  (1 − β) A/τ, so R → ∞ (the paradigm's R is genuinely unbounded there). To keep R finite
  we evaluate GD and R at x clipped to log(finfo.max)/2 (≈ 354 in float64, ≈ 44 in
  float32); the reconstructed gradient then differs from the exact one by at most
  β e^{−354} (float64) resp. β e^{−44} (float32) relative to its size |1 − β|.
  β → 0: GD ~ β → 0 and R ~ 1/β; their product stays exact (β must be > 0: β = 0 is
  the positives-only BYOL limit, which the ``alignment`` loss covers).

Parameters: τ > 0, β > 0, m1 and m2 any real numbers. Negative margins are allowed and
the formula is applied literally (no folding of θ_p + m1 into [0, π] and no
"easy margin" switch as in ArcFace implementations): for θ_p + m1 outside [0, π], the
logit cos(θ_p + m1) is simply the cosine of that real number.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from gradlab import defaults
from gradlab.losses._ops import angular_factor as _angular_factor
from gradlab.losses._ops import masked_logsumexp, masked_softmax, shifted_cos
from gradlab.losses._registry import LossSpec, register

__all__ = [
    "margin_pos_cos",
    "angular_factor",
    "margin_infonce_value",
    "margin_infonce_kernel",
]



def margin_pos_cos(c_pos, *, m1):
    """cos(θ_p + m1) from c_p = cos θ_p, (...,) (exact at m1 = 0); the one formula is ArcCon's."""
    return shifted_cos(c_pos, m1)


def angular_factor(c_pos, *, m1):
    """A = sin(θ_p + m1)/sin θ_p, (...,): Rho et al. 2023 Theorem 4.1's factor on the pull (ArcCon's ratio)."""
    return _angular_factor(c_pos, m1)


def _pos_logit(c_pos, tau, m1, m2):
    return (margin_pos_cos(c_pos, m1=m1) - m2) / tau


def margin_infonce_value(c_pos, c_neg, valid, *, tau, beta, m1, m2):
    """L_i = −δ_ii + β log(e^{δ_ii} + Σ_{valid j} e^{c_j/τ}), (...,) (Rho et al. 2023 Eq. 5)."""
    pos = _pos_logit(c_pos, tau, m1, m2)
    logits_neg = jnp.where(valid, c_neg / tau, -jnp.inf)
    all_logits = jnp.concatenate([pos[..., None], logits_neg], axis=-1)
    return beta * jax.nn.logsumexp(all_logits, axis=-1) - pos


def margin_infonce_kernel(c_pos, c_neg, valid, *, tau, beta, m1, m2):
    """(GD (...,), W (..., M), R (..., 1)) of the margin InfoNCE; see the module doc."""
    pos = _pos_logit(c_pos, tau, m1, m2)
    x = pos - masked_logsumexp(c_neg / tau, valid)  # δ_ii − log S
    # Parameters may be traced (the registry jits with params as arguments): no Python branching.
    x_clip = jnp.minimum(x, 0.5 * math.log(jnp.finfo(jnp.result_type(x)).max))
    x = jnp.where(beta == 1.0, x, x_clip)  # β = 1 needs no clip (R = A); β ≠ 1: keep R finite
    gd = beta * jax.nn.sigmoid(-x)  # β (1 − q_ii)
    weight = masked_softmax(c_neg / tau, valid) / tau  # q_ij / (τ (1 − q_ii))
    amp = angular_factor(c_pos, m1=m1)
    ratio = amp * (1.0 + (1.0 - beta) * jnp.exp(x_clip)) / beta  # (1 − β q_ii) A / (β (1 − q_ii))
    return gd, weight, ratio[..., None]


register(LossSpec(
    name="margin_infonce", title="Margin InfoNCE", family="margin", kind="cosine",
    # τ, β: Rho et al. 2023 App. C; m1 = 0.5, m2 = 0.4: Table 5, SimCLR on CIFAR-10 (the main
    # in-batch-negatives setting)
    defaults={"tau": defaults.RHO2023_TAU, "beta": defaults.RHO2023_BETA, "m1": 0.5, "m2": 0.4},
    rules={"tau": "positive", "beta": "positive", "m1": "real", "m2": "real"},
    value=margin_infonce_value, kernel=margin_infonce_kernel,
    gd="β (1 − q_ii), q_ii = softmax weight of δ_ii = (cos(θ_p+m1) − m2)/τ",
    weight="E_j / (τ S) = q_ij / (τ (1 − q_ii))",
    ratio="(1 − β q_ii) sin(θ_p + m1) / (β (1 − q_ii) sin θ_p)",
    reference=(
        "Rho et al. 2023 Eqs. 4–5 (generalized InfoNCE with β, angular margin m1, subtractive margin m2); "
        f"defaults from App. C: τ = {defaults.RHO2023_TAU:g} (C.1), β = {defaults.RHO2023_BETA:g}, m1 = 0.5, m2 = 0.4 (Table 5, SimCLR / CIFAR-10; "
        "Table 5 lists one (m1, m2) per method and dataset, SimCLR / CIFAR-10 is taken as the main one)"
    ),
))
