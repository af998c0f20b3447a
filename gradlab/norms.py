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
    "norm_grid",
    "norm_result",
    "norm_panels",
    "stack_panels",
    "norm_on_mu_grid",
    "loss_norm",
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


def _angles(theta_pos: ArrayLike, theta_neg: ArrayLike, dtype=None):
    tp, tn = jnp.asarray(theta_pos), jnp.asarray(theta_neg)
    if dtype is None:
        dtype = jnp.result_type(tp.dtype, tn.dtype, jnp.float32)
        if not jnp.issubdtype(dtype, jnp.floating):
            dtype = jnp.float32
    return jnp.broadcast_arrays(tp.astype(dtype), tn.astype(dtype))


def _sin(theta):
    """|sin θ|: the length of a tangential unit direction (never −0 at θ = π in float32)."""
    return jnp.abs(jnp.sin(theta))


def _check_k(negatives) -> float:
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
    k, tau = _check_k(negatives), _check_pos("tau", tau)
    tp, tn = _angles(theta_pos, theta_neg)
    return _gd_softmax(tp, tn, k, tau) * _sin(tp) / tau


def infonce_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["infonce"]["tau"]) -> Array:
    """‖∇_cl^{neg_j}‖ (Nie et al. 2023 Eq. 16): e^{c_n/τ} sin θ_ij' / (τ (e^{c_p/τ} + K e^{c_n/τ}))."""
    k, tau = _check_k(negatives), _check_pos("tau", tau)
    tp, tn = _angles(theta_pos, theta_neg)
    return _gd_softmax(tp, tn, k, tau) / k * _sin(tn) / tau


# --- alignment / uniformity (Wang & Isola) ----------------------------------------------
def align_pos(theta_pos: ArrayLike, theta_neg: ArrayLike | None = None, *, alpha: float = DEFAULTS["align"]["alpha"], **_) -> Array:
    """‖∇L_align‖ (Nie et al. 2023 Eq. 8): α (2 sin(θ_ii'/2))^{α−2} sin θ_ii'; independent of θ_ij'.

    ``theta_neg`` only fixes the output shape (broadcast). For α < 2 the norm diverges
    as θ_ii' → 0 (it is returned as ``inf`` there); for α = 2 it is 2 sin θ_ii'.
    """
    alpha = _check_pos("alpha", alpha)
    tp, _tn = _angles(theta_pos, 0.0 if theta_neg is None else theta_neg)
    # (2 sin(θ/2))^{α−2} sin θ = 2^{α−1} sin(θ/2)^{α−1} cos(θ/2): finite at θ = 0 for α >= 1.
    half = jnp.abs(jnp.sin(tp / 2))
    return alpha * 2.0 ** (alpha - 1) * half ** (alpha - 1) * jnp.abs(jnp.cos(tp / 2))


def uniform_neg(theta_pos: ArrayLike | None, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                t: float = DEFAULTS["uniform"]["t"]) -> Array:
    """‖∇L_uniform^j‖ (Nie et al. 2023 Eq. 17): 2t sin θ_ij' / (N K), with all N(N−1) pairs at θ_ij'.

    Eq. 29's normalizer Σ_i Σ_{j≠i} exp(−t‖ĥ_i − ĥ_j'‖²) runs over the N = K + 1 anchors of
    the batch; with every anchor–negative pair at the same angle the exponentials cancel.
    """
    k, t = _check_k(negatives), _check_pos("t", t)
    tp, tn = _angles(0.0 if theta_pos is None else theta_pos, theta_neg)
    del tp
    return 2 * t * _sin(tn) / ((k + 1) * k)


# --- DCL / DCL+ -------------------------------------------------------------------------
def _dcl_positive(tp, tn, k, tau):
    """1[L_dcl > 0] with L_dcl = (c_n − c_p)/τ + log K."""
    return ((jnp.cos(tn) - jnp.cos(tp)) / tau + math.log(k) > 0).astype(tp.dtype)


def dcl_pos(theta_pos: ArrayLike, theta_neg: ArrayLike | None = None, *, tau: float = DEFAULTS["dcl"]["tau"], **_) -> Array:
    """‖∇_dcl^pos‖ (Nie et al. 2023 Eq. 9): sin θ_ii' / τ; independent of θ_ij' and K."""
    tau = _check_pos("tau", tau)
    tp, _tn = _angles(theta_pos, 0.0 if theta_neg is None else theta_neg)
    return _sin(tp) / tau


