"""gradlab.plot: every figure recipe renders on a tiny grid (file exists, image not blank),
π-multiple axes, masks, colour bars; matplotlib stays out of ``import gradlab``."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from gradlab import plot
from gradlab.io import Result
from gradlab.plot._style import pi_label, pi_ticks  # private on purpose: the tick helper
from tests._mpl import callers_settings_after

G = 6


def _grid_result(statistic="gd_map", loss="arccon", mask=True, extra=None):
    mu_pos = np.linspace(math.pi / 20, math.pi / 2, G)
    mu_neg = np.linspace(math.pi / 20, math.pi, G + 1)
    mean = np.clip(1.2 - (mu_neg[None, :] - mu_pos[:, None]), 0, 1)
    m = (mu_pos[:, None] > mu_neg[None, :]) if mask else None
    return Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": mu_pos, "mu_neg": mu_neg}, mean=mean,
                  stderr=np.full(mean.shape, 0.01), mask=m, extra=extra or {},
                  meta={"statistic": statistic, "loss": loss, "params": {"tau": 0.05}})


def _not_blank(path):
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    rgb = img[..., :3]
    non_white = np.mean(np.any(rgb < 0.95, axis=-1))
    assert rgb.std() > 0.05 and non_white > 0.05, f"{path} looks blank"
    return img


def _recipes():
    weight = Result(dims=("tau", "mu_neg"), coords={"tau": np.array([0.3, 0.05]), "mu_neg": np.linspace(0.2, 3.0, 9)},
                    mean=np.random.default_rng(0).uniform(0, 1, (2, 9)), stderr=np.full((2, 9), 0.01),
                    mask=np.zeros((2, 9), bool), meta={"mu_pos": math.pi / 6, "protocol": {"batch_size": 16}})
    sat = np.random.default_rng(1).uniform(0, 1, (2, G, G + 1))
    lemma = _grid_result("lemma1_map", mask=True, extra={"satisfied": sat})
    lemma = Result(dims=lemma.dims, coords={**lemma.coords, "r": np.array([1.0, 1.5])}, mean=lemma.mean,
                   mask=lemma.mask, extra={"satisfied": sat}, meta={"lam": 0.1})
    edges = np.linspace(-2, 4, 13)
    dist = Result(dims=("lam",), coords={"lam": np.array([0.1, 1.0])}, mean=np.array([0.8, 1.2]),
                  extra={"histogram": np.abs(np.random.default_rng(2).normal(size=(2, 12))), "bin_edges": edges,
                         "below": np.zeros(2), "feasible": np.array([1.0, 0.5])},
                  meta={"mu_pos": [math.pi / 6], "mu_neg": [math.pi / 3]})
    from gradlab import margins, norms

    theta = np.linspace(0.05, math.pi - 0.05, 8, dtype=np.float32)
    q = np.linspace(0.05, 0.95, 7, dtype=np.float32)
    return {
        "gd_maps": lambda: plot.gd_maps([_grid_result(mask=False), _grid_result(loss="met", mask=False)]),
        "weight_share_curves": lambda: plot.weight_share_curves(weight),
        "ratio_maps": lambda: plot.ratio_maps([_grid_result("ratio_map", l) for l in ("arccon", "met", "mat")]),
        "lemma1_maps": lambda: plot.lemma1_maps(lemma),
        "min_ratio_distribution": lambda: plot.min_ratio_distribution(dist),
        "norm_maps": lambda: plot.norm_maps([norms.norm_result(n, grid=9) for n in ("infonce", "dcl", "mat")]
                                            + [norms.norm_result("uniform", part="neg", grid=9)]),
        "margin_gradients": lambda: plot.margin_gradients(margins.free_gradient_grid(theta, q, tau=0.25)),
        "margin_multipliers": lambda: plot.margin_multipliers(margins.multiplier_grid(theta, q, tau=0.25, m1=0.4)),
        "margin_ratio_grid": lambda: plot.margin_ratio_grid(
            margins.ratio_grid(theta, q, m1_values=(0.2, 0.8), tau_values=(0.1, 0.5))),
        "stsb_scatter": lambda: plot.stsb_scatter(*_stsb_data(), title="light, STS-B dev"),
        "train_curves": lambda: plot.train_curves(*_train_data(), best_step=200, title="light + infonce"),
    }


def _stsb_data():
    gold = np.random.default_rng(3).uniform(0, 5, 1500)  # the size of STS-B dev
    return 0.1 * gold + np.random.default_rng(4).normal(0, 0.1, 1500), gold


def _train_data():
    steps = np.arange(400.0)  # noisy per-step losses, as in a real run
    losses = 3.0 - 0.3 * np.log1p(steps) + np.random.default_rng(5).normal(0, 0.3, 400)
    evals = [{"step": s, "dev_spearman": 60.0 + s / 30} for s in (0, 100, 200, 300, 400)]
    return losses, evals


@pytest.mark.parametrize("name", list(_recipes()))
def test_every_recipe_renders(name, tmp_path):
    from matplotlib.figure import Figure

    fig = _recipes()[name]()
    assert isinstance(fig, Figure)
    path = plot.save_figure(fig, tmp_path / f"{name}.png")
    assert path.exists() and path.stat().st_size > 1000
    _not_blank(path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary file left behind"


def test_pi_labels_and_ticks():
    assert pi_label(0.0) == "0"
    assert pi_label(math.pi) == "π"
    assert pi_label(math.pi / 20) == "π/20"
    assert pi_label(3 * math.pi / 10) == "3π/10"
    assert pi_label(-math.pi / 2) == "−π/2"  # U+2212, matplotlib's own minus
    ticks = pi_ticks(math.pi / 20, math.pi)
    assert 3 <= ticks.size <= 7
    from fractions import Fraction

    for t in ticks:  # every tick is a simple multiple of π (denominator <= 20)
        assert abs(float(Fraction(t / math.pi).limit_denominator(20)) * math.pi - t) < 1e-9
    assert ticks.min() >= math.pi / 20 - 1e-9 and ticks.max() <= math.pi + 1e-9


def test_heatmap_axes_colorbar_and_mask_shading(tmp_path):
    r = _grid_result("ratio_map")
    fig = plot.heatmap(r, quantity="ratio", title="t")
    ax, cax = fig.axes[0], fig.axes[1]
    assert cax.get_ylabel() == plot.LABELS["ratio"]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert all("π" in s or s == "0" for s in labels) and labels
    assert ax.get_xlabel() == r"$\mu_{neg}$" and ax.get_ylabel() == r"$\mu_{pos}$"
    # the masked cells are drawn over: same data without the mask renders differently
    a = tmp_path / "masked.png"
    b = tmp_path / "plain.png"
    plot.save_figure(fig, a)
    unmasked = Result(dims=r.dims, coords=r.coords, mean=r.mean, meta=r.meta)
    plot.save_figure(plot.heatmap(unmasked, quantity="ratio", title="t"), b)
    ia, ib = _not_blank(a), _not_blank(b)
    assert ia.shape == ib.shape and np.abs(ia - ib).max() > 0.1


def test_heatmap_accepts_arrays_and_validates_shapes():
    fig = plot.heatmap(np.arange(12.0).reshape(3, 4), x=np.linspace(0, 1, 4), y=np.linspace(0, 1, 3))
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="do not match"):
        plot.heatmap(np.zeros((3, 4)), x=np.zeros(3), y=np.zeros(3))
    with pytest.raises(ValueError, match="2-D"):
        plot.heatmap(np.zeros(3))


def test_same_quantity_same_colormap():
    a = plot.gd_maps([_grid_result(mask=False)])
    b = plot.heatmap(_grid_result(mask=False), quantity="gd")
    cmap_a = a.axes[0].collections[0].get_cmap().name
    cmap_b = b.axes[0].collections[0].get_cmap().name
    assert cmap_a == cmap_b == plot.CMAPS["gd"]


def test_import_gradlab_does_not_import_matplotlib():
    code = "import sys, gradlab, gradlab.plot, gradlab.norms; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_plotting_leaves_the_callers_matplotlib_settings_alone():
    # a notebook's rcParams and backend are the user's: recipes style only their own figure
    out = callers_settings_after(
        "import numpy as np\n"
        "from gradlab import plot\n"
        "fig = plot.heatmap(np.eye(4), x=np.linspace(0, 3, 4), y=np.linspace(0, 1.5, 4))\n"
        "print(fig.axes[0].xaxis.label.get_fontsize())"
    )
    assert float(out[0]) == 12.0  # gradlab's axes.labelsize inside its own figure
    assert out[1:] == ["17.0", "True", "False"]  # the caller's rc and backend kept, no pyplot state touched


def test_min_ratio_legend_reads_the_exact_cdf_at_the_chosen_ratio():
    from gradlab.lemma1 import summarize_min_ratio

    samples = np.array([[0.5, 0.9, 1.2, 1.33, 3.0, np.nan]])  # 5 feasible; 2 of them ≤ 1, 4 ≤ 1.4
    res = summarize_min_ratio(samples, [0.1], ratios=(1.0, 1.4))
    labels = lambda fig: [t.get_text() for t in fig.axes[0].get_legend().get_texts()]  # noqa: E731
    assert "P($r_{low}$ ≤ 1) = 0.40" in labels(plot.min_ratio_distribution(res))[0]
    assert "P($r_{low}$ ≤ 1.4) = 0.80" in labels(plot.min_ratio_distribution(res, ratio=1.4))[0]
    # a ratio that is neither reported nor a bin edge: no made-up fraction
    assert "P(" not in labels(plot.min_ratio_distribution(res, ratio=1.37))[0]


@pytest.mark.parametrize("name", ["weight_share_curves", "min_ratio_distribution", "ratio_maps"])
def test_saved_recipe_does_not_depend_on_the_callers_rc(name, tmp_path):
    # tick density is decided when the figure is drawn, from tick label sizes: pinned per recipe
    import matplotlib as mpl
    import matplotlib.image as mpimg

    def png(rc, stem):
        with mpl.rc_context(rc):
            path = tmp_path / f"{stem}.png"
            plot.save_figure(_recipes()[name](), path)
        return mpimg.imread(path)

    ref = png({}, "default")
    other = png({"font.size": 17, "xtick.labelsize": 24, "ytick.labelsize": 3}, "other")
    assert ref.shape == other.shape and np.array_equal(ref, other)


def test_real_pipeline_recipes_draw_the_given_data():
    cos, gold = _stsb_data()
    fig = plot.stsb_scatter(cos, gold, title="t")
    (ax,) = fig.axes
    np.testing.assert_array_equal(ax.collections[0].get_offsets(), np.column_stack([gold, cos]))
    assert ax.get_xlabel() == "gold similarity (0–5)" and ax.get_ylabel() == "cosine similarity"
    assert ax.get_title() == "t"
    losses, evals = _train_data()
    fig = plot.train_curves(losses, evals, best_step=200, title="run")
    a1, a2 = fig.axes
    np.testing.assert_array_equal(a1.lines[0].get_xdata(), np.arange(1, 401))
    np.testing.assert_array_equal(a1.lines[0].get_ydata(), losses)
    np.testing.assert_array_equal(a2.lines[0].get_ydata(), [e["dev_spearman"] for e in evals])
    assert a2.lines[1].get_xdata()[0] == 200 and a2.get_legend().get_texts()[0].get_text() == "best (step 200)"
    assert a1.get_ylabel() == "training loss" and fig.get_suptitle() == "run"
    assert plot.train_curves(losses, evals).axes[1].get_legend() is None  # no best step: nothing marked


def test_every_recipe_leaves_the_callers_matplotlib_settings_alone():
    # every recipe of _recipes (the real pipeline's included): no pyplot, no backend or rc change
    out = callers_settings_after("from tests import test_plot\nfor make in test_plot._recipes().values():\n    make()")
    assert out == ["17.0", "True", "False"]
