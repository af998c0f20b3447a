"""The per-batch statistics of the monitor, computed in one jitted pass.

Notation (the Formulas page of the documentation): a batch of N pairs, anchors h_i and positives h_i' (unit
rows after normalization), negatives h_j' (j ≠ i); C_ij = h_i·h_j', c_p = C_ii,
θ = arccos C. The hardest negative of anchor i is j*(i) = argmax_{j≠i} C_ij (the
nearest one; first index on ties).

Every statistic is a reduction over anchors of per-anchor quantities, each a function
of one row of C (and of the rows of the Gram matrices h hᵀ, h' h'ᵀ for the uniformity).
So the anchors are processed in row blocks of ``StatsConfig.block``: a block forms
only (block, N) matrices, never an (N, N) one, and every reduction is exact:
sums and means add up per-anchor values, the pooled σ of the N(N − 1) negative angles
merges per-anchor means and sums of squared deviations (Chan et al.'s exact update),
the uniformity is a logsumexp of per-anchor logsumexps, histograms add per-block
counts over fixed bins, and the Lemma-1 quantiles are over the N per-anchor values.
Cost O(N² D) per τ; memory O(N D + block · N). A sharded ``jax.Array`` input is
fine: the row blocks never gather an (N, N) matrix; each block needs all N keys, so
the keys (N, D) may be replicated on every device (XLA's choice), not split N D / devices
(that would need a ring exchange of key shards).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from gradlab import defaults
from gradlab._transfer import host_outputs
from gradlab.collapse import collapse_ratios
from gradlab.geometry import normalize, safe_arccos, sin_from_cos
from gradlab.lemma1 import lemma1_bounds
from gradlab.losses import gaussian_logits
from gradlab.monitor._collapse import embedding_std

__all__ = ["StatsConfig", "batch_statistics_fn", "host_statistics_fn", "tau_key", "lam_key"]

_QNAMES = tuple(f"q{round(100 * q):02d}" for q in defaults.MONITOR_QUANTILES)  # ("q10", ..., "q90")


def tau_key(tau: float) -> str:
    """The record key of a temperature (``0.05 -> "0.05"``)."""
    return f"{float(tau):g}"


lam_key = tau_key


@dataclasses.dataclass(frozen=True)
class LossEntry:
    """One loss the monitor evaluates: its key, kernel and parameters.

    ``kernel`` is the embedding-form cosine kernel ``(c_pos, C, valid, **params) -> (gd, W, R)``
    of a cosine-family loss (evaluated in row blocks). The trained loss may be of any kind:
    then ``kernel`` is ``None`` and ``loss`` (a ``gradlab.Loss``) gives its exact
    ``components`` on the whole batch. ``about`` (name, params) describes the entry when
    ``loss`` stands for something else (a gradient transform's surrogate).
    """

    key: str
    kernel: Callable | None
    params: tuple[tuple[str, float], ...]
    loss: Any = None
    about: tuple | None = None


@dataclasses.dataclass(frozen=True)
class StatsConfig:
    """Static configuration of the jitted statistics (hashable: one compilation per config and shape).

    Attributes:
      losses: loss entries whose GD is summarized (``gd_mean``, ``gd_off_fraction``).
      ratio_losses: loss entries whose dynamic ratio at the hardest negative is
        averaged over the anchors passing their own GD gate (``ratio``).
      trained: the loss being trained, with its own parameters (``None``: none). Its
        statistics appear under the key ``"trained"``: ``gd_mean``, ``gd_off_fraction``,
        ``weight_share`` (the hardest negative's share W_ij* / Σ_j W_ij, over the anchors
        where W is defined, GD > 0), ``ratio`` and ``ratio_pass_fraction`` (R at the
        hardest negative over the anchors passing the GD gate; NaN for a matrix ratio).
      taus: temperatures of the exponential weight (``hardest_share``, ``weight_share``).
      lambdas: Lemma-1 step sizes λ (``lemma1_*``).
      margin: margin m of the baseline's GD gate 1[c_p − max_k c_k < m] (Li et al. 2024
        Eq. 5), reported under the key ``"baseline"``; ``None`` to skip.
      gd_threshold: an anchor's GD is "off" when GD < gd_threshold.
      static_ratio: the static r whose Lemma-1 satisfied fraction is reported.
      align_alpha, uniform_t: Wang & Isola's α and t.
      hist_bins: bins of the cos θ histograms over [−1, 1] (``None``: no histograms).
      block: anchors per row block: only (block, N) matrices are formed, never the
        (N, N) ones (N <= block: one block).
      lemma1_hist_range, lemma1_hist_bins: histogram of the minimum ratio
        (values outside the range are clipped into the end bins).
    """

    losses: tuple[LossEntry, ...] = ()
    ratio_losses: tuple[LossEntry, ...] = ()
    trained: LossEntry | None = None
    taus: tuple[float, ...] = ()
    lambdas: tuple[float, ...] = ()
    margin: float | None = 0.3
    gd_threshold: float = 0.01
    static_ratio: float = 1.0
    align_alpha: float = 2.0
    uniform_t: float = 2.0
    hist_bins: int | None = None
    block: int = 256
    lemma1_hist_range: tuple[float, float] = (-2.0, 4.0)
    lemma1_hist_bins: int = 60


def _nan_if_empty(total, count):
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def _first_true(mask):
    """Index of the first True entry of a 1-D mask, or −1."""
    return jnp.where(jnp.any(mask), jnp.argmax(mask), -1)


def _row_block(h_rows, hp_rows, h, hp, start, size: int, cfg: StatsConfig):
    """Per-anchor quantities of the anchors start … start + size − 1 against all N keys.

    ``h_rows`` / ``hp_rows`` are h / h' padded to whole blocks (the block's anchors and
    positives are sliced from them); ``h`` / ``hp`` (N, D) are the keys. Only (size, N)
    matrices are formed: C_b = h_b h'ᵀ, the angles, the softmax weights per τ, and the
    two Gram rows of the uniformity. Rows past N (padding) are masked out of the
    histogram and sliced away by the caller.
    """
    n = hp.shape[0]
    dtype = h.dtype
    hb = jax.lax.dynamic_slice_in_dim(h_rows, start, size)
    hpb = jax.lax.dynamic_slice_in_dim(hp_rows, start, size)
    rows = start + jnp.arange(size)
    cols = jnp.arange(n)
    valid = cols[None, :] != rows[:, None]
    local = jnp.arange(size)
    C = hb @ hp.T
    c_pos = C[local, jnp.clip(rows, 0, n - 1)]
    theta = safe_arccos(C)
    row_mean = jnp.sum(jnp.where(valid, theta, 0.0), axis=-1) / (n - 1)
    hard = jnp.argmax(jnp.where(valid, C, -jnp.inf), axis=1)  # j*(i)
    c_hard = C[local, hard]
    hp_hard = hp[hard]
    # One block with N <= D: the keys' Gram matrix G' = h' h'ᵀ (N, N) is the cheaper way to
    # the push directions (N³ per τ instead of N² D); several blocks never form it.
    gram = hp @ hp.T if size == n and n <= hp.shape[1] else None
    out = {
        "c_pos": c_pos,
        "c_hard": c_hard,
        "gp_hard": jnp.sum(hpb * hp_hard, axis=-1) if gram is None else gram[local, hard],  # h_i'·h_j*'
        "theta_mean": row_mean,
        "theta_m2": jnp.sum(jnp.where(valid, (theta - row_mean[:, None]) ** 2, 0.0), axis=-1),
        "cos_sum": jnp.sum(jnp.where(valid, C, 0.0), axis=-1),
        # ‖h_i − h_j'‖ = √(2 − 2 C_ij) on the sphere (clipped at 0 against rounding)
        "dist_neg_mean": jnp.sum(jnp.where(valid, jnp.sqrt(jnp.clip(2.0 - 2.0 * C, 0.0)), 0.0), axis=-1) / (n - 1),
    }

    kernels = {}

    def kernel(e):  # each distinct loss traced once, even if listed for GD and for ratio
        if e.key not in kernels:  # (by key: the trained entry's parameters are traced, not hashable)
            kernels[e.key] = e.kernel(c_pos, C, valid, **dict(e.params))
        return kernels[e.key]

    out["gd"] = {e.key: kernel(e)[0] for e in cfg.losses}
    out["hard"] = hard
    t = cfg.trained
    if t is not None and t.kernel is not None:
        gd, w, r = kernel(t)
        out["t_gd"] = gd
        out["t_share"] = w[local, hard] / jnp.sum(w, axis=-1)
        out["t_r_hard"] = jnp.broadcast_to(r, C.shape)[local, hard]
    out["r_hard"], out["r_gd"] = {}, {}
    for e in cfg.ratio_losses:
        gd, _, r = kernel(e)
        out["r_hard"][e.key] = jnp.broadcast_to(r, C.shape)[local, hard]
        out["r_gd"][e.key] = gd

    # hardest negative's share of the exponential weight, per τ.
    # simple: w_{i j*} with w = softmax_{j≠i}(C_ij/τ).
    # projected: v_i = Σ_j w_ij t_ij with t_ij = h_j' − C_ij h_i (tangent at h_i); the
    # hardest negative's contribution to v_i along v_i is w_ij* ⟨t_ij*, v_i⟩ / ‖v_i‖²
    # (the contributions of all negatives sum to 1). With u_i = Σ_j w_ij h_j':
    # ‖v_i‖² = ‖u_i‖² − (Σ_j w_ij C_ij)² and ⟨t_ij*, v_i⟩ = u_i·h_j*' − C_ij* Σ_j w_ij C_ij,
    # where ‖u_i‖² = (W G' Wᵀ)_ii and u_i·h_j*' = (W G')_ij* when G' is at hand.
    eps = float(jnp.finfo(dtype).eps)
    out["w_hard"], out["share"] = {}, {}
    for tau in cfg.taus:
        logits = jnp.where(valid, C / tau, -jnp.inf)
        w = jax.nn.softmax(logits, axis=-1, where=valid)
        w = jnp.where(valid, w, 0.0)
        w_hard = w[local, hard]
        if gram is None:
            u = w @ hp
            wgw = jnp.sum(u * u, axis=-1)  # ‖Σ_j w_ij h_j'‖² ≤ 1
            u_hard = jnp.sum(u * hp_hard, axis=-1)
        else:
            wg = w @ gram  # (W G')_ik = Σ_j w_ij G'_jk
            wgw = jnp.sum(wg * w, axis=-1)
            u_hard = wg[local, hard]
        wc = jnp.sum(w * C, axis=-1)
        vv = wgw - wc**2  # ‖v_i‖², by cancellation: rounding error ~ eps · wgw
        tv = u_hard - c_hard * wc
        ok = vv > 64 * eps * wgw  # below: no push direction beyond rounding noise -> undefined (NaN)
        out["w_hard"][tau_key(tau)] = w_hard
        out["share"][tau_key(tau)] = jnp.where(ok, w_hard * tv / jnp.where(ok, vv, 1.0), jnp.nan)

    # Wang & Isola's uniformity (``gradlab.losses.log_mean_gaussian``), one row of pairs i < j at a
    # time: log Σ_{j>i} exp(−t‖x_i − x_j‖²), combined over rows in ``_statistics``.
    upper = cols[None, :] > rows[:, None]
    for name, xb, x, g in (("unif_h", hb, h, None), ("unif_hp", hpb, hp, gram)):
        logits = gaussian_logits(xb @ x.T if g is None else g, cfg.uniform_t)
        out[name] = jax.nn.logsumexp(jnp.where(upper, logits, -jnp.inf), axis=-1)

    if cfg.hist_bins is not None:
        edges = jnp.linspace(-1.0, 1.0, cfg.hist_bins + 1, dtype=dtype)
        weights = (valid & (rows < n)[:, None]).astype(dtype)
        out["hist_cos_neg"], _ = jnp.histogram(jnp.clip(C, -1.0, 1.0), bins=edges, weights=weights)
    return out


def _per_anchor(h, hp, cfg: StatsConfig):
    """``_row_block`` over all anchors in blocks of ``cfg.block`` rows (one block when N <= block)."""
    n = h.shape[0]
    if n <= cfg.block:
        return _row_block(h, hp, h, hp, 0, n, cfg)
    size = cfg.block
    nb = -(-n // size)
    pad = nb * size - n
    h_pad = jnp.pad(h, ((0, pad), (0, 0)))
    hp_pad = jnp.pad(hp, ((0, pad), (0, 0)))

    def block(start):
        return _row_block(h_pad, hp_pad, h, hp, start, size, cfg)

    stacked = jax.lax.map(block, jnp.arange(nb) * size)
    out = {}
    for k, v in stacked.items():
        if k == "hist_cos_neg":
            out[k] = jnp.sum(v, axis=0)
        else:
            out[k] = jax.tree_util.tree_map(lambda a: a.reshape((nb * size,) + a.shape[2:])[:n], v)
    return out


def _trained_components(h, hp, hard, entry: LossEntry):
    """(gd, share, r_hard) per anchor of a trained loss of any kind, from its exact components on the batch."""
    comps = entry.loss.components(h, hp)
    local = jnp.arange(h.shape[0])
    w = comps.weight
    share = w[local, hard] / jnp.sum(w, axis=-1)
    if comps.ratio_diagonal:  # Barlow Twins: R is a matrix, no scalar at the hardest negative
        r_hard = jnp.full(comps.gd.shape, jnp.nan, comps.gd.dtype)
    else:
        r_hard = jnp.broadcast_to(comps.ratio, w.shape)[local, hard]
    return comps.gd, share, r_hard


def _trained_statistics(a, h, hp, cfg: StatsConfig) -> dict:
    """The ``"trained"`` entry of each statistic: GD, its off fraction, the hardest negative's share of W, R at it."""
    dtype = h.dtype
    e = cfg.trained
    if e.kernel is not None:
        gd, share, r_hard = a["t_gd"], a["t_share"], a["t_r_hard"]
    else:
        gd, share, r_hard = _trained_components(h, hp, a["hard"], e)
    gd = gd.astype(dtype)
    defined = gd > 0  # W (and R) are undefined where GD = 0
    gate = gd >= cfg.gd_threshold
    return {
        "gd_mean": jnp.mean(gd),
        "gd_off_fraction": jnp.mean((gd < cfg.gd_threshold).astype(dtype)),
        "weight_share": _nan_if_empty(jnp.sum(jnp.where(defined, share, 0.0)), jnp.sum(defined)),
        "ratio": _nan_if_empty(jnp.sum(jnp.where(gate, r_hard, 0.0)), jnp.sum(gate)),
        "ratio_pass_fraction": jnp.mean(gate.astype(dtype)),
    }


