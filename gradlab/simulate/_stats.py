"""The statistics of Li et al. 2024 Sec. 3.1: GD maps, weight share, dynamic ratio, Lemma 1.

Fast paths. A loss whose spec is ``factored`` (``gradlab.losses.LossSpec.factored``) sees its N − 1 negatives only through one number
per batch, so the negatives are replaced by a single *effective negative* and the
loss's own kernel is evaluated on it:

* ``"lse"`` losses (InfoNCE, ArcCon, DCL, DCL+): GD depends on S = Σ_j e^{c_j/τ}; the
  effective cosine is c_eff = τ · logsumexp(c/τ), so that e^{c_eff/τ} = S; their weight
  is the softmax, and their ratio does not depend on the negative.
* ``"max"`` losses (MPT, MET, MAT): GD, the non-zero weight and the ratio depend on the
  hardest negative (largest cosine) only; c_eff = max_j c_j.

A user loss (``gradlab.loss_from_cosines(..., neg_reduction=...)``) or a composition
(``gradlab.compose``) whose blocks read the negatives through one reduction takes the
same paths. Any other loss with an angle form takes the direct path (the whole
(B, N − 1) cosine table per cell). The tests check that both paths agree to float rounding.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from gradlab import backend, defaults
from gradlab.io import Result
from gradlab.lemma1 import lemma1_bounds, sphere_cosines, summarize_min_ratio
from gradlab.losses import BUILTIN, Loss, get_spec, list_losses
from gradlab.simulate._engine import Stat, run
from gradlab.simulate._protocol import Protocol
from gradlab.simulate._quadrature import quadrature_gd_map
from gradlab.simulate._results import as_loss as _as_loss
from gradlab.simulate._results import check_protocol as _check_protocol
from gradlab.simulate._results import grid_result as _grid_result
from gradlab.simulate._results import meta as _meta
from gradlab.simulate._results import stderr_out as _stderr_out
from gradlab.simulate._sampling import CommonDraws, cell_draws, draws_for

_STAT_CACHE: dict[tuple, Stat] = {}


# --- helpers ---------------------------------------------------------------------------------
def _check_angle_form(loss: Loss):
    if loss.spec.kind != "cosine":
        raise ValueError(
            f"{loss.name} has no angle form (its components depend on more of the batch than the "
            "anchor's angles), so it cannot be simulated from θ_ii' and θ_ij'"
        )


def _registered(loss: Loss) -> bool:
    """The loss is the registered one of its name (not a user loss that reuses the name)."""
    return loss.spec.name in list_losses() and get_spec(loss.spec.name) is loss.spec


def _path(loss: Loss, method: str) -> str:
    if method not in ("auto", "factored", "direct"):
        raise ValueError(f"method must be 'auto', 'factored' or 'direct'; got {method!r}")
    kind = loss.spec.factored
    if method == "factored":
        if kind is None:
            factored = [n for n in list_losses() if get_spec(n).factored]
            raise ValueError(
                f"{loss.name} has no factored path; factored losses: {', '.join(factored)}, and user losses "
                "declared with neg_reduction= (gradlab.loss_from_cosines)"
            )
        return kind
    if method == "direct" or kind is None:
        return "direct"
    return kind


def _params(loss: Loss, dtype, **extra):
    """The loss's parameters (and ``extra``) as host scalars of ``dtype``: the programs take them
    as arguments (a device array made here would be one more dispatch per map)."""
    p = {k: np.asarray(v, dtype) for k, v in loss.params.items()}
    p.update({k: np.asarray(v, dtype) for k, v in extra.items()})
    return p


def _loss_params(p: dict, loss: Loss) -> dict:
    return {k: p[k] for k in loss.params}


def _effective_neg(kind: str, c_neg, p):
    if kind == "lse":
        tau = p["tau"]
        return tau * table_logsumexp(c_neg / tau)
    return jnp.max(c_neg, axis=-1)


def table_logsumexp(x):
    """log Σ exp(x) over the last axis, as the negatives' tables take it on the backend traced
    for (``gradlab.backend.current``).

    A GPU takes it in one pass (:func:`logsumexp_one_pass`): in two (the max, then the sum) XLA
    writes x to memory between the passes where x is costly to recompute, as in the independent
    mode, whose x comes from fresh random draws (compiled for an H100, that map's kernels then move
    24.0 GB instead of 34.4: ``benchmarks/gpu_aot.py --engine``). A CPU takes two: its XLA ran a
    reduction with a combiner of its own 7–10 times slower than the two built-in ones."""
    if backend.current() == "gpu":
        return logsumexp_one_pass(x)
    return jax.nn.logsumexp(x, axis=-1)


def logsumexp_one_pass(x):
    """log Σ exp(x) over the last axis in one pass: a reduction of (running max, sum of exp(x − it)).

    Two partial results combine as (m, s) ⊕ (m', s') = (M, S) with M = max(m, m') and, when m ≥ m',
    S = s + s'·e^{m'−m} (else the same with the roles swapped): one exponential a combination,
    exact up to rounding, never above 1, so nothing overflows; −inf for an empty axis."""
    def combine(a, b):
        (ma, sa), (mb, sb) = a, b
        hi, lo = jnp.maximum(ma, mb), jnp.minimum(ma, mb)
        e = jnp.exp(lo - jnp.where(jnp.isfinite(hi), hi, 0))  # e^{lo − hi}; 0 where lo is −inf
        return hi, jnp.where(ma >= mb, sa + sb * e, sb + sa * e)

    zero = jnp.zeros((), x.dtype)
    m, s = jax.lax.reduce((x, jnp.ones_like(x)), (jnp.array(-jnp.inf, x.dtype), zero), combine, (x.ndim - 1,))
    return m + jnp.log(s)


def _kernel_on(loss: Loss, kind: str, c_pos, table, p):
    """(gd (B,), weight (B, M), ratio (B, M)) from the loss kernel on the negatives' table."""
    c_neg = table[..., None] if kind != "direct" else table
    valid = jnp.ones(c_neg.shape, dtype=bool)
    gd, weight, ratio = loss.spec.kernel(c_pos, c_neg, valid, **_loss_params(p, loss))
    return gd, weight, jnp.broadcast_to(ratio, weight.shape)


