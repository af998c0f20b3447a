"""optax-style functions, one per registered loss: ``infonce(h, h_prime, *, tau=0.05, symmetric=False)``.

``gradlab.losses.infonce(h, h_prime, tau=tau, symmetric=symmetric)`` is
``get_loss("infonce", tau=tau, symmetric=symmetric)(h, h_prime)``. The registry stays the
catalogue: each function's keyword defaults are read from the registry (``_D``), and
``_loss_function`` checks at import that they name exactly the spec's parameters and gives the
function its docstring, built from the spec (title, GD / W / R, reference, a short example).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

from jax import Array

from gradlab.losses._loss import Loss
from gradlab.losses._registry import LossSpec, get_spec, list_losses


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


#: loss name -> its registry defaults (what the functions' signatures show).
_D = {name: get_spec(name).defaults for name in list_losses()}


def _value(loss: str, h, h_prime, symmetric: bool, **params) -> Array:
    return Loss.from_spec(get_spec(loss), symmetric=symmetric, **params)(h, h_prime)


def _loss_function(loss: str) -> Callable[[Callable], Callable]:
    """Name, document and check the function of one registered loss (its keywords are the spec's parameters)."""
    spec = get_spec(loss)

    def wrap(fn: Callable) -> Callable:
        ps = list(inspect.signature(fn).parameters.values())
        kw = {p.name: p.default for p in ps[2:] if p.kind is p.KEYWORD_ONLY}
        if fn.__name__ != function_name(loss) or kw != {**spec.defaults, "symmetric": False}:
            raise RuntimeError(f"the function of {loss!r} does not match its registry entry")
        fn.__module__ = "gradlab.losses"
        fn.__doc__ = _doc(spec, fn.__name__)
        return fn

    return wrap


@_loss_function("infonce")
def infonce(h, h_prime, *, tau=_D["infonce"]["tau"], symmetric=False) -> Array:
    return _value("infonce", h, h_prime, symmetric, tau=tau)


@_loss_function("arccon")
def arccon(h, h_prime, *, tau=_D["arccon"]["tau"], u=_D["arccon"]["u"], symmetric=False) -> Array:
    return _value("arccon", h, h_prime, symmetric, tau=tau, u=u)


@_loss_function("mpt")
def mpt(h, h_prime, *, m=_D["mpt"]["m"], symmetric=False) -> Array:
    return _value("mpt", h, h_prime, symmetric, m=m)


@_loss_function("met")
def met(h, h_prime, *, m=_D["met"]["m"], symmetric=False) -> Array:
    return _value("met", h, h_prime, symmetric, m=m)


@_loss_function("mat")
def mat(h, h_prime, *, m=_D["mat"]["m"], symmetric=False) -> Array:
    return _value("mat", h, h_prime, symmetric, m=m)


@_loss_function("dcl")
def dcl(h, h_prime, *, tau=_D["dcl"]["tau"], symmetric=False) -> Array:
    return _value("dcl", h, h_prime, symmetric, tau=tau)


@_loss_function("dcl+")
def dcl_plus(h, h_prime, *, tau=_D["dcl+"]["tau"], symmetric=False) -> Array:
    return _value("dcl+", h, h_prime, symmetric, tau=tau)


@_loss_function("alignment")
def alignment(h, h_prime, *, alpha=_D["alignment"]["alpha"], symmetric=False) -> Array:
    return _value("alignment", h, h_prime, symmetric, alpha=alpha)


@_loss_function("uniformity")
def uniformity(h, h_prime, *, t=_D["uniformity"]["t"], symmetric=False) -> Array:
    return _value("uniformity", h, h_prime, symmetric, t=t)


@_loss_function("align_uniform")
def align_uniform(h, h_prime, *, lam=_D["align_uniform"]["lam"], alpha=_D["align_uniform"]["alpha"], t=_D["align_uniform"]["t"], symmetric=False) -> Array:
    return _value("align_uniform", h, h_prime, symmetric, lam=lam, alpha=alpha, t=t)


@_loss_function("align_mhe")
def align_mhe(h, h_prime, *, nu=_D["align_mhe"]["nu"], symmetric=False) -> Array:
    return _value("align_mhe", h, h_prime, symmetric, nu=nu)


@_loss_function("align_mhs")
def align_mhs(h, h_prime, *, nu=_D["align_mhs"]["nu"], symmetric=False) -> Array:
    return _value("align_mhs", h, h_prime, symmetric, nu=nu)


@_loss_function("barlow_twins")
def barlow_twins(h, h_prime, *, nu=_D["barlow_twins"]["nu"], symmetric=False) -> Array:
    return _value("barlow_twins", h, h_prime, symmetric, nu=nu)


@_loss_function("barlow_twins_pearson")
def barlow_twins_pearson(h, h_prime, *, lambda_bt=_D["barlow_twins_pearson"]["lambda_bt"], symmetric=False) -> Array:
    return _value("barlow_twins_pearson", h, h_prime, symmetric, lambda_bt=lambda_bt)


@_loss_function("vicreg")
def vicreg(h, h_prime, *, nu1=_D["vicreg"]["nu1"], nu2=_D["vicreg"]["nu2"], gamma=_D["vicreg"]["gamma"], symmetric=False) -> Array:
    return _value("vicreg", h, h_prime, symmetric, nu1=nu1, nu2=nu2, gamma=gamma)


@_loss_function("vicreg_nc")
def vicreg_nc(h, h_prime, *, lambda_i=_D["vicreg_nc"]["lambda_i"], lambda_v=_D["vicreg_nc"]["lambda_v"], lambda_c=_D["vicreg_nc"]["lambda_c"], eps=_D["vicreg_nc"]["eps"], symmetric=False) -> Array:
    return _value("vicreg_nc", h, h_prime, symmetric, lambda_i=lambda_i, lambda_v=lambda_v, lambda_c=lambda_c, eps=eps)


@_loss_function("margin_infonce")
def margin_infonce(h, h_prime, *, tau=_D["margin_infonce"]["tau"], beta=_D["margin_infonce"]["beta"], m1=_D["margin_infonce"]["m1"], m2=_D["margin_infonce"]["m2"], symmetric=False) -> Array:
    return _value("margin_infonce", h, h_prime, symmetric, tau=tau, beta=beta, m1=m1, m2=m2)


@_loss_function("mmhe")
def mmhe(h, h_prime, *, m=_D["mmhe"]["m"], tau=_D["mmhe"]["tau"], r=_D["mmhe"]["r"], symmetric=False) -> Array:
    return _value("mmhe", h, h_prime, symmetric, m=m, tau=tau, r=r)


@_loss_function("mmhs")
def mmhs(h, h_prime, *, m=_D["mmhs"]["m"], r=_D["mmhs"]["r"], symmetric=False) -> Array:
    return _value("mmhs", h, h_prime, symmetric, m=m, r=r)


@_loss_function("mb")
def mb(h, h_prime, *, m=_D["mb"]["m"], tau=_D["mb"]["tau"], r=_D["mb"]["r"], symmetric=False) -> Array:
    return _value("mb", h, h_prime, symmetric, m=m, tau=tau, r=r)


@_loss_function("mv")
def mv(h, h_prime, *, m=_D["mv"]["m"], tau=_D["mv"]["tau"], r=_D["mv"]["r"], symmetric=False) -> Array:
    return _value("mv", h, h_prime, symmetric, m=m, tau=tau, r=r)


@_loss_function("baseline")
def baseline(h, h_prime, *, m=_D["baseline"]["m"], tau=_D["baseline"]["tau"], r=_D["baseline"]["r"], symmetric=False) -> Array:
    return _value("baseline", h, h_prime, symmetric, m=m, tau=tau, r=r)


#: ``function_name`` and one function per registered loss, in registry order.
__all__ = ["function_name", *(function_name(n) for n in list_losses())]
_MISSING = [n for n in __all__ if n not in globals()]
if _MISSING:  # a newly registered loss needs its def here
    raise RuntimeError(f"no function for registered loss(es): {', '.join(_MISSING)}")
