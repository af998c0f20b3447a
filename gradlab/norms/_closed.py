"""Nie et al. 2023's gradient norms in closed form (Eqs. 7–9, 11, 16–22) and ``norm_map``, their dispatch.

The formulas, their typos and the defaults are described in :mod:`gradlab.norms`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from gradlab import defaults
from gradlab.losses import TRIPLET_METRICS, get_spec, triplet_gate

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
    "DEPENDS_ON_K",
    "CLOSED_FORMS",
    "angles",
    "abs_sin",
    "check_negatives",
    "canonical_norm",
]

DEFAULT_NEGATIVES = defaults.NORM_NEGATIVES

#: Norm-map name -> loss-registry name: the one thing the registry cannot know. Nie et al.
#: 2023 name the a&u pair's parts "align" (positive part only) and "uniform" (negative
#: part only); the registry calls the losses "alignment" and "uniformity".
REGISTRY_NAMES: Mapping[str, str] = MappingProxyType({
    "infonce": "infonce", "align": "alignment", "uniform": "uniformity", "dcl": "dcl", "dcl+": "dcl+",
    "mpt": "mpt", "met": "met", "mat": "mat",
})

#: The parameters of each norm map and their defaults: the loss registry's (Nie et al. 2023 Table 2).
DEFAULTS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    name: MappingProxyType(dict(get_spec(reg).defaults)) for name, reg in REGISTRY_NAMES.items()
})

PARTS = ("pos", "neg")


def angles(theta_pos: ArrayLike, theta_neg: ArrayLike, dtype=None):
    """θ_ii' and θ_ij' as JAX arrays of one floating dtype (at least float32), broadcast to one shape."""
    tp, tn = jnp.asarray(theta_pos), jnp.asarray(theta_neg)
    if dtype is None:
        dtype = jnp.result_type(tp.dtype, tn.dtype, jnp.float32)
        if not jnp.issubdtype(dtype, jnp.floating):
            dtype = jnp.float32
    return jnp.broadcast_arrays(tp.astype(dtype), tn.astype(dtype))


def abs_sin(theta):
    """|sin θ|: the length of a tangential unit direction (never −0 at θ = π in float32)."""
    return jnp.abs(jnp.sin(theta))


def check_negatives(negatives) -> float:
    """K as a float once it is an integer >= 1; else ValueError."""
    if isinstance(negatives, bool) or not float(negatives) >= 1 or float(negatives) != int(negatives):
        raise ValueError(f"negatives must be an integer >= 1 (the number K of negatives); got {negatives!r}")
    return float(negatives)


def _check_pos(name: str, value) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return value


def _check_nonneg(name: str, value) -> float:
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0; got {value!r}")
    return value


def _gd_softmax(tp, tn, k, tau):
    """K e^{c_n/τ} / (e^{c_p/τ} + K e^{c_n/τ}) = sigmoid(log K + (c_n − c_p)/τ), stable."""
    return 1.0 / (1.0 + jnp.exp((jnp.cos(tp) - jnp.cos(tn)) / tau - math.log(k)))


# --- InfoNCE -----------------------------------------------------------------------------
def infonce_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["infonce"]["tau"]) -> Array:
    """‖∇_cl^pos‖ (Nie et al. 2023 Eq. 7): (1/τ) · GD · sin θ_ii', K negatives all at θ_ij'.

    Args:
      theta_pos: θ_ii' (radians), any shape broadcasting with ``theta_neg``.
      theta_neg: θ_ij' (radians).
      negatives: K, the number of negatives.
      tau: temperature τ > 0.

    Returns:
      The norm, of the broadcast shape.

    Examples:
      >>> import math
      >>> round(float(infonce_pos(math.pi / 2, math.pi / 2, negatives=1, tau=1.0)), 6)
      0.5
    """
    k, tau = check_negatives(negatives), _check_pos("tau", tau)
    tp, tn = angles(theta_pos, theta_neg)
    return _gd_softmax(tp, tn, k, tau) * abs_sin(tp) / tau


def infonce_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["infonce"]["tau"]) -> Array:
    """‖∇_cl^{neg_j}‖ (Nie et al. 2023 Eq. 16): e^{c_n/τ} sin θ_ij' / (τ (e^{c_p/τ} + K e^{c_n/τ}))."""
    k, tau = check_negatives(negatives), _check_pos("tau", tau)
    tp, tn = angles(theta_pos, theta_neg)
    return _gd_softmax(tp, tn, k, tau) / k * abs_sin(tn) / tau


