"""Recipes for the training studies (``gradlab experiment``): Li et al. 2024 Figs. 1, 5–9 at CPU
scale, and a run's monitored (μ_pos, μ_neg) path drawn on the simulated maps of its loss.

Each takes plain arrays (or ``Result`` objects for the maps) and returns the matplotlib Figure.
A band or error bar is mean ± the half-width the caller passes: the studies pass the 95 % t
interval of the mean over seeds, the interval their claims use (none for one seed). These
recipes only draw; what they show is computed by ``gradlab.experiments``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gradlab.plot._core import heatmap
from gradlab.plot._style import AXIS_LABELS, new_figure, styled

Series = tuple[np.ndarray, np.ndarray | None]  # mean, band half-width (or None)
#: Series told apart without colour alone: a qualitative palette, and a line style and marker each.
LINESTYLES = ("-", "--", "-.", (0, (5, 1, 1, 1)), (0, (1, 1)), (0, (8, 2)))
MARKERS = ("o", "s", "^", "D", "v", "P")


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


def _support(edges, counts, step: float = 0.1) -> tuple[float, float]:
    """[lo, hi] covering every bin with a count in any of ``counts``, rounded out to ``step``
    (the whole edge range when all are empty)."""
    edges = np.asarray(edges, float)
    used = np.zeros(edges.size - 1, bool)
    for c in counts:
        used |= np.asarray(c, float) > 0
    if not used.any():
        return float(edges[0]), float(edges[-1])
    idx = np.flatnonzero(used)
    lo = max(edges[0], np.floor(edges[idx[0]] / step + 1e-9) * step)
    hi = min(edges[-1], np.ceil(edges[idx[-1] + 1] / step - 1e-9) * step)
    return float(lo), float(hi)


def _colours(n, cmap="viridis"):
    import matplotlib

    if cmap == "tab10":  # qualitative: distinct hues, not shades of one
        return [matplotlib.colormaps["tab10"](i % 10) for i in range(max(n, 1))]
    return matplotlib.colormaps[cmap](np.linspace(0.05, 0.85, max(n, 1)))


@styled
def component_sweeps(panels: Mapping[str, tuple[Sequence[float], np.ndarray, np.ndarray | None]], *,
                     reference: float | None = None, ylabel: str = "STS-B dev Spearman × 100",
                     suptitle: str | None = None, failed: Mapping[str, Sequence[float]] | None = None,
                     notes: Mapping[str, str] | None = None):
    """Li et al. 2024 Fig. 6: the score against one varied component per panel (mean and its band).

    Args:
      panels: title -> (values, mean, band half-width); log-scaled x when the values span more than 20×.
      reference: a horizontal dotted line (e.g. the score before training).
      failed: title -> values whose runs failed (marked with a red ×).
      notes: title -> a line written in the panel's lower left (e.g. the claim's paired difference
        with its interval).
    """
    fig, axes = new_figure(1, len(panels), panel=(4.2, 3.4))
    for ax, (title, (values, mean, sd)) in zip(axes.ravel(), panels.items(), strict=True):
        values = np.asarray(values, float)
        _band(ax, values, mean, sd, "C0", None)
        if values.min() > 0 and values.max() / values.min() > 20:
            ax.set_xscale("log")
        if reference is not None:
            ax.axhline(reference, color="0.4", ls=":", lw=1.2, label="before training")
            ax.legend(frameon=False, loc="lower right", fontsize=8)
        if (notes or {}).get(title):
            ax.text(0.02, 0.03, notes[title], transform=ax.transAxes, ha="left", va="bottom", fontsize=8,
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.7", "alpha": 0.9})
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

    The x axis spans the bins with counts (in any panel), rounded out to a multiple of 0.1.
    """
    edges = np.asarray(edges, float)
    fig, axes = new_figure(1, len(panels), panel=(4.4, 3.3))
    style = {"pos": ("C0", "-", "anchor–positive"), "neg": ("C3", "-", "anchor–negative"),
             "pos_before": ("C0", ":", "positive, before"), "neg_before": ("C3", ":", "negative, before")}
    from matplotlib.ticker import MaxNLocator

    lo, hi = _support(edges, [c for hists in panels.values() for c in hists.values()])
    for ax, (title, hists) in zip(axes.ravel(), panels.items(), strict=True):
        for key, counts in hists.items():
            colour, ls, label = style.get(key, ("0.3", "-", key))
            _density_step(ax, edges, counts, color=colour, ls=ls, label=label)
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
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
def min_ratio_histograms(edges, panels: Mapping[str, Mapping[str, np.ndarray]], *, suptitle: str | None = None,
                         feasible: Mapping[str, Mapping[str, float]] | None = None):
    """Li et al. 2024 Fig. 8a (training side): Lemma-1 minimum ratios, one panel per λ, before vs after.

    Each curve is a density over the feasible anchors only (it integrates to 1 however few
    anchors are feasible); ``feasible`` (title -> label -> fraction of all anchors) puts that
    fraction in the legend. The end bins hold every value beyond them (the monitor clips
    r_low into its histogram range), so their tick labels read ≤ and ≥.
    """
    edges = np.asarray(edges, float)
    fig, axes = new_figure(1, len(panels), panel=(3.8, 3.2))
    for ax, (title, hists) in zip(axes.ravel(), panels.items(), strict=True):
        fractions = (feasible or {}).get(title, {})
        drawn = []
        for colour, (label, counts) in zip(("0.5", "C2"), hists.items(), strict=False):
            if label in fractions and np.isfinite(fractions[label]):
                label = f"{label} (feasible {fractions[label]:.2f})"
            drawn.append(_density_step(ax, edges, counts, color=colour, label=label))
        ax.axvline(1.0, color="0.3", ls=":", lw=1)
        ax.set_xlabel("minimum ratio $r_{low}$")
        ax.set_title(title)
        if any(drawn):
            ax.legend(frameon=False, fontsize=8)
            _clip_ticks(ax, edges)
        else:
            ax.text(0.5, 0.5, "no feasible anchor", transform=ax.transAxes, ha="center", color="0.4")
            ax.set_yticks([])
            ax.set_xlim(edges[0], edges[-1])
            _clip_ticks(ax, edges)
        ax.grid(alpha=0.3)
    axes.ravel()[0].set_ylabel("density over feasible anchors")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def _clip_ticks(ax, edges):
    """Integer ticks across ``edges``, the two ends labelled ≤ lo and ≥ hi (the end bins collect
    every value beyond them)."""
    lo, hi = float(edges[0]), float(edges[-1])
    ticks = np.arange(np.ceil(lo), np.floor(hi) + 1)
    labels = [f"{t:g}" for t in ticks]
    if ticks.size and ticks[0] == lo:
        labels[0] = f"≤{lo:g}"
    if ticks.size and ticks[-1] == hi:
        labels[-1] = f"≥{hi:g}"
    ax.set_xticks(ticks, labels)
    ax.set_xlim(lo, hi)