def _effective_ratio(weight, ratio):
    """Σ_j W_j R_j / Σ_j W_j over the last axis (the ratio the weighted gradient sees)."""
    if weight.shape[-1] == 1:
        return ratio[..., 0]
    total = jnp.sum(weight, axis=-1)
    safe = jnp.where(total != 0, total, 1)
    return jnp.where(total != 0, jnp.sum(weight * ratio, axis=-1) / safe, jnp.nan)


def _stored(loss: Loss, *key) -> tuple | None:
    """A statistic's identity in every process (``Stat.stored``): one of gradlab's own losses by name
    (its code is gradlab's, which the store's key covers); None for any other loss, a user's
    ``register``-ed one included."""
    return (loss.spec.name, *key) if loss.spec.name in BUILTIN and _registered(loss) else None


def _stat(key: tuple, build: Callable[[], Stat]) -> Stat:
    if key not in _STAT_CACHE:
        _STAT_CACHE[key] = build()
    return _STAT_CACHE[key]


# --- GD --------------------------------------------------------------------------------------
def _gd_stat(loss: Loss, kind: str, with_ratio: bool) -> Stat:
    def neg(c_neg, p):
        return c_neg if kind == "direct" else _effective_neg(kind, c_neg, p)

    def pair(c_pos, table, u, p):
        gd, weight, ratio = _kernel_on(loss, kind, c_pos, table, p)
        out = {"gd": (gd, None)}
        if with_ratio:
            eff = _effective_ratio(weight, ratio)
            # a user loss leaves W, R undefined where GD = 0: those batches do not count
            out["ratio"] = (eff, jnp.isfinite(eff) if loss.spec.family == "user" else None)
        return out

    return Stat(key=("gd", loss.spec, kind, with_ratio), neg=neg, pair=pair,
                stored=_stored(loss, "gd", kind, with_ratio))


