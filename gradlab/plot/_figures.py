"""One recipe per paper figure of Li et al. 2024 and Nie et al. 2023. Each takes Result objects
and returns the matplotlib Figure, so notebooks can restyle it (Rho et al. 2023: ``_margins``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from gradlab.plot._core import curves, heatmap
from gradlab.plot._style import AXIS_LABELS, new_figure, set_pi_axis, styled

#: The gradient-norm maps' part names (Nie et al. 2023 Eqs. 8, 17), which are not registered losses.
_NORM_PARTS = {"align": "alignment", "uniform": "uniformity"}


def loss_title(name: str) -> str:
    """Display name of a loss: the registry's short label (``LossSpec.label``), else the name as given."""
    if name in _NORM_PARTS:
        return _NORM_PARTS[name]
    try:
        from gradlab.losses import get_spec

        return get_spec(name).label
    except Exception:  # noqa: BLE001 - any unknown name is shown as given
        return str(name)


def panel_title(meta: Mapping, label: str | None = None) -> str:
    """A loss panel's title: the loss's display name (``label``, else :func:`loss_title` of
    ``meta["loss"]``) and its parameters, e.g. ``"InfoNCE (τ=0.1)"``."""
    return f"{label or loss_title(meta.get('loss', ''))} ({_params_str(meta)})"


def _grid_shape(n: int, ncols: int | None):
    ncols = n if ncols is None else max(1, min(ncols, n))
    return math.ceil(n / ncols), ncols


def _hide_unused(axes, n):
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)


def _params_str(meta: Mapping) -> str:
    p = meta.get("params") or {}
    return ", ".join(f"{_sym(k)}={v:.3g}" for k, v in p.items())


def _sym(k: str) -> str:
    return {"tau": "τ", "u": "u", "m": "m", "alpha": "α", "t": "t"}.get(k, k)


def _loss_panels(results, titles, suptitle, ncols, **heatmap_kw):
    """One (μ_pos, μ_neg) heatmap panel per loss's Result, titled by loss and parameters."""
    results = list(results)
    nrows, ncols = _grid_shape(len(results), ncols)
    fig, axes = new_figure(nrows, ncols, panel=(4.6, 3.6))
    for i, (ax, r) in enumerate(zip(axes.ravel(), results, strict=False)):
        title = titles[i] if titles else panel_title(r.meta)
        heatmap(r, ax=ax, title=title, **heatmap_kw)
    _hide_unused(axes, len(results))
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# --- Li et al. 2024 ----------------------------------------------------------------------------------
@styled
def gd_maps(results: Sequence, *, titles: Sequence[str] | None = None, suptitle: str | None = None,
            ncols: int | None = None):
    """Li et al. 2024 Figs. 2 and 10: mean GD over (μ_pos, μ_neg), one panel per loss (colour 0..1)."""
    return _loss_panels(results, titles, suptitle, ncols, quantity="gd", vmin=0.0, vmax=1.0)


