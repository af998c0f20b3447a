"""The figures read at a glance and do not mislead: bars from zero, colour bars that say where
they clip and are labelled on both sides of a diverging centre, gaps and constants said in
words, reference lines where the paper draws them. Small synthetic data; structure, not pixels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradlab import plot
from gradlab.io import Result


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _legend(ax):
    leg = ax.get_legend()
    return [] if leg is None else [t.get_text() for t in leg.get_texts()]


def _cbar(ax):
    """The colour bar drawn for the first image of ``ax`` (matplotlib links it to the mappable)."""
    return ax.collections[0].colorbar


# --- Li et al. 2024 Fig. 1 (bars) ----------------------------------------------------------------
def test_bars_start_at_zero_and_carry_their_difference():
    pairs = [("A", (43.0, 0.5), "mA", (45.5, 0.4)), ("B", (60.0, None), "mB", (58.0, None))]
    fig = plot.ori_mod_bars(pairs, reference=("InfoNCE", (50.0, None)), baseline=40.0)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo == 0.0 and hi >= 60.0
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == [43.0, 45.5, 58.0, 60.0]  # full bars: each drawn from 0 to its value
    assert all(p.get_y() == 0.0 for p in ax.patches)
    assert {"+2.5", "-2.0"} <= set(_texts(ax))  # modified − original, by hand


# --- colour bars -----------------------------------------------------------------------------
@pytest.mark.parametrize(("values", "expected"), [
    ([0.0, 0.5, 1.0], "neither"), ([-0.5, 0.5], "min"), ([0.5, 3.5], "max"), ([-1.0, 4.0], "both")])
def test_colorbar_extends_exactly_where_values_pass_the_range(values, expected):
    v = np.array([values, values], float)
    fig = plot.heatmap(v, x=np.arange(v.shape[1], dtype=float), y=np.arange(2.0), vmin=0.0, vmax=1.0 if
                       expected in ("neither", "min") else 3.0)
    assert _cbar(fig.axes[0]).extend == expected


def test_lemma1_map_marks_its_clipped_colour_scale():
    # the r_low panel's scale stops at the 98th percentile: the values above it get an arrow
    g = np.linspace(0.1, 1.5, 10)
    mean = np.add.outer(g, g)  # 10 × 10, max 3.0 well above its 98th percentile
    sat = np.full((1, 10, 10), 0.5)
    r = Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": g, "mu_neg": g, "r": np.array([1.0])}, mean=mean,
               extra={"satisfied": sat}, meta={"lam": 0.1})
    fig = plot.lemma1_maps(r)
    cb = _cbar(fig.axes[0])
    assert cb.extend == "max" and cb.vmax == pytest.approx(np.quantile(mean, 0.98))
    assert _cbar(fig.axes[1]).extend == "neither"  # the satisfied fraction fits [0, 1]


def test_diverging_colorbar_has_ticks_on_both_sides_of_its_centre():
    from matplotlib.colors import TwoSlopeNorm

    v = np.linspace(0.0, 40.0, 30).reshape(5, 6)  # 1 is near the bottom: a linear bar would label only > 1
    norm = TwoSlopeNorm(vcenter=1.0, vmin=0.0, vmax=40.0)
    fig = plot.heatmap(v, x=np.arange(6.0), y=np.arange(5.0), quantity="multiplier", norm=norm)
    ticks = np.asarray(_cbar(fig.axes[0]).get_ticks())
    assert (ticks < 1).sum() >= 2 and (ticks > 1).sum() >= 2 and 1.0 in ticks
    # the lower half of the bar is labelled (TwoSlopeNorm maps [vmin, 1] to [0, 0.5])
    assert (norm(ticks[ticks < 1]) < 0.5).all()


@pytest.mark.parametrize("recipe", ["margin_multipliers", "margin_ratio_grid"])
def test_rho2023_multiplier_bars_are_labelled_below_one(recipe):
    from gradlab import margins

    theta = np.linspace(0.05, math.pi - 0.05, 24)
    q = np.linspace(0.05, 0.95, 9)
    if recipe == "margin_multipliers":
        fig = plot.margin_multipliers(margins.multiplier_grid(theta, q, tau=0.25, m1=0.4))
    else:
        fig = plot.margin_ratio_grid(margins.ratio_grid(theta, q, m1_values=(0.4, 1.6), tau_values=(0.25,)))
    images = [ax for ax in fig.axes if ax.collections and getattr(ax.collections[0], "colorbar", None)]
    assert images
    for ax in images:
        cb = _cbar(ax)
        ticks = np.asarray(cb.get_ticks())
        ticks = ticks[(ticks >= cb.vmin) & (ticks <= cb.vmax)]  # the ones the bar shows
        assert (ticks < 1).sum() >= 2 and (ticks > 1).sum() >= 2, ticks
        assert all(lab.get_text() for lab in cb.ax.get_yticklabels())


# --- Li et al. 2024 Figs. 3, 4, 8(a) (simulated) ----------------------------------------------------
def test_fig3_legend_sits_outside_the_data():
    mu_neg = np.linspace(0.2, 3.0, 9)
    r = Result(dims=("tau", "mu_neg"), coords={"tau": np.array([0.3, 0.005]), "mu_neg": mu_neg},
               mean=np.vstack([np.full(9, 0.02), np.full(9, 0.95)]), stderr=np.full((2, 9), 0.01),
               meta={"mu_pos": math.pi / 6})
    fig = plot.weight_share_curves(r)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend_box = ax.get_legend().get_window_extent()
    assert legend_box.x0 >= ax.get_window_extent().x1  # right of the axes, not over the curves


def test_fig4_contour_labels_are_large_and_named():
    g = np.linspace(0.2, 3.0, 12)
    mean = np.add.outer(np.zeros(12), g)  # R from 0.2 to 3.0 along μ_neg: contours at 1 and 2
    r = Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": g / 2, "mu_neg": g}, mean=mean,
               meta={"loss": "met", "params": {"m": 0.45}})
    ax = plot.ratio_maps([r]).axes[0]
    labels = [t for t in ax.texts if t.get_text().startswith("R = ")]
    assert {t.get_text() for t in labels} == {"R = 1", "R = 2"}
    assert min(t.get_fontsize() for t in labels) >= 11


def test_fig8a_simulated_shows_the_whole_range_and_what_lies_beyond():
    from gradlab.lemma1 import summarize_min_ratio

    samples = np.array([[-3.0, -1.5, 0.5, 1.2, 1.3, np.nan]])  # 5 feasible; one below −2 (1/5 = 0.20)
    res = summarize_min_ratio(samples, [0.1])
    ax = plot.min_ratio_distribution(res).axes[0]
    assert ax.get_xlim() == (-2.0, 4.0)  # the histogram's full range (default bins), not cut at −1
    assert "0.20 < -2" in _legend(ax)[0] and "feasible 0.83" in _legend(ax)[0]
    assert "feasible" in ax.get_ylabel()


# --- Nie et al. 2023 Fig. 4 ---------------------------------------------------------------------------
def test_norm_maps_in_two_columns_factor_out_small_magnitudes():
    from gradlab import norms

    rs = [norms.norm_result("infonce", part="neg", negatives=k, grid=9) for k in (64, 32768)]
    rs += [norms.norm_result("met", part="neg", grid=9)]
    fig = plot.norm_maps(rs, ncols=2, panel=(3.4, 2.7))
    maps = [ax for ax in fig.axes if ax.get_visible() and ax.collections and ax.get_title()]
    assert len(maps) == 3
    assert tuple(fig.get_size_inches()) == pytest.approx((6.8, 5.4))  # 2 × 2 panels of 3.4 × 2.7 in
    vmax = float(np.nanmax(rs[1].mean))  # K = 32768: norms of order 1e-4 (Eq. 16 scales as 1/K)
    e = math.floor(math.log10(vmax))
    assert e <= -3
    cb = _cbar(maps[1])
    assert cb.ax.get_ylabel().endswith(")") and "×10⁻" in cb.ax.get_ylabel()
    top = max(t for t in cb.get_ticks() if t <= cb.vmax)
    shown = {lab.get_text() for lab in cb.ax.get_yticklabels()}
    assert f"{top / 10.0 ** e:g}" in shown  # labels in units of 10^e, no offset text over the title
    assert _cbar(maps[2]).ax.get_ylabel() == plot.LABELS["norm"]  # MET's norms ≤ 1: no factor
    for ax in maps:
        assert len(ax.get_xticks()) <= 4 and len(ax.get_yticks()) <= 4


# --- training studies -------------------------------------------------------------------------------
def _steps_panel(mean):
    steps = np.arange(5.0, 5.0 * (len(mean) + 1), 5.0)
    return steps, np.asarray(mean, float), None


def test_fig9_reference_lines_at_the_simulated_sigmas():
    panels = {"σ_pos": {"σ_pos": _steps_panel([0.06, 0.058, 0.057])},
              "σ_neg": {"σ_neg": _steps_panel([0.12, 0.118, 0.115])}}
    refs = {"σ_pos": [(0.05, "simulation's σ_pos = 0.05")], "σ_neg": [(0.10, "simulation's σ_neg = 0.10")]}
    fig = plot.step_series(panels, references=refs)
    for ax, value in zip(fig.axes, (0.05, 0.10), strict=True):
        flat = [ln for ln in ax.lines if len(set(ln.get_ydata())) == 1 and ln.get_ydata()[0] == value]
        assert flat and flat[0].get_linestyle() == "--"
        lo, hi = ax.get_ylim()
        assert lo < value < hi  # the line is inside the view even though the data stay above it
        assert any(f"{value:.2f}" in t for t in _texts(ax))


def test_fig8b_gaps_are_marked_and_explained():
    mean = [1.5, np.nan, np.nan, 1.4, 1.6, np.nan]
    fig = plot.step_series({"(b) R": {"ArcCon": _steps_panel(mean)}}, gaps={"(b) R": "no anchor's GD above the threshold"})
    ax = fig.axes[0]
    points = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert len(points) == 1 and points[0].get_xdata().tolist() == [5.0, 20.0, 25.0]  # every recorded value
    rug = [ln for ln in ax.lines if ln.get_marker() == "|" and len(ln.get_xdata())]
    assert rug and rug[0].get_xdata().tolist() == [10.0, 15.0, 30.0]  # every record without one
    across = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert across and np.isfinite(across[0].get_ydata()).all()  # the dotted line bridges the gaps
    assert "no value: no anchor's GD above the threshold" in _legend(ax)


def test_fig8a_cpu_says_feasible_only_and_marks_the_end_bins():
    edges = np.linspace(-2.0, 4.0, 13)
    counts = np.zeros(12)
    counts[[0, 5, 6]] = [3, 10, 7]  # the first bin holds the values clipped at −2
    fig = plot.min_ratio_histograms(edges, {"λ = 0.1": {"before": counts, "after": counts},
                                            "λ = 1": {"before": np.zeros(12), "after": np.zeros(12)}},
                                    feasible={"λ = 0.1": {"before": 0.25, "after": 0.5}})
    a, b = fig.axes
    labels = [t.get_text() for t in a.get_xticklabels()]
    assert labels[0] == "≤-2" and labels[-1] == "≥4"
    assert "feasible anchors" in a.get_ylabel()
    assert _legend(a) == ["before (feasible 0.25)", "after (feasible 0.50)"]
    assert "no feasible anchor" in _texts(b)


def test_fig5_axis_spans_the_data_with_round_ticks():
    edges = np.linspace(-1.0, 1.0, 201)
    pos, neg = np.zeros(200), np.zeros(200)
    pos[185:199] = 5.0  # cos 0.85 .. 0.99
    neg[73:150] = 2.0  # cos −0.27 .. 0.50
    fig = plot.cosine_histograms(edges, {"a": {"pos": pos, "neg": neg}, "b": {"pos": pos, "neg": neg}})
    ax = fig.axes[0]
    assert ax.get_xlim() == pytest.approx((-0.3, 1.0))  # the used bins, rounded out to 0.1
    fig.canvas.draw()
    boxes = sorted((b.x0, b.x1) for b in (t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()))
    assert len(boxes) >= 3
    assert all(right < left for (_, right), (left, _) in zip(boxes, boxes[1:], strict=False))  # no collisions


def _map(values, g=None):
    g = np.linspace(0.2, 1.5, 8) if g is None else g
    return Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": g, "mu_neg": g * 2}, mean=np.asarray(values, float))


def test_trajectory_constant_ratio_is_said_not_coloured():
    gd = _map(np.linspace(0, 1, 64).reshape(8, 8))
    const = _map(np.full((8, 8), 1.5))
    path_pos, path_neg = np.array([0.5, 0.52, 0.55]), np.array([1.2, 1.25, 1.3])
    fig = plot.trajectory_on_maps([gd, const], path_pos, path_neg, quantities=["gd", "ratio"],
                                  ranges=[(0.0, 1.0), (0.0, 3.0)])
    ax_gd, ax_r = fig.axes[:2]
    assert "R = 1.5, constant" in _texts(ax_r)
    assert _cbar(ax_r) is None and _cbar(ax_gd) is not None  # no colour scale for a constant
    assert not any("constant" in t for t in _texts(ax_gd))
    # a zoomed inset around the path on each panel, smaller than the panel and holding the path
    for ax in (ax_gd, ax_r):
        (inset,) = ax.child_axes
        (x0, x1), (y0, y1) = inset.get_xlim(), inset.get_ylim()
        assert x0 < path_neg.min() and path_neg.max() < x1 and y0 < path_pos.min() and path_pos.max() < y1
        assert (x1 - x0) < 0.5 * np.ptp(ax.get_xlim())



def test_trajectory_inset_only_when_the_path_is_small():
    gd = _map(np.linspace(0, 1, 64).reshape(8, 8))
    long_pos, long_neg = np.array([0.3, 0.9, 1.4]), np.array([0.5, 1.8, 2.9])  # most of the map
    fig = plot.trajectory_on_maps([gd], long_pos, long_neg)
    assert fig.axes[0].child_axes == []
    fig = plot.trajectory_on_maps([gd], long_pos, long_neg, inset=False)
    assert fig.axes[0].child_axes == []
    fig = plot.trajectory_on_maps([gd], long_pos[:1], long_neg[:1])  # one record: still zoomed in
    assert len(fig.axes[0].child_axes) == 1


def test_step_series_tells_close_series_apart_and_keeps_legends_off_the_data():
    """nie2023's panels: InfoNCE, alignment + uniformity and DCL nearly coincide, so hue alone must not
    carry them: each has its own hue, line style and marker, and the legend lies below the panel."""
    import matplotlib.colors as mcolors

    steps = np.arange(0.0, 105.0, 5.0)
    lines = {name: (steps, 1.0 + 0.001 * i + 0.01 * np.sin(steps / 20), np.full(steps.size, 0.005))
             for i, name in enumerate(["InfoNCE", "alignment + uniformity", "DCL", "MPT (m = 0.1)"])}
    fig = plot.step_series({"alignment": lines, "uniformity": lines}, ncols=2)
    fig.canvas.draw()
    for ax in fig.axes:
        drawn = [ln for ln in ax.lines if ln.get_label() in lines]
        assert len(drawn) == 4
        hues = {mcolors.to_hex(ln.get_color()) for ln in drawn}
        styles = {str(ln.get_linestyle()) + str(ln.get_dashes() if hasattr(ln, "get_dashes") else "") for ln in drawn}
        assert len(hues) == 4 and len({ln.get_marker() for ln in drawn}) == 4
        assert len({ln.get_linestyle() for ln in drawn} | styles) >= 2
        legend, box = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert legend.y1 <= box.y0 + 1  # below the axes: it covers no curve
        assert len(ax.collections) == 4  # each series draws its interval band