def dcl_neg(theta_pos: ArrayLike | None, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
            tau: float = DEFAULTS["dcl"]["tau"]) -> Array:
    """‖∇_dcl^{neg_j}‖ (Nie et al. 2023 Eq. 18): sin θ_ij' / (τ K) (the softmax over K equal negatives)."""
    k, tau = _check_k(negatives), _check_pos("tau", tau)
    tp, tn = _angles(0.0 if theta_pos is None else theta_pos, theta_neg)
    del tp
    return _sin(tn) / (tau * k)


def dclplus_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["dcl+"]["tau"]) -> Array:
    """‖∇_dcl+^pos‖ (Nie et al. 2023 Eq. 11): sin θ_ii' / τ where L_dcl > 0, else 0."""
    k, tau = _check_k(negatives), _check_pos("tau", tau)
    tp, tn = _angles(theta_pos, theta_neg)
    return _dcl_positive(tp, tn, k, tau) * _sin(tp) / tau


def dclplus_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, negatives: int = DEFAULT_NEGATIVES,
                tau: float = DEFAULTS["dcl+"]["tau"]) -> Array:
    """‖∇_dcl+^{neg_j}‖ (Nie et al. 2023 Eq. 19): sin θ_ij' / (τ K) where L_dcl > 0, else 0."""
    k, tau = _check_k(negatives), _check_pos("tau", tau)
    tp, tn = _angles(theta_pos, theta_neg)
    return _dcl_positive(tp, tn, k, tau) * _sin(tn) / (tau * k)


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
    tp, tn = _angles(theta_pos, theta_neg)
    return _gate_mpt(tp, tn, m) * _sin(tp)


def mpt_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mpt"]["m"], **_) -> Array:
    """‖∇_mpt^neg‖ (Nie et al. 2023 Eq. 20, gate fixed): sin θ_ij' · 1[c_p − c_n < m] (hardest negative)."""
    m = _check_nonneg("m", m)
    tp, tn = _angles(theta_pos, theta_neg)
    return _gate_mpt(tp, tn, m) * _sin(tn)


def met_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["met"]["m"], **_) -> Array:
    """‖∇_met^pos‖ (Nie et al. 2023 Eq. 39): cos(θ_ii'/2) · 1[d_n − d_p < m], d = 2 sin(θ/2)."""
    m = _check_nonneg("m", m)
    tp, tn = _angles(theta_pos, theta_neg)
    return _gate_met(tp, tn, m) * jnp.abs(jnp.cos(tp / 2))


def met_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["met"]["m"], **_) -> Array:
    """‖∇_met^neg‖ (Nie et al. 2023 Eq. 21): cos(θ_ij'/2) · 1[d_n − d_p < m] (hardest negative)."""
    m = _check_nonneg("m", m)
    tp, tn = _angles(theta_pos, theta_neg)
    return _gate_met(tp, tn, m) * jnp.abs(jnp.cos(tn / 2))