@styled
def weight_share_curves(result, *, title: str | None = None):
    """Li et al. 2024 Fig. 3: mean share of the hardest negative in W vs μ_neg, one curve per τ."""
    taus = np.asarray(result.coords["tau"], float)
    mean = result.masked_mean()
    ys = {f"τ = {t:g}": mean[i] for i, t in enumerate(taus)}
    se = None if result.stderr is None else {f"τ = {t:g}": result.stderr[i] for i, t in enumerate(taus)}
    mu_pos = result.meta.get("mu_pos")
    n = (result.meta.get("protocol") or {}).get("batch_size")
    default = "hardest negative's share of the weight"
    if mu_pos is not None:
        default += f"\n($\\mu_{{pos}}$ = {mu_pos / math.pi:.3g}π" + (f", N = {n})" if n else ")")
    fig = curves(result.coords["mu_neg"], ys, stderr=se, x_name="mu_neg", ylabel="share of the hardest negative",
                 title=title or default, cmap="viridis")
    ax = fig.axes[0]
    ax.set_ylim(-0.02, 1.02)
    ax.legend(frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: the curves fill the axes
    return fig


@styled
def ratio_maps(results: Sequence, *, titles: Sequence[str] | None = None, suptitle: str | None = None,
               vmin: float | None = 0.0, vmax: float | None = 3.0, ncols: int | None = None):
    """Li et al. 2024 Fig. 4: mean dynamic ratio over (μ_pos, μ_neg), shaded where the pairs do
    not occur in training (μ_pos > μ_neg, and gradient dissipation), contours at R = 1, 2.

    The colour scale is clipped to [vmin, vmax] (the ratios diverge as θ_ii' → 0) so that
    the band 1 ≤ R ≤ 2 the paper discusses stays readable.
    """
    return _loss_panels(results, titles, suptitle, ncols, quantity="ratio", vmin=vmin, vmax=vmax,
                        contours=[1.0, 2.0], contour_color="white", contour_fmt="R = %g", contour_fontsize=12)


@styled
def lemma1_maps(result, *, max_ratios: int = 4):
    """Lemma 1 over the grid: mean minimum ratio r_low (masked where never feasible), and
    the fraction of batches a static ratio r satisfies, one panel per r."""
    r_axis = np.asarray(result.coords.get("r", []), float)[:max_ratios]
    n = 1 + r_axis.size
    nrows, ncols = _grid_shape(n, 3)
    fig, axes = new_figure(nrows, ncols, panel=(4.4, 3.6))
    lam = result.meta.get("lam")
    low = np.asarray(result.mean, float)
    finite = low[np.isfinite(low)]
    vmax = float(np.quantile(finite, 0.98)) if finite.size else None
    flat = axes.ravel()
    heatmap(result, quantity="lemma1", ax=flat[0], vmax=vmax, contours=[1.0],
            title=f"minimum ratio $r_{{low}}$ (λ = {lam:g})" if lam is not None else "minimum ratio")
    sat = result.extra.get("satisfied")
    for k, r in enumerate(r_axis):
        heatmap(np.asarray(sat[k], float), x=result.coords["mu_neg"], y=result.coords["mu_pos"],
                x_name="mu_neg", y_name="mu_pos", quantity="feasible", ax=flat[k + 1], vmin=0, vmax=1,
                title=f"r = {r:g} satisfies Lemma 1", label="fraction of batches")
    _hide_unused(axes, n)
    return fig


@styled
def min_ratio_distribution(result, *, ratio: float = 1.0, title: str | None = None, xlim=None):
    """Li et al. 2024 Fig. 8(a), simulated: density of the minimum ratio r_low per λ, with a
    static ratio ``ratio`` marked.

    The densities are over the feasible batches only. The legend gives, per λ, the fraction
    of feasible batches whose r_low ≤ ``ratio`` (a static ratio satisfies the lemma only
    there; from ``extra["cdf"]`` when the result has that ratio, else from the histogram when
    ``ratio`` is a bin edge, else left out), the feasible fraction, and the fractions of
    feasible batches beyond the histogram's range. ``xlim`` defaults to that whole range.
    """
    import matplotlib

    lams = np.asarray(result.coords["lam"], float)
    edges = np.asarray(result.extra["bin_edges"], float)
    hist = np.asarray(result.extra["histogram"], float)
    below = np.asarray(result.extra.get("below", np.zeros(lams.size)), float)
    above = np.asarray(result.extra.get("above", np.zeros(lams.size)), float)
    feas = np.asarray(result.extra.get("feasible", np.ones(lams.size)), float)
    at = _cdf_at(result, ratio, edges, hist, below)
    fig, axes = new_figure(1, 1, panel=(5.6, 4.6))
    ax = axes[0, 0]
    colours = matplotlib.colormaps["plasma"](np.linspace(0.05, 0.85, max(lams.size, 1)))
    for k, (lam, colour) in enumerate(zip(lams, colours, strict=False)):
        share = "" if at is None else f"P($r_{{low}}$ ≤ {ratio:g}) = {at[k]:.2f}, "
        beyond = "".join(f", {v:.2f} {side} {e:g}" for v, side, e in ((below[k], "<", edges[0]),
                                                                      (above[k], ">", edges[-1]))
                         if np.isfinite(v) and v >= 0.005)
        ax.stairs(hist[k], edges, color=colour, lw=1.8, fill=False,
                  label=f"λ = {lam:g}: {share}feasible {feas[k]:.2f}{beyond}")
        ax.stairs(hist[k], edges, color=colour, alpha=0.12, fill=True)
    ax.axvline(ratio, color="k", ls="--", lw=1.2)
    ax.set_xlim(*(xlim or (edges[0], edges[-1])))
    ax.set_xlabel("minimum ratio $r_{low}$ of Lemma 1")
    ax.set_ylabel("density over feasible batches")
    meta = result.meta
    mp, mn = (_scalar(meta.get(k)) for k in ("mu_pos", "mu_neg"))
    if title is None:
        title = "distribution of the minimum ratio (simulated)"
        if isinstance(mp, (int, float)) and isinstance(mn, (int, float)):
            title += f"\n$\\mu_{{pos}}$ = {mp / math.pi:.3g}π, $\\mu_{{neg}}$ = {mn / math.pi:.3g}π"
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.2))
    ax.grid(alpha=0.3)
    return fig


