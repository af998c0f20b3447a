"""Effective contrastive losses (Li et al. 2024 Table 1; Nie et al. 2023): InfoNCE, ArcCon, MPT, MET, MAT, DCL, DCL+.

Each loss is written once in terms of the anchor's cosines: ``c_pos`` (...,) to its
positive and ``c_neg`` (..., M) to its negatives, with ``valid`` (..., M) marking the
negatives that exist. ``value`` gives L_i, ``kernel`` gives (GD, W, R). The embedding
form (the N − 1 off-diagonal negatives of each row) and the angle form (M = N − 1) share
these functions.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from gradlab.geometry import distance_from_cos, safe_arccos, sin_from_cos
from gradlab.losses._ops import (
    NEG_INF,
    TRIPLET_METRICS,
    angular_factor,
    chord_ratio,
    floor_tiny,
    fraction_gd,
    hardest,
    hardest_cos,
    masked_logsumexp,
    masked_softmax,
    shifted_cos,
    sine_ratio,
    triplet_gate,
)
from gradlab.losses._registry import LossSpec, register


# --- InfoNCE -------------------------------------------------------------------------
def infonce_value(c_pos, c_neg, valid, *, tau):
    logits_neg = jnp.where(valid, c_neg / tau, NEG_INF)
    all_logits = jnp.concatenate([(c_pos / tau)[..., None], logits_neg], axis=-1)
    return jax.nn.logsumexp(all_logits, axis=-1) - c_pos / tau


def infonce_kernel(c_pos, c_neg, valid, *, tau):
    gd = fraction_gd(c_pos, c_neg, valid, tau)  # 1 / (1 + e^{c_p/τ} / S)
    weight = masked_softmax(c_neg / tau, valid) / tau  # E_j / (τ S)
    return gd, weight, jnp.ones_like(c_pos)[..., None]


# --- ArcCon ---------------------------------------------------------------------------
def arccon_value(c_pos, c_neg, valid, *, tau, u):
    pos = shifted_cos(c_pos, u) / tau
    logits_neg = jnp.where(valid, c_neg / tau, NEG_INF)
    all_logits = jnp.concatenate([pos[..., None], logits_neg], axis=-1)
    return jax.nn.logsumexp(all_logits, axis=-1) - pos


def arccon_kernel(c_pos, c_neg, valid, *, tau, u):
    gd = fraction_gd(shifted_cos(c_pos, u), c_neg, valid, tau)
    weight = masked_softmax(c_neg / tau, valid) / tau
    return gd, weight, angular_factor(c_pos, u)[..., None]


# --- MPT / MET / MAT (triplet losses with the hardest negative) ------------------------
def _triplet_gd(name, c_pos, c_neg, valid, m):
    """GD = 1[d(hardest) − d(positive) < m] in the loss's own metric d (``_ops.TRIPLET_METRICS``)."""
    d = TRIPLET_METRICS[name].of_cos
    return triplet_gate(d(hardest_cos(c_neg, valid)), d(c_pos), m).astype(c_neg.dtype)


def mpt_value(c_pos, c_neg, valid, *, m):
    return jax.nn.relu(-c_pos + hardest_cos(c_neg, valid) + m)


def mpt_kernel(c_pos, c_neg, valid, *, m):
    gd = _triplet_gd("mpt", c_pos, c_neg, valid, m)
    return gd, hardest(c_neg, valid), jnp.ones_like(c_pos)[..., None]


def met_value(c_pos, c_neg, valid, *, m):
    d_pos = distance_from_cos(c_pos)
    d_min = distance_from_cos(hardest_cos(c_neg, valid))
    return jax.nn.relu(d_pos - d_min + m)


def met_kernel(c_pos, c_neg, valid, *, m):
    d_neg = distance_from_cos(c_neg)
    gd = _triplet_gd("met", c_pos, c_neg, valid, m)
    onehot = hardest(c_neg, valid)
    weight = onehot / floor_tiny(d_neg)
    return gd, weight, chord_ratio(c_pos, c_neg)


def mat_value(c_pos, c_neg, valid, *, m):
    theta_pos = safe_arccos(c_pos)
    theta_min = safe_arccos(hardest_cos(c_neg, valid))
    return jax.nn.relu(theta_pos - theta_min + m)


def mat_kernel(c_pos, c_neg, valid, *, m):
    gd = _triplet_gd("mat", c_pos, c_neg, valid, m)
    s_neg = sin_from_cos(c_neg)
    weight = hardest(c_neg, valid) / floor_tiny(s_neg)
    return gd, weight, sine_ratio(c_pos, c_neg)