def mat_pos(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mat"]["m"], **_) -> Array:
    """‖∇_mat^pos‖ (Nie et al. 2023 Eq. 39): 1[θ_ij' − θ_ii' < m] (the angle's gradient has unit norm)."""
    m = _check_nonneg("m", m)
    tp, tn = _angles(theta_pos, theta_neg)
    return _gate_mat(tp, tn, m)


def mat_neg(theta_pos: ArrayLike, theta_neg: ArrayLike, *, m: float = DEFAULTS["mat"]["m"], **_) -> Array:
    """‖∇_mat^neg‖ (Nie et al. 2023 Eq. 22): 1[θ_ij' − θ_ii' < m] (hardest negative)."""
    return mat_pos(theta_pos, theta_neg, m=m)


# --- dispatch ------------------------------------------------------------------------------
_FUNCS: Mapping[tuple[str, str], Callable[..., Array]] = MappingProxyType({
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


def _canonical(loss: str, part: str) -> str:
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
    name = _canonical(loss, part)
    own = DEFAULTS[name]
    unknown = set(params) - set(own)
    if unknown:
        raise ValueError(f"{name}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {', '.join(own)}")
    merged = {**own, **params}
    fn = _FUNCS[(name, part)]
    if (name, part) in DEPENDS_ON_K:
        merged["negatives"] = negatives
    else:
        _check_k(negatives)
    return fn(theta_pos, theta_neg, **merged)


_NORM_BLOCK = 2**21  # cosines per autodiff block (grid points × K), bounding the working set


def loss_norm(loss, theta_pos: ArrayLike, theta_neg: ArrayLike, *, part: str = "pos",
              negatives: int = DEFAULT_NEGATIVES) -> Array:
    """Nie et al. 2023's alignment or uniformity norm of any cosine-kind ``Loss``, by autodiff.

    ‖∇^pos‖ = |∂L/∂c_p| sin θ_ii' and ‖∇^{neg_j}‖ = |∂L/∂c_j| sin θ_ij' for one of the K
    negatives, all at θ_ij' (the module doc). The loss's own parameters are used. Partials
    that are not finite (an arccos derivative at θ = 0 or π) count as 0.

    Args:
      loss: a ``gradlab.Loss`` of kind ``"cosine"`` (``loss_from_cosines``, ``compose``, or
        a registered cosine loss).
      theta_pos, theta_neg: θ_ii' and θ_ij' (radians), broadcasting.
      part: ``"pos"`` or ``"neg"``.
      negatives: K.

    Returns:
      The norm, shape of the broadcast of the angles.

    Examples:
      >>> import jax.numpy as jnp
      >>> from gradlab.losses import get_loss
      >>> float(loss_norm(get_loss("dcl", tau=0.5), jnp.pi / 2, 1.0, part="pos"))  # = sin θ_ii' / τ
      2.0
    """
    import jax
    import numpy as np

    from gradlab.losses import Loss, cosine_partials

    if not isinstance(loss, Loss) or loss.spec.kind != "cosine":
        raise ValueError(f"loss_norm needs a gradlab Loss of kind 'cosine' (a function of cosines); got {loss!r}")
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}; got {part!r}")
    k = int(_check_k(negatives))
    tp, tn = _angles(theta_pos, theta_neg)
    shape, flat_p, flat_n = tp.shape, tp.ravel(), tn.ravel()
    rows = max(1, _NORM_BLOCK // k)
    from gradlab._memory import check_fits

    check_fits(f"the autodiff norm of {loss.name} with K = {k}", flat_p.size * flat_p.dtype.itemsize,
               4 * min(rows, flat_p.size) * k * flat_p.dtype.itemsize)
    value, params = loss.spec.value, dict(loss.params)

    @jax.jit
    def block(tp_b, tn_b):
        c_neg = jnp.broadcast_to(jnp.cos(tn_b)[:, None], (tn_b.shape[0], k))
        d_pos, d_neg = cosine_partials(value, jnp.cos(tp_b), c_neg, jnp.ones(c_neg.shape, bool), **params)
        if part == "pos":
            return jnp.abs(d_pos) * _sin(tp_b)
        return jnp.abs(d_neg[:, 0]) * _sin(tn_b)

    n = flat_p.size
    rows = min(rows, n)
    pad = (-n) % rows
    flat_p, flat_n = jnp.pad(flat_p, (0, pad), constant_values=1.0), jnp.pad(flat_n, (0, pad), constant_values=1.0)
    out = [np.asarray(block(flat_p[i:i + rows], flat_n[i:i + rows])) for i in range(0, n + pad, rows)]
    return jnp.asarray(np.concatenate(out)[:n].reshape(shape))


def _closed_form(loss) -> str | None:
    """The norm-map name of a registered loss that has a closed form; None for any other ``Loss``."""
    name = {reg: n for n, reg in REGISTRY_NAMES.items()}.get(loss.name)
    if name is None:
        return None
    return name if loss.spec is get_spec(loss.name) else None  # not a user loss of the same name


def norm_grid(grid: int = 200, *, lo: float = 0.0, hi: float = math.pi, dtype=jnp.float32):
    """The angle axes of the maps: ``grid`` points in [lo, hi] for θ_ii' and θ_ij' alike.

    Returns:
      ``(theta_pos (G,), theta_neg (G,))`` — use ``theta_pos[:, None]`` and
      ``theta_neg[None, :]`` to get a (G, G) map with θ_ii' on axis 0.
    """
    if int(grid) < 2:
        raise ValueError(f"grid must have at least 2 points; got {grid!r}")
    if not hi > lo:
        raise ValueError(f"the angle range must be non-empty; got [{lo}, {hi}]")
    from gradlab._memory import check_map

    check_map("a gradient-norm map", int(grid), int(grid), jnp.dtype(dtype).itemsize)
    axis = jnp.linspace(lo, hi, int(grid), dtype=dtype)
    return axis, axis


def norm_result(loss, *, part: str = "pos", negatives: int = DEFAULT_NEGATIVES, grid: int = 200,
                theta_range: tuple[float, float] = (0.0, math.pi), dtype=jnp.float32, **params: float):
    """A gradient-norm map as a ``gradlab.io.Result`` with dims (theta_pos, theta_neg).

    Args:
      loss, part, negatives, **params: as in ``norm_map``; ``loss`` may also be a
        cosine-kind ``gradlab.Loss`` (its parameters, updated by ``params``): a registered
        one gets its closed form, any other its autodiff norms (``loss_norm``).
      grid: points per axis; theta_range: the common range of θ_ii' and θ_ij'.
      dtype: float dtype of the computation.

    Returns:
      ``Result`` with ``mean`` (grid, grid) (rows index θ_ii'), ``stderr`` None (exact
      values) and ``meta`` (statistic ``norm_map``, loss, part, negatives, params).

    Examples:
      >>> r = norm_result("dcl", grid=5)
      >>> r.dims, r.mean.shape
      (('theta_pos', 'theta_neg'), (5, 5))
    """
    import numpy as np

    from gradlab.io import Result, runtime_meta
    from gradlab.losses import Loss

    theta_pos, theta_neg = norm_grid(grid, lo=float(theta_range[0]), hi=float(theta_range[1]), dtype=dtype)
    if isinstance(loss, Loss) and _closed_form(loss) is None:  # a user or composed loss: autodiff
        loss = loss.replace(**params) if params else loss
        values = loss_norm(loss, theta_pos[:, None], theta_neg[None, :], part=part, negatives=negatives)
        name, used, method = loss.name, {k: float(v) for k, v in loss.params.items()}, "autodiff"
    else:
        if isinstance(loss, Loss):  # a registered loss: its closed form, with its parameters
            params, loss = {**loss.params, **params}, _closed_form(loss)
        name = _canonical(loss, part)
        values = norm_map(name, theta_pos[:, None], theta_neg[None, :], part=part, negatives=negatives, **params)
        used, method = {**DEFAULTS[name], **{k: float(v) for k, v in params.items()}}, "closed form"
    meta = {"statistic": "norm_map", "loss": name, "part": part, "negatives": int(negatives), "params": used,
            "method": method, "reference": "Nie et al. 2023 Eqs. 7-9, 11, 16-22", **runtime_meta()}
    return Result(dims=("theta_pos", "theta_neg"),
                  coords={"theta_pos": np.asarray(theta_pos, np.float64), "theta_neg": np.asarray(theta_neg, np.float64)},
                  mean=np.asarray(values), meta=meta)


def norm_panels(losses=NORM_LOSSES, *, parts=PARTS, negatives=None, grid: int = 200, **params: float) -> list:
    """The panels of Nie et al. 2023 Figs. 2 and 4: one ``norm_result`` per (part, loss, K).

    Args:
      losses: norm-map names (``NORM_LOSSES``; aliases accepted) or ``gradlab.Loss``
        objects (a cosine-kind user or composed loss gets its autodiff norms, one panel
        per K of ``negatives``, default ``DEFAULT_NEGATIVES``); a loss without the
        requested part (alignment has no negative part, uniformity no positive part) is
        skipped for that part, and the a&u pair gives one panel per part.
      parts: any of ``"pos"``, ``"neg"``.
      negatives: K values. InfoNCE gets one panel per K (default
        ``gradlab.defaults.NORM_INFONCE_NEGATIVES``, as in Fig. 2); the others use the
        first (default ``DEFAULT_NEGATIVES``).
      grid: points per θ axis over [0, π].
      **params: loss parameters; each goes to the losses that have it.

    Returns:
      list of ``Result`` (dims (theta_pos, theta_neg)), ordered by part, then loss, then K.

    Raises:
      ValueError: an unknown loss or part, or a parameter no requested map has.

    Examples:
      >>> [r.meta["negatives"] for r in norm_panels(["infonce"], parts=["pos"], negatives=[4, 8], grid=3)]
      [4, 8]
    """
    from gradlab.losses import Loss

    user = [loss for loss in losses if isinstance(loss, Loss) and _closed_form(loss) is None]
    named = [loss if not isinstance(loss, Loss) else _closed_form(loss) for loss in losses if loss not in user]
    names = [_canonical(n, p) for p in parts for n in named]
    allowed = {k for n in names for k in DEFAULTS[n]} | {k for loss in user for k in loss.params}
    unknown = set(params) - allowed
    if unknown:
        raise ValueError(f"unknown parameter {sorted(unknown)[0]!r} for {', '.join(map(str, losses))}")
    ks = None if negatives is None else [int(_check_k(k)) for k in negatives]
    panels = []
    for part in parts:
        done = set()
        for loss in losses:
            if loss in user:  # any loss of cosines: autodiff norms, one panel per K
                own = {k: v for k, v in params.items() if k in loss.params}
                panels.extend(norm_result(loss, part=part, negatives=k, grid=grid, **own)
                              for k in (ks or [DEFAULT_NEGATIVES]))
                continue
            name = _canonical(_closed_form(loss) if isinstance(loss, Loss) else loss, part)
            if (name, part) not in _FUNCS or name in done:
                continue
            done.add(name)
            own = {k: v for k, v in {**(loss.params if isinstance(loss, Loss) else {}), **params}.items()
                   if k in DEFAULTS[name]}
            if name == "infonce":
                k_list = ks or list(defaults.NORM_INFONCE_NEGATIVES)
            else:
                k_list = [ks[0] if ks else DEFAULT_NEGATIVES]
            panels.extend(norm_result(name, part=part, negatives=k, grid=grid, **own) for k in k_list)
    return panels



def stack_panels(panels):
    """``norm_panels`` / ``norm_result`` Results of one grid as one Result (the ``.npz`` of
    ``gradlab norms`` and ``gradlab figures``): a first axis ``panel`` labelled
    ``LOSS:PART:K=NEGATIVES``, then (theta_pos, theta_neg); ``meta["panels"]`` keeps each meta.

    Examples:
      >>> s = stack_panels(norm_panels(["infonce"], parts=["pos"], negatives=[4, 8], grid=3))
      >>> s.coords["panel"].tolist(), s.mean.shape
      (['infonce:pos:K=4', 'infonce:pos:K=8'], (2, 3, 3))
    """
    from gradlab.io import Result

    labels = [f"{r.meta['loss']}:{r.meta['part']}:K={r.meta['negatives']}" for r in panels]
    return Result.stack(panels, "panel", labels)

def norm_on_mu_grid(loss, protocol, *, part: str = "pos"):
    """A norm map evaluated at the mean angles of a simulation grid: θ_ii' = μ_pos, θ_ij' = μ_neg.

    The closed form of Nie et al. 2023 with K = N − 1 negatives, all at θ_ij', so that it
    sits beside a simulated map of the same ``protocol`` (same axes, same batch).

    Args:
      loss: a registry name or ``gradlab.Loss`` among ``REGISTRY_NAMES.values()`` (its
        parameters are used; the closed form), a norm-map name, or any other cosine-kind
        ``Loss`` (user or composed: ``loss_norm``, by autodiff).
      protocol: a ``gradlab.simulate.Protocol`` (its μ axes and ``n_neg``).
      part: ``"pos"`` (alignment part) or ``"neg"`` (one negative's uniformity part).

    Returns:
      ``Result`` with dims (mu_pos, mu_neg), ``mean`` (G_pos, G_neg), ``stderr`` None.

    Raises:
      ValueError: a loss without a norm map, or without that part.

    Examples:
      >>> from gradlab.simulate import Protocol
      >>> norm_on_mu_grid("dcl", Protocol(grid=4, batch_size=9)).mean.shape
      (4, 4)
    """
    import numpy as np

    from gradlab._memory import check_map
    from gradlab.io import Result, runtime_meta
    from gradlab.losses import Loss

    check_map("a gradient-norm map", *protocol.grid_shape, 8)
    mu_pos, mu_neg = protocol.mu_pos[:, None], protocol.mu_neg[None, :]
    if isinstance(loss, Loss) and _closed_form(loss) is None:  # a user or composed loss: autodiff
        values = loss_norm(loss, mu_pos, mu_neg, part=part, negatives=protocol.n_neg)
        reg_name, used, method = loss.name, dict(loss.params), "autodiff"
    else:
        reg_name = loss if isinstance(loss, str) else getattr(loss, "name", None)
        given = {} if isinstance(loss, str) else dict(loss.params)
        to_norm = {reg: name for name, reg in REGISTRY_NAMES.items()}
        name = to_norm.get(reg_name, reg_name)
        if name not in DEFAULTS or (name, part) not in _FUNCS:
            have = ", ".join(f"{reg} ({'/'.join(p for p in PARTS if (n, p) in _FUNCS)})" for n, reg in REGISTRY_NAMES.items())
            raise ValueError(f"no {part!r} gradient-norm map for loss {reg_name!r}; maps exist for {have}")
        params = {k: float(v) for k, v in given.items() if k in DEFAULTS[name]}
        values = norm_map(name, mu_pos, mu_neg, part=part, negatives=protocol.n_neg, **params)
        used, method = {**DEFAULTS[name], **params}, "closed form"
    meta = {"statistic": "norm_map", "loss": reg_name, "params": used, "part": part,
            "negatives": protocol.n_neg, "protocol": protocol.to_dict(), "method": method,
            "reference": "Nie et al. 2023 Eqs. 7-9, 11, 16-22", **runtime_meta()}
    return Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": protocol.mu_pos, "mu_neg": protocol.mu_neg},
                  mean=np.asarray(values), meta=meta)
