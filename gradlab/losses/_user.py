"""Losses a user designs: any function of the cosines (``loss_from_cosines``) and any GD × W × R (``compose``).

Both return a full ``Loss`` of the ``"cosine"`` kind, so every tool that takes a
registered cosine-family loss takes them too: the simulated maps, the monitor, training.

Components of a function of the cosines, from autodiff in cosine space. For
L_i = f(c_p, c_1, …, c_M), ∂L_i/∂h_i = ∂f/∂c_p · h_i' + Σ_j ∂f/∂c_j · n_j (tangential
parts), and the paradigm (Li et al. 2024 Eq. 4) reads GD·W_j = ∂f/∂c_j and
GD·Σ_j W_j R_j = −∂f/∂c_p. The split chosen here:

    GD = Σ_j ∂f/∂c_j,   W_j = (∂f/∂c_j) / GD  (Σ_j W_j = 1),   R = −(∂f/∂c_p) / GD  (one per anchor).

GD·W_j and the effective ratio Σ_j W_j R_j / Σ_j W_j do not depend on the split; they
equal the closed forms of every registered cosine-family loss (tests/test_design.py).

Singular points. Where GD = 0 (no push on any negative: a closed gate, or a loss of
c_p alone) W and R are undefined: they are returned as 0, so the paradigm gradient
is 0 there (a pull −∂f/∂c_p · h_i' without a push cannot be written as GD·W·(n − R h')),
and ``undefined_mask`` marks those anchors. A partial derivative that is not finite
(the derivative of ``jnp.arccos`` at θ = 0 or π) is read as 0: the tangent direction
vanishes there, the convention of the zoo (``gradlab.geometry.safe_arccos``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.errors import one_line
from gradlab.losses._compose import PARAMS, composition
from gradlab.losses._loss import Loss
from gradlab.losses._registry import LossSpec, get_spec

__all__ = [
    "NEG_REDUCTIONS",
    "autodiff_kernel",
    "cosine_partials",
    "undefined_mask",
    "loss_from_cosines",
    "compose",
    "probe",
]

#: The declared structures of ``loss_from_cosines(neg_reduction=...)`` -> the factored
#: simulation path (``LossSpec.factored``).
NEG_REDUCTIONS = {"logsumexp": "lse", "max": "max"}


def cosine_partials(value: Callable, c_pos, c_neg, valid, **params):
    """(∂L/∂c_p (...,), ∂L/∂c_j (..., M)) of a per-anchor ``value(c_pos, c_neg, valid, **params)``.

    Non-finite partials (an arccos derivative at a pole) are read as 0.
    """
    d_pos, d_neg = jax.grad(lambda a, b: jnp.sum(value(a, b, valid, **params)), argnums=(0, 1))(c_pos, c_neg)
    clean = lambda x: jnp.where(jnp.isfinite(x), x, 0.0)  # noqa: E731
    return clean(d_pos), jnp.where(valid, clean(d_neg), 0.0)


def _split(d_pos, d_neg):
    gd = jnp.sum(d_neg, axis=-1)
    ok = gd != 0
    safe = jnp.where(ok, gd, 1.0)
    weight = jnp.where(ok[..., None], d_neg / safe[..., None], 0.0)
    ratio = jnp.where(ok, -d_pos / safe, 0.0)[..., None]
    return gd, weight, ratio


@functools.cache
def autodiff_kernel(value: Callable) -> Callable:
    """The kernel ``(c_pos, c_neg, valid, **p) -> (gd, weight, ratio)`` of any cosine ``value``, by autodiff.

    The split of the module doc: GD = Σ_j ∂L/∂c_j, W summing to one, one R per anchor.
    Applied to a registered loss's ``spec.value`` it is an independent witness of the
    hand-derived ``spec.kernel``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from gradlab.losses import get_spec
      >>> kernel = autodiff_kernel(get_spec("infonce").value)
      >>> c_pos, c_neg = jnp.array([0.8]), jnp.array([[0.1, 0.3]])
      >>> gd, w, r = kernel(c_pos, c_neg, jnp.ones((1, 2), bool), tau=0.5)
      >>> round(float(r[0, 0]), 6), round(float(w.sum()), 6)
      (1.0, 1.0)
    """

    def kernel(c_pos, c_neg, valid, **params):
        return _split(*cosine_partials(value, c_pos, c_neg, valid, **params))

    return kernel


def undefined_mask(loss: Loss, c_pos, c_neg):
    """True where W and R are undefined (GD = Σ_j ∂L/∂c_j = 0): c_pos (...,), c_neg (..., M) -> (...,)."""
    c_pos, c_neg = jnp.asarray(c_pos), jnp.asarray(c_neg)
    gd, _, _ = loss.spec.kernel(c_pos, c_neg, jnp.ones(c_neg.shape, bool), **loss.params)
    return gd == 0


# --- loss_from_cosines ------------------------------------------------------------------------
_PROBE_POS = np.cos(np.array([0.2, 0.7, 1.1]))
_PROBE_NEG = np.cos(np.array([[0.9, 1.3, 1.6, 2.2], [0.5, 1.0, 1.5, 2.9], [1.2, 1.2, 1.8, 0.3]]))


def probe(loss: Loss) -> None:
    """Evaluate a cosine loss and its components on a small fixed batch; raise a one-line ``ValueError`` if it fails.

    Checks: it can be called as ``fn(c_pos, c_neg, **params)``, also with its parameters traced
    (as the compiled training step and monitor pass them), returns shape (B,) for c_pos (B,) and
    c_neg (B, M), and its values and components are finite.
    """
    name, spec = loss.name, loss.spec
    c_pos, c_neg = jnp.asarray(_PROBE_POS), jnp.asarray(_PROBE_NEG)
    valid = jnp.ones(c_neg.shape, bool)
    try:
        out = jnp.asarray(spec.value(c_pos, c_neg, valid, **loss.params))
    except Exception as exc:  # noqa: BLE001 - any failure of user code becomes one line
        raise ValueError(f"{name}: calling it as fn(c_pos, c_neg, **params) failed ({one_line(exc, first_line=True)})") from None
    if out.shape != c_pos.shape:
        raise ValueError(f"{name}: fn(c_pos (3,), c_neg (3, 4)) must return shape (3,); got {out.shape}")
    try:  # gradlab's compiled programs (the training step, the monitor) take the parameters as arguments
        jax.jit(lambda params: spec.value(c_pos, c_neg, valid, **params))(dict(loss.params))
    except jax.errors.ConcretizationTypeError as exc:
        raise ValueError(f"{name}: a parameter's value decides a Python branch or a shape ({one_line(exc, first_line=True)}); "
                         "gradlab passes the parameters to its compiled programs as JAX values: branch with "
                         "jnp.where or jax.lax.cond") from None
    if not bool(jnp.all(jnp.isfinite(out))):
        raise ValueError(f"{name}: fn returned a non-finite value on the probe batch: {np.asarray(out).tolist()}")
    try:
        parts = spec.kernel(c_pos, c_neg, valid, **loss.params)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{name}: its gradient in cosine space failed ({one_line(exc, first_line=True)})") from None
    if not all(bool(jnp.all(jnp.isfinite(x))) for x in parts):
        raise ValueError(f"{name}: its GD / W / R are not finite on the probe batch")


def _rules(params: Mapping[str, Any], rules: Mapping[str, str] | None) -> dict[str, str]:
    rules = dict(rules or {})
    unknown = set(rules) - set(params)
    if unknown:
        raise ValueError(f"rules name unknown parameter(s) {', '.join(sorted(unknown))}; parameters: {', '.join(params) or '(none)'}")
    return {k: rules.get(k, "real") for k in params}


def loss_from_cosines(fn: Callable, *, name: str, params: Mapping[str, float] | None = None,
                      rules: Mapping[str, str] | None = None, neg_reduction: str | None = None,
                      title: str | None = None, check: bool = True) -> Loss:
    """A full ``gradlab.Loss`` from a per-anchor function of the cosines; GD / W / R by autodiff.

    Args:
      fn: ``fn(c_pos, c_neg, **params) -> L`` with c_pos (...,) the anchor's cosine to its
        positive, c_neg (..., M) its cosines to the M = N − 1 valid negatives (gradlab
        never passes the anchor's own index), and L (...,). Any JAX function; each L_i
        must depend on its own row only. For angle-based losses use
        ``gradlab.geometry.safe_arccos`` (finite derivative at the poles).
      name: the loss's name (results, monitor keys, file names).
      params: parameter name -> default value (the Loss's pytree leaves; override with
        ``loss.replace(...)``).
      rules: parameter name -> ``"positive" | "nonnegative" | "unit" | "real"`` (default "real").
      neg_reduction: declare that fn reads the negatives only through
        ``logsumexp(c_neg / tau)`` (``"logsumexp"``, with a parameter ``tau``) or
        ``max(c_neg)`` (``"max"``): the simulator then takes the factored fast path.
        A wrong declaration gives wrong maps; ``method="direct"`` always works.
      title: display name (default: ``name``).
      check: evaluate fn on a small probe batch now (shape, finiteness; one-line ``ValueError``).

    Returns:
      A ``Loss`` of kind ``"cosine"``: ``GD = Σ_j ∂L/∂c_j``, ``W_j = (∂L/∂c_j)/GD``
      (summing to one), ``R = −(∂L/∂c_p)/GD`` (one per anchor); W = R = 0 where GD = 0
      (see ``undefined_mask``). Reference: Li et al. 2024 Eq. 4.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import gradlab
      >>> def focal(c_pos, c_neg, *, tau, gamma):
      ...     logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
      ...     p = jnp.exp(c_pos / tau - jax.nn.logsumexp(logits, axis=-1))
      ...     return -((1 - p) ** gamma) * jnp.log(p)
      >>> loss = gradlab.loss_from_cosines(focal, name="focal", params={"tau": 0.05, "gamma": 2.0},
      ...                                  rules={"tau": "positive", "gamma": "nonnegative"})
      >>> c = loss.components_from_angles(jnp.array([0.5]), jnp.array([[1.0, 1.2, 1.5]]))
      >>> round(float(c.weight.sum()), 6)
      1.0
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {type(fn).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string; got {name!r}")
    params = dict(params or {})
    for k, v in params.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ValueError(f"{name}: parameter names must be identifiers; got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise ValueError(f"{name}: default of parameter {k!r} must be a finite number; got {v!r}")
    if neg_reduction is not None and neg_reduction not in NEG_REDUCTIONS:
        raise ValueError(f"neg_reduction must be None or one of {', '.join(NEG_REDUCTIONS)}; got {neg_reduction!r}")
    if neg_reduction == "logsumexp" and "tau" not in params:
        raise ValueError(f"{name}: neg_reduction='logsumexp' reads logsumexp(c_neg / tau): it needs a parameter 'tau'")

    def value(c_pos, c_neg, valid, **p):
        return fn(c_pos, c_neg, **p)

    value.__doc__ = fn.__doc__
    spec = LossSpec.from_cosines(
        name, value, autodiff_kernel(value), defaults=params, rules=_rules(params, rules),
        title=title or name, family="user", gd="Σ_j ∂L/∂c_j (autodiff)", weight="(∂L/∂c_j) / GD",
        ratio="−(∂L/∂c_p) / GD", reference=f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}",
        factored=NEG_REDUCTIONS.get(neg_reduction),
    )
    loss = Loss.from_spec(spec)
    if check:
        probe(loss)
    return loss


# --- compose ------------------------------------------------------------------------------------
@functools.cache
def _composed_spec(gd: str, weight: str, ratio: str) -> LossSpec:
    c = composition(gd, weight, ratio)
    if (gd, weight, ratio) == ("indicator", "softmax", "static"):
        return get_spec("baseline")  # the registered Eq. 5 baseline is this composition
    spec = LossSpec.from_cosines(
        f"{gd}-{weight}-{ratio}", c.value, c.kernel,
        defaults={k: PARAMS[k][0] for k in c.params}, rules={k: PARAMS[k][1] for k in c.params},
        title=f"GD {gd} × W {weight} × R {ratio}", family="composed",
        gd=gd, weight=weight, ratio=ratio, reference="Li et al. 2024 Eq. 5 (composed)", factored=c.factored,
    )
    return spec


def compose(*, gd: str, weight: str, ratio: str, symmetric: bool = False, **params: float) -> Loss:
    """A loss of the Eq. 5 family (Li et al. 2024) from three building blocks under stop-gradient.

    L_i = sg(GD) Σ_j sg(W_j) (c_j − sg(R_j) c_p): ``jax.grad`` of it is exactly the paradigm
    gradient GD Σ_j W_j (n_j − R_j h_i'), and ``components`` gives the blocks in closed form.

    Args:
      gd: ``"fraction"`` (τ), ``"indicator"`` (m), ``"sigmoid"`` (m, width), ``"none"``.
      weight: ``"softmax"`` (τ), ``"hardest"``, ``"uniform"``.
      ratio: ``"static"`` (r), ``"arccon"`` (u), ``"met"``, ``"mat"``.
      symmetric: average both directions in ``loss(h, h_prime)``.
      **params: the blocks' parameters (defaults: m = 0.3, τ = 0.05, r = 1, u = π/18, width = 0.05).

    Returns:
      A ``Loss`` of kind ``"cosine"``; (indicator, softmax, static) is the registered ``baseline``.

    Examples:
      >>> import gradlab
      >>> gradlab.compose(gd="indicator", weight="softmax", ratio="static", m=0.3, tau=0.05, r=1.0)
      Loss('baseline', m=0.3, tau=0.05, r=1)
      >>> gradlab.compose(gd="sigmoid", weight="hardest", ratio="mat", m=0.2)
      Loss('sigmoid-hardest-mat', m=0.2, width=0.05)
    """
    return Loss.from_spec(_composed_spec(gd, weight, ratio), symmetric=symmetric, **params)