@styled
def step_series(panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]], *,
                ylabels: Mapping[str, str] | None = None, suptitle: str | None = None, ncols: int | None = None,
                references: Mapping[str, Sequence[tuple[float, str]]] | None = None,
                gaps: Mapping[str, str] | None = None):
    """Curves over training steps (Li et al. 2024 Figs. 8b, 8c, 9): one panel per quantity.

    A record without a value (NaN) leaves a gap: the recorded points are drawn as markers,
    joined by a solid line between neighbouring records and a dotted one across a gap, and
    each missing record is a tick at the bottom of the panel.

    Series are told apart by hue (a qualitative palette), line style and marker; each panel's
    legend sits below it, off the data.

    Args:
      panels: title -> {label: (steps, mean, band half-width or None)}.
      references: title -> [(value, label)]: dashed horizontal reference lines (e.g. the
        σ_pos, σ_neg the simulation assumes, Li et al. 2024 Fig. 9).
      gaps: title -> what a missing record means there (legend text of the bottom ticks).
    """
    from matplotlib.ticker import MaxNLocator

    n = len(panels)
    ncols = n if ncols is None else ncols
    nrows = -(-n // ncols)
    fig, axes = new_figure(nrows, ncols, panel=(4.2, 3.2))
    flat = axes.ravel()
    for ax, (title, lines) in zip(flat, panels.items(), strict=False):
        missing = False
        for i, (colour, (label, (x, mean, sd))) in enumerate(zip(_colours(len(lines), "tab10"), lines.items(),
                                                                     strict=False)):
            missing |= _gapped_series(ax, x, mean, sd, colour, label, ls=LINESTYLES[i % len(LINESTYLES)],
                                      marker=MARKERS[i % len(MARKERS)])
        if missing:
            ax.plot([], [], marker="|", ls="", ms=9, color="0.3",
                    label=f"no value: {(gaps or {}).get(title, 'not recorded')}")
        for value, ref_label in (references or {}).get(title, ()):
            ax.axhline(value, color="0.3", ls="--", lw=1.2)
            lo, hi = ax.get_ylim()
            pad = 0.08 * max(hi - lo, abs(value) * 0.1, 1e-12)
            ax.set_ylim(min(lo, value - pad), max(hi, value + pad))
            ax.annotate(ref_label, (1.0, value), xycoords=("axes fraction", "data"), xytext=(-4, 2),
                        textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.2",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training step")
        ax.set_ylabel((ylabels or {}).get(title, title))
        ax.set_title(title)
        if len(lines) > 1 or missing:  # below the panel: never over the curves
            ax.legend(frameon=False, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2)
        ax.grid(alpha=0.3)
    for ax in flat[n:]:
        ax.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def _gapped_series(ax, x, mean, sd, colour, label, ls="-", marker="o") -> bool:
    """Draw one series with its band; NaN records as gaps (see ``step_series``). True if any."""
    x, mean = np.asarray(x, float), np.asarray(mean, float)
    ok = np.isfinite(mean)
    if ok.all():
        ax.plot(x, mean, color=colour, lw=1.8, ls=ls, marker=marker, ms=4, markevery=max(1, x.size // 8),
                label=label)
        if sd is not None and np.any(np.isfinite(sd)):
            sd = np.nan_to_num(np.asarray(sd, float))
            ax.fill_between(x, mean - sd, mean + sd, color=colour, alpha=0.18, lw=0)
        return False
    ax.plot(x[ok], mean[ok], color=colour, lw=0.9, ls=":")  # across the gaps
    ax.plot(x, mean, color=colour, lw=1.8, ls=ls)  # NaN breaks the line: drawn between neighbouring records
    ax.plot(x[ok], mean[ok], color=colour, marker=marker, ms=4, ls="", label=label)
    if sd is not None:
        sd = np.asarray(sd, float)
        band = ok & np.isfinite(sd)
        ax.fill_between(x, np.where(band, mean - sd, np.nan), np.where(band, mean + sd, np.nan), color=colour,
                        alpha=0.22, lw=0)
    ax.plot(x[~ok], np.full(int((~ok).sum()), 0.04), transform=ax.get_xaxis_transform(), marker="|", ls="",
            ms=9, color=colour, clip_on=False)
    return True


@styled
def ori_mod_bars(pairs: Sequence[tuple[str, Series, str, Series]], *, reference: tuple[str, Series] | None = None,
                 baseline: float | None = None, ylabel: str = "STS-B test Spearman × 100", title: str | None = None):
    """Li et al. 2024 Fig. 1: original vs modified loss per pair, bars with the caller's error bars.

    The bars start at 0; each pair's difference (modified − original) is written above it.

    Args:
      pairs: (original name, (mean, half-width), modified name, (mean, half-width)); a NaN mean is a
        failed run.
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
    # bars start at 0 (a bar's length is its value); the small differences are written above each pair
    top = max(finite + [float(reference[1][0])] * (reference is not None) + [baseline or 0.0], default=1.0)
    for xi, p in zip(x, pairs, strict=True):
        a, b = float(p[1][0]), float(p[3][0])
        if np.isfinite(a) and np.isfinite(b):
            ax.text(xi, max(a, b) + 0.04 * top, f"{b - a:+.1f}", ha="center", va="bottom", fontsize=9,
                    color="C2" if b > a else ("C3" if b < a else "0.3"))
    ax.set_ylim(0.0, 1.25 * top)
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False, fontsize=8, loc="upper left", ncols=2)
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
                       ranges: Sequence[tuple[float | None, float | None]] | None = None, inset: bool = True):
    """A run's monitored (μ_pos, μ_neg) path drawn on simulated (μ_pos, μ_neg) maps of its loss.

    The path is a white line from a circle (first monitored step) to a star (last); x is μ_neg,
    y is μ_pos, as in every map of Li et al. 2024. A map that is one constant where it is not
    masked (the ratio map of a static-ratio loss: R = r everywhere) is drawn without a colour
    scale and labelled with its value. With ``inset`` (default), each panel gets a zoomed inset
    of the path's neighbourhood, its region outlined on the map (not when the path already
    spans a third of the map).

    Args:
      maps: ``Result`` maps with dims ``("mu_pos", "mu_neg")`` (e.g. ``gd_map``, ``ratio_map``).
      mu_pos, mu_neg: (T,) the monitored path, radians.
      quantities: colour scale per map (``"gd"``, ``"ratio"``).
      ranges: (vmin, vmax) per map.
      inset: add the zoomed inset around the path.
    """
    from matplotlib.colors import ListedColormap

    maps = list(maps)
    mu_pos, mu_neg = np.asarray(mu_pos, float), np.asarray(mu_neg, float)
    fig, axes = new_figure(1, len(maps), panel=(4.8, 3.8))
    for k, (ax, r) in enumerate(zip(axes.ravel(), maps, strict=True)):
        path_cells(r, mu_pos, mu_neg)  # validates the dims and the path
        q = (quantities or ["gd"] * len(maps))[k]
        vmin, vmax = (ranges or [(None, None)] * len(maps))[k]
        const = constant_value(r.mean, r.mask)
        kw = ({"cmap": ListedColormap(["0.93"]), "colorbar": False} if const is not None
              else {"vmin": vmin, "vmax": vmax})
        heatmap(r, ax=ax, quantity=q, title=(titles or [None] * len(maps))[k], **kw)
        _draw_path(ax, mu_neg, mu_pos)
        inset_left = _path_inset(ax, r, mu_neg, mu_pos, q, kw) if inset and mu_pos.size else None
        if const is not None:  # the note goes to the side the inset leaves free
            name = {"ratio": "R", "gd": "GD"}.get(q, q)
            x_note, ha = (0.03, "left") if inset_left is not None and inset_left > 0.5 else (0.97, "right")
            ax.text(x_note, 0.96, f"{name} = {const:.4g}, constant", transform=ax.transAxes, ha=ha, va="top",
                    fontsize=11, bbox={"boxstyle": "round", "fc": "white", "ec": "0.5"}, zorder=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def constant_value(values, mask=None, rtol: float = 1e-6) -> float | None:
    """The value of a map that is one constant over its finite, unmasked cells, else None.

    Examples:
      >>> constant_value(np.full((2, 3), 1.5)), constant_value(np.array([[1.0, 2.0]]))
      (1.5, None)
      >>> constant_value(np.array([[1.0, 9.0]]), mask=np.array([[False, True]]))
      1.0
    """
    v = np.asarray(values, float)
    keep = np.isfinite(v) if mask is None else np.isfinite(v) & ~np.asarray(mask, bool)
    v = v[keep]
    if not v.size or np.ptp(v) > rtol * max(1.0, float(np.abs(v).max())):
        return None
    return float(np.median(v))


def _draw_path(ax, x, y, scale: float = 1.0):
    ax.plot(x, y, color="white", lw=2.2 * scale, zorder=5, label="training path")
    ax.plot(x, y, color="black", lw=0.8 * scale, zorder=6)
    if y.size:
        ax.plot(x[:1], y[:1], "o", color="white", mec="black", ms=7 * scale, zorder=7)
        ax.plot(x[-1:], y[-1:], "*", color="white", mec="black", ms=12 * scale, zorder=7)


def _path_inset(ax, r, x, y, quantity, kw) -> float | None:
    """A zoomed inset of the map around the path, in the panel corner farthest from it; returns
    the inset's left edge (axes fraction), or None when the path is already large (zoom < 3)."""
    xs, ys = np.asarray(r.coords["mu_neg"], float), np.asarray(r.coords["mu_pos"], float)
    cell = max(np.abs(np.diff(xs)).min(initial=0.0), np.abs(np.diff(ys)).min(initial=0.0), 1e-3)
    half = max(0.6 * max(np.ptp(x), np.ptp(y)), 4 * cell)
    cx, cy = (x.min() + x.max()) / 2, (y.min() + y.max()) / 2
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    if (x1 - x0) / (2 * half) < 3:
        return None
    # the corner farthest from the path's centre, in axes fractions
    fx, fy = (cx - x0) / (x1 - x0), (cy - y0) / (y1 - y0)
    left, bottom = (0.55 if fx < 0.5 else 0.03), (0.53 if fy < 0.5 else 0.03)
    sub = ax.inset_axes([left, bottom, 0.42, 0.42])
    heatmap(r, ax=sub, quantity=quantity, **{**kw, "colorbar": False})
    _draw_path(sub, x, y, scale=0.8)
    sub.set_xlim(cx - half, cx + half)
    sub.set_ylim(cy - half, cy + half)
    sub.set_xticks([])
    sub.set_yticks([])
    sub.set_xlabel("")
    sub.set_ylabel("")
    sub.text(0.97, 0.05, f"zoom ×{(x1 - x0) / (2 * half):.0f}", transform=sub.transAxes, ha="right", va="bottom",
             fontsize=8, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85}, zorder=9)
    ax.indicate_inset_zoom(sub, edgecolor="white", lw=1.2, alpha=1.0)
    return left


__all__ = ["component_sweeps", "cosine_histograms", "weight_share_before_after", "min_ratio_histograms",
           "step_series", "ori_mod_bars", "path_cells", "trajectory_on_maps", "constant_value"]