def _cdf_at(result, ratio, edges, hist, below):
    """P(r_low ≤ ratio) per λ: exact from ``extra["cdf"]``, else from whole histogram bins."""
    ratios = np.asarray(result.coords.get("ratio", []), float)
    if "cdf" in result.extra and np.any(np.isclose(ratios, ratio)):
        return np.asarray(result.extra["cdf"], float)[:, int(np.argmin(np.abs(ratios - ratio)))]
    if not np.any(np.isclose(edges, ratio)):
        return None
    mass = hist * np.diff(edges)
    return np.nansum(mass[:, edges[1:] <= ratio + 1e-9], axis=1) + np.nan_to_num(below)


def _scalar(v):
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    return v if isinstance(v, (int, float)) else None


# --- Nie et al. 2023 ----------------------------------------------------------------------------------
def norm_title(result) -> str:
    m = result.meta
    name = m.get("loss", "")
    part = m.get("part", "pos")
    sym = {"infonce": "cl", "dcl+": "dcl^+"}.get(name, name)
    if name == "align":
        head = r"$\|\nabla \mathcal{L}_{align}\|$"
    elif name == "uniform":
        head = r"$\|\nabla \mathcal{L}^{j}_{uniform}\|$"
    else:
        head = rf"$\|\nabla^{{{'pos' if part == 'pos' else 'neg_j'}}}_{{{sym}}}\|$"
    bits = [_params_str(m)]
    if name in ("infonce", "uniform", "dcl+") or (name == "dcl" and part == "neg") or m.get("method") == "autodiff":
        bits.append(f"K = {m.get('negatives')}")
    return f"{head}  ({', '.join(b for b in bits if b)})"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(vmax: float) -> int:
    """The power of ten to factor out of colour-bar labels: 0 for 0.1 ≤ |vmax| < 1000.

    Examples:
      >>> _decade(0.3), _decade(0.0006), _decade(0.045), _decade(5e4), _decade(0.0)
      (0, -4, -2, 4, 0)
    """
    if not np.isfinite(vmax) or vmax == 0 or 0.1 <= abs(vmax) < 1000:
        return 0
    return int(np.floor(np.log10(abs(vmax))))


@styled
def norm_maps(results: Sequence, *, titles: Sequence[str] | None = None, suptitle: str | None = None,
              ncols: int | None = None, panel: tuple[float, float] = (4.3, 3.5)):
    """Nie et al. 2023 Figs. 2 and 4: gradient-norm maps over θ_ii' (y) × θ_ij' (x), one panel each,
    each with its own colour scale (magnitudes differ by orders: 1/τ, 2t/(NK), ...).

    ``panel`` is each panel's size in inches: a smaller panel keeps the same font sizes, so
    the labels stay legible when a many-panel figure is shown narrow (at most four ticks per
    axis and colour bar, small or large norms with a common ×10ⁿ factor).
    """
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    results = list(results)
    nrows, ncols = _grid_shape(len(results), ncols)
    fig, axes = new_figure(nrows, ncols, panel=panel)
    for i, (ax, r) in enumerate(zip(axes.ravel(), results, strict=False)):
        heatmap(r, quantity="norm", ax=ax, title=titles[i] if titles else norm_title(r), vmin=0.0)
        for which in ("x", "y"):
            lim = ax.get_xlim() if which == "x" else ax.get_ylim()
            set_pi_axis(ax, which, max(lim[0], 0.0), lim[1], max_ticks=4)
        cbar = ax.collections[0].colorbar
        e = _decade(cbar.vmax)
        cbar.locator = MaxNLocator(nbins=4)
        cbar.formatter = FuncFormatter(lambda v, _pos, e=e: f"{v / 10.0 ** e:g}")
        cbar.update_ticks()
        if e:
            cbar.set_label(f"gradient norm (×10{str(e).translate(_SUPERSCRIPT)})")
    _hide_unused(axes, len(results))
    if suptitle:
        fig.suptitle(suptitle)
    return fig


__all__ = [
    "loss_title",
    "panel_title",
    "gd_maps",
    "weight_share_curves",
    "ratio_maps",
    "lemma1_maps",
    "min_ratio_distribution",
    "norm_maps",
    "norm_title",
    "AXIS_LABELS",
    "set_pi_axis",
]