def gd_map(loss, protocol: Protocol | None = None, *, exact: bool = False, method: str = "auto", progress=None) -> Result:
    """Mean GD per (μ_pos, μ_neg) cell (Li et al. 2024 Figs. 2 and 10).

    Args:
      loss: registry name or ``gradlab.Loss`` with an angle form.
      protocol: the ``Protocol`` (default: the paper's).
      exact: use quadrature instead of Monte Carlo (MPT, MET, MAT; ``stderr`` is None).
      method: ``"auto"`` (factored where available), ``"factored"`` or ``"direct"``.
      progress: optional ``callable(done, total)``, called after each step.

    Returns:
      ``Result`` with dims (mu_pos, mu_neg): ``mean`` (G_pos, G_neg), ``stderr``.

    Examples:
      >>> from gradlab.simulate import Protocol, gd_map
      >>> r = gd_map("infonce", Protocol(grid=4, batches=16, batch_size=8))
      >>> r.mean.shape
      (4, 4)
    """
    protocol = _check_protocol(protocol)
    loss = _as_loss(loss)
    _check_angle_form(loss)
    if exact:
        if not _registered(loss):
            raise ValueError(f"exact (quadrature) GD maps exist for the registered MPT, MET and MAT; {loss.name!r} is a user loss")
        return quadrature_gd_map(loss, protocol)
    kind = _path(loss, method)
    dtype = protocol.jnp_dtype()
    stat = _stat(("gd", loss, kind, False), lambda: _gd_stat(loss, kind, False))
    out = run(stat, protocol, protocol.mu_pos, protocol.mu_neg, _params(loss, dtype),
              chunk=protocol.chunk, progress=progress)
    mean, se, _ = out["gd"]
    return _grid_result(protocol, mean, stderr=se, meta=_meta("gd_map", protocol, loss, method=kind))


# --- ratio -----------------------------------------------------------------------------------
def ratio_map(loss, protocol: Protocol | None = None, *, gd_threshold: float = defaults.GD_THRESHOLD, method: str = "auto", progress=None) -> Result:
    """Mean effective ratio Σ_j W_j R_j / Σ_j W_j per cell (Li et al. 2024 Fig. 4).

    For MET / MAT the weight is on the hardest negative, so this is its ratio; for ArcCon
    the ratio does not depend on the negative. Cells that do not occur in training are
    masked: μ_pos > μ_neg, or mean GD < ``gd_threshold`` (gradient switched off).

    Returns:
      ``Result`` with dims (mu_pos, mu_neg), ``mask``, and extra arrays ``gd`` (mean GD)
      and ``gd_stderr``.
    """
    protocol = _check_protocol(protocol)
    loss = _as_loss(loss)
    _check_angle_form(loss)
    if not isinstance(gd_threshold, numbers.Real) or not np.isfinite(gd_threshold):
        raise ValueError(f"gd_threshold must be a finite number; got {gd_threshold!r}")
    kind = _path(loss, method)
    dtype = protocol.jnp_dtype()
    stat = _stat(("gd", loss, kind, True), lambda: _gd_stat(loss, kind, True))
    out = run(stat, protocol, protocol.mu_pos, protocol.mu_neg, _params(loss, dtype),
              chunk=protocol.chunk, progress=progress)
    mean, se, count = out["ratio"]
    gd, gd_se, _ = out["gd"]
    mask = (protocol.mu_pos[:, None] > protocol.mu_neg[None, :]) | (gd < gd_threshold) | (np.asarray(count) == 0)
    return _grid_result(
        protocol,
        mean,
        stderr=se,
        mask=mask,
        extra={"gd": gd, "gd_stderr": gd_se},
        extra_dims={"gd": ("mu_pos", "mu_neg"), "gd_stderr": ("mu_pos", "mu_neg")},
        meta=_meta("ratio_map", protocol, loss, method=kind, gd_threshold=float(gd_threshold)),
    )