def _statistics(h, hp, cfg: StatsConfig):
    n = h.shape[0]
    dtype = h.dtype
    # --- input health (reported, never raised here) --------------------------------
    finite_h, finite_hp = jnp.isfinite(h), jnp.isfinite(hp)
    health = {
        "nonfinite_h": jnp.sum(~finite_h),
        "nonfinite_h_prime": jnp.sum(~finite_hp),
        "zero_row_h": _first_true(~jnp.any(h != 0, axis=1)),
        "zero_row_h_prime": _first_true(~jnp.any(hp != 0, axis=1)),
    }
    h = normalize(jnp.where(finite_h, h, 0.0))
    hp = normalize(jnp.where(finite_hp, hp, 0.0))
    a = _per_anchor(h, hp, cfg)

    # --- cosines and angles ---------------------------------------------------------
    c_pos, c_hard = a["c_pos"], a["c_hard"]
    # θ_ii' = 2 arcsin(‖h_i − h_i'‖ / 2): exact near 0, where arccos of a rounded cosine
    # is not (float32: arccos(1 − ulp) ≈ 3e-4 for identical views).
    chord = jnp.sqrt(jnp.sum((h - hp) ** 2, axis=-1))
    theta_pos = 2.0 * jnp.arcsin(jnp.clip(chord / 2.0, 0.0, 1.0))
    n_neg = n * (n - 1)
    mu_pos = jnp.mean(theta_pos)
    sigma_pos = jnp.sqrt(jnp.sum((theta_pos - mu_pos) ** 2) / (n - 1))
    mu_neg = jnp.mean(a["theta_mean"])
    # pooled over the N(N − 1) angles from the per-anchor means and sums of squares (exact merge)
    m2 = jnp.sum(a["theta_m2"]) + (n - 1) * jnp.sum((a["theta_mean"] - mu_neg) ** 2)
    sigma_neg = jnp.sqrt(m2 / max(n_neg - 1, 1))

    out = {
        "mu_pos": mu_pos,
        "sigma_pos": sigma_pos,
        "mu_neg": mu_neg,
        "sigma_neg": sigma_neg,
        "cos_pos_mean": jnp.mean(c_pos),
        "cos_neg_mean": jnp.sum(a["cos_sum"]) / n_neg,
        # Nie et al. 2023 Fig. 3: mean over anchors of (mean distance to the negatives − distance to the positive)
        "distance_gap": jnp.mean(a["dist_neg_mean"] - chord),
    }

    # --- gradient dissipation ---------------------------------------------------------
    gd_mean, gd_off = {}, {}
    for e in cfg.losses:
        gd = a["gd"][e.key]
        gd_mean[e.key] = jnp.mean(gd)
        gd_off[e.key] = jnp.mean((gd < cfg.gd_threshold).astype(dtype))
    if cfg.margin is not None:
        gd = (c_pos - c_hard < cfg.margin).astype(dtype)
        gd_mean["baseline"] = jnp.mean(gd)
        gd_off["baseline"] = jnp.mean((gd < cfg.gd_threshold).astype(dtype))
    trained = {} if cfg.trained is None else _trained_statistics(a, h, hp, cfg)
    if trained:
        gd_mean["trained"] = trained["gd_mean"]
        gd_off["trained"] = trained["gd_off_fraction"]
    out["gd_mean"] = gd_mean
    out["gd_off_fraction"] = gd_off

    # --- dynamic ratios at the hardest negative, anchors passing the GD gate -----------
    ratio, ratio_pass = {}, {}
    for e in cfg.ratio_losses:
        gate = a["r_gd"][e.key] >= cfg.gd_threshold
        ratio[e.key] = _nan_if_empty(jnp.sum(jnp.where(gate, a["r_hard"][e.key], 0.0)), jnp.sum(gate))
        ratio_pass[e.key] = jnp.mean(gate.astype(dtype))
    if trained:
        ratio["trained"] = trained["ratio"]
        ratio_pass["trained"] = trained["ratio_pass_fraction"]
    out["ratio"] = ratio
    out["ratio_pass_fraction"] = ratio_pass

    # --- hardest negative's share of the exponential weight, per τ --------------------
    out["hardest_share"] = {k: jnp.nanmean(v) for k, v in a["share"].items()}
    out["weight_share"] = {k: jnp.mean(v) for k, v in a["w_hard"].items()}
    if trained:
        out["weight_share"]["trained"] = trained["weight_share"]

    # --- Lemma 1 with the hardest negative, α measured from the embeddings -------------
    s = sin_from_cos(c_pos)
    t = sin_from_cos(c_hard)
    st = s * t
    cos_alpha = jnp.where(st > 0, (a["gp_hard"] - c_pos * c_hard) / jnp.where(st > 0, st, 1.0), 1.0)
    alpha = safe_arccos(jnp.clip(cos_alpha, -1.0, 1.0))
    theta_hard = safe_arccos(c_hard)
    l1_min, l1_feas, l1_sat, l1_hist = {}, {}, {}, {}
    lo_edge, hi_edge = cfg.lemma1_hist_range
    for lam in cfg.lambdas:
        low, high, feasible = lemma1_bounds(theta_pos, theta_hard, alpha, jnp.asarray(lam, dtype))
        low = low.astype(dtype)
        q = jnp.nanquantile(low, jnp.asarray(defaults.MONITOR_QUANTILES, dtype))
        summary = {"mean": jnp.nanmean(low)}
        summary.update({name: q[k] for k, name in enumerate(_QNAMES)})
        key = lam_key(lam)
        l1_min[key] = summary
        l1_feas[key] = jnp.mean(feasible.astype(dtype))
        r = cfg.static_ratio
        l1_sat[key] = jnp.mean((feasible & (low <= r) & (r <= high)).astype(dtype))
        if cfg.hist_bins is not None:
            edges = jnp.linspace(lo_edge, hi_edge, cfg.lemma1_hist_bins + 1, dtype=dtype)
            vals = jnp.clip(jnp.where(feasible, low, lo_edge), lo_edge, hi_edge)
            l1_hist[key], _ = jnp.histogram(vals, bins=edges, weights=feasible.astype(dtype))
        out.setdefault("_lemma1_per_anchor", {})[key] = low
    out["lemma1_min_ratio"] = l1_min
    out["lemma1_feasible_fraction"] = l1_feas
    out["lemma1_satisfied_fraction"] = l1_sat

    # --- Wang & Isola, Zhang et al. 2022, dimensional collapse ----------------------------
    out["align"] = jnp.mean((2.0 - 2.0 * c_pos).clip(0.0) ** (cfg.align_alpha / 2.0))
    log_pairs = jnp.log(n * (n - 1) / 2.0).astype(dtype)
    out["uniform"] = 0.5 * (jax.nn.logsumexp(a["unif_h"]) + jax.nn.logsumexp(a["unif_hp"])) - log_pairs
    m_o_h, m_r_h = collapse_ratios(h, normalized=True)
    m_o_hp, m_r_hp = collapse_ratios(hp, normalized=True)
    out["m_o"] = 0.5 * (m_o_h + m_o_hp)
    out["m_r"] = 0.5 * (m_r_h + m_r_hp)
    out["embedding_std"] = 0.5 * (embedding_std(h) + embedding_std(hp))

    # --- histograms (Li et al. 2024 Fig. 5) ------------------------------------------------
    if cfg.hist_bins is not None:
        edges = jnp.linspace(-1.0, 1.0, cfg.hist_bins + 1, dtype=dtype)
        cpos_hist, _ = jnp.histogram(jnp.clip(c_pos, -1.0, 1.0), bins=edges)
        out["histograms"] = {"cos_pos": cpos_hist, "cos_neg": a["hist_cos_neg"], "lemma1_min_ratio": l1_hist}
    out["_health"] = health
    return out


