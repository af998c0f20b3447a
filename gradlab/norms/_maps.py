"""The gradient-norm maps of any cosine loss (autodiff), their grids, Result bundles and figure panels."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from gradlab import defaults
from gradlab.losses import get_spec
from gradlab.norms._closed import (
    CLOSED_FORMS,
    DEFAULT_NEGATIVES,
    DEFAULTS,
    NORM_LOSSES,
    PARTS,
    REGISTRY_NAMES,
    abs_sin,
    angles,
    canonical_norm,
    check_negatives,
    norm_map,
)

__all__ = ["loss_norm", "norm_grid", "norm_result", "norm_panels", "stack_panels", "norm_on_mu_grid"]

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
    k = int(check_negatives(negatives))
    tp, tn = angles(theta_pos, theta_neg)
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
            return jnp.abs(d_pos) * abs_sin(tp_b)
        return jnp.abs(d_neg[:, 0]) * abs_sin(tn_b)

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
        name = canonical_norm(loss, part)
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
    names = [canonical_norm(n, p) for p in parts for n in named]
    allowed = {k for n in names for k in DEFAULTS[n]} | {k for loss in user for k in loss.params}
    unknown = set(params) - allowed
    if unknown:
        raise ValueError(f"unknown parameter {sorted(unknown)[0]!r} for {', '.join(map(str, losses))}")
    ks = None if negatives is None else [int(check_negatives(k)) for k in negatives]
    panels = []
    for part in parts:
        done = set()
        for loss in losses:
            if loss in user:  # any loss of cosines: autodiff norms, one panel per K
                own = {k: v for k, v in params.items() if k in loss.params}
                panels.extend(norm_result(loss, part=part, negatives=k, grid=grid, **own)
                              for k in (ks or [DEFAULT_NEGATIVES]))
                continue
            name = canonical_norm(_closed_form(loss) if isinstance(loss, Loss) else loss, part)
            if (name, part) not in CLOSED_FORMS or name in done:
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
        if name not in DEFAULTS or (name, part) not in CLOSED_FORMS:
            have = ", ".join(f"{reg} ({'/'.join(p for p in PARTS if (n, p) in CLOSED_FORMS)})" for n, reg in REGISTRY_NAMES.items())
            raise ValueError(f"no {part!r} gradient-norm map for loss {reg_name!r}; maps exist for {have}")
        params = {k: float(v) for k, v in given.items() if k in DEFAULTS[name]}
        values = norm_map(name, mu_pos, mu_neg, part=part, negatives=protocol.n_neg, **params)
        used, method = {**DEFAULTS[name], **params}, "closed form"
    meta = {"statistic": "norm_map", "loss": reg_name, "params": used, "part": part,
            "negatives": protocol.n_neg, "protocol": protocol.to_dict(), "method": method,
            "reference": "Nie et al. 2023 Eqs. 7-9, 11, 16-22", **runtime_meta()}
    return Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": protocol.mu_pos, "mu_neg": protocol.mu_neg},
                  mean=np.asarray(values), meta=meta)