# --- alignment / uniformity (Wang & Isola) ----------------------------------------------
def align_pos(theta_pos: ArrayLike, theta_neg: ArrayLike | None = None, *, alpha: float = DEFAULTS["align"]["alpha"], **_) -> Array:
    """‖∇L_align‖ (Nie et al. 2023 Eq. 8): α (2 sin(θ_ii'/2))^{α−2} sin θ_ii'; independent of θ_ij'.

    ``theta_neg`` only fixes the output shape (broadcast). For α < 2 the norm diverges
    as θ_ii' → 0 (it is returned as ``inf`` there); for α = 2 it is 2 sin θ_ii'.
    """
    alpha = _check_pos("alpha", alpha)
    tp, _tn = angles(theta_pos, 0.0 if theta_neg is None else theta_neg)
    # (2 sin(θ/2))^{α−2} sin θ = 2^{α−1} sin(θ/2)^{α−1} cos(θ/2): finite at θ = 0 for α >= 1.
    half = jnp.abs(jnp.sin(tp / 2))
    return alpha * 2.0 ** (alpha - 1) * half ** (alpha - 1) * jnp.abs(jnp.cos(tp / 2))


def uniform_neg(theta_pos: ArrayLike | None, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                t: float = DEFAULTS["uniform"]["t"]) -> Array:
    """‖∇L_uniform^j‖ (Nie et al. 2023 Eq. 17): 2t sin θ_ij' / (N K), with all N(N−1) pairs at θ_ij'.

    Eq. 29's normalizer Σ_i Σ_{j≠i} exp(−t‖ĥ_i − ĥ_j'‖²) runs over the N = K + 1 anchors of
    the batch; with every anchor–negative pair at the same angle the exponentials cancel.
    """
    k, t = check_negatives(negatives), _check_pos("t", t)
    tp, tn = angles(0.0 if theta_pos is None else theta_pos, theta_neg)
    del tp
    return 2 * t * abs_sin(tn) / ((k + 1) * k)


# --- DCL / DCL+ -------------------------------------------------------------------------
def _dcl_positive(tp, tn, k, tau):
    """1[L_dcl > 0] with L_dcl = (c_n − c_p)/τ + log K."""
    return ((jnp.cos(tn) - jnp.cos(tp)) / tau + math.log(k) > 0).astype(tp.dtype)


def dcl_pos(theta_pos: ArrayLike, theta_neg: ArrayLike | None = None, *, tau: float = DEFAULTS["dcl"]["tau"], **_) -> Array:
    """‖∇_dcl^pos‖ (Nie et al. 2023 Eq. 9): sin θ_ii' / τ; independent of θ_ij' and K."""
    tau = _check_pos("tau", tau)
    tp, _tn = angles(theta_pos, 0.0 if theta_neg is None else theta_neg)
    return abs_sin(tp) / tau


def dcl_neg(theta_pos: ArrayLike | None, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
            tau: float = DEFAULTS["dcl"]["tau"]) -> Array:
    """‖∇_dcl^{neg_j}‖ (Nie et al. 2023 Eq. 18): sin θ_ij' / (τ K) (the softmax over K equal negatives)."""
    k, tau = check_negatives(negatives), _check_pos("tau", tau)
    tp, tn = angles(0.0 if theta_pos is None else theta_pos, theta_neg)
    del tp
    return abs_sin(tn) / (tau * k)


