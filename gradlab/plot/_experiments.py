"""Recipes for the training studies (``gradlab experiment``): Li et al. 2024 Figs. 1, 5–9 at CPU
scale, and a run's monitored (μ_pos, μ_neg) path drawn on the simulated maps of its loss.

Each takes plain arrays (or ``Result`` objects for the maps) and returns the matplotlib Figure.
Spread bands are ± one sample standard deviation over seeds (none for one seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gradlab.plot._core import heatmap
from gradlab.plot._style import AXIS_LABELS, new_figure, styled

Series = tuple[np.ndarray, np.ndarray | None]  # mean, sd (or None)


def _band(ax, x, mean, sd, colour, label, marker="o"):
    x, mean = np.asarray(x, float), np.asarray(mean, float)
    ax.plot(x, mean, color=colour, lw=1.8, marker=marker, ms=4, label=label)
    if sd is not None and np.any(np.isfinite(sd)):
        sd = np.nan_to_num(np.asarray(sd, float))
        ax.fill_between(x, mean - sd, mean + sd, color=colour, alpha=0.22, lw=0)


def _density_step(ax, edges, counts, **line) -> bool:
    """Draw histogram ``counts`` over ``edges`` as a density step line; False if empty."""
    c = np.asarray(counts, float)
    if c.sum() <= 0:
        return False
    ax.step((edges[1:] + edges[:-1]) / 2, c / c.sum() / np.diff(edges), where="mid", lw=1.6, **line)
    return True


def _colours(n, cmap="viridis"):
    import matplotlib

    return matplotlib.colormaps[cmap](np.linspace(0.05, 0.85, max(n, 1)))


@styled
def component_sweeps(panels: Mapping[str, tuple[Sequence[float], np.ndarray, np.ndarray | None]], *,
                     reference: float | None = None, ylabel: str = "STS-B dev Spearman × 100",
                     suptitle: str | None = None, failed: Mapping[str, Sequence[float]] | None = None):
    """Li et al. 2024 Fig. 6: the score against one varied component per panel (mean ± sd over seeds).

    Args:
      panels: title -> (values, mean, sd); log-scaled x when the values span more than 20×.
      reference: a horizontal dotted line (e.g. the score before training).
      failed: title -> values whose runs failed (marked with a red ×).
    """
    fig, axes = new_figure(1, len(panels), panel=(4.2, 3.4))
    for ax, (title, (values, mean, sd)) in zip(axes.ravel(), panels.items(), strict=True):
        values = np.asarray(values, float)
        _band(ax, values, mean, sd, "C0", None)
        if values.min() > 0 and values.max() / values.min() > 20:
            ax.set_xscale("log")
        if reference is not None:
            ax.axhline(reference, color="0.4", ls=":", lw=1.2, label="before training")
            ax.legend(frameon=False)
        for v in (failed or {}).get(title, ()):
            ax.plot([v], [np.nanmin(mean) if np.any(np.isfinite(mean)) else 0.0], "x", color="red", ms=9)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


@styled
def cosine_histograms(edges, panels: Mapping[str, Mapping[str, np.ndarray]], *, suptitle: str | None = None):
    """Li et al. 2024 Fig. 5: densities of anchor–positive and anchor–negative cosines, one panel per run.

    Args:
      edges: (B + 1,) bin edges over cos θ.
      panels: title -> {"pos": counts (B,), "neg": counts (B,), optionally "pos_before", "neg_before"}.
    """
    edges = np.asarray(edges, float)
    fig, axes = new_figure(1, len(panels), panel=(4.4, 3.3))
    style = {"pos": ("C0", "-", "anchor–positive"), "neg": ("C3", "-", "anchor–negative"),
             "pos_before": ("C0", ":", "positive, before"), "neg_before": ("C3", ":", "negative, before")}
    for ax, (title, hists) in zip(axes.ravel(), panels.items(), strict=True):
        for key, counts in hists.items():
            colour, ls, label = style.get(key, ("0.3", "-", key))
            _density_step(ax, edges, counts, color=colour, ls=ls, label=label)
        ax.set_xlabel(r"$\cos\theta$")
        ax.set_ylabel("density")
        ax.set_title(title)
        ax.legend(frameon=False, fontsize=8)
        ax.grid(alpha=0.3)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


@styled
def weight_share_before_after(taus, series: Mapping[str, Series], *, title: str | None = None):
    """Li et al. 2024 Fig. 7: the hardest negative's share of W against τ, before and after training."""
    fig, axes = new_figure(1, 1, panel=(5.0, 3.6))
    ax = axes[0, 0]
    for colour, (label, (mean, sd)) in zip(_colours(len(series), "plasma"), series.items(), strict=False):
        _band(ax, taus, mean, sd, colour, label)
    ax.set_xscale("log")
    ax.set_xlabel(AXIS_LABELS["tau"])
    ax.set_ylabel("hardest negative's share of W")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(frameon=False)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig


