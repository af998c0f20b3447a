"""The Eq. 5 family of Li et al. 2024 as building blocks: any GD × W × R, under stop-gradient.

A composition is the per-anchor loss

    L_i = sg(GD) · Σ_j sg(W_j) · (c_j − sg(R_j) · c_p),

whose gradient in cosine space is ∂L/∂c_j = GD·W_j and ∂L/∂c_p = −GD·Σ_j W_j R_j:
exactly the paradigm, by construction. Each block is a function of the anchor's
cosines (``c_pos`` (...,), ``c_neg`` (..., M), ``valid`` (..., M)) and of its own
parameters, and each reuses the zoo's numerics from ``_ops`` (one home per formula):

* GD: ``"fraction"`` (InfoNCE's, τ), ``"indicator"`` (MPT's gate, m), ``"sigmoid"``
  (a smooth gate σ((m − c_p + max_k c_k)/width)), ``"none"`` (1);
* W: ``"softmax"`` (of c_j/τ, summing to one), ``"hardest"`` (one-hot), ``"uniform"`` (1/M);
* R: ``"static"`` (r), ``"arccon"`` (sin(θ_p + u)/sin θ_p), ``"met"`` (the chord ratio),
  ``"mat"`` (sin θ_j / sin θ_p).

The registered ``baseline`` (Li et al. 2024 Eq. 5) is the composition
(indicator, softmax, static).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from gradlab.losses._ops import (
    TRIPLET_METRICS,
    angular_factor,
    chord_ratio,
    fraction_gd,
    hardest,
    hardest_cos,
    masked_softmax,
    sine_ratio,
    triplet_gate,
)

__all__ = ["Block", "GD_BLOCKS", "WEIGHT_BLOCKS", "RATIO_BLOCKS", "PARAMS", "indicator_gate", "composition"]

sg = jax.lax.stop_gradient


def indicator_gate(c_hardest, c_pos, m):
    """MPT's gate (Li et al. 2024 Sec. 4): c_p − max_k c_k < m, i.e. ``triplet_gate`` in d = −cos."""
    d = TRIPLET_METRICS["mpt"].of_cos
    return triplet_gate(d(c_hardest), d(c_pos), m)


@dataclasses.dataclass(frozen=True)
class Block:
    """One factor: ``fn(c_pos, c_neg, valid, **params)``, its parameter names, how it reads the negatives.

    ``reads`` is ``"lse"`` (only through logsumexp(c/τ)), ``"max"`` (only through the
    hardest negative), ``"none"`` or ``"all"``: it decides the factored simulation path.
    """

    fn: Callable
    params: tuple[str, ...]
    reads: str
    formula: str


def _ones(c_pos, c_neg, valid):
    return jnp.ones_like(c_pos)


GD_BLOCKS = {
    "fraction": Block(lambda c_pos, c_neg, valid, *, tau: fraction_gd(c_pos, c_neg, valid, tau),
                      ("tau",), "lse", "1 / (1 + e^{c_p/τ} / S)"),
    "indicator": Block(lambda c_pos, c_neg, valid, *, m:
                       indicator_gate(hardest_cos(c_neg, valid), c_pos, m).astype(c_neg.dtype),
                       ("m",), "max", "1[c_p − max_k c_k < m]"),
    "sigmoid": Block(lambda c_pos, c_neg, valid, *, m, width:
                     jax.nn.sigmoid((m - c_pos + hardest_cos(c_neg, valid)) / width),
                     ("m", "width"), "max", "σ((m − c_p + max_k c_k) / width)"),
    "none": Block(_ones, (), "none", "1"),
}
WEIGHT_BLOCKS = {
    "softmax": Block(lambda c_pos, c_neg, valid, *, tau: masked_softmax(c_neg / tau, valid),
                     ("tau",), "lse", "softmax_j(c_j/τ)"),
    "hardest": Block(lambda c_pos, c_neg, valid: hardest(c_neg, valid), (), "max", "1 for the hardest negative"),
    "uniform": Block(lambda c_pos, c_neg, valid: jnp.where(valid, 1.0, 0.0).astype(c_neg.dtype)
                     / jnp.sum(valid, axis=-1, keepdims=True), (), "all", "1 / M"),
}
RATIO_BLOCKS = {
    "static": Block(lambda c_pos, c_neg, valid, *, r: jnp.broadcast_to(r, c_pos.shape).astype(c_neg.dtype)[..., None],
                    ("r",), "none", "r"),
    "arccon": Block(lambda c_pos, c_neg, valid, *, u: angular_factor(c_pos, u)[..., None],
                    ("u",), "none", "sin(θ_p + u) / sin θ_p"),
    "met": Block(lambda c_pos, c_neg, valid: chord_ratio(c_pos, c_neg), (), "max", "√((1 − c_j)/(1 − c_p))"),
    "mat": Block(lambda c_pos, c_neg, valid: sine_ratio(c_pos, c_neg), (), "max", "sin θ_j / sin θ_p"),
}

