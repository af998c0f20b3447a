"""optax-style functions, one per registered loss, generated from the registry.

``gradlab.losses.infonce(h, h_prime, *, tau=0.05, symmetric=False)`` is
``get_loss("infonce", tau=tau, symmetric=symmetric)(h, h_prime)``. The registry stays
the catalogue: each function carries the registry's defaults in its real signature
(``inspect.signature``) and a docstring built from the spec (title, GD / W / R,
reference, a short example).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

from jax import Array

from gradlab.losses._loss import Loss
from gradlab.losses._registry import LossSpec, get_spec, list_losses

__all__ = ["function_name", "loss_function", "functional_api"]

_P = inspect.Parameter


def function_name(loss_name: str) -> str:
    """The Python name of a loss's function: ``"dcl+"`` -> ``"dcl_plus"``, other non-identifier characters -> ``_``."""
    ident = re.sub(r"\W", "_", loss_name.replace("+", "_plus"))
    if not ident.isidentifier():
        raise ValueError(f"cannot name a function after loss {loss_name!r}")
    return ident


def _doc(spec: LossSpec, ident: str) -> str:
    params = "\n".join(
        f"      {k}: {spec.rules[k]} (default {v:g})." for k, v in spec.defaults.items()
    )
    kind = {"cosine": "mean over anchors of the per-anchor loss L_i",
            "per_anchor": "mean over anchors of the per-anchor loss L_i",
            "batch": "the batch-level objective"}[spec.kind]
    return f"""{spec.title}: {kind}, a scalar.

    GD = {spec.gd}; W = {spec.weight}; R = {spec.ratio}.

    Reference: {spec.reference}.
    Same as ``get_loss({spec.name!r}, ...)(h, h_prime)``; the ``Loss`` has the components.

    Args:
      h: anchors (N, D), N >= 2 (rows are normalized).
      h_prime: positives (N, D).
{params}
      symmetric: average both directions (default False).

    Returns:
      The scalar loss, ().

    Examples:
      >>> import jax.numpy as jnp
      >>> from gradlab.losses import {ident}
      >>> h = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]])
      >>> {ident}(h, h + 0.1).shape
      ()
    """


def loss_function(spec: LossSpec) -> Callable[..., Array]:
    """The optax-style function of one spec: ``(h, h_prime, *, <params>, symmetric=False) -> Array``."""
    ident = function_name(spec.name)
    signature = inspect.Signature(
        [_P("h", _P.POSITIONAL_OR_KEYWORD), _P("h_prime", _P.POSITIONAL_OR_KEYWORD)]
        + [_P(k, _P.KEYWORD_ONLY, default=v) for k, v in spec.defaults.items()]
        + [_P("symmetric", _P.KEYWORD_ONLY, default=False)],
        return_annotation=Array,
    )

    def fn(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # a TypeError for a wrong call, as a real function gives
        bound.apply_defaults()
        a = dict(bound.arguments)
        h, h_prime, symmetric = a.pop("h"), a.pop("h_prime"), a.pop("symmetric")
        return Loss.from_spec(spec, symmetric=symmetric, **a)(h, h_prime)

    fn.__signature__ = signature
    fn.__name__ = fn.__qualname__ = ident
    fn.__module__ = "gradlab.losses"
    fn.__doc__ = _doc(spec, ident)
    return fn


def functional_api() -> dict[str, Callable[..., Array]]:
    """Python name -> function, for every registered loss, in registry order."""
    return {function_name(n): loss_function(get_spec(n)) for n in list_losses()}