@styled
def min_ratio_histograms(edges, panels: Mapping[str, Mapping[str, np.ndarray]], *, suptitle: str | None = None):
    """Li et al. 2024 Fig. 8a (training side): Lemma-1 minimum ratios, one panel per λ, before vs after."""
    edges = np.asarray(edges, float)
    fig, axes = new_figure(1, len(panels), panel=(3.8, 3.2))
    for ax, (title, hists) in zip(axes.ravel(), panels.items(), strict=True):
        drawn = [_density_step(ax, edges, counts, color=colour, label=label)
                 for colour, (label, counts) in zip(("0.5", "C2"), hists.items(), strict=False)]
        ax.axvline(1.0, color="0.3", ls=":", lw=1)
        ax.set_xlabel("minimum ratio $r_{low}$")
        ax.set_title(title)
        if any(drawn):
            ax.legend(frameon=False, fontsize=8)
        else:
            ax.text(0.5, 0.5, "never feasible", transform=ax.transAxes, ha="center", color="0.4")
        ax.grid(alpha=0.3)
    axes.ravel()[0].set_ylabel("density (feasible anchors)")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


@styled
def step_series(panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]], *,
                ylabels: Mapping[str, str] | None = None, suptitle: str | None = None, ncols: int | None = None):
    """Curves over training steps (Li et al. 2024 Figs. 8b, 8c, 9): one panel per quantity.

    Args:
      panels: title -> {label: (steps, mean, sd)}.
    """
    n = len(panels)
    ncols = n if ncols is None else ncols
    nrows = -(-n // ncols)
    fig, axes = new_figure(nrows, ncols, panel=(4.2, 3.2))
    flat = axes.ravel()
    for ax, (title, lines) in zip(flat, panels.items(), strict=False):
        for colour, (label, (x, mean, sd)) in zip(_colours(len(lines)), lines.items(), strict=False):
            _band(ax, x, mean, sd, colour, label, marker="." if np.isnan(np.asarray(mean, float)).any() else "")
        ax.set_xlabel("training step")
        ax.set_ylabel((ylabels or {}).get(title, title))
        ax.set_title(title)
        if len(lines) > 1:
            ax.legend(frameon=False, fontsize=8)
        ax.grid(alpha=0.3)
    for ax in flat[n:]:
        ax.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


@styled
def ori_mod_bars(pairs: Sequence[tuple[str, Series, str, Series]], *, reference: tuple[str, Series] | None = None,
                 baseline: float | None = None, ylabel: str = "STS-B test Spearman × 100", title: str | None = None):
    """Li et al. 2024 Fig. 1: original vs modified loss per pair, bars with ± sd over seeds.

    Args:
      pairs: (original name, (mean, sd), modified name, (mean, sd)); a NaN mean is a failed run.
      reference: an optional reference loss drawn as a dashed line.
      baseline: the score before training (dotted line).
    """
    fig, axes = new_figure(1, 1, panel=(1.6 * len(pairs) + 2.0, 3.6))
    ax = axes[0, 0]
    x = np.arange(len(pairs))
    for k, (offset, colour, label) in enumerate(((-0.2, "0.6", "original"), (0.2, "C0", "modified"))):
        means = np.array([float(p[1 + 2 * k][0]) for p in pairs])
        sds = np.array([np.nan if p[1 + 2 * k][1] is None else float(p[1 + 2 * k][1]) for p in pairs])
        ax.bar(x + offset, np.nan_to_num(means), width=0.38, color=colour, label=label,
               yerr=np.where(np.isfinite(sds), sds, 0.0), capsize=3)
        for xi, m in zip(x, means, strict=True):
            if not np.isfinite(m):
                ax.text(xi + offset, 0.5, "failed", rotation=90, ha="center", va="bottom", color="red", fontsize=8)
    ax.set_xticks(x, [f"{p[0]}\nvs {p[2]}" for p in pairs], fontsize=9)
    if reference is not None:
        ax.axhline(float(reference[1][0]), color="C1", ls="--", lw=1.4, label=reference[0])
    if baseline is not None:
        ax.axhline(baseline, color="0.3", ls=":", lw=1.2, label="before training")
    finite = [float(p[1 + 2 * k][0]) for p in pairs for k in (0, 1) if np.isfinite(p[1 + 2 * k][0])]
    if finite:
        ax.set_ylim(max(0.0, min(finite + ([baseline] if baseline else [])) - 8), max(finite) + 5)
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    if title:
        ax.set_title(title)
    return fig


def path_cells(result, mu_pos, mu_neg) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i_pos, i_neg) of the grid cell nearest to each point of a (μ_pos, μ_neg) path.

    Args:
      result: a map ``Result`` with dims ``("mu_pos", "mu_neg")``.
      mu_pos, mu_neg: (T,) the path.

    Examples:
      >>> import numpy as np
      >>> from gradlab.io import Result
      >>> r = Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": np.array([0.1, 0.2, 0.3]),
      ...            "mu_neg": np.array([1.0, 2.0])}, mean=np.zeros((3, 2)))
      >>> [a.tolist() for a in path_cells(r, [0.12, 0.29], [1.9, 1.1])]
      [[0, 2], [1, 0]]
    """
    if tuple(result.dims) != ("mu_pos", "mu_neg"):
        raise ValueError(f"a trajectory needs a (mu_pos, mu_neg) map; got dims {tuple(result.dims)}")
    ax_p, ax_n = np.asarray(result.coords["mu_pos"], float), np.asarray(result.coords["mu_neg"], float)
    p, n = np.asarray(mu_pos, float), np.asarray(mu_neg, float)
    if p.shape != n.shape or p.ndim != 1:
        raise ValueError(f"mu_pos and mu_neg must be (T,) arrays of one length; got {p.shape} and {n.shape}")
    return np.abs(p[:, None] - ax_p).argmin(1), np.abs(n[:, None] - ax_n).argmin(1)


@styled
def trajectory_on_maps(maps: Sequence, mu_pos, mu_neg, *, titles: Sequence[str] | None = None,
                       quantities: Sequence[str] | None = None, suptitle: str | None = None,
                       ranges: Sequence[tuple[float | None, float | None]] | None = None):
    """A run's monitored (μ_pos, μ_neg) path drawn on simulated (μ_pos, μ_neg) maps of its loss.

    The path is a white line from a circle (first monitored step) to a star (last); x is μ_neg,
    y is μ_pos, as in every map of Li et al. 2024.

    Args:
      maps: ``Result`` maps with dims ``("mu_pos", "mu_neg")`` (e.g. ``gd_map``, ``ratio_map``).
      mu_pos, mu_neg: (T,) the monitored path, radians.
      quantities: colour scale per map (``"gd"``, ``"ratio"``).
      ranges: (vmin, vmax) per map.
    """
    maps = list(maps)
    mu_pos, mu_neg = np.asarray(mu_pos, float), np.asarray(mu_neg, float)
    fig, axes = new_figure(1, len(maps), panel=(4.8, 3.8))
    for k, (ax, r) in enumerate(zip(axes.ravel(), maps, strict=True)):
        path_cells(r, mu_pos, mu_neg)  # validates the dims and the path
        q = (quantities or ["gd"] * len(maps))[k]
        vmin, vmax = (ranges or [(None, None)] * len(maps))[k]
        heatmap(r, ax=ax, quantity=q, vmin=vmin, vmax=vmax, title=(titles or [None] * len(maps))[k])
        ax.plot(mu_neg, mu_pos, color="white", lw=2.2, zorder=5, label="training path")
        ax.plot(mu_neg, mu_pos, color="black", lw=0.8, zorder=6)
        if mu_pos.size:
            ax.plot(mu_neg[:1], mu_pos[:1], "o", color="white", mec="black", ms=7, zorder=7)
            ax.plot(mu_neg[-1:], mu_pos[-1:], "*", color="white", mec="black", ms=12, zorder=7)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


__all__ = ["component_sweeps", "cosine_histograms", "weight_share_before_after", "min_ratio_histograms",
           "step_series", "ori_mod_bars", "path_cells", "trajectory_on_maps"]