# --- DCL / DCL+ (Nie et al. 2023) ----------------------------------------------------------
def dcl_value(c_pos, c_neg, valid, *, tau):
    return -c_pos / tau + masked_logsumexp(c_neg / tau, valid)


def dcl_kernel(c_pos, c_neg, valid, *, tau):
    weight = masked_softmax(c_neg / tau, valid) / tau
    return jnp.ones_like(c_pos), weight, jnp.ones_like(c_pos)[..., None]


def dclplus_value(c_pos, c_neg, valid, *, tau):
    return jax.nn.relu(dcl_value(c_pos, c_neg, valid, tau=tau))


def dclplus_kernel(c_pos, c_neg, valid, *, tau):
    _, weight, ratio = dcl_kernel(c_pos, c_neg, valid, tau=tau)
    gd = (dcl_value(c_pos, c_neg, valid, tau=tau) > 0).astype(c_neg.dtype)
    return gd, weight, ratio


_SOFT_W = "E_j / (τ S): softmax of c_j/τ over negatives, over τ"

register(LossSpec(
    name="infonce", title="InfoNCE", family="effective", kind="cosine", factored="lse",
    defaults={"tau": 0.05}, rules={"tau": "positive"},
    value=infonce_value, kernel=infonce_kernel,
    gd="1 / (1 + e^{c_p/τ} / S), S = Σ_j e^{c_j/τ}", weight=_SOFT_W, ratio="1",
    reference="Li et al. 2024 Table 1; Oord et al. 2018",
))
register(LossSpec(
    name="arccon", title="ArcCon", family="effective", kind="cosine", factored="lse",
    defaults={"tau": 0.05, "u": math.pi / 18}, rules={"tau": "positive", "u": "real"},
    value=arccon_value, kernel=arccon_kernel,
    gd="1 / (1 + e^{cos(θ_p+u)/τ} / S)", weight=_SOFT_W, ratio="sin(θ_p + u) / sin θ_p",
    reference="Li et al. 2024 Table 1; Zhang et al. 2022b",
))
register(LossSpec(
    name="mpt", title="MPT", family="effective", kind="cosine", factored="max",
    defaults={"m": 0.23}, rules={"m": "nonnegative"},
    value=mpt_value, kernel=mpt_kernel,
    gd="1[c_p − max_k c_k < m]", weight="1 for the hardest negative, else 0", ratio="1",
    reference="Li et al. 2024 Table 1; Nie et al. 2023 Table 2 (m)",
))
register(LossSpec(
    name="met", title="MET", family="effective", kind="cosine", factored="max",
    defaults={"m": 0.45}, rules={"m": "nonnegative"},
    value=met_value, kernel=met_kernel,
    gd="1[min_k d_k − d_p < m], d = √(2−2c)", weight="1/d_j for the nearest negative, else 0",
    ratio="√((1 − c_j)/(1 − c_p))",
    reference="Li et al. 2024 Table 1 (typo: min, not max); Nie et al. 2023 Table 2 (m)",
))
register(LossSpec(
    name="mat", title="MAT", family="effective", kind="cosine", factored="max",
    defaults={"m": 0.15 * math.pi}, rules={"m": "nonnegative"},
    value=mat_value, kernel=mat_kernel,
    gd="1[min_k θ_k − θ_p < m]", weight="1/sin θ_j for the nearest negative, else 0",
    ratio="sin θ_j / sin θ_p",
    reference="Nie et al. 2023 (Eq. 20–22, Table 2: m = 0.15π)",
))
register(LossSpec(
    name="dcl", title="DCL", family="effective", kind="cosine", factored="lse",
    defaults={"tau": 0.03}, rules={"tau": "positive"},
    value=dcl_value, kernel=dcl_kernel,
    gd="1", weight=_SOFT_W, ratio="1",
    reference="Nie et al. 2023 Eq. 5 (Table 2: τ = 0.03); Yeh et al. 2021",
))
register(LossSpec(
    name="dcl+", title="DCL+", family="effective", kind="cosine", factored="lse",
    defaults={"tau": 0.17}, rules={"tau": "positive"},
    value=dclplus_value, kernel=dclplus_kernel,
    gd="1[L_dcl > 0]", weight=_SOFT_W, ratio="1",
    reference="Nie et al. 2023 Eq. 10 (Table 2: τ = 0.17)",
))
