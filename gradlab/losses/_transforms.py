"""Rho et al. 2023's gradient-scaling transforms (Eqs. 8–12, Algorithms 1–6) as surrogate losses.

Each transform is the generalized InfoNCE of Eq. 5 on transformed logits: the loss values
are those of InfoNCE with β (except ``margins``, which is the margin loss of Eq. 4), only
the gradients change. The margin-free logits are δ̃_ij = cos θ_ij/τ; a scale w is applied
as δ w + sg(δ)(1 − w) (Eq. 9), so the value is δ and the gradient is w times δ's gradient.

The margin logits δ_ij = (cos(θ_ij + m1 p_ij) − m2 p_ij)/τ (Eq. 4) and the closed-form
angle gradient (Eqs. 14–15) live here, next to the margin loss; ``gradlab.margins``
(the analysis of Theorem 4.1 and Lemmas 4.2–4.4) imports them.

A configured ``GradientTransform`` is a pytree: its numbers (τ, β and the transform's
parameters s, c, α, m1, m2) are leaves, its name and string options static. It can be
passed to ``jax.jit`` as an argument (a new τ reuses the compiled program) and
differentiated with respect to τ or any other parameter.

Readings of Rho et al. 2023's algorithms:

* Algorithm 3 writes ``(1/π − scales) × stop_gradient(logits)``; for the forward value to
  stay unchanged (as the text says, and as Eq. 9 writes) it must be ``(1 − scales)``.
* Algorithm 3 uses the curve s (1 − θ/π)^{1/c}, Eq. 10–11 the curve s |(1 − (θ/π)^c)^{1/c}|.
  Both are convex for c < 1, linear at c = 1 and constant 1 as c → ∞. ``curvature`` uses
  Eq. 10 by default and Algorithm 3's curve with ``curve="alg3"``.
* Algorithm 4 (scaling by the ratio) applies the ratio to the positive logit only
  (``(1 − p) × logits + p × ...``), while Sec. 5.4 says "multiply the gradients by the
  ratio" and Theorem 4.1 puts the ratio on every sample. ``ratio`` follows Algorithm 4
  by default (``targets="positive"``); ``targets="all"`` scales every logit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from gradlab import defaults
from gradlab._validation import check_angles, check_pair, check_param
from gradlab.geometry import cosine_matrix, fold_angle, normalize, safe_arccos
from gradlab.losses._ops import masked_logsumexp, masked_softmax, shifted_cos

__all__ = [
    "TRANSFORMS",
    "GradientTransform",
    "apply_transform",
    "transform_loss_from_logits",
    "margin_logits",
    "margin_angle_gradient",
]

_sg = jax.lax.stop_gradient


# --- the margin logits and their angle gradient (Eqs. 4, 14, 15) --------------------------------
def margin_logits(c: ArrayLike, p: ArrayLike, *, tau, m1=0.0, m2=0.0) -> Array:
    """δ_ij = (cos(θ_ij + m1 p_ij) − m2 p_ij)/τ from cosines c_ij = cos θ_ij (Rho et al. 2023 Eq. 4, Algorithm 2).

    cos(θ + m1 p) is evaluated as c cos(m1 p) − sin θ sin(m1 p) (ArcCon's ``shifted_cos``, no
    arccos), for θ ∈ [0, π]; m1 = m2 = 0 gives Eq. 2's δ̃ = c/τ exactly.

    Args:
      c: cosines, shape (..., K).
      p: target probabilities p_ij (one-hot for the positive), broadcastable to ``c``.
      tau: temperature τ > 0.
      m1, m2: angular and subtractive margins.

    Returns:
      The logits, shape (..., K).

    Examples:
      >>> import jax.numpy as jnp
      >>> d = margin_logits(jnp.array([1.0, 0.0]), jnp.array([1.0, 0.0]), tau=0.5, m2=0.5)
      >>> [round(float(x), 6) for x in d]
      [1.0, 0.0]
    """
    c = jnp.asarray(c)
    if not jnp.issubdtype(c.dtype, jnp.floating):
        c = c.astype(jnp.float32)
    p = jnp.asarray(p, dtype=c.dtype)
    return (shifted_cos(c, m1 * p) - m2 * p) / tau


def one_minus_beta_q(x, beta):
    """1 − β σ(x), written as σ(−x) + (1 − β) σ(x) (exact near σ(x) = 1 when β = 1)."""
    return jax.nn.sigmoid(-x) + (1.0 - beta) * jax.nn.sigmoid(x)


def angle_logits(theta_pos, theta_neg, tau, m1, m2):
    """(δ_il (...,), δ_ih (..., M)) for one positive at θ_il and M negatives at θ_ih (Eq. 4)."""
    return margin_logits(jnp.cos(theta_pos), 1.0, tau=tau, m1=m1, m2=m2), jnp.cos(theta_neg) / tau


@jax.jit
def margin_angle_gradient(theta_pos, theta_neg, tau, beta, m1, m2):
    """∂L_i/∂θ_ij = (p_ij − β q_ij) sin(θ_ij + m1 p_ij)/τ (Rho et al. 2023 Eq. 15; Eq. 14 at m1 = m2 = 0).

    Unvalidated core (``gradlab.margins.angle_gradient`` checks its inputs).

    Args:
      theta_pos: θ_il, shape (...,).
      theta_neg: θ_ih, shape (..., M).
      tau, beta, m1, m2: as in Eq. 5.

    Returns:
      ``(g_pos (...,), g_neg (..., M))``.
    """
    pos, neg = angle_logits(theta_pos, theta_neg, tau, m1, m2)
    x = pos - jax.nn.logsumexp(neg, axis=-1)
    q_neg = jax.nn.softmax(jnp.concatenate([pos[..., None], neg], axis=-1), axis=-1)[..., 1:]
    g_pos = one_minus_beta_q(x, beta) * jnp.sin(theta_pos + m1) / tau
    g_neg = -beta * q_neg * jnp.sin(theta_neg) / tau
    return g_pos, g_neg


# --- the transformed logits ----------------------------------------------------------------------
def _scale_grad(logits, w):
    """Eq. 9: δ w + sg(δ)(1 − w) — the value of δ, the gradient of δ times sg(w)."""
    w = _sg(w)
    return w * logits + (1.0 - w) * _sg(logits)


def _curve(x, c, kind):
    x = jnp.clip(x, 0.0, 1.0)
    if kind == "alg3":
        return (1.0 - x) ** (1.0 / c)
    return jnp.abs((1.0 - x**c) ** (1.0 / c))  # Eq. 10


def _one_minus_alpha_qpos(base, p, valid, alpha):
    """1 − α q̃_il = (1 − α) + α Σ_{h valid, p=0} q̃_ih (per anchor, (..., 1)), floored at tiny."""
    q = masked_softmax(base, valid)
    rest = jnp.sum(jnp.where(valid & (p == 0), q, 0.0), axis=-1, keepdims=True)
    d = (1.0 - alpha) + alpha * rest
    return jnp.maximum(d, jnp.finfo(d.dtype).tiny)


def _transform_logits(name, c, theta, p, valid, tau, prm):
    """Transformed logits (..., K). ``c`` carries the gradient; ``theta`` is only used under sg."""
    base = c / tau
    theta = _sg(theta)
    if name == "none":  # Algorithm 1
        return base
    if name == "margins":  # Algorithm 2 / Eq. 4
        return margin_logits(c, p, tau=tau, m1=prm["m1"], m2=prm["m2"])
    if name == "emphasize":  # Eqs. 8–9
        w = (1.0 - p) + prm["s"] * p
    elif name == "curvature":  # Eqs. 10–11 / Algorithm 3
        w = (1.0 - p) + _curve(theta / math.pi, prm["c"], prm["curve"]) * prm["s"] * p
    elif name == "ratio":  # Algorithm 4 (Sec. 5.4)
        new = margin_logits(c, p, tau=tau, m1=prm["m1"], m2=prm["m2"])
        lse = lambda z: masked_logsumexp(z, valid)[..., None]  # noqa: E731
        scale = jnp.exp(lse(base) - lse(new))  # Σ e^{δ̃} / Σ e^{δ}
        w = (1.0 - p) + p * scale if prm["targets"] == "positive" else jnp.broadcast_to(scale, base.shape)
    elif name == "attenuate_i":  # Eq. 12 type I / Algorithm 5
        w = jnp.broadcast_to(1.0 / _one_minus_alpha_qpos(base, p, valid, prm["alpha"]), base.shape)
    elif name == "attenuate_ii":  # Eq. 12 type II / Algorithm 6
        w = (1.0 - p) + p / _one_minus_alpha_qpos(base, p, valid, prm["alpha"])
    else:  # pragma: no cover - names are validated in apply_transform
        raise ValueError(name)
    return _scale_grad(base, w)


def transform_loss_from_logits(logits: ArrayLike, p: ArrayLike, valid: ArrayLike | None = None, *,
                               beta: float = 1.0) -> Array:
    """Eq. 5 on given logits: L_i = −Σ_j p_ij δ_ij + β Σ_j p_ij log Σ_{k valid} e^{δ_ik}, shape (...,).

    Args:
      logits: δ, shape (..., K) (e.g. a transform's output).
      p: target probabilities, broadcastable to (..., K).
      valid: optional mask (..., K) of entries that exist; invalid ones are left out of
        the sum and must have p = 0.
      beta: Eq. 3's β.

    Examples:
      >>> import jax.numpy as jnp
      >>> round(float(transform_loss_from_logits(jnp.zeros(4), jnp.array([1.0, 0, 0, 0]))), 6)  # log 4
      1.386294
    """
    logits = jnp.asarray(logits)
    p = jnp.asarray(p, dtype=logits.dtype)
    valid = jnp.ones(logits.shape, bool) if valid is None else jnp.broadcast_to(valid, logits.shape)
    lse = masked_logsumexp(logits, valid)
    return -jnp.sum(jnp.where(valid, p * logits, 0.0), axis=-1) + beta * jnp.sum(p, axis=-1) * lse


# name -> {param: (default, rule)}; string options separately.
TRANSFORMS: Mapping[str, Mapping[str, tuple[float, str]]] = MappingProxyType({
    "none": {},
    "margins": {"m1": (0.5, "real"), "m2": (0.4, "real")},
    "emphasize": {"s": (1.125, "positive")},
    "curvature": {"s": (2.5, "positive"), "c": (0.7, "positive")},
    "ratio": {"m1": (0.2, "real"), "m2": (0.0, "real")},
    "attenuate_i": {"alpha": (0.25, "unit")},
    "attenuate_ii": {"alpha": (1.0, "unit")},
})
_OPTIONS = {"curvature": {"curve": ("eq10", "alg3")}, "ratio": {"targets": ("positive", "all")}}


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class GradientTransform:
    """A Rho et al. 2023 gradient transform as a surrogate loss: Eq. 5 on transformed logits.

    The loss values are those of plain InfoNCE-with-β (except ``margins``, which changes
    the logits); only the gradients change. Every method is pure and jit-friendly.

    A pytree: ``tau``, ``beta`` and the numeric ``params`` are leaves; ``name``, the string
    options (``curve``, ``targets``) and ``symmetric`` are static. So a transform is a
    ``jax.jit`` argument (a new τ does not recompile) and ``jax.grad`` with respect to the
    transform gives the derivative in τ, β and each parameter. Build one with
    ``apply_transform`` (which validates); the constructor does not check its values.

    Attributes:
      name: one of ``TRANSFORMS``.
      params: the transform's parameters (validated, defaults filled in), options included.
      tau: temperature τ; beta: Eq. 3's β; symmetric: average both directions in ``__call__``.
    """

    name: str
    params: Mapping[str, Any]
    tau: Any = defaults.RHO2023_TAU
    beta: Any = defaults.RHO2023_BETA
    symmetric: bool = False

    def __hash__(self):
        return hash((self.name, tuple(self.params.items()), self.tau, self.beta, self.symmetric))

    def tree_flatten(self):
        keys = tuple(TRANSFORMS[self.name])
        options = tuple((k, v) for k, v in self.params.items() if k not in keys)
        leaves = (self.tau, self.beta, *(self.params[k] for k in keys))
        return leaves, (self.name, keys, options, self.symmetric)

    @classmethod
    def tree_unflatten(cls, aux, leaves):
        name, keys, options, symmetric = aux
        tau, beta, *values = leaves
        params = MappingProxyType({**dict(zip(keys, values, strict=True)), **dict(options)})
        return cls(name, params, tau, beta, symmetric)

    def _prepare(self, c, p, valid, theta):
        c = jnp.asarray(c)
        if not jnp.issubdtype(c.dtype, jnp.floating):
            c = c.astype(jnp.float32)
        p = jnp.broadcast_to(jnp.asarray(p, dtype=c.dtype), c.shape)
        valid = jnp.ones(c.shape, bool) if valid is None else jnp.broadcast_to(jnp.asarray(valid, bool), c.shape)
        theta = safe_arccos(_sg(c)) if theta is None else jnp.broadcast_to(jnp.asarray(theta, c.dtype), c.shape)
        return c, p, valid, theta

    def logits(self, c: ArrayLike, p: ArrayLike, valid: ArrayLike | None = None, *, theta: ArrayLike | None = None):
        """Transformed logits (..., K) from cosines ``c`` (..., K) and one-hot targets ``p``.

        ``theta`` (the angles, used only under stop_gradient for the scales) defaults to
        arccos(c). Invalid entries come out as −inf.
        """
        return _logits_jit(self, *self._prepare(c, p, valid, theta))

    def loss_from_cosines(self, c, p, valid=None, *, theta=None) -> Array:
        """Per-anchor surrogate losses (...,) from cosines (..., K), targets p and mask."""
        return _loss_jit(self, *self._prepare(c, p, valid, theta))

    def as_loss(self):
        """The surrogate as a cosine-family ``gradlab.Loss``: the GD / W / R of the gradient it trains with.

        The surrogate's value is InfoNCE's (the margin loss's for ``margins``) and its gradient
        in cosine space is the transformed one, so ``gradlab.loss_from_cosines`` (autodiff in
        cosine space) gives the paradigm's components of what the transform actually trains:
        ``as_loss().components(h, h_prime)`` (one direction; ``symmetric`` is dropped). The
        parameters are fixed in the returned loss (it has none of its own).

        Examples:
          ``none`` trains InfoNCE itself; the autodiff split puts InfoNCE's 1/τ into GD (W then sums
          to one), where Li et al. 2024 Table 1 puts it into W:

          >>> import jax.numpy as jnp
          >>> t = apply_transform("none", tau=0.25)
          >>> from gradlab.losses import get_loss
          >>> c_pos, c_neg, valid = jnp.array([0.8]), jnp.array([[0.1, 0.5]]), jnp.ones((1, 2), bool)
          >>> gd, w, r = t.as_loss().spec.kernel(c_pos, c_neg, valid)
          >>> ref_gd, ref_w, _ = get_loss("infonce", tau=0.25).spec.kernel(c_pos, c_neg, valid, tau=0.25)
          >>> bool(jnp.allclose(gd * w, ref_gd * ref_w)), bool(jnp.allclose(gd, ref_gd / 0.25)), float(r[0, 0])
          (True, True, 1.0)
        """
        from gradlab.losses._user import loss_from_cosines

        one_way = dataclasses.replace(self, symmetric=False)

        def surrogate(c_pos, c_neg):
            c = jnp.concatenate([c_pos[..., None], c_neg], axis=-1)
            p = jnp.zeros(c.shape, c.dtype).at[..., 0].set(1.0)
            return one_way.loss_from_cosines(c, p)

        return loss_from_cosines(surrogate, name=f"transform:{self.name}", params={}, check=False)

    def from_angles(self, theta_pos: ArrayLike, theta_neg: ArrayLike) -> Array:
        """Per-anchor surrogate losses (...,) from θ_il (...,) and θ_ih (..., M); differentiable in θ."""
        theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
        return _from_angles_jit(self, theta_pos, theta_neg)

    def per_anchor(self, h: ArrayLike, h_prime: ArrayLike) -> Array:
        """(N,) per-anchor surrogate losses: anchor h_i, positive h_i', negatives h_j' (normalized inside)."""
        h, h_prime = check_pair(h, h_prime)
        return _embed_jit(self, h, h_prime, "per_anchor")

    def __call__(self, h: ArrayLike, h_prime: ArrayLike) -> Array:
        """Scalar training objective: the mean of the per-anchor surrogate (both directions if symmetric)."""
        h, h_prime = check_pair(h, h_prime)
        return _embed_jit(self, h, h_prime, "objective")

    def scales(self, theta_pos: ArrayLike, theta_neg: ArrayLike):
        """The multipliers w the transform puts on ∂L/∂θ: ``(w_pos (...,), w_neg (..., M))``.

        ``none``: 1; ``emphasize``: s on the positive (Eq. 8); ``curvature``: s γ(θ⁺/π, c) on the
        positive (Eq. 11); ``ratio``: Σe^{δ̃}/Σe^{δ} on the positive (all samples with
        ``targets="all"``); ``attenuate_i``: 1/(1 − α q̃⁺) on all; ``attenuate_ii``: on the positive.
        Not defined for ``margins``, which changes the logits (use ``angle_gradient``).
        """
        if self.name == "margins":
            raise ValueError("'margins' changes the logits, not only the gradient scale: use angle_gradient()")
        theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
        return _scales_jit(self, theta_pos, theta_neg)

    def angle_gradient(self, theta_pos: ArrayLike, theta_neg: ArrayLike):
        """The transformed gradient in closed form: ∂L/∂θ_ij = (p_ij − β q̃_ij) w_ij sin θ_ij/τ.

        For ``margins``: Rho et al. 2023 Eq. 15 with the transform's m1, m2. Returns
        ``(g_pos (...,), g_neg (..., M))``.
        """
        theta_pos, theta_neg = check_angles(theta_pos, theta_neg)
        if self.name == "margins":
            return margin_angle_gradient(theta_pos, theta_neg, self.tau, self.beta, self.params["m1"],
                                         self.params["m2"])
        g_pos, g_neg = margin_angle_gradient(theta_pos, theta_neg, self.tau, self.beta, 0.0, 0.0)
        w_pos, w_neg = _scales_jit(self, theta_pos, theta_neg)
        return g_pos * w_pos, g_neg * w_neg


def _one_hot_first(shape, dtype):
    return jnp.zeros(shape, dtype).at[..., 0].set(1.0)


@jax.jit
def _logits_jit(tr, c, p, valid, theta):
    out = _transform_logits(tr.name, jnp.where(valid, c, 0.0), theta, p, valid, tr.tau, tr.params)
    return jnp.where(valid, out, -jnp.inf)


@jax.jit
def _loss_jit(tr, c, p, valid, theta):
    return transform_loss_from_logits(_logits_jit(tr, c, p, valid, theta), p, valid, beta=tr.beta)


@jax.jit
def _from_angles_jit(tr, theta_pos, theta_neg):
    theta = jnp.concatenate([theta_pos[..., None], theta_neg], axis=-1)
    p = _one_hot_first(theta.shape, theta.dtype)
    valid = jnp.ones(theta.shape, bool)
    return _loss_jit(tr, jnp.cos(theta), p, valid, fold_angle(theta))


def _per_anchor_unit(tr, h, hp):
    c = cosine_matrix(h, hp)  # anchor h_i against h_k' (positive on the diagonal)
    p = jnp.eye(h.shape[0], dtype=c.dtype)
    return _loss_jit(tr, c, p, jnp.ones(c.shape, bool), safe_arccos(_sg(c)))


@functools.partial(jax.jit, static_argnums=3)
def _embed_jit(tr, h, hp, kind):
    h, hp = normalize(h), normalize(hp)
    per = _per_anchor_unit(tr, h, hp)
    if kind == "per_anchor":
        return per
    out = jnp.mean(per)
    return 0.5 * (out + jnp.mean(_per_anchor_unit(tr, hp, h))) if tr.symmetric else out


@jax.jit
def _scales_jit(tr, theta_pos, theta_neg):
    theta = jnp.concatenate([theta_pos[..., None], theta_neg], axis=-1)
    c = jnp.cos(theta)
    p = _one_hot_first(theta.shape, theta.dtype)
    valid = jnp.ones(theta.shape, bool)
    # the gradient of _scale_grad w.r.t. its logits is w: read it off with a VJP of ones.
    f = lambda cc: _transform_logits(tr.name, cc, fold_angle(theta), p, valid, tr.tau, tr.params)  # noqa: E731
    w = jax.vjp(f, c)[1](jnp.ones_like(c))[0] * tr.tau  # ∂δ/∂c = w/τ
    return w[..., 0], w[..., 1:]


def apply_transform(name: str, *, tau: float = defaults.RHO2023_TAU, beta: float = defaults.RHO2023_BETA,
                    symmetric: bool = False,
                    **params: Any) -> GradientTransform:
    """A Rho et al. 2023 gradient transform, ready for a JAX training loop.

    Names and parameters (defaults: SimCLR on CIFAR-10 in Rho et al. 2023's App. C tables):

    * ``"none"`` — Algorithm 1: δ = cos θ/τ (InfoNCE with β).
    * ``"margins"`` (m1 = 0.5, m2 = 0.4; Table 5) — Algorithm 2 / Eq. 4: the margin logits
      (values change; the loss is ``margin_infonce``).
    * ``"emphasize"`` (s = 1.125; Table 6) — Eqs. 8–9: positive gradients × s.
    * ``"curvature"`` (s = 2.5, c = 0.7; Table 7; ``curve="eq10"`` or ``"alg3"``) — Eqs. 10–11 /
      Algorithm 3: positive gradients × s γ(θ⁺/π, c).
    * ``"ratio"`` (m1 = 0.2; Table 8; m2 = 0; ``targets="positive"`` or ``"all"``) —
      Algorithm 4: gradients × Σe^{δ̃}/Σe^{δ} (Lemma 4.2's ratio).
    * ``"attenuate_i"`` (α = 0.25) — Eq. 12 type I / Algorithm 5: all gradients × 1/(1 − α q̃⁺).
    * ``"attenuate_ii"`` (α = 1; Table 1, the better α of the two for SimCLR / CIFAR-10) —
      Eq. 12 type II / Algorithm 6: positive gradient × 1/(1 − α q̃⁺).

    Every scale is computed under stop_gradient from the margin-free logits, and applied
    as δ w + sg(δ)(1 − w) (Eq. 9), so loss values are unchanged. Targets are one-hot
    (one positive per anchor). 1 − α q̃⁺ is computed as (1 − α) + α Σ_h q̃_h and floored at
    the dtype's smallest normal number, so α = 1 stays finite as q̃⁺ → 1.

    Args:
      name: one of ``TRANSFORMS``.
      tau: temperature τ > 0 (default ``defaults.RHO2023_TAU``, Rho et al. 2023 App. C).
      beta: Eq. 3's β > 0 (default ``defaults.RHO2023_BETA``).
      symmetric: average both directions in the scalar loss.
      **params: the transform's parameters (unknown keys raise ``ValueError``).

    Examples:
      >>> import jax
      >>> loss = apply_transform("emphasize", s=2.0, tau=0.05)
      >>> h, hp = jax.random.normal(jax.random.key(0), (2, 8, 16))
      >>> grads = jax.grad(loss)(h, hp)
      >>> step = jax.jit(lambda t, a, b: t(a, b))  # the transform is a jit argument
      >>> bool(step(loss, h, hp) == loss(h, hp))
      True
    """
    if name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r}; valid choices: {', '.join(TRANSFORMS)}")
    spec = TRANSFORMS[name]
    options = _OPTIONS.get(name, {})
    unknown = set(params) - set(spec) - set(options)
    if unknown:
        valid = ", ".join([*spec, *options]) or "(none)"
        raise ValueError(f"transform {name!r}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {valid}")
    merged: dict[str, Any] = {k: check_param(name, k, params.get(k, d), r) for k, (d, r) in spec.items()}
    for k, choices in options.items():
        v = params.get(k, choices[0])
        if v not in choices:
            raise ValueError(f"transform {name!r}: {k} must be one of {choices}; got {v!r}")
        merged[k] = v
    tau = check_param(name, "tau", tau, "positive")
    beta = check_param(name, "beta", beta, "positive")
    return GradientTransform(name, MappingProxyType(merged), tau, beta, bool(symmetric))