@functools.lru_cache(maxsize=32)
def batch_statistics_fn(cfg: StatsConfig):
    """The jitted ``(h, h_prime) -> statistics`` for a config (cached). The trained loss's
    parameters are an argument of the program, not constants: configs that differ only in them
    (runs of one loss at another τ) share one compilation per shape."""
    return _WithTrained(_statistics_program(_program_config(cfg)), _trained_argument(cfg))


@functools.lru_cache(maxsize=32)
def host_statistics_fn(cfg: StatsConfig):
    """``(h, h_prime) -> statistics`` as NumPy arrays on the host, copied in one transfer per
    dtype (:func:`gradlab._transfer.host_outputs`; cached and shared like :func:`batch_statistics_fn`)."""
    return _WithTrained(_host_program(_program_config(cfg)), _trained_argument(cfg))


class _WithTrained:
    """A shared statistics program (jitted, or :class:`~gradlab._transfer.HostOutputs`) called with
    one config's trained loss: ``(h, h_prime) -> statistics``, its ``lower`` or its ``start`` alike.
    (A plain class: ``jax.eval_shape`` of it jits it, which needs a weak reference to it.)"""

    def __init__(self, program: Any, trained: Any):
        self.program, self.trained = program, trained

    def __call__(self, h, h_prime):
        return self.program(h, h_prime, self.trained)

    def lower(self, h, h_prime):
        return self.program.lower(h, h_prime, self.trained)

    def start(self, h, h_prime):
        return self.program.start(h, h_prime, self.trained)


