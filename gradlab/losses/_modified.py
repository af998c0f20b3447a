"""Modified losses (Li et al. 2024 Sec. 4, App. E Eqs. 13-19, Tables 4-5) and the paradigm baseline (Eq. 5).

All four modified losses share the gate of Li et al. 2024 Sec. 4,

    d_i = 1[h_i·h_i' − max_{k≠i} h_i·h_k' < m],

a stop-gradient on the anchors that fail the condition (§4 of the Formulas page of the documentation), and use
same-view negatives h_j (Eq. 12). Their per-anchor values L_i are written as in the
paper (Eqs. 6, 13-15; the "no gradient" factors under ``stop_gradient``) and
``components`` gives ∂L_i/∂h_i with every other embedding fixed (Eqs. 16-19):

    mMHE: d_i Σ_j e^{h_i·h_j/τ} (h_j − r h_i') / (τ Σ_{k<l} e^{h_k·h_l/τ})
    mMHS: d_i (h_j − r h_i') / ‖h_i − h_j‖,  j the nearest same-view neighbour
    mB:   d_i Σ_j e^{h_i'·h_j'/τ} (h_j − r h_i') / Σ_{k≠l} e^{h_k'·h_l'/τ}
    mV:   d_i Σ_j e^{h_i·h_j/τ} (h_j − r h_i') / Σ_{k≠l} e^{h_k·h_l/τ}

Summing those L_i would let h_i receive gradient from the other anchors' terms (the
shared uniformity of mMHE, the h_i·h_j products of mB / mV, the nearest neighbour of
mMHS). The training objective (``LossSpec.objective``) therefore keeps the value
mean_i L_i but holds every *other* same-view row under stop-gradient, so that its
gradient w.r.t. h_i is exactly (1/N) × Eq. 16-19.

mB, mV and mMHE normalize their weights over the whole batch: they have no angle form.
The baseline (Eq. 5) is a cosine-family loss and has one: it is the composition
(indicator, softmax, static) of ``_compose`` (``gradlab.compose``). The four modified
losses share its GD block (``indicator_gate``) and its static R, but their W is
normalized over the whole batch, which no per-anchor W block can express.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gradlab.geometry import cosine_matrix, distance_from_cos
from gradlab.losses._compose import composition, indicator_gate
from gradlab.losses._ineffective import mhe_uniformity
from gradlab.losses._ops import (
    floor_tiny,
    hardest,
    hardest_cos,
    offdiag,
    sq_dist_pos,
)
from gradlab.losses._registry import LossSpec, register
from gradlab.paradigm import Components

__all__ = ["gate", "baseline_value", "baseline_kernel"]

sg = jax.lax.stop_gradient


def gate(h, hp, m):
    """d_i = 1[h_i·h_i' − max_{k≠i} h_i·h_k' < m], (N,), under stop-gradient."""
    n = h.shape[0]
    c_pos = jnp.sum(h * hp, axis=-1)
    c_max = hardest_cos(cosine_matrix(h, hp), offdiag(n))
    return sg(indicator_gate(c_max, c_pos, m).astype(h.dtype))


def _pair_weights(c, tau, pairs):
    """e^{c_ij/τ} / Σ_{pairs} e^{c_kl/τ} off the diagonal (0 on it), (N, N), via logsumexp."""
    n = c.shape[0]
    off = offdiag(n)
    mask = jnp.triu(jnp.ones((n, n), dtype=bool), k=1) if pairs == "k<l" else off
    logits = c / tau
    lse = jax.nn.logsumexp(jnp.where(mask, logits, -jnp.inf))
    return jnp.where(off, jnp.exp(jnp.where(off, logits, 0.0) - lse), 0.0)


def _components(gd, weight, r, dtype):
    n = weight.shape[0]
    return Components(gd, weight, jnp.full((n, 1), r, dtype), None, "h")


# --- mB / mV (Eqs. 6, 13, 18, 19) ---------------------------------------------------
def _mb_weight(h, hp, tau):
    return _pair_weights(cosine_matrix(hp, hp), tau, "k≠l")


def _mv_weight(h, hp, tau):
    return _pair_weights(cosine_matrix(h, h), tau, "k≠l")


def _linear_per_anchor(weight_fn, h, hp, neg, m, tau, r):
    """L_i = d_i (−h_i·w_p,i h_i' + Σ_j w_ij h_i·n_j), w_p,i = r Σ_j w_ij; w, d under sg."""
    d = gate(h, hp, m)
    w = sg(weight_fn(h, hp, tau))
    wp = r * jnp.sum(w, axis=-1)
    c_pos = jnp.sum(h * hp, axis=-1)
    push = jnp.sum(w * cosine_matrix(h, neg), axis=-1)
    return d * (push - wp * c_pos)


def mb_per_anchor(h, hp, *, m, tau, r):
    return _linear_per_anchor(_mb_weight, h, hp, h, m, tau, r)


def mb_objective(h, hp, *, m, tau, r):
    return jnp.mean(_linear_per_anchor(_mb_weight, h, hp, sg(h), m, tau, r))


def mb_components(h, hp, *, m, tau, r):
    return _components(gate(h, hp, m), _mb_weight(h, hp, tau), r, h.dtype)


def mv_per_anchor(h, hp, *, m, tau, r):
    return _linear_per_anchor(_mv_weight, h, hp, h, m, tau, r)


def mv_objective(h, hp, *, m, tau, r):
    return jnp.mean(_linear_per_anchor(_mv_weight, h, hp, sg(h), m, tau, r))


def mv_components(h, hp, *, m, tau, r):
    return _components(gate(h, hp, m), _mv_weight(h, hp, tau), r, h.dtype)


# --- mMHE (Eqs. 14, 16) ------------------------------------------------------------
def mmhe_uniformity(h, tau):
    """L^{u,mMHE} = log (2 Σ_{k<l} e^{−‖h_k − h_l‖²/(2τ)} / (N(N−1))), same view (App. E)."""
    return mhe_uniformity(h, tau)


def _mmhe_align_coef(h, tau, r):
    """r Σ_{j≠i} e^{h_i·h_j/τ} / (2τ Σ_{k<l} e^{h_k·h_l/τ}), (N,), under sg."""
    w = _pair_weights(cosine_matrix(h, h), tau, "k<l")
    return sg(r * jnp.sum(w, axis=-1) / (2.0 * tau))


def mmhe_per_anchor(h, hp, *, m, tau, r):
    """L_i = d_i (L_i^{a,mMHE} + L^{u,mMHE}) (Eq. 14): the shared uniformity in every L_i."""
    d = gate(h, hp, m)
    return d * (_mmhe_align_coef(h, tau, r) * sq_dist_pos(h, hp) + mmhe_uniformity(h, tau))


def mmhe_objective(h, hp, *, m, tau, r):
    """mean_i L_i in value; gradient w.r.t. h_i = (1/N) × Eq. 16.

    The uniformity is evaluated on h̃ (h_i where d_i = 1, sg(h_i) elsewhere), so that
    each pair term reaches only the gated anchors, once.
    """
    n = h.shape[0]
    d = gate(h, hp, m)
    align = jnp.mean(d * _mmhe_align_coef(h, tau, r) * sq_dist_pos(h, hp))
    h_gated = jnp.where(d[:, None] > 0, h, sg(h))
    uni = mmhe_uniformity(h_gated, tau)
    return align + jnp.sum(d) / n * sg(uni) + (uni - sg(uni)) / n


def mmhe_components(h, hp, *, m, tau, r):
    """W_ij = e^{h_i·h_j/τ} / (τ Σ_{k<l} e^{h_k·h_l/τ}), R = r, GD = d_i."""
    w = _pair_weights(cosine_matrix(h, h), tau, "k<l") / tau
    return _components(gate(h, hp, m), w, r, h.dtype)


# --- mMHS (Eqs. 15, 17; "min", not "max", in L^{a,mMHS}) ------------------------------
def _mmhs(h, hp, neg, m, r):
    n = h.shape[0]
    d = gate(h, hp, m)
    c_near = hardest_cos(cosine_matrix(h, neg), offdiag(n))
    dist = distance_from_cos(c_near)
    coef = sg(r / (2.0 * floor_tiny(dist)))
    return d * (coef * sq_dist_pos(h, hp) - dist)


def mmhs_per_anchor(h, hp, *, m, r):
    """L_i = d_i (r/(2 min_j ‖h_i − h_j‖) ‖h_i − h_i'‖² − min_j ‖h_i − h_j‖) (Eq. 15)."""
    return _mmhs(h, hp, h, m, r)


def mmhs_objective(h, hp, *, m, r):
    return jnp.mean(_mmhs(h, hp, sg(h), m, r))


def mmhs_components(h, hp, *, m, r):
    """W_j = 1/‖h_i − h_j‖ for the nearest same-view j, else 0; R = r; GD = d_i."""
    n = h.shape[0]
    c = cosine_matrix(h, h)
    off = offdiag(n)
    w = jnp.where(off, hardest(c, off) / floor_tiny(distance_from_cos(c)), 0.0)
    return _components(gate(h, hp, m), w, r, h.dtype)


# --- baseline of the empirical study (Eq. 5): a composition -----------------------------
_BASELINE = composition("indicator", "softmax", "static")
#: GD = 1[c_p − max_k c_k < m], W = softmax_k(c_k/τ), R = r (no 1/τ on W).
baseline_kernel = _BASELINE.kernel
#: L_i = GD Σ_j W_j (c_j − R c_p) with GD, W, R under stop-gradient.
baseline_value = _BASELINE.value


# --- registry -------------------------------------------------------------------------
_GATE = "d_i = 1[h_i·h_i' − max_{k≠i} h_i·h_k' < m]"
_RULES_MTR = {"m": "nonnegative", "tau": "positive", "r": "nonnegative"}

register(
    LossSpec(
        name="mmhe",
        title="mMHE",
        family="modified",
        kind="per_anchor",
        defaults={"m": 0.30, "tau": 0.05, "r": 1.75},
        rules=_RULES_MTR,
        negatives="h",
        per_anchor=mmhe_per_anchor,
        components=mmhe_components,
        objective=mmhe_objective,
        gd=_GATE,
        weight="e^{h_i·h_j/τ} / (τ Σ_{k<l} e^{h_k·h_l/τ})",
        ratio="r",
        reference="Li et al. 2024 App. E Eqs. 14, 16; Table 4 (BERT-base)",
    )
)
register(
    LossSpec(
        name="mmhs",
        title="mMHS",
        family="modified",
        kind="per_anchor",
        defaults={"m": 0.30, "r": 1.75},
        rules={"m": "nonnegative", "r": "nonnegative"},
        negatives="h",
        per_anchor=mmhs_per_anchor,
        components=mmhs_components,
        objective=mmhs_objective,
        gd=_GATE,
        weight="1/‖h_i−h_j‖ for the nearest same-view j, else 0",
        ratio="r",
        reference="Li et al. 2024 App. E Eqs. 15, 17 (typo: min, not max); Table 4 (BERT-base)",
    )
)
register(
    LossSpec(
        name="mb",
        title="mB (modified Barlow Twins)",
        label="mB",
        family="modified",
        kind="per_anchor",
        defaults={"m": 0.30, "tau": 0.05, "r": 1.5},
        rules=_RULES_MTR,
        negatives="h",
        per_anchor=mb_per_anchor,
        components=mb_components,
        objective=mb_objective,
        gd=_GATE,
        weight="e^{h_i'·h_j'/τ} / Σ_{k≠l} e^{h_k'·h_l'/τ}",
        ratio="r",
        reference="Li et al. 2024 Sec. 4 Eq. 6, App. E Eq. 18; Table 4 (BERT-base)",
    )
)
register(
    LossSpec(
        name="mv",
        title="mV (modified VICReg)",
        label="mV",
        family="modified",
        kind="per_anchor",
        defaults={"m": 0.30, "tau": 0.05, "r": 1.5},
        rules=_RULES_MTR,
        negatives="h",
        per_anchor=mv_per_anchor,
        components=mv_components,
        objective=mv_objective,
        gd=_GATE,
        weight="e^{h_i·h_j/τ} / Σ_{k≠l} e^{h_k·h_l/τ}",
        ratio="r",
        reference="Li et al. 2024 App. E Eqs. 13, 19; Table 4 (BERT-base)",
    )
)
register(
    LossSpec(
        name="baseline",
        title="Paradigm baseline (Eq. 5)",
        label="baseline (Eq. 5)",
        family="modified",
        kind="cosine",
        defaults={"m": 0.30, "tau": 0.05, "r": 1.0},
        rules=_RULES_MTR,
        value=baseline_value,
        kernel=baseline_kernel,
        gd="1[c_p − max_k c_k < m]",
        weight="softmax_k(c_k/τ)_j (no 1/τ)",
        ratio="r",
        reference="Li et al. 2024 Sec. 3.2 Eq. 5 (m = 0.3, τ = 0.05, r = 1)",
    )
)
