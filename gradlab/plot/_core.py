"""Plot primitives: a heatmap over two (angle) axes with a shaded mask, and curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gradlab.plot._style import (
    AXIS_LABELS,
    CMAPS,
    LABELS,
    is_angle_axis,
    new_figure,
    set_pi_axis,
    styled,
)


def _as_grid(data, x, y, mask, x_name, y_name):
    """(values (Y, X), x (X,), y (Y,), mask or None, x_name, y_name) from a Result or arrays."""
    if hasattr(data, "dims") and hasattr(data, "coords"):
        if len(data.dims) != 2:
            raise ValueError(f"a heatmap needs a 2-D Result; got dims {data.dims}")
        y_name = y_name or data.dims[0]
        x_name = x_name or data.dims[1]
        values = np.asarray(data.mean, dtype=float)
        y = np.asarray(data.coords[data.dims[0]], float) if y is None else np.asarray(y, float)
        x = np.asarray(data.coords[data.dims[1]], float) if x is None else np.asarray(x, float)
        mask = data.mask if mask is None else mask
    else:
        values = np.asarray(data, dtype=float)
        if values.ndim != 2:
            raise ValueError(f"a heatmap needs a 2-D array; got shape {values.shape}")
        y = np.arange(values.shape[0], dtype=float) if y is None else np.asarray(y, float)
        x = np.arange(values.shape[1], dtype=float) if x is None else np.asarray(x, float)
    if values.shape != (y.size, x.size):
        raise ValueError(f"values of shape {values.shape} do not match axes y ({y.size},) and x ({x.size},)")
    if mask is not None:
        mask = np.asarray(mask, bool)
        if mask.shape != values.shape:
            raise ValueError(f"mask of shape {mask.shape} does not match values {values.shape}")
    return values, x, y, mask, x_name, y_name


def shade_mask(ax, x, y, mask, *, color="0.55", alpha=0.55, hatch="///"):
    """Shade (grey veil + hatching) the cells where ``mask`` is True, as in Li et al. 2024 Fig. 4."""
    if mask is None or not np.any(mask):
        return
    from matplotlib.colors import ListedColormap

    veil = np.ma.masked_where(~mask, np.ones(mask.shape))
    ax.pcolormesh(x, y, veil, cmap=ListedColormap([color]), alpha=alpha, shading="nearest",
                  vmin=0, vmax=1, rasterized=True, linewidth=0)
    if min(mask.shape) >= 2 and hatch:
        import matplotlib as mpl

        with mpl.rc_context({"hatch.color": "0.25", "hatch.linewidth": 0.6}):
            ax.contourf(x, y, mask.astype(float), levels=[0.5, 1.5], colors="none", hatches=[hatch])


@styled
def heatmap(data, *, x=None, y=None, mask=None, quantity: str = "gd", ax=None, title: str | None = None,
            label: str | None = None, cmap: str | None = None, vmin=None, vmax=None, norm=None,
            contours: Sequence[float] | None = None, contour_color: str = "lime", contour_fmt: str = "%g",
            contour_fontsize: float = 8, x_name: str | None = None, y_name: str | None = None,
            colorbar: bool = True):
    """Heatmap of a 2-D statistic; angle axes get ticks at multiples of π.

    Args:
      data: a ``Result`` with two dims (rows = dims[0] on the y axis, columns = dims[1]
        on x, origin at the lower left) or a (Y, X) array with ``x`` and ``y``.
      x, y: axis coordinates (override the Result's).
      mask: bool (Y, X), True = shaded (default: the Result's mask).
      quantity: key of ``CMAPS`` / ``LABELS`` (colormap and colour-bar label).
      ax: draw into this Axes (else a new Figure).
      contours: levels to draw as lines (e.g. ``[1.0]``) in ``contour_color``, labelled with
        ``contour_fmt`` (e.g. ``"R = %g"``) at ``contour_fontsize`` points.
      x_name, y_name: axis names (``"mu_neg"``, ``"theta_pos"`` ...) for labels and π ticks.

    The colour bar gets extension arrows on the side(s) where values lie outside its range
    (a clipped scale is never silent), and a ``TwoSlopeNorm`` gets ticks on both sides of
    its centre.

    Returns:
      The matplotlib Figure.
    """
    values, x, y, mask, x_name, y_name = _as_grid(data, x, y, mask, x_name, y_name)
    if ax is None:
        fig, axes = new_figure(1, 1, panel=(4.8, 3.9))
        ax = axes[0, 0]
    fig = ax.figure
    finite = values[np.isfinite(values)]
    if norm is None and finite.size:
        vmin = float(finite.min()) if vmin is None else vmin
        vmax = float(finite.max()) if vmax is None else vmax
        if vmax <= vmin:
            vmax = vmin + 1e-12
    kw = {"norm": norm} if norm is not None else {"vmin": vmin, "vmax": vmax}
    mesh = ax.pcolormesh(x, y, np.ma.masked_invalid(values), cmap=cmap or CMAPS.get(quantity, "viridis"),
                         shading="nearest", rasterized=True, **kw)
    ax.set_facecolor("0.85")  # cells without a value (NaN)
    if contours is not None and finite.size and min(values.shape) >= 2:
        levels = [c for c in contours if finite.min() < c < finite.max()]
        if levels:
            cs = ax.contour(x, y, values, levels=levels, colors=contour_color, linewidths=1.4)
            from matplotlib import patheffects

            for text in ax.clabel(cs, fmt=contour_fmt, fontsize=contour_fontsize):
                text.set_path_effects([patheffects.withStroke(linewidth=0.15 * contour_fontsize, foreground="0.1")])
    shade_mask(ax, x, y, mask)
    for which, name, axis in (("x", x_name, x), ("y", y_name, y)):
        if name and is_angle_axis(name) and axis.size:
            set_pi_axis(ax, which, float(axis.min()), float(axis.max()))
    if x_name:
        ax.set_xlabel(AXIS_LABELS.get(x_name, x_name))
    if y_name:
        ax.set_ylabel(AXIS_LABELS.get(y_name, y_name))
    if x.size > 1 and y.size > 1:
        dx, dy = (x[1] - x[0]) / 2, (y[1] - y[0]) / 2
        ax.set_xlim(x.min() - abs(dx), x.max() + abs(dx))
        ax.set_ylim(y.min() - abs(dy), y.max() + abs(dy))
    if title:
        ax.set_title(title)
    if colorbar:
        lo, hi = (norm.vmin, norm.vmax) if norm is not None else (vmin, vmax)
        cbar = fig.colorbar(mesh, ax=ax, label=label or LABELS.get(quantity, quantity), shrink=0.95,
                            extend=colorbar_extend(finite, lo, hi))
        from matplotlib.colors import TwoSlopeNorm

        if isinstance(norm, TwoSlopeNorm):
            ticks = two_slope_ticks(norm.vmin, norm.vcenter, norm.vmax)
            cbar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    return fig


def colorbar_extend(values, lo, hi) -> str:
    """``extend=`` for a colour bar over [lo, hi]: an arrow on each side that values pass.

    Examples:
      >>> colorbar_extend([0.0, 0.5, 1.0], 0.0, 1.0), colorbar_extend([-1.0, 4.0], 0.0, 3.0)
      ('neither', 'both')
      >>> colorbar_extend([0.2, 7.0], 0.0, 3.0), colorbar_extend([], 0.0, 1.0)
      ('max', 'neither')
    """
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if not v.size or lo is None or hi is None:
        return "neither"
    tol = 1e-9 * max(abs(hi - lo), 1e-300)
    below, above = bool(v.min() < lo - tol), bool(v.max() > hi + tol)
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[below, above]


def two_slope_ticks(vmin: float, vcenter: float, vmax: float, n_low: int = 3, n_high: int = 4) -> np.ndarray:
    """Colour-bar ticks for a ``TwoSlopeNorm``: round values on each side of the centre, the centre
    included (matplotlib's default spaces ticks linearly in data, so the shorter side gets none).

    Examples:
      >>> two_slope_ticks(0.0, 1.0, 40.0).tolist()
      [0.0, 0.5, 1.0, 10.0, 20.0, 30.0, 40.0]
      >>> two_slope_ticks(-9.0, 1.0, 4.0).tolist()
      [-8.0, -6.0, -4.0, -2.0, 1.0, 2.0, 3.0, 4.0]
    """
    from matplotlib.ticker import MaxNLocator

    def side(a, b, n):
        """Round ticks in [a, b], none within 15 % of the side's length of the centre (each side
        fills half the bar); two at least when a finer step finds them."""
        for bins in (n, n + 2, n + 4):
            t = MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10]).tick_values(a, b)
            t = t[(t >= a - 1e-9 * (b - a)) & (t <= b + 1e-9 * (b - a))]
            t = t[np.abs(t - vcenter) >= 0.15 * (b - a)]
            if t.size >= 2:
                break
        return t

    low, high = side(vmin, vcenter, n_low), side(vcenter, vmax, n_high)
    return np.unique(np.round(np.concatenate([low, [vcenter], high]), 12))


@styled
def curves(x, ys: Mapping[str, np.ndarray], *, stderr: Mapping[str, np.ndarray] | None = None, ax=None,
           x_name: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
           title: str | None = None, cmap: str = "viridis", legend_title: str | None = None):
    """Curves y(x), one per label, with ±2 standard-error bands; π ticks on an angle x axis.

    Returns:
      The matplotlib Figure.
    """
    x = np.asarray(x, float)
    if ax is None:
        fig, axes = new_figure(1, 1, panel=(5.2, 3.6))
        ax = axes[0, 0]
    fig = ax.figure
    import matplotlib

    colours = matplotlib.colormaps[cmap](np.linspace(0.05, 0.9, max(len(ys), 1)))
    for colour, (name, y) in zip(colours, ys.items(), strict=False):
        y = np.asarray(y, float)
        ax.plot(x, y, color=colour, lw=1.8, label=name)
        if stderr is not None and name in stderr and stderr[name] is not None:
            se = np.asarray(stderr[name], float)
            ax.fill_between(x, y - 2 * se, y + 2 * se, color=colour, alpha=0.25, lw=0)
    if x_name and is_angle_axis(x_name) and x.size:
        set_pi_axis(ax, "x", float(x.min()), float(x.max()))
    ax.set_xlabel(xlabel or AXIS_LABELS.get(x_name or "", x_name or ""))
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if ys:
        ax.legend(title=legend_title, frameon=False)
    ax.grid(alpha=0.3)
    return fig
