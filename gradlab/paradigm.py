"""The GD / W / R paradigm (Li et al. 2024, Eq. 4) as data, and its numerical extraction.

    ∂L_i/∂h_i = GD_i · Σ_{j≠i} W_ij (n_j − R_ij · h_i')

where the negatives n_j are h_j' (Eq. 4) or h_j (Eq. 12). Gradients are compared on
the sphere: only the part tangent to h_i counts, ``(I − h_i h_iᵀ) g``.

``Components`` holds the three factors; ``reconstruct`` turns them back into the
gradient; ``decompose`` recovers them from the autodiff gradient of *any* per-anchor
JAX loss and reports the residual that is not of the paradigm's form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import Array

from gradlab._validation import check_pair
from gradlab.geometry import normalize, tangent_project

__all__ = ["Components", "Decomposition", "reconstruct", "anchor_gradient", "decompose", "fit_paradigm", "NEGATIVES"]

NEGATIVES = ("h_prime", "h")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Components:
    """The paradigm's three factors for a batch (embedding form) or for angles.

    Attributes:
      gd: Gradient Dissipation, shape (...,) — one value per anchor.
      weight: W, shape (..., M) — per negative. In embedding form M = N and the
        diagonal (the anchor's own index) is zero; in angle form M = N − 1.
      ratio: R, broadcastable to ``weight`` (a per-negative or per-anchor scalar), or,
        for Barlow Twins, a per-anchor diagonal D×D matrix stored as its diagonal, shape
        (..., D), flagged by ``ratio_diagonal`` (``ratio_matrix()`` gives the dense form).
      pull: only for objectives without negatives (pure alignment), the coefficient
        of −h_i' that no negative carries; ``None`` otherwise.
      negatives: ``"h_prime"`` if the formula pushes away from h_j' (Eq. 4), ``"h"``
        if from the same view h_j (Eq. 12). Static (not a traced leaf).
    """

    gd: Array
    weight: Array
    ratio: Array
    pull: Array | None = None
    negatives: str = dataclasses.field(default="h_prime", metadata=dict(static=True))
    ratio_diagonal: bool = dataclasses.field(default=False, metadata=dict(static=True))

    @property
    def ratio_is_matrix(self) -> bool:
        """R is a per-anchor matrix (Barlow Twins), held as its diagonal (..., D)."""
        return self.ratio_diagonal

    def ratio_matrix(self) -> Array:
        """The dense per-anchor R, (..., D, D); only for a matrix ratio (N · D² floats)."""
        if not self.ratio_diagonal:
            raise ValueError("the ratio is not a matrix; it broadcasts against the weight")
        return self.ratio[..., :, None] * jnp.eye(self.ratio.shape[-1], dtype=self.ratio.dtype)

    def pull_coefficient(self) -> Array:
        """GD · Σ_j W_j R_j (+ pull): the total coefficient of −h_i', shape (...,).

        Not defined for a matrix ratio (Barlow Twins): use ``reconstruct``.
        """
        if self.ratio_is_matrix:
            raise ValueError("the ratio is a matrix (Barlow Twins): the pull is a vector, use reconstruct()")
        total = self.gd * jnp.sum(self.weight * self.ratio, axis=-1)
        return total if self.pull is None else total + self.pull


def reconstruct(components: Components, h: Array, h_prime: Array) -> Array:
    """Rebuild ∂L_i/∂h_i (N, D) from embedding-form components, projected to the tangent plane.

    ``h`` and ``h_prime`` must already be unit rows (``gradlab.geometry.normalize``).
    """
    neg = h_prime if components.negatives == "h_prime" else h
    gd = components.gd[:, None]
    push = components.weight @ neg
    if components.ratio_is_matrix:
        # Σ_j W_ij R_i h_i' with a per-anchor diagonal matrix R_i (held as its diagonal).
        wsum = jnp.sum(components.weight, axis=-1)
        pull = wsum[:, None] * components.ratio * h_prime
    else:
        wr = jnp.sum(components.weight * jnp.broadcast_to(components.ratio, components.weight.shape), axis=-1)
        pull = wr[:, None] * h_prime
    g = gd * (push - pull)
    if components.pull is not None:
        g = g - components.pull[:, None] * h_prime
    return tangent_project(h, g)


def anchor_gradient(per_anchor_fn: Callable[[Array, Array], Array], h: Array, h_prime: Array) -> Array:
    """Tangential ∂L_i/∂h_i for every anchor i, all other embeddings held fixed.

    ``per_anchor_fn(h, h_prime) -> (N,)`` is any JAX function of the two (N, D) views.
    The gradient is taken at the normalized points and projected to the sphere, so
    it is the Riemannian gradient that the paradigm describes. Cost: N reverse passes.
    """
    h = normalize(h)
    h_prime = normalize(h_prime)
    n = h.shape[0]

    def loss_i(h_i, i):
        return per_anchor_fn(h.at[i].set(h_i), h_prime)[i]

    g = jax.vmap(jax.grad(loss_i))(h, jnp.arange(n))
    return tangent_project(h, g)


def fit_paradigm(g: Array, h: Array, h_prime: Array, negatives: str = "h_prime"):
    """Least-squares paradigm coefficients of tangential gradients ``g`` (N, D). Traceable.

    For each anchor i, fits g_i ≈ Σ_{j≠i} a_ij P_i n_j − b_i P_i h_i' (P_i = I − h_i h_iᵀ)
    on unit rows ``h``, ``h_prime``. Returns ``coef`` (N, N), with a_ij off the diagonal and
    b_i on it, and ``residual`` (N,) = ‖g_i − fit_i‖ / ‖g_i‖ (0 where g_i = 0). Unique for
    D > N; otherwise ``lstsq``'s minimum-norm fit.
    """
    n = h.shape[0]
    neg = h_prime if negatives == "h_prime" else h
    eye = jnp.eye(n, dtype=bool)

    def fit_one(i):
        hi = h[i]
        # Basis: N-1 negatives (slot i replaced by -h_i'), all projected on the tangent plane at h_i.
        basis = jnp.where(eye[i][:, None], -h_prime[i][None, :], neg)
        basis = basis - (basis @ hi)[:, None] * hi[None, :]
        coef, *_ = jnp.linalg.lstsq(basis.T, g[i])
        fit = coef @ basis
        gnorm = jnp.linalg.norm(g[i])
        res = jnp.where(gnorm > 0, jnp.linalg.norm(g[i] - fit) / jnp.where(gnorm > 0, gnorm, 1.0), 0.0)
        return coef, res

    return jax.vmap(fit_one)(jnp.arange(n))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Decomposition:
    """What ``decompose`` recovers from an autodiff gradient.

    Attributes:
      gd_weight: GD·W_ij, shape (N, N), zero diagonal (GD and W are only identified
        up to their product).
      ratio: the effective ratio Σ_j GD W_ij R_ij / Σ_j GD W_ij, shape (N,). It is R
        itself when R does not depend on j or only one negative carries weight.
      pull: GD Σ_j W_ij R_ij, the total coefficient of −h_i', shape (N,).
      residual: ‖g_i − fit_i‖ / ‖g_i‖ per anchor, shape (N,): the part of the
        tangential gradient that is not of the paradigm's form (0 where g_i = 0).
      gradient: the tangential autodiff gradient that was decomposed, (N, D).
      negatives: which negatives the basis used (``"h_prime"`` or ``"h"``).
    """

    gd_weight: Array
    ratio: Array
    pull: Array
    residual: Array
    gradient: Array
    negatives: str = dataclasses.field(default="h_prime", metadata=dict(static=True))


def decompose(
    per_anchor_fn: Callable[[Array, Array], Array],
    h,
    h_prime,
    *,
    negatives: str = "h_prime",
    gradient: Array | None = None,
) -> Decomposition:
    """Extract GD·W_j and R numerically from the autodiff gradient of any per-anchor loss.

    For each anchor i the tangential gradient g_i is fitted by least squares on the
    tangential parts of the negatives {n_j}_{j≠i} and of the positive h_i':

        g_i ≈ Σ_{j≠i} a_ij P_i n_j − b_i P_i h_i',   P_i = I − h_i h_iᵀ

    so that a_ij = GD·W_ij and b_i = GD Σ_j W_ij R_ij. The fit is unique when these N
    vectors are independent, which needs D > N (checked).

    Args:
      per_anchor_fn: ``f(h, h_prime) -> (N,)`` per-anchor losses, any JAX function.
      h, h_prime: the two views, (N, D); normalized inside.
      negatives: ``"h_prime"`` (Eq. 4) or ``"h"`` (Eq. 12) as the basis of negatives.
      gradient: optionally, a precomputed (N, D) gradient to decompose instead (for
        batch-level objectives pass ``jax.grad`` of the batch loss).

    Returns:
      A ``Decomposition``.

    Examples:
      >>> import gradlab, jax
      >>> h, hp = jax.random.normal(jax.random.key(0), (2, 8, 32))
      >>> d = gradlab.decompose(gradlab.get_loss("infonce").per_anchor, h, hp)
      >>> float(d.residual.max()) < 1e-4
      True
    """
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {NEGATIVES}; got {negatives!r}")
    h, h_prime = check_pair(h, h_prime)
    n, d = h.shape
    if d <= n:
        raise ValueError(
            f"decompose needs D > N so that the N basis vectors are independent on the tangent plane; "
            f"got N = {n}, D = {d}"
        )
    h = normalize(h)
    h_prime = normalize(h_prime)
    if gradient is None:
        out = jax.eval_shape(per_anchor_fn, h, h_prime)
        if getattr(out, "shape", None) != (n,):
            raise ValueError(
                f"per_anchor_fn must return the (N,) = ({n},) per-anchor losses L_i; it returns shape "
                f"{getattr(out, 'shape', type(out).__name__)}. For a registered loss pass loss.per_anchor; "
                "for a batch-level objective pass gradient=jax.grad of it"
            )
        g = anchor_gradient(per_anchor_fn, h, h_prime)
    else:
        g = tangent_project(h, gradient)
    coef, residual = fit_paradigm(g, h, h_prime, negatives)
    eye = jnp.eye(n, dtype=bool)
    gd_weight = jnp.where(eye, 0.0, coef)
    pull = jnp.diagonal(coef)
    wsum = jnp.sum(gd_weight, axis=1)
    ratio = pull / jnp.where(wsum != 0, wsum, jnp.nan)
    return Decomposition(gd_weight, ratio, pull, residual, g, negatives)