#: Default and validation rule of every block parameter (the baseline's m, τ, r;
#: ArcCon's u; width *ours*).
PARAMS = {
    "tau": (0.05, "positive"),
    "m": (0.30, "nonnegative"),
    "width": (0.05, "positive"),
    "r": (1.0, "nonnegative"),
    "u": (math.pi / 18, "real"),
}

_KINDS = {"gd": GD_BLOCKS, "weight": WEIGHT_BLOCKS, "ratio": RATIO_BLOCKS}


def _block(kind: str, name) -> Block:
    blocks = _KINDS[kind]
    if not isinstance(name, str) or name not in blocks:
        raise ValueError(f"unknown {kind} block {name!r}; choose from {', '.join(blocks)}")
    return blocks[name]


@dataclasses.dataclass(frozen=True)
class Composition:
    """A GD × W × R composition: its cosine ``value`` and closed-form ``kernel``, params, factored path."""

    gd: str
    weight: str
    ratio: str
    params: tuple[str, ...]
    value: Callable
    kernel: Callable
    factored: str | None


def _factored(gd: Block, w: Block, r: Block) -> str | None:
    """"lse" / "max" when every block reads the negatives through that one reduction (or not at all)."""
    reads = {b.reads for b in (gd, w, r)} - {"none"}
    if w.reads in ("lse", "max") and reads == {w.reads}:
        return w.reads
    return None


@functools.cache
def composition(gd: str, weight: str, ratio: str) -> Composition:
    """The (value, kernel) pair of one composition (cached: one spec, one compilation each).

    Examples:
      >>> c = composition("indicator", "softmax", "static")
      >>> c.params, c.factored
      (('m', 'tau', 'r'), None)
    """
    blocks = (_block("gd", gd), _block("weight", weight), _block("ratio", ratio))
    names = tuple(dict.fromkeys(p for b in blocks for p in b.params))

    def kernel(c_pos, c_neg, valid, **p):
        g, w, r = (b.fn(c_pos, c_neg, valid, **{k: p[k] for k in b.params}) for b in blocks)
        return g, w, r

    def value(c_pos, c_neg, valid, **p):
        g, w, r = jax.tree_util.tree_map(sg, kernel(c_pos, c_neg, valid, **p))
        return g * jnp.sum(jnp.where(valid, w * (c_neg - r * c_pos[..., None]), 0.0), axis=-1)

    kernel.__doc__ = f"GD = {blocks[0].formula}, W = {blocks[1].formula}, R = {blocks[2].formula}."
    value.__doc__ = "L_i = sg(GD) Σ_j sg(W_j) (c_j − sg(R_j) c_p) (Li et al. 2024 Eq. 5)."
    return Composition(gd, weight, ratio, names, value, kernel, _factored(*blocks))
