"""``Loss``: a spec with its parameters fixed, a JAX pytree (parameters are its leaves).

Gradient conventions (what ``Components`` describes, what ``anchor_gradient`` returns):
per-anchor losses (kinds ``"cosine"``, ``"per_anchor"``): ∂L_i/∂h_i, all other
embeddings held fixed; batch-level objectives (kind ``"batch"``): ∂L/∂h_i of the batch
objective. ``loss(h, h_prime)`` is the mean of L_i (one direction), or the batch
objective; ``symmetric=True`` averages both directions.

As a pytree a ``Loss`` passes through ``jax.jit``, ``jax.vmap`` and ``jax.grad`` as an
argument: the parameters are traced leaves, the spec and ``symmetric`` are static. A
new τ therefore reuses the compiled program, and ``jax.grad`` with respect to a loss
gives a ``Loss`` whose parameters are the derivatives (e.g. d/dτ).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from gradlab._validation import check_angles, check_pair, check_param
from gradlab.geometry import cosine_matrix, normalize, tangent_project
from gradlab.losses._ops import offdiag_gather, offdiag_kernel
from gradlab.losses._registry import LossSpec, get_spec
from gradlab.paradigm import Components, anchor_gradient, reconstruct

__all__ = ["Loss", "get_loss"]


def _embedding_cosines(h: Array, h_prime: Array, negatives: str):
    """c_pos (N,), c_neg (N, N − 1) (the off-diagonal negatives j ≠ i) and an all-true mask.

    A cosine-kind spec therefore sees exactly the valid negatives in every form (embedding
    and angle), so a user function of the cosines (``gradlab.loss_from_cosines``) needs
    no mask; ``_components`` does the same through ``_ops.offdiag_kernel``.
    """
    neg = h_prime if negatives == "h_prime" else h
    c_pos = jnp.sum(h * h_prime, axis=-1)
    c_neg = offdiag_gather(cosine_matrix(h, neg))
    return c_pos, c_neg, jnp.ones(c_neg.shape, dtype=bool)


def _param_key(v):
    """A hashable stand-in for one parameter: its number(s) when concrete, its identity when traced."""
    if isinstance(v, jax.core.Tracer):
        return ("traced", id(v))
    a = np.asarray(v)
    return float(a) if a.ndim == 0 else (a.shape, tuple(a.ravel().tolist()))


def _param_text(v) -> str:
    if isinstance(v, jax.core.Tracer):
        return "<traced>"
    a = np.asarray(v)
    return f"{float(a):g}" if a.ndim == 0 else f"<array {a.shape}>"


@dataclasses.dataclass(frozen=True, eq=False)
class Loss:
    """A loss with its parameters fixed. Pure: every method is a function of its inputs.

    Attributes:
      spec: the ``LossSpec`` (static pytree data).
      params: parameter name -> value (the pytree leaves, in ``spec.defaults`` order).
      symmetric: average both directions in ``loss(h, h_prime)`` (static).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from gradlab.losses import get_loss
      >>> h = jnp.eye(3, 4); hp = jnp.roll(h, 1, axis=1) + h
      >>> loss = get_loss("infonce", tau=0.1)
      >>> value = jax.jit(lambda l, a, b: l(a, b))(loss, h, hp)  # a Loss is a jit argument
      >>> sorted(jax.grad(lambda l: l(h, hp))(loss).params)  # d/dτ as a Loss
      ['tau']
    """

    spec: LossSpec
    params: Mapping[str, Any]
    symmetric: bool = False

    @classmethod
    def from_spec(cls, spec: LossSpec, *, symmetric: bool = False, **params: Any) -> Loss:
        """Configure any spec (registered or not): defaults filled in, every value checked."""
        unknown = set(params) - set(spec.defaults)
        if unknown:
            valid = ", ".join(spec.defaults) or "(none)"
            raise ValueError(f"{spec.name}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {valid}")
        merged = {k: check_param(spec.name, k, params.get(k, v), spec.rules[k]) for k, v in spec.defaults.items()}
        return cls(spec, MappingProxyType(merged), bool(symmetric))

    def replace(self, **params: Any) -> Loss:
        """The same loss with some parameters changed (checked like ``get_loss``).

        Examples:
          >>> from gradlab.losses import get_loss
          >>> get_loss("infonce").replace(tau=0.2)
          Loss('infonce', tau=0.2)
        """
        return Loss.from_spec(self.spec, symmetric=self.symmetric, **{**self.params, **params})

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={_param_text(v)}" for k, v in self.params.items())
        sym = ", symmetric=True" if self.symmetric else ""
        return f"Loss({self.spec.name!r}{', ' if ps else ''}{ps}{sym})"

    def _key(self):
        return (self.spec, tuple((k, _param_key(v)) for k, v in self.params.items()), self.symmetric)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, Loss) and self._key() == other._key()

    # --- values -----------------------------------------------------------------
    def _objective(self, h: Array, h_prime: Array) -> Array:
        s, p = self.spec, self.params
        if s.objective is not None:
            return s.objective(h, h_prime, **p)
        if s.kind == "batch":
            return s.batch(h, h_prime, **p)
        return jnp.mean(self._per_anchor(h, h_prime))

    def _per_anchor(self, h: Array, h_prime: Array) -> Array:
        s, p = self.spec, self.params
        if s.kind == "cosine":
            c_pos, c_neg, valid = _embedding_cosines(h, h_prime, s.negatives)
            return s.value(c_pos, c_neg, valid, **p)
        if s.kind == "per_anchor":
            return s.per_anchor(h, h_prime, **p)
        raise TypeError(
            f"{s.name} is a batch-level objective: it has no per-anchor split. "
            "Use loss(h, h_prime) and loss.components(...), which describe ∂L/∂h_i of the batch loss."
        )

    def _one_way(self) -> Loss:
        return self if not self.symmetric else Loss(self.spec, self.params, False)

    def __call__(self, h, h_prime) -> Array:
        h, h_prime = check_pair(h, h_prime)
        return _run(self, h, h_prime, "objective")

    def per_anchor(self, h, h_prime) -> Array:
        """The (N,) one-directional per-anchor losses L_i (anchor h_i, positive h_i')."""
        h, h_prime = check_pair(h, h_prime)
        if self.spec.kind == "batch":
            self._per_anchor(h, h_prime)  # raises the explanatory TypeError
        return _run(self._one_way(), h, h_prime, "per_anchor")

    # --- the paradigm --------------------------------------------------------------
    def components(self, h, h_prime) -> Components:
        """Exact GD / W / R in embedding form: gd (N,), weight (N, N) zero diagonal, ratio."""
        h, h_prime = check_pair(h, h_prime)
        return _run(self._one_way(), h, h_prime, "components")

    def _components(self, h: Array, h_prime: Array) -> Components:
        s, p = self.spec, self.params
        if s.kind == "cosine":
            neg = h_prime if s.negatives == "h_prime" else h
            c_pos = jnp.sum(h * h_prime, axis=-1)
            gd, weight, ratio = offdiag_kernel(s.kernel)(c_pos, cosine_matrix(h, neg), **p)
            return Components(gd, weight, ratio, None, s.negatives)
        return s.components(h, h_prime, **p)

    def components_from_angles(self, theta_pos, theta_neg) -> Components:
        """GD / W / R from angles alone: theta_pos (...,), theta_neg (..., N−1).

        Only the ``"cosine"`` kind has an angle form. Angles outside [0, π] are read as
        the geometric angle they represent. jit- and vmap-friendly.
        """
        s = self.spec
        if s.kind != "cosine":
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
        objectives: ∂L/∂h_i. Computed with ``jax.grad``: the independent witness.
        """
        h, h_prime = check_pair(h, h_prime)
        return _run(self._one_way(), h, h_prime, "anchor_gradient")

    def _anchor_gradient(self, h: Array, h_prime: Array) -> Array:
        s, p = self.spec, self.params
        if s.kind == "batch":
            g = jax.grad(lambda x: s.batch(x, h_prime, **p))(h)
            return tangent_project(h, g)
        return anchor_gradient(self._per_anchor, h, h_prime)

    def paradigm_gradient(self, h, h_prime) -> Array:
        """``reconstruct(self.components(h, h_prime), ...)``: the paradigm's gradient, (N, D)."""
        h, h_prime = check_pair(h, h_prime)
        return _run(self._one_way(), h, h_prime, "paradigm_gradient")


def _flatten_with_keys(loss: Loss):
    keys = tuple(loss.params)
    children = tuple((jax.tree_util.DictKey(k), loss.params[k]) for k in keys)
    return children, (loss.spec, keys, loss.symmetric)


def _flatten(loss: Loss):
    keys = tuple(loss.params)
    return tuple(loss.params[k] for k in keys), (loss.spec, keys, loss.symmetric)


def _unflatten(aux, children) -> Loss:
    spec, keys, symmetric = aux
    return Loss(spec, MappingProxyType(dict(zip(keys, children, strict=True))), symmetric)


jax.tree_util.register_pytree_with_keys(Loss, _flatten_with_keys, _unflatten, _flatten)


@functools.partial(jax.jit, static_argnames="method")
def _run(loss: Loss, h: Array, h_prime: Array, method: str):
    """Every public method, jitted once per (spec, symmetric, method, shapes): parameters are traced."""
    h, h_prime = normalize(h), normalize(h_prime)
    if method == "objective":
        out = loss._objective(h, h_prime)
        return 0.5 * (out + loss._objective(h_prime, h)) if loss.symmetric else out
    if method == "per_anchor":
        return loss._per_anchor(h, h_prime)
    if method == "components":
        return loss._components(h, h_prime)
    if method == "anchor_gradient":
        return loss._anchor_gradient(h, h_prime)
    if method == "paradigm_gradient":
        return reconstruct(loss._components(h, h_prime), h, h_prime)
    raise ValueError(f"unknown method {method!r}")


def get_loss(name: str, *, symmetric: bool = False, **params: Any) -> Loss:
    """A configured loss by name. Unknown names or bad parameters raise ``ValueError``.

    Examples:
      >>> import gradlab
      >>> loss = gradlab.get_loss("arccon", tau=0.05, u=0.1745)
      >>> sorted(loss.params)
      ['tau', 'u']
    """
    return Loss.from_spec(get_spec(name), symmetric=symmetric, **params)
