"""Figure recipes that compute: the floor above ``gradlab.plot``.

A recipe here runs the library (the engine ``gradlab.simulate``, ``gradlab.norms``,
``gradlab.margins``, the monitor's log reader) and hands the result to ``gradlab.plot``, which
draws what it is given and computes nothing. Each returns the Figure with its data, so a notebook
gets what the ``gradlab`` command writes:

* the paper figures as a registry: ``FIGURES`` (id -> ``PaperFigure``) and
  ``paper_figure(id) -> (Figure, Result)``, the figure and data ``gradlab figures --only ID``
  writes; ``paper_drawing(id) -> (Drawing, Result)``, the same computed but not drawn (a
  ``Drawing`` pickles, and is drawn where it is called); ``figure_ids``;
* ``component_figure(loss, protocol, component=...)``: a (μ_pos, μ_neg) map of one paradigm
  component of any loss, what ``gradlab heatmap`` writes (``COMPONENTS``), and
  ``draw_component(result, loss_name, component=...)``, its figure from the computed map;
* ``report(log, out_dir)``: a monitor log's curves, figures + data + metadata, what
  ``gradlab report LOG`` writes.

``gradlab.plot.paper_figure`` (and the registry's other names) and ``gradlab.monitor.report``
still name these, for code written before they moved here.
"""

from gradlab.figures._paper import COMPONENTS as COMPONENTS
from gradlab.figures._paper import FIGURES as FIGURES
from gradlab.figures._paper import Drawing as Drawing
from gradlab.figures._paper import PaperFigure as PaperFigure
from gradlab.figures._paper import component_figure as component_figure
from gradlab.figures._paper import draw_component as draw_component
from gradlab.figures._paper import figure_ids as figure_ids
from gradlab.figures._paper import paper_drawing as paper_drawing
from gradlab.figures._paper import paper_figure as paper_figure
from gradlab.figures._report import report as report

__all__ = ["COMPONENTS", "FIGURES", "Drawing", "PaperFigure", "component_figure", "draw_component", "figure_ids",
           "paper_drawing", "paper_figure", "report"]