# --- weight share ----------------------------------------------------------------------------
def _weight_stat(loss: Loss, kind: str, gated: bool) -> Stat:
    def neg(c_neg, p):
        if kind == "direct":
            return c_neg
        return (_effective_neg(kind, c_neg, p), jnp.max(c_neg, axis=-1))

    def pair(c_pos, table, u, p):
        if kind == "direct":
            gd, weight, _ = _kernel_on(loss, kind, c_pos, table, p)
            hard = jnp.argmax(table, axis=-1)
            w_hard = jnp.take_along_axis(weight, hard[..., None], axis=-1)[..., 0]
            total = jnp.sum(weight, axis=-1)
            share = jnp.where(total != 0, w_hard / jnp.where(total != 0, total, 1), jnp.nan)
        else:
            c_eff, c_max = table
            gd, _, _ = _kernel_on(loss, kind, c_pos, c_eff, p)
            if kind == "lse":  # softmax share of the hardest negative: e^{c_max/τ} / S
                share = jnp.exp((c_max - c_eff) / p["tau"])
            else:  # all the weight is on the hardest negative
                share = jnp.ones_like(c_max)
        include = gd >= p["gd_gate"] if gated else None
        return {"share": (share, include), "gd": (gd, None)}

    return Stat(key=("weight", loss.spec, kind, gated), neg=neg, pair=pair,
                stored=_stored(loss, "weight", kind, gated))


def _check_weight_args(loss: Loss, gd_gate, what: str):
    _check_angle_form(loss)
    if "tau" not in loss.params:
        raise ValueError(f"{loss.name} has no temperature parameter 'tau'; {what} needs one")
    if gd_gate is not None and not (isinstance(gd_gate, numbers.Real) and np.isfinite(gd_gate)):
        raise ValueError(f"gd_gate must be None or a finite number; got {gd_gate!r}")


def _weight_moments(loss: Loss, kind: str, draws, protocol: Protocol, mu_pos, gd_gate, progress):
    """(share mean, stderr, count, gd mean) on mu_pos × protocol.mu_neg for ``loss`` as configured."""
    gated = gd_gate is not None
    stat = _stat(("weight", loss, kind, gated), lambda: _weight_stat(loss, kind, gated))
    p = _params(loss, protocol.jnp_dtype(), gd_gate=gd_gate if gated else 0.0)
    out = run(stat, draws, mu_pos, protocol.mu_neg, p, chunk=protocol.chunk, progress=progress)
    m, s, c = out["share"]
    return m, s, np.broadcast_to(c, m.shape), out["gd"][0]


def _weight_fields(mean, se, count, gd, batches: int, dims: tuple) -> dict:
    mask = count == 0
    return dict(
        mean=np.where(mask, np.nan, mean),
        stderr=np.where(mask, np.nan, _stderr_out(se, count)),
        mask=mask,
        extra={"passed": count / batches, "gd": gd},
        extra_dims={"passed": dims, "gd": dims},
    )


def weight_share(
    protocol: Protocol | None = None,
    *,
    taus: Sequence[float] = defaults.TAUS,
    mu_pos: float = defaults.WEIGHT_MU_POS,
    loss="infonce",
    gd_gate: float | None = None,
    method: str = "auto",
    progress=None,
) -> Result:
    """Mean share of the hardest negative (largest cosine) in the weight (Li et al. 2024 Fig. 3).

    μ_pos is fixed; μ_neg runs over the protocol's μ_neg axis; τ over ``taus`` (the loss
    must have a ``tau`` parameter). With ``gd_gate = g`` only batches whose GD is >= g
    count; a cell where none passes is masked (mean and stderr NaN there).

    Returns:
      ``Result`` with dims (tau, mu_neg), ``mask`` (no batch passed), extra ``passed``
      (fraction of batches that passed the gate) and ``gd`` (mean GD).

    Examples:
      >>> from gradlab.simulate import Protocol, weight_share
      >>> r = weight_share(Protocol(grid=3, batches=8, batch_size=8), taus=(0.1, 0.05))
      >>> r.dims, r.mean.shape
      (('tau', 'mu_neg'), (2, 3))
    """
    protocol = _check_protocol(protocol)
    loss = _as_loss(loss)
    _check_weight_args(loss, gd_gate, "weight_share sweeps τ")
    taus = [float(t) for t in np.atleast_1d(np.asarray(taus, dtype=float))]
    if not taus or any(not (np.isfinite(t) and t > 0) for t in taus):
        raise ValueError(f"taus must be positive finite numbers; got {taus}")
    kind = _path(loss, method)
    draws = draws_for(protocol)
    rows = []
    for i, tau in enumerate(taus):
        lp = loss.replace(tau=tau)  # the same spec (registered or not), τ changed
        sub = None if progress is None else (lambda d, t, i=i: progress(i * t + d, len(taus) * t))
        rows.append([a[0] for a in _weight_moments(lp, kind, draws, protocol, np.asarray([mu_pos], float), gd_gate, sub)])
    mean, se, count, gd = (np.stack(col) for col in zip(*rows, strict=True))
    return Result(
        dims=("tau", "mu_neg"),
        coords={"tau": np.asarray(taus), "mu_neg": protocol.mu_neg},
        **_weight_fields(mean, se, count, gd, protocol.batches, ("tau", "mu_neg")),
        meta=_meta("weight_share", protocol, loss, method=kind, mu_pos=float(mu_pos),
                   gd_gate=None if gd_gate is None else float(gd_gate)),
    )