def dclplus_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["dcl+"]["tau"]) -> Array:
    """‖∇_dcl+^pos‖ (Nie et al. 2023 Eq. 11): sin θ_ii' / τ where L_dcl > 0, else 0."""
    k, tau = check_negatives(negatives), _check_pos("tau", tau)
    tp, tn = angles(theta_pos, theta_neg)
    return _dcl_positive(tp, tn, k, tau) * abs_sin(tp) / tau


def dclplus_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["dcl+"]["tau"]) -> Array:
    """‖∇_dcl+^{neg_j}‖ (Nie et al. 2023 Eq. 19): sin θ_ij' / (τ K) where L_dcl > 0, else 0."""
    k, tau = check_negatives(negatives), _check_pos("tau", tau)
    tp, tn = angles(theta_pos, theta_neg)
    return _dcl_positive(tp, tn, k, tau) * abs_sin(tn) / (tau * k)


# --- triplet losses with the hardest negative --------------------------------------------
def _triplet_gate(name, tp, tn, m):
    """1[d(θ_neg) − d(θ_pos) < m] in the loss's metric d (``gradlab.losses._ops.TRIPLET_METRICS``)."""
    d = TRIPLET_METRICS[name].of_angle
    return triplet_gate(d(tn, jnp), d(tp, jnp), m).astype(tp.dtype)


def _gate_mpt(tp, tn, m):
    return _triplet_gate("mpt", tp, tn, m)


def _gate_met(tp, tn, m):
    return _triplet_gate("met", tp, tn, m)


def _gate_mat(tp, tn, m):
    return _triplet_gate("mat", tp, tn, m)


def mpt_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mpt"]["m"], **_) -> Array:
    """‖∇_mpt^pos‖ (Nie et al. 2023 Eq. 39): sin θ_ii' · 1[c_p − c_n < m]."""
    m = _check_nonneg("m", m)
    tp, tn = angles(theta_pos, theta_neg)
    return _gate_mpt(tp, tn, m) * abs_sin(tp)


def mpt_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mpt"]["m"], **_) -> Array:
    """‖∇_mpt^neg‖ (Nie et al. 2023 Eq. 20, gate fixed): sin θ_ij' · 1[c_p − c_n < m] (hardest negative)."""
    m = _check_nonneg("m", m)
    tp, tn = angles(theta_pos, theta_neg)
    return _gate_mpt(tp, tn, m) * abs_sin(tn)


def met_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["met"]["m"], **_) -> Array:
    """‖∇_met^pos‖ (Nie et al. 2023 Eq. 39): cos(θ_ii'/2) · 1[d_n − d_p < m], d = 2 sin(θ/2)."""
    m = _check_nonneg("m", m)
    tp, tn = angles(theta_pos, theta_neg)
    return _gate_met(tp, tn, m) * jnp.abs(jnp.cos(tp / 2))


def met_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["met"]["m"], **_) -> Array:
    """‖∇_met^neg‖ (Nie et al. 2023 Eq. 21): cos(θ_ij'/2) · 1[d_n − d_p < m] (hardest negative)."""
    m = _check_nonneg("m", m)
    tp, tn = angles(theta_pos, theta_neg)
    return _gate_met(tp, tn, m) * jnp.abs(jnp.cos(tn / 2))


def mat_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mat"]["m"], **_) -> Array:
    """‖∇_mat^pos‖ (Nie et al. 2023 Eq. 39): 1[θ_ij' − θ_ii' < m] (the angle's gradient has unit norm)."""
    m = _check_nonneg("m", m)
    tp, tn = angles(theta_pos, theta_neg)
    return _gate_mat(tp, tn, m)


def mat_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mat"]["m"], **_) -> Array:
    """‖∇_mat^neg‖ (Nie et al. 2023 Eq. 22): 1[θ_ij' − θ_ii' < m] (hardest negative)."""
    return mat_pos(theta_pos, theta_neg, m=m)