def _program_config(cfg: StatsConfig) -> StatsConfig:
    """``cfg`` with the trained loss's parameter values left out (its structure kept): the key of
    the compiled program, whose argument they are."""
    t = cfg.trained
    if t is None:
        return cfg
    return dataclasses.replace(cfg, trained=dataclasses.replace(
        t, params=tuple((k, None) for k, _ in t.params), loss=jax.tree_util.tree_structure(t.loss), about=None))


def _trained_argument(cfg: StatsConfig) -> Any:
    """The trained loss (a pytree whose leaves are its parameters) on the device, or None."""
    return None if cfg.trained is None else jax.device_put(cfg.trained.loss)


def _statistics_of(h, hp, trained, cfg: StatsConfig):
    """:func:`_statistics` with the trained loss ``trained`` put back into ``cfg`` (a program config)."""
    if cfg.trained is not None:
        cfg = dataclasses.replace(cfg, trained=dataclasses.replace(
            cfg.trained, params=tuple(trained.params.items()), loss=trained))
    return _statistics(h, hp, cfg)


@functools.lru_cache(maxsize=32)
def _statistics_program(cfg: StatsConfig):
    return jax.jit(functools.partial(_statistics_of, cfg=cfg))


@functools.lru_cache(maxsize=32)
def _host_program(cfg: StatsConfig):
    return host_outputs(_statistics_program(cfg))