def weight_map(loss, protocol: Protocol | None = None, *, gd_gate: float | None = None, method: str = "auto",
               progress=None) -> Result:
    """Mean share of the hardest negative in the weight over the whole (μ_pos, μ_neg) grid.

    Li et al. 2024 Fig. 3 fixes μ_pos = π/6 and sweeps τ (``weight_share``); this map keeps
    the loss's own τ and sweeps μ_pos as well. With ``gd_gate = g`` only batches whose GD
    is >= g count; a cell where none passes is masked.

    Args:
      loss: registry name or ``gradlab.Loss`` with an angle form and a ``tau`` parameter.
      protocol: the ``Protocol`` (default: the paper's).
      gd_gate: None (every batch) or a GD threshold.
      method: ``"auto"``, ``"factored"`` or ``"direct"``.
      progress: optional ``callable(done, total)``.

    Returns:
      ``Result`` with dims (mu_pos, mu_neg): ``mean`` share, ``stderr``, ``mask`` (no batch
      passed), extra ``passed`` (fraction of batches that passed) and ``gd`` (mean GD).

    Examples:
      >>> from gradlab.simulate import Protocol, weight_map
      >>> r = weight_map("infonce", Protocol(grid=3, batches=8, batch_size=8), gd_gate=0.01)
      >>> r.dims, r.mean.shape
      (('mu_pos', 'mu_neg'), (3, 3))
    """
    protocol = _check_protocol(protocol)
    loss = _as_loss(loss)
    _check_weight_args(loss, gd_gate, "weight_map")
    kind = _path(loss, method)
    moments = _weight_moments(loss, kind, protocol, protocol, protocol.mu_pos, gd_gate, progress)
    return _grid_result(
        protocol,
        **_weight_fields(*moments, protocol.batches, ("mu_pos", "mu_neg")),
        meta=_meta("weight_map", protocol, loss, method=kind, gd_gate=None if gd_gate is None else float(gd_gate)),
    )


# --- Lemma 1 ---------------------------------------------------------------------------------
def _alpha_fn(alpha_law):
    """Map uniforms u in [0, 1) to α: 'uniform' -> π u; a number -> that α; a callable -> it."""
    if isinstance(alpha_law, str):
        if alpha_law != "uniform":
            raise ValueError(f"alpha_law must be 'uniform', a number or a callable; got {alpha_law!r}")
        return ("uniform",), lambda u: jnp.pi * u
    if isinstance(alpha_law, numbers.Real) and not isinstance(alpha_law, bool):
        a = float(alpha_law)
        return ("fixed", a), lambda u: jnp.full_like(u, a)
    if callable(alpha_law):
        return ("callable", alpha_law), alpha_law
    raise ValueError(f"alpha_law must be 'uniform', a number or a callable; got {alpha_law!r}")


