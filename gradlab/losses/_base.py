"""The loss registry: ``LossSpec`` (what a loss is), ``Loss`` (a configured instance).

Two kinds of spec:

* **Cosine family** (per-anchor losses that see the anchor only through the cosines
  c_p = h_i·h_i' and c_j = h_i·n_j): the spec gives ``value(c_pos, c_neg, valid)``
  and ``kernel(c_pos, c_neg, valid) -> (gd, weight, ratio)`` once, and the embedding
  form, the angle form and the per-anchor values all derive from them. ``valid``
  marks which negatives exist (the diagonal is invalid in embedding form).
* **Embedding family** (batch-level objectives, same-view negatives, whole-batch
  normalizers): the spec gives ``per_anchor(h, hp)`` or ``batch(h, hp)`` and
  ``components(h, hp)`` on unit rows directly.

Gradient conventions (what ``Components`` describes, what ``anchor_gradient`` returns):
per-anchor losses: ∂L_i/∂h_i, all other embeddings held fixed; batch-level
objectives: ∂L/∂h_i of the batch objective. ``loss(h, h_prime)`` is the mean of L_i
(one direction), or the batch objective.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from gradlab._validation import check_angles, check_pair, check_param
from gradlab.geometry import cosine_matrix, normalize, tangent_project
from gradlab.paradigm import Components, anchor_gradient, reconstruct

__all__ = ["LossSpec", "Loss", "register", "get_loss", "list_losses", "loss_table", "FAMILIES"]

FAMILIES = ("effective", "ineffective", "modified", "margin")

_REGISTRY: dict[str, LossSpec] = {}


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """Everything gradlab knows about one loss.

    Attributes:
      name: registry key (lower case), e.g. ``"infonce"``.
      title: display name, e.g. ``"InfoNCE"``.
      family: one of ``FAMILIES``.
      defaults: parameter name -> default value (from the papers).
      rules: parameter name -> ``"positive" | "nonnegative" | "unit" | "real"``.
      negatives: ``"h_prime"`` or ``"h"`` — which negatives the paradigm form uses.
      value, kernel: cosine-family functions (see module doc).
      per_anchor, batch, components: embedding-family functions on unit rows.
      objective: optional training objective ``(h, hp, **p) -> ()`` on unit rows when
        it differs from mean(per_anchor) in its gradient (gated modified losses).
      exact: False where the published decomposition is approximate (VICReg, Li et al. 2024).
      gd, weight, ratio: the components in words (for tables and ``gradlab losses``).
      reference: where the formula comes from.
    """

    name: str
    title: str
    family: str
    defaults: Mapping[str, float]
    rules: Mapping[str, str]
    negatives: str = "h_prime"
    value: Callable | None = None
    kernel: Callable | None = None
    per_anchor: Callable | None = None
    batch: Callable | None = None
    components: Callable | None = None
    objective: Callable | None = None
    exact: bool = True
    gd: str = ""
    weight: str = ""
    ratio: str = ""
    reference: str = ""

    @property
    def cosine_family(self) -> bool:
        return self.kernel is not None

    @property
    def batch_level(self) -> bool:
        return self.batch is not None

    @property
    def has_angle_form(self) -> bool:
        return self.kernel is not None


def register(spec: LossSpec) -> LossSpec:
    """Add a spec to the registry (name must be new)."""
    if spec.family not in FAMILIES:
        raise ValueError(f"unknown family {spec.family!r}; choose from {FAMILIES}")
    if spec.name in _REGISTRY:
        raise ValueError(f"a loss named {spec.name!r} is already registered")
    if set(spec.defaults) != set(spec.rules):
        raise ValueError(f"{spec.name}: defaults and rules must name the same parameters")
    _REGISTRY[spec.name] = spec
    return spec


def _ensure_loaded():
    # Importing the family modules registers their specs (lazily, on first use).
    from gradlab.losses import _effective, _ineffective, _margins, _modified  # noqa: F401


def list_losses(family: str | None = None) -> list[str]:
    """Names of all registered losses (optionally of one family), in registry order."""
    _ensure_loaded()
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
    return [n for n, s in _REGISTRY.items() if family is None or s.family == family]


def get_spec(name: str) -> LossSpec:
    _ensure_loaded()
    key = str(name).lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown loss {name!r}; valid choices: {', '.join(_REGISTRY)}")
    return _REGISTRY[key]


def get_loss(name: str, *, symmetric: bool = False, **params: Any) -> Loss:
    """A configured loss by name. Unknown names or bad parameters raise ``ValueError``.

    Example:
      >>> import gradlab
      >>> loss = gradlab.get_loss("arccon", tau=0.05, u=0.1745)
      >>> sorted(loss.params)
      ['tau', 'u']
    """
    spec = get_spec(name)
    unknown = set(params) - set(spec.defaults)
    if unknown:
        valid = ", ".join(spec.defaults) or "(none)"
        raise ValueError(f"{spec.name}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {valid}")
    merged = {k: check_param(spec.name, k, params.get(k, v), spec.rules[k]) for k, v in spec.defaults.items()}
    return Loss(spec, MappingProxyType(merged), bool(symmetric))


def loss_table() -> list[dict[str, str]]:
    """One row per loss: name, family, parameters with defaults, GD / W / R in words."""
    _ensure_loaded()
    return [
        dict(
            name=s.name,
            title=s.title,
            family=s.family,
            params=", ".join(f"{k}={v:g}" for k, v in s.defaults.items()),
            negatives=s.negatives,
            gd=s.gd,
            weight=s.weight,
            ratio=s.ratio,
            exact="yes" if s.exact else "approximate (residual reported)",
            reference=s.reference,
        )
        for s in _REGISTRY.values()
    ]


def _embedding_cosines(h: Array, h_prime: Array, negatives: str):
    """c_pos (N,), c_neg (N, N) and the valid mask (off-diagonal) for embedding form."""
    neg = h_prime if negatives == "h_prime" else h
    c_pos = jnp.sum(h * h_prime, axis=-1)
    c_neg = cosine_matrix(h, neg)
    valid = ~jnp.eye(h.shape[0], dtype=bool)
    return c_pos, c_neg, valid


@dataclasses.dataclass(frozen=True)
class Loss:
    """A registered loss with its parameters fixed. Pure: every method is a function of its inputs.

    ``loss(h, h_prime)`` — the scalar objective (mean of L_i over anchors, or the batch
    objective); ``symmetric=True`` averages both directions.
    """

    spec: LossSpec
    params: Mapping[str, float]
    symmetric: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}=<traced>" for k, v in self.params.items())
        sym = ", symmetric=True" if self.symmetric else ""
        return f"Loss({self.spec.name!r}{', ' if ps else ''}{ps}{sym})"

    def _key(self):
        return (self.spec.name, tuple(self.params.items()), self.symmetric)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, Loss) and self._key() == other._key()

    # --- values -----------------------------------------------------------------
    def _objective(self, h: Array, h_prime: Array) -> Array:
        s, p = self.spec, self.params
        if s.objective is not None:
            return s.objective(h, h_prime, **p)
        if s.batch is not None:
            return s.batch(h, h_prime, **p)
        return jnp.mean(self._per_anchor(h, h_prime))

    def _per_anchor(self, h: Array, h_prime: Array) -> Array:
        s, p = self.spec, self.params
        if s.value is not None:
            c_pos, c_neg, valid = _embedding_cosines(h, h_prime, s.negatives)
            return s.value(c_pos, c_neg, valid, **p)
        if s.per_anchor is not None:
            return s.per_anchor(h, h_prime, **p)
        raise TypeError(
            f"{s.name} is a batch-level objective: it has no per-anchor split. "
            "Use loss(h, h_prime) and loss.components(...), which describe ∂L/∂h_i of the batch loss."
        )

    def __call__(self, h, h_prime) -> Array:
        h, h_prime = check_pair(h, h_prime)
        return _jitted(self.spec.name, "objective", self.symmetric)(dict(self.params), h, h_prime)

    def per_anchor(self, h, h_prime) -> Array:
        """The (N,) one-directional per-anchor losses L_i (anchor h_i, positive h_i')."""
        h, h_prime = check_pair(h, h_prime)
        if self.spec.batch is not None:
            self._per_anchor(h, h_prime)  # raises the explanatory TypeError
        return _jitted(self.spec.name, "per_anchor", False)(dict(self.params), h, h_prime)

    # --- the paradigm --------------------------------------------------------------
    def components(self, h, h_prime) -> Components:
        """Exact GD / W / R in embedding form: gd (N,), weight (N, N) zero diagonal, ratio."""
        h, h_prime = check_pair(h, h_prime)
        return _jitted(self.spec.name, "components", False)(dict(self.params), h, h_prime)

    def _components(self, h: Array, h_prime: Array) -> Components:
        s, p = self.spec, self.params
        if s.kernel is not None:
            c_pos, c_neg, valid = _embedding_cosines(h, h_prime, s.negatives)
            gd, weight, ratio = s.kernel(c_pos, c_neg, valid, **p)
            weight = jnp.where(valid, weight, 0.0)
            return Components(gd, weight, ratio, None, s.negatives)
        return s.components(h, h_prime, **p)

    def components_from_angles(self, theta_pos, theta_neg) -> Components:
        """GD / W / R from angles alone: theta_pos (...,), theta_neg (..., N−1).

        Angles outside [0, π] are read as the geometric angle they represent.
        jit- and vmap-friendly.
        """
        s = self.spec
        if s.kernel is None:
            raise NotImplementedError(
                f"{s.name} has no angle form: its components depend on more of the batch than "
                "the anchor's angles to its positive and negatives"
            )
        theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
        c_pos, c_neg = jnp.cos(theta_pos), jnp.cos(theta_neg)
        valid = jnp.ones(theta_neg.shape, dtype=bool)
        gd, weight, ratio = s.kernel(c_pos, c_neg, valid, **self.params)
        return Components(gd, weight, ratio, None, s.negatives)

    def anchor_gradient(self, h, h_prime) -> Array:
        """The tangential autodiff gradient that ``components`` describes, (N, D).

        Per-anchor losses: ∂L_i/∂h_i with all other embeddings fixed. Batch-level
        objectives: ∂L/∂h_i. Computed with ``jax.grad`` — the independent witness.
        """
        h, h_prime = check_pair(h, h_prime)
        return _jitted(self.spec.name, "anchor_gradient", False)(dict(self.params), h, h_prime)

    def _anchor_gradient(self, h: Array, h_prime: Array) -> Array:
        s, p = self.spec, self.params
        if s.batch is not None:
            g = jax.grad(lambda x: s.batch(x, h_prime, **p))(h)
            return tangent_project(h, g)
        return anchor_gradient(self._per_anchor, h, h_prime)

    def paradigm_gradient(self, h, h_prime) -> Array:
        """``reconstruct(self.components(h, h_prime), ...)``: the paradigm's gradient, (N, D)."""
        h, h_prime = check_pair(h, h_prime)
        return _jitted(self.spec.name, "paradigm_gradient", False)(dict(self.params), h, h_prime)


@functools.cache
def _jitted(name: str, method: str, symmetric: bool):
    """One jitted function per (loss, method): parameters are traced, so new values never recompile."""
    spec = get_spec(name)

    def run(params, h, h_prime):
        loss = Loss(spec, params, symmetric)
        h, h_prime = normalize(h), normalize(h_prime)
        if method == "objective":
            out = loss._objective(h, h_prime)
            return 0.5 * (out + loss._objective(h_prime, h)) if symmetric else out
        if method == "per_anchor":
            return loss._per_anchor(h, h_prime)
        if method == "components":
            return loss._components(h, h_prime)
        if method == "anchor_gradient":
            return loss._anchor_gradient(h, h_prime)
        if method == "paradigm_gradient":
            return reconstruct(loss._components(h, h_prime), h, h_prime)
        raise ValueError(method)

    return jax.jit(run)
