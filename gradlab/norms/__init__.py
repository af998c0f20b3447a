"""Nie et al. 2023's gradient-norm maps over θ_ii' × θ_ij' (Eqs. 7–9, 11, 16–22; Figs. 2 and 4).

The gradient of a per-anchor loss w.r.t. the anchor splits into an *alignment* part
(along the tangential direction to the positive h_i') and a *uniformity* part (one term
per negative h_j'). On the unit sphere (the paper's 1/‖h_i‖ factor dropped) the
tangential part of ĥ_i' has length sin θ_ii' and that of ĥ_j' has length sin θ_ij', so
each norm is a scalar coefficient times a sine. As in the paper, all K negatives sit at
the same angle θ_ij' ("All θ_ij' in one equation are treated as the same value").

Alignment part ‖∇^pos‖ (Fig. 2), with c_p = cos θ_ii', c_n = cos θ_ij':

    InfoNCE (Eq. 7)   K e^{c_n/τ} sin θ_ii' / (τ (e^{c_p/τ} + K e^{c_n/τ}))
    alignment (Eq. 8) α (2 sin(θ_ii'/2))^{α−2} sin θ_ii'
    DCL (Eq. 9)       sin θ_ii' / τ
    DCL+ (Eq. 11)     sin θ_ii' / τ · 1[L_dcl > 0],  L_dcl = (c_n − c_p)/τ + log K
    MPT (Eq. 39)      sin θ_ii' · 1[c_p − c_n < m]
    MET (Eq. 39)      cos(θ_ii'/2) · 1[d_n − d_p < m],  d = 2 sin(θ/2)
    MAT (Eq. 39)      1 · 1[θ_ij' − θ_ii' < m]

Uniformity part ‖∇^{neg_j}‖ of one negative (Fig. 4):

    InfoNCE (Eq. 16)  e^{c_n/τ} sin θ_ij' / (τ (e^{c_p/τ} + K e^{c_n/τ}))
    uniformity (17)   2t sin θ_ij' / (N K),  N = K + 1 anchors (Eq. 29's double sum)
    DCL (Eq. 18)      sin θ_ij' / (τ K)
    DCL+ (Eq. 19)     sin θ_ij' / (τ K) · 1[L_dcl > 0]
    MPT (Eq. 20)      sin θ_ij' · gate   (the hardest negative only)
    MET (Eq. 21)      cos(θ_ij'/2) · gate
    MAT (Eq. 22)      1 · gate

Typos in Nie et al. 2023 fixed here (each checked against ``jax.grad``): Eq. 7's denominator
has exp(cos θ_ii'/τ), not exp(cos θ_ij'/τ); Eq. 11 has sin θ_ii', not sin θ_ij'; Eq. 20's
gate is c_p − max_j c_j < m (a difference, not a sum); Eq. 21/40's MET gate is "< m" for
the non-zero branch, as in Eq. 39.

Defaults follow Nie et al. 2023 Table 2 (BERT-base) and are the loss registry's own
(``gradlab.losses.get_spec(name).defaults``: τ_InfoNCE = 0.05, α = 2, t = 6 for the a&u pair,
τ_DCL = 0.03, τ_DCL+ = 0.17, m_MPT = 0.23, m_MET = 0.45, m_MAT = 0.15π); K = 64 negatives
("under the condition of 64 negative sample size") is ``gradlab.defaults.NORM_NEGATIVES``.

Every function is pure and broadcasts ``theta_pos`` against ``theta_neg``; they accept
NumPy or JAX arrays and return a JAX array of the broadcast shape.

**Any loss of cosines** (a user loss from ``gradlab.loss_from_cosines``, a composition, or
a registered cosine-kind loss) has the same two norms by autodiff (``loss_norm``): with
c_p = cos θ_ii' and all K negatives at c_j = cos θ_ij',

    ‖∇^pos‖ = |∂L/∂c_p| sin θ_ii',        ‖∇^{neg_j}‖ = |∂L/∂c_j| sin θ_ij'  (one negative),

since the tangential part of ∇_{h_i} c = h is sin θ long. For the registered losses this
reproduces every closed form above (tested), with one convention to know: a loss that takes
the hardest negative by ``max`` shares the gradient among K exactly tied negatives under
autodiff, so its uniformity map is Nie et al. 2023's "hardest negative only" value / K.
"""

from gradlab.norms._closed import (
    DEFAULT_NEGATIVES,
    DEFAULTS,
    NORM_LOSSES,
    PARTS,
    REGISTRY_NAMES,
    align_pos,
    dcl_neg,
    dcl_pos,
    dclplus_neg,
    dclplus_pos,
    infonce_neg,
    infonce_pos,
    mat_neg,
    mat_pos,
    met_neg,
    met_pos,
    mpt_neg,
    mpt_pos,
    norm_map,
    uniform_neg,
)
from gradlab.norms._maps import (
    loss_norm,
    norm_grid,
    norm_on_mu_grid,
    norm_panels,
    norm_result,
    stack_panels,
)

__all__ = [
    "NORM_LOSSES",
    "PARTS",
    "DEFAULTS",
    "DEFAULT_NEGATIVES",
    "REGISTRY_NAMES",
    "infonce_pos",
    "infonce_neg",
    "align_pos",
    "uniform_neg",
    "dcl_pos",
    "dcl_neg",
    "dclplus_pos",
    "dclplus_neg",
    "mpt_pos",
    "mpt_neg",
    "met_pos",
    "met_neg",
    "mat_pos",
    "mat_neg",
    "norm_map",
    "norm_grid",
    "norm_result",
    "norm_panels",
    "stack_panels",
    "norm_on_mu_grid",
    "loss_norm",
]
