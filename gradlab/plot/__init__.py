"""Plotting: heatmaps over angle axes (ticks in multiples of π, shaded masks), curves,
and one recipe per paper figure. Every function returns the matplotlib Figure.

matplotlib is imported on first use (Agg when headless), never at ``import gradlab``.

Recipes (Li et al. 2024): ``gd_maps`` (Figs. 2, 10), ``weight_share_curves`` (Fig. 3),
``ratio_maps`` (Fig. 4), ``lemma1_maps``, ``min_ratio_distribution`` (Fig. 8a);
(Nie et al. 2023): ``norm_maps`` (Figs. 2, 4); (Rho et al. 2023): ``margin_gradients`` (Fig. 1),
``margin_multipliers`` (Fig. 2), ``margin_ratio_grid`` (Fig. 8).
The training monitor (Li et al. 2024 Sec. 3.2 on real embeddings): ``monitor_curves``,
``lemma1_before_after``, ``cosine_before_after``, ``monitor_figures`` (a report's three),
``track_summary``.
The real pipeline: ``stsb_scatter``, ``sts_scores``, ``train_curves``; several runs overlaid
(``gradlab compare``): ``compare_curves``.
Primitives: ``heatmap``, ``curves``, ``shade_mask``, ``save_figure`` (``gradlab.outputs``'s);
style: ``CMAPS``.

A view: each recipe draws the data it is given (a ``Result``, a log's series, arrays) and
computes nothing, so this package imports no engine, monitor, real pipeline or experiment.
The recipes that compute and then draw, the paper-figure registry (``FIGURES``,
``paper_figure``, ``component_figure``) and the monitor report, are a floor up in
``gradlab.figures``; the registry's names still work from here (imported on first use).
"""

from gradlab._lazy import attach as _attach
from gradlab.io import series_keys as series_keys
from gradlab.outputs import save_figure as save_figure
from gradlab.plot._compare import compare_curves as compare_curves
from gradlab.plot._core import curves as curves
from gradlab.plot._core import heatmap as heatmap
from gradlab.plot._core import shade_mask as shade_mask
from gradlab.plot._experiments import component_sweeps as component_sweeps
from gradlab.plot._experiments import cosine_histograms as cosine_histograms
from gradlab.plot._experiments import min_ratio_histograms as min_ratio_histograms
from gradlab.plot._experiments import ori_mod_bars as ori_mod_bars
from gradlab.plot._experiments import path_cells as path_cells
from gradlab.plot._experiments import step_series as step_series
from gradlab.plot._experiments import trajectory_on_maps as trajectory_on_maps
from gradlab.plot._experiments import weight_share_before_after as weight_share_before_after
from gradlab.plot._figures import gd_maps as gd_maps
from gradlab.plot._figures import lemma1_maps as lemma1_maps
from gradlab.plot._figures import loss_title as loss_title
from gradlab.plot._figures import min_ratio_distribution as min_ratio_distribution
from gradlab.plot._figures import norm_maps as norm_maps
from gradlab.plot._figures import panel_title as panel_title
from gradlab.plot._figures import ratio_maps as ratio_maps
from gradlab.plot._figures import weight_share_curves as weight_share_curves
from gradlab.plot._margins import margin_gradients as margin_gradients
from gradlab.plot._margins import margin_multipliers as margin_multipliers
from gradlab.plot._margins import margin_ratio_grid as margin_ratio_grid
from gradlab.plot._monitor import cosine_before_after as cosine_before_after
from gradlab.plot._monitor import lemma1_before_after as lemma1_before_after
from gradlab.plot._monitor import monitor_curves as monitor_curves
from gradlab.plot._monitor import monitor_figure_recipes as monitor_figure_recipes
from gradlab.plot._monitor import monitor_figures as monitor_figures
from gradlab.plot._monitor import track_summary as track_summary
from gradlab.plot._real import sts_scores as sts_scores
from gradlab.plot._real import stsb_scatter as stsb_scatter
from gradlab.plot._real import train_curves as train_curves
from gradlab.plot._style import CMAPS as CMAPS
from gradlab.plot._style import LABELS as LABELS
from gradlab.plot._style import pi_label as pi_label

__all__ = [
    "curves", "heatmap", "shade_mask", "gd_maps", "lemma1_maps", "loss_title", "panel_title", "margin_gradients",
    "margin_multipliers", "margin_ratio_grid", "min_ratio_distribution", "norm_maps", "ratio_maps",
    "weight_share_curves", "monitor_curves", "lemma1_before_after", "cosine_before_after", "track_summary",
    "monitor_figures", "monitor_figure_recipes", "stsb_scatter", "sts_scores", "train_curves", "CMAPS", "LABELS",
    "pi_label", "save_figure", "series_keys",
    # several runs side by side (gradlab compare)
    "compare_curves",
    # training studies (gradlab.experiments)
    "component_sweeps", "cosine_histograms", "min_ratio_histograms", "ori_mod_bars", "path_cells", "step_series",
    "trajectory_on_maps", "weight_share_before_after",
]

#: The paper-figure registry moved a floor up, to ``gradlab.figures`` (its entries run the engine);
#: these names still reach it from here, imported on first use (never by ``import gradlab.plot``).
_MOVED_UP = {
    "FIGURES": "gradlab.figures",
    "PaperFigure": "gradlab.figures",
    "figure_ids": "gradlab.figures",
    "paper_figure": "gradlab.figures",
    "COMPONENTS": "gradlab.figures",
    "component_figure": "gradlab.figures",
}

__getattr__, _ = _attach(__name__, _MOVED_UP)
