"""The static explorer: the four panels precomputed by ``gradlab.simulate`` for a few slider values,
switched in the browser by Bokeh's ``CustomJS`` (no server, no Python); the docs' home page shows it.

Every map is a ``view_maps`` of a ``View`` at one slider value, stored as a float32 array in the page
(Bokeh's binary arrays: the numbers are the engine's, not rounded). Keep the precompute cheap: it
runs in every docs build (the default: 3 losses × 5 values and 4 λ on a 24 × 24 grid of 64 batches
of 64, a few seconds once compiled).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gradlab.explore import _bokeh
from gradlab.explore._deps import require_extra
from gradlab.explore._maps import LABELS, PANELS, View, panel_results, view_loss, view_maps

__all__ = ["static_explorer", "STATIC_CHOICES", "STATIC_LAMS", "static_html"]

#: loss -> (the parameter its slider moves, the values precomputed) (Li et al. 2024's defaults among them).
STATIC_CHOICES: dict[str, tuple[str, tuple[float, ...]]] = {
    "infonce": ("tau", (0.02, 0.05, 0.1, 0.2, 0.5)),
    "arccon": ("tau", (0.02, 0.05, 0.1, 0.2, 0.5)),
    "met": ("m", (0.15, 0.3, 0.45, 0.6, 0.9)),
}
#: The λ values of the Lemma-1 panel.
STATIC_LAMS = (0.05, 0.1, 0.5, 1.0)

_JS = """
const loss = select.value;
const [label, vals] = values[loss];
const i = Math.max(0, Math.min(slider.value, vals.length - 1));
slider.title = `${label} = ${vals[i]}`;
const maps = data[`${loss}|${i}`];
for (const key of ["gd", "weight", "ratio"]) {
  const source = sources[key];
  source.data = {...source.data, image: [maps[key]]};
  figures[key].title.text = maps[key].length == 1 ? `${titles[key]}: needs a temperature τ` : titles[key];
}
const j = Math.max(0, Math.min(lam_slider.value, lams.length - 1));
lam_slider.title = `λ = ${lams[j]} (r = ${r})`;
sources.lemma1.data = {...sources.lemma1.data, image: [lemma[j]]};
"""


def _image(result) -> np.ndarray:
    return np.full((1, 1), np.nan, np.float32) if result is None else np.asarray(result.masked_mean(), np.float32)


def static_html(*, choices: Mapping[str, tuple[str, Sequence[float]]] = STATIC_CHOICES,
                lams: Sequence[float] = STATIC_LAMS, r: float = 1.5, grid: int = 24, batches: int = 64,
                batch_size: int = 64, seed: int = 0, title: str = "gradlab explore (static)") -> str:
    """The static explorer as one standalone HTML text (Bokeh's JavaScript inline: no server, no network).

    Args:
      choices: loss -> (the parameter its slider moves, the values to precompute).
      lams: the λ values of the Lemma-1 panel (r fixed at ``r``).
      grid, batches, batch_size, seed: the ``Protocol`` of every map.

    The page's sources are those of the live page (``explore_gd``, ...); the loss menu is named
    ``explore_loss``, the sliders ``explore_param`` (an index into the loss's values) and ``explore_lam``.
    """
    require_extra("bokeh")
    from bokeh.embed import file_html
    from bokeh.layouts import column, gridplot, row
    from bokeh.models import CustomJS, Div, Select, Slider
    from bokeh.resources import INLINE

    if not choices or not lams:
        raise ValueError("static_explorer needs at least one loss and one λ")
    protocol = {"grid": grid, "batches": batches, "batch_size": batch_size, "seed": seed}
    data, values = {}, {}
    for loss, (param, vals) in choices.items():
        values[loss] = [LABELS.get(param, param), [float(v) for v in vals]]
        for i, v in enumerate(vals):
            panels = panel_results(view_maps(View(loss, lam=lams[0], r=r, **protocol).set(**{param: float(v)})))
            data[f"{loss}|{i}"] = {k: _image(panels[k]) for k in ("gd", "weight", "ratio")}
    lemma = [_image(panel_results(view_maps(View(next(iter(choices)), lam=float(lam), r=r, **protocol)))["lemma1"])
             for lam in lams]
    first_loss = next(iter(choices))
    param, vals = choices[first_loss]
    default = view_loss(View(first_loss)).params[param]  # start at the paper's value where it is one
    start = min(range(len(vals)), key=lambda i: abs(float(vals[i]) - default))
    shown = panel_results(view_maps(View(first_loss, lam=lams[0], r=r, **protocol).set(**{param: float(vals[start])})))
    path_source = _bokeh.path_source()  # no run on the static page
    figures, sources = {}, {}
    for key, panel_title in PANELS.items():
        fig, src = _bokeh.map_figure(key, panel_title, _bokeh.image_data(shown[key] if shown[key] is not None
                                                                          else shown["gd"]), path_source,
                                     width=300, height=250)
        figures[key], sources[key] = fig, src
    select = Select(title="loss", options=list(choices), value=first_loss, name="explore_loss", width=120)
    label = values[first_loss][0]
    slider = Slider(title=f"{label} = {float(vals[start]):g}", start=0,
                    end=max(len(v[1]) for v in values.values()) - 1, step=1, value=start, show_value=False,
                    name="explore_param", width=180)
    lam_slider = Slider(title=f"λ = {lams[0]:g} (r = {r:g})", start=0, end=len(lams) - 1, step=1, value=0,
                        show_value=False, name="explore_lam", width=180)
    callback = CustomJS(args={"select": select, "slider": slider, "lam_slider": lam_slider, "sources": sources,
                              "figures": figures, "titles": dict(PANELS), "values": values, "data": data,
                              "lemma": lemma, "lams": [float(x) for x in lams], "r": float(r)}, code=_JS)
    for widget in (select, slider, lam_slider):
        widget.js_on_change("value", callback)
    note = Div(text=(f"Precomputed by <code>gradlab.simulate</code> on a {grid} × {grid} grid, {batches} batches "
                     f"of {batch_size} (seed {seed}); <code>gradlab explore</code> recomputes any value live."),
               width=600)
    layout = column(row(select, slider, lam_slider), note,
                    gridplot([[figures["gd"], figures["weight"]], [figures["ratio"], figures["lemma1"]]],
                             toolbar_location=None))
    return file_html(layout, INLINE, title)


def static_explorer(path: str | os.PathLike, **kwargs) -> Path:
    """Write ``static_html(**kwargs)`` to ``path`` (atomically); returns the path."""
    from gradlab.io import atomic_write_text

    return atomic_write_text(Path(path), static_html(**kwargs))