def _lemma_stat(alpha_key, alpha: Callable) -> Stat:
    def neg(c_neg, p):
        return jnp.max(c_neg, axis=-1)  # the hardest negative: smallest angle θ_ij'

    def pair(c_pos, c_max, u, p):
        from gradlab.geometry import safe_arccos

        # (B, 1) angles against (R,) ratios: each sine and cosine once per batch
        tp, tn, a = safe_arccos(c_pos)[:, None], safe_arccos(c_max)[:, None], alpha(u)[:, None]
        low, high, feasible = lemma1_bounds(tp, tn, a, p["lam"])
        r = p["ratios"]
        sat = feasible & (low <= r) & (r <= high)
        before, after = sphere_cosines(tp, tn, a, p["lam"], r)
        closer = after >= before
        dt = c_pos.dtype
        return {
            "low": (low[:, 0], feasible[:, 0]),
            "feasible": (feasible[:, 0].astype(dt), None),
            "satisfied": (sat.astype(dt), None),
            "sphere_closer": (closer.astype(dt), None),
            "sphere_disagree": ((sat != closer).astype(dt), None),
        }

    stored = None if alpha_key[0] == "callable" else ("lemma1", *alpha_key)  # a user's α law: no stable name
    return Stat(key=("lemma1",) + alpha_key, neg=neg, pair=pair, stored=stored)