# --- dispatch ------------------------------------------------------------------------------
CLOSED_FORMS: Mapping[tuple[str, str], Callable[..., Array]] = MappingProxyType({
    ("infonce", "pos"): infonce_pos, ("infonce", "neg"): infonce_neg,
    ("align", "pos"): align_pos, ("uniform", "neg"): uniform_neg,
    ("dcl", "pos"): dcl_pos, ("dcl", "neg"): dcl_neg,
    ("dcl+", "pos"): dclplus_pos, ("dcl+", "neg"): dclplus_neg,
    ("mpt", "pos"): mpt_pos, ("mpt", "neg"): mpt_neg,
    ("met", "pos"): met_pos, ("met", "neg"): met_neg,
    ("mat", "pos"): mat_pos, ("mat", "neg"): mat_neg,
})

#: Loss names the norm maps know, in the order of Nie et al. 2023's figures.
NORM_LOSSES = ("infonce", "align", "uniform", "dcl", "dcl+", "mpt", "met", "mat")

#: Losses whose map depends on the number of negatives K.
DEPENDS_ON_K = frozenset({("infonce", "pos"), ("infonce", "neg"), ("uniform", "neg"), ("dcl", "neg"),
                          ("dcl+", "pos"), ("dcl+", "neg")})

_ALIASES = {"cl": "infonce", "alignment": "align", "uniformity": "uniform", "dclplus": "dcl+",
            "dcl_plus": "dcl+", "a&u": None}


def canonical_norm(loss: str, part: str) -> str:
    """The norm-map name of ``loss`` (aliases resolved; the a&u pair by ``part``); else ValueError."""
    name = str(loss).lower()
    name = _ALIASES.get(name, name) or name
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}; got {part!r}")
    # the a&u pair: alignment is its positive part, uniformity its negative part
    if name in ("align", "uniform"):
        name = "align" if part == "pos" else "uniform"
    if name not in DEFAULTS:
        raise ValueError(f"no gradient-norm map for loss {loss!r}; valid choices: {', '.join(NORM_LOSSES)}")
    return name


def norm_map(loss: str, theta_pos: ArrayLike, theta_neg: ArrayLike, *, part: str = "pos",
             negatives: int = DEFAULT_NEGATIVES, **params: float) -> Array:
    """The gradient norm of ``loss``'s alignment (``part="pos"``) or uniformity (``"neg"``) part.

    Args:
      loss: one of ``NORM_LOSSES`` (``"align"``/``"uniform"`` name the a&u pair: the
        alignment loss has only a positive part, the uniformity loss only a negative part).
      theta_pos, theta_neg: θ_ii' and θ_ij' (radians), broadcasting.
      part: ``"pos"`` (Nie et al. 2023 Fig. 2) or ``"neg"`` (one negative's share, Fig. 4).
      negatives: K, the number of negatives (all at θ_ij').
      **params: the loss's parameters (``tau``, ``m``, ``alpha``, ``t``); defaults from
        Nie et al. 2023 Table 2 (see ``DEFAULTS``).

    Returns:
      The norm, shape of the broadcast of ``theta_pos`` and ``theta_neg``.

    Raises:
      ValueError: unknown loss / part / parameter, or a bad value.

    Examples:
      >>> import jax.numpy as jnp
      >>> float(norm_map("dcl", jnp.pi / 2, 1.0, tau=0.5))
      2.0
    """
    name = canonical_norm(loss, part)
    own = DEFAULTS[name]
    unknown = set(params) - set(own)
    if unknown:
        raise ValueError(f"{name}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {', '.join(own)}")
    merged = {**own, **params}
    fn = CLOSED_FORMS[(name, part)]
    if (name, part) in DEPENDS_ON_K:
        merged["negatives"] = negatives
    else:
        check_negatives(negatives)
    return fn(theta_pos, theta_neg, **merged)
