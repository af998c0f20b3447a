"""The figure registry behind ``gradlab figures``: id -> what it reproduces and how it is built.

Each builder computes with the library, draws with ``gradlab.plot`` and writes
``ID.{png,...}``, ``ID.npz`` and ``ID.json`` through the command's ``Writer``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gradlab import defaults


@dataclass(frozen=True)
class Figure:
    paper: str
    shows: str
    build: Callable


def _protocol(quick: bool, seed: int):
    from gradlab.simulate import Protocol

    if quick:
        return Protocol(grid=12, batches=32, batch_size=16, seed=seed)
    return Protocol(seed=seed)


def _gd(ids_losses, title):
    def build(fid, writer, quick, seed):
        from gradlab import plot, simulate

        proto = _protocol(quick, seed)
        results = [simulate.gd_map(name, proto) for name in ids_losses]
        fig = plot.gd_maps(results, suptitle=title) if writer.plot else None
        writer.figure(fid, fig)
        _write_stack(writer, fid, results, key="loss")

    return build


def _write_stack(writer, stem, results, key):
    """Several same-shaped Results in one .npz: axes, ``mean`` (P, ...), ``stderr``, ``mask``, extras."""
    first = results[0]
    arrays = {name: np.asarray(v) for name, v in first.coords.items()}
    arrays[key] = np.asarray([str(r.meta.get(key)) for r in results])
    arrays["mean"] = np.stack([r.mean for r in results])
    if all(r.stderr is not None for r in results):
        arrays["stderr"] = np.stack([r.stderr for r in results])
    if all(r.mask is not None for r in results):
        arrays["mask"] = np.stack([r.mask for r in results])
    for name in first.extra:
        if all(name in r.extra for r in results):
            arrays[name] = np.stack([r.extra[name] for r in results])
    writer.data(stem, arrays, dims={"mean": [key, *first.dims]}, result_meta={"panels": [r.meta for r in results]})


def _fig3(fid, writer, quick, seed):
    from gradlab import plot, simulate

    r = simulate.weight_share(_protocol(quick, seed))
    writer.result(fid, r, plot.weight_share_curves(r) if writer.plot else None)


def _fig4(fid, writer, quick, seed):
    from gradlab import plot, simulate

    proto = _protocol(quick, seed)
    results = [simulate.ratio_map(name, proto) for name in ("arccon", "met", "mat")]
    fig = plot.ratio_maps(results, suptitle="dynamic ratio (shaded: pairs that do not occur in training)") if writer.plot else None
    writer.figure(fid, fig)
    _write_stack(writer, fid, results, key="loss")


def _fig8a(fid, writer, quick, seed):
    from gradlab import plot, simulate

    r = simulate.min_ratio_distribution(_protocol(quick, seed), lams=defaults.LEMMA1_LAMS)
    writer.result(fid, r, plot.min_ratio_distribution(r) if writer.plot else None)


def _lemma1(fid, writer, quick, seed):
    from gradlab import plot, simulate

    r = simulate.lemma1_map(_protocol(quick, seed), lam=0.1)
    writer.result(fid, r, plot.lemma1_maps(r) if writer.plot else None)


def _norms(part, names, ks_infonce=defaults.NORM_INFONCE_NEGATIVES, ncols=4):
    def build(fid, writer, quick, seed):
        from gradlab_cli.app import _write_panels

        from gradlab import norms, plot

        grid = 40 if quick else 300
        results = []
        for name in names:
            for k in (ks_infonce if name == "infonce" else (norms.DEFAULT_NEGATIVES,)):
                results.append(norms.norm_result(name, part=part, negatives=k, grid=grid))
        fig = plot.norm_maps(results, ncols=ncols) if writer.plot else None
        _write_panels(writer, fid, results, fig)

    return build


def _margin_axes(quick):
    g = 40 if quick else 240
    theta = np.linspace(0.01, math.pi - 0.01, g)
    q = np.linspace(0.005, 0.995, g)
    return theta, q


def _dict_arrays(d):
    return {k: np.asarray(v) for k, v in d.items()}


def _rho2023_fig1(fid, writer, quick, seed):
    from gradlab import margins, plot

    theta, q = _margin_axes(quick)
    d = margins.free_gradient_grid(theta, q, tau=defaults.RHO2023_TAU, beta=defaults.RHO2023_BETA, dtype=np.float32)
    writer.figure(fid, plot.margin_gradients(d, tau=defaults.RHO2023_TAU, beta=defaults.RHO2023_BETA) if writer.plot else None)
    writer.data(fid, _dict_arrays(d), dims={"positive": ["theta", "q"], "negative": ["theta", "q"]},
                extra_meta={"tau": defaults.RHO2023_TAU, "beta": defaults.RHO2023_BETA, "reference": "Rho et al. 2023 Fig. 1, Eq. 14"})


def _rho2023_fig2(fid, writer, quick, seed):
    from gradlab import margins, plot

    theta, q = _margin_axes(quick)
    d = margins.multiplier_grid(theta, q, tau=defaults.RHO2023_TAU, beta=defaults.RHO2023_BETA, m1=0.4, dtype=np.float32)
    writer.figure(fid, plot.margin_multipliers(d, tau=defaults.RHO2023_TAU, m1=0.4) if writer.plot else None)
    dims = {k: ["theta_pos", "q_pos"] for k in ("angular", "ratio_pos", "ratio_neg", "total_pos")}
    writer.data(fid, _dict_arrays(d), dims=dims,
                extra_meta={"tau": defaults.RHO2023_TAU, "beta": defaults.RHO2023_BETA, "m1": 0.4, "reference": "Rho et al. 2023 Fig. 2, Theorem 4.1"})


#: Rho et al. 2023 Fig. 8's panels vary m1 and τ without listing the values; ours: the m1 of
#: Sec. 5.4 / Table 8 and around it, and τ around App. C's 0.25.
RHO2023_FIG8_M1 = (0.2, 0.4, 0.8, 1.6)
RHO2023_FIG8_TAU = (0.1, defaults.RHO2023_TAU, 0.5)


def _rho2023_fig8(fid, writer, quick, seed):
    from gradlab import margins, plot

    theta, q = _margin_axes(quick)
    d = margins.ratio_grid(theta, q, m1_values=RHO2023_FIG8_M1, tau_values=RHO2023_FIG8_TAU, beta=1.0,
                           dtype=np.float32)
    writer.figure(fid, plot.margin_ratio_grid(d) if writer.plot else None)
    dims = {k: ["m1", "tau", "theta_pos", "q_pos"] for k in ("ratio_pos", "ratio_neg")}
    writer.data(fid, _dict_arrays(d), dims=dims, extra_meta={"beta": 1.0, "reference": "Rho et al. 2023 Fig. 8"})


FIGURES: dict[str, Figure] = {
    "li2024_fig2": Figure("Li et al. 2024 Fig. 2", "mean GD over (μ_pos, μ_neg), ArcCon and MET",
                        _gd(("arccon", "met"), "gradient dissipation: ArcCon and MET")),
    "li2024_fig10": Figure("Li et al. 2024 Fig. 10", "mean GD over (μ_pos, μ_neg), InfoNCE and MPT",
                         _gd(("infonce", "mpt"), "gradient dissipation: InfoNCE and MPT")),
    "li2024_fig3": Figure("Li et al. 2024 Fig. 3", "hardest negative's share of the weight vs μ_neg for six τ", _fig3),
    "li2024_fig4": Figure("Li et al. 2024 Fig. 4", "dynamic ratios of ArcCon, MET, MAT with the masks", _fig4),
    "li2024_fig8a": Figure("Li et al. 2024 Fig. 8(a), simulated", "distribution of Lemma 1's minimum ratio for four λ", _fig8a),
    "li2024_lemma1": Figure("Li et al. 2024 Lemma 1 (no paper figure)", "minimum-ratio map and satisfied fractions, λ = 0.1",
                          _lemma1),
    "nie2023_fig2a": Figure("Nie et al. 2023 Fig. 2(a)", "alignment-part norms: InfoNCE for K = 64, 512, 4096, 32768; alignment; DCL",
                         _norms("pos", ("infonce", "align", "dcl"), ncols=3)),
    "nie2023_fig2b": Figure("Nie et al. 2023 Fig. 2(b)", "alignment-part norms of DCL+, MPT, MET, MAT",
                         _norms("pos", ("dcl+", "mpt", "met", "mat"), ncols=4)),
    "nie2023_fig4": Figure("Nie et al. 2023 Fig. 4", "uniformity-part norms (one negative): InfoNCE ×4 K, uniformity, DCL, DCL+, MPT, MET, MAT",
                        _norms("neg", ("infonce", "uniform", "dcl", "dcl+", "mpt", "met", "mat"), ncols=5)),
    "rho2023_fig1": Figure("Rho et al. 2023 Fig. 1", f"gradient magnitudes without margins (β = {defaults.RHO2023_BETA:g}, τ = {defaults.RHO2023_TAU:g})", _rho2023_fig1),
    "rho2023_fig2": Figure("Rho et al. 2023 Fig. 2", f"angular-margin multipliers (β = {defaults.RHO2023_BETA:g}, τ = {defaults.RHO2023_TAU:g}, m1 = 0.4)", _rho2023_fig2),
    "rho2023_fig8": Figure("Rho et al. 2023 Fig. 8", "(p − βq)/(p − βq̃) for several m1 and τ", _rho2023_fig8),
}


def build(fid: str, writer, *, quick: bool = False, seed: int = 0) -> None:
    """Build figure ``fid`` into ``writer`` (figure + data + metadata)."""
    FIGURES[fid].build(fid, writer, quick, seed)