def lemma1_map(
    protocol: Protocol | None = None,
    *,
    lam: float = defaults.LEMMA1_LAM,
    ratios: Sequence[float] = defaults.LEMMA1_RATIOS,
    alpha_law="uniform",
    progress=None,
) -> Result:
    """Lemma-1 statistics per cell, for each batch's hardest negative (smallest θ_ij').

    α (the angle between the planes O h_i h_i' and O h_i h_j') is drawn per batch from
    ``alpha_law``: ``"uniform"`` on [0, π] (default), a fixed number, or a callable
    mapping uniforms u ∈ [0, 1) (array) to α (an inverse CDF).

    Returns:
      ``Result`` with dims (mu_pos, mu_neg): ``mean`` = mean minimum ratio r_low over the
      feasible batches (masked where none is feasible); extra ``feasible`` (fraction of
      feasible batches) and ``satisfied`` (r, mu_pos, mu_neg): the fraction of batches with
      r_low <= r <= r_high, with axis ``r``; ``sphere_closer`` (r, mu_pos, mu_neg): the
      fraction where the step, taken on the sphere and retracted, truly does not increase
      the angle to the positive; ``sphere_disagree``: the fraction where the tangent-plane
      lemma and the sphere disagree (``gradlab.lemma1.lemma1_sphere_check``).
    """
    protocol = _check_protocol(protocol)
    if not (isinstance(lam, numbers.Real) and np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be a positive finite number; got {lam!r}")
    r = np.atleast_1d(np.asarray(ratios, dtype=float))
    if r.ndim != 1 or r.size == 0 or not np.all(np.isfinite(r)):
        raise ValueError(f"ratios must be a non-empty 1-D sequence of finite numbers; got {ratios!r}")
    alpha_key, alpha = _alpha_fn(alpha_law)
    dtype = protocol.jnp_dtype()
    stat = _stat(("lemma1",) + alpha_key, lambda: _lemma_stat(alpha_key, alpha))
    p = {"lam": np.asarray(lam, dtype), "ratios": np.asarray(r, dtype)}  # host arrays: no dispatch of their own
    out = run(stat, protocol, protocol.mu_pos, protocol.mu_neg, p, chunk=protocol.chunk, progress=progress)
    low, low_se, n_feas = out["low"]
    mask = n_feas == 0
    sat, closer, disagree = (np.moveaxis(out[k][0], -1, 0) for k in ("satisfied", "sphere_closer", "sphere_disagree"))
    rdims = ("r", "mu_pos", "mu_neg")
    return _grid_result(
        protocol,
        np.where(mask, np.nan, low),
        coords={"r": r},
        stderr=np.where(mask, np.nan, _stderr_out(low_se, n_feas)),
        mask=mask,
        extra={"feasible": out["feasible"][0], "satisfied": sat, "sphere_closer": closer, "sphere_disagree": disagree},
        extra_dims={"feasible": ("mu_pos", "mu_neg"), "satisfied": rdims, "sphere_closer": rdims, "sphere_disagree": rdims},
        meta=_meta("lemma1_map", protocol, None, lam=float(lam), alpha_law=str(alpha_law)),
    )


def min_ratio_distribution(
    protocol: Protocol | None = None,
    *,
    lams: Sequence[float] = defaults.LEMMA1_LAMS,
    mu_pos: float | Sequence[float] = defaults.LEMMA1_MU_POS,
    mu_neg: float | Sequence[float] = defaults.LEMMA1_MU_NEG,
    bins=None,
    quantiles: Sequence[float] = defaults.MIN_RATIO_QUANTILES,
    alpha_law="uniform",
    return_samples: bool = False,
    ratios: Sequence[float] = defaults.LEMMA1_RATIOS,
) -> Result:
    """Distribution of the Lemma-1 minimum ratio r_low per λ (Li et al. 2024 Fig. 8a, simulated).

    Batches of the cell(s) (μ_pos, μ_neg) (scalars, or 1-D arrays pooled over their
    Cartesian product) give one r_low each (hardest negative, α from ``alpha_law``).
    Infeasible batches have no r_low; their fraction is reported.

    Returns:
      ``Result`` with dims (lam,): ``mean`` r_low over feasible samples, ``stderr``; extra
      ``feasible`` (lam,), ``histogram`` (lam, bin) as a density over ``bin_edges``,
      ``below`` / ``above`` (lam,) fractions outside the bins, ``quantiles`` (lam, q)
      (NaN where nothing is feasible), ``cdf`` (lam, ratio) the fraction of feasible
      batches with r_low ≤ r for each of ``ratios``, and with ``return_samples``
      ``samples`` (lam, sample) (NaN where infeasible).
    """
    protocol = _check_protocol(protocol)
    lams = np.atleast_1d(np.asarray(lams, dtype=float))
    if lams.ndim != 1 or lams.size == 0 or not np.all(np.isfinite(lams) & (lams > 0)):
        raise ValueError(f"lams must be positive finite numbers; got {lams!r}")
    edges = np.linspace(-2.0, 4.0, 61) if bins is None else np.asarray(bins, dtype=float)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins must be increasing edges (at least 2); got shape {edges.shape}")
    qs = np.asarray(quantiles, dtype=float)
    _, alpha = _alpha_fn(alpha_law)
    dtype = protocol.jnp_dtype()
    mp = np.atleast_1d(np.asarray(mu_pos, float))
    mn = np.atleast_1d(np.asarray(mu_neg, float))
    cp, cn = (np.repeat(mp, mn.size), np.tile(mn, mp.size))
    samples = []
    draws = draws_for(protocol)
    for i, (a, b) in enumerate(zip(cp, cn, strict=True)):
        if isinstance(draws, CommonDraws):
            z_pos, z_neg, u = draws.z_pos, draws.z_neg, draws.u
        else:
            z_pos, z_neg, u = cell_draws(protocol.seed, i, protocol.batches, protocol.batch_size, dtype)
        theta_pos = jnp.arccos(jnp.cos(jnp.asarray(a, dtype) + protocol.sigma_pos * z_pos))
        c_max = jnp.max(jnp.cos(jnp.asarray(b, dtype) + protocol.sigma_neg * z_neg), axis=-1)
        theta_min = jnp.arccos(c_max)
        low, _, feas = lemma1_bounds(theta_pos[None], theta_min[None], alpha(u)[None], jnp.asarray(lams, dtype)[:, None])
        samples.append(np.where(np.asarray(feas), np.asarray(low), np.nan))
    s = np.concatenate(samples, axis=1)  # (lam, samples)
    return summarize_min_ratio(
        s, lams, bins=edges, quantiles=qs, return_samples=return_samples, ratios=ratios,
        meta=_meta("min_ratio_distribution", protocol, None, mu_pos=mp.tolist(), mu_neg=mn.tolist(),
                   alpha_law=str(alpha_law)),
    )
