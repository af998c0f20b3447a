"""Export the explorer's current view: a PNG of its panels, their numbers (``.npz``) and a ``.json``
with the view and the ``gradlab heatmap`` / ``gradlab lemma1`` commands that recompute each panel."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from gradlab.explore._maps import (
    PANELS,
    View,
    panel_results,
    view_commands,
    view_maps,
    view_protocol,
)

__all__ = ["export_view", "STEM"]

#: The stem of the exported files: ``explore_view.{png,npz,json}``.
STEM = "explore_view"
_QUANTITY = {"gd": "gd", "weight": "weight", "ratio": "ratio", "lemma1": "satisfied"}
_RANGE = {"gd": (0.0, 1.0), "weight": (0.0, 1.0), "ratio": (0.0, 3.0), "lemma1": (0.0, 1.0)}


def export_view(view: View, out: str | os.PathLike, *, run: Mapping[str, np.ndarray] | None = None,
                run_source: str | None = None, plot: bool = True, command_line: str | None = None) -> list[Path]:
    """Write ``out/explore_view.{png,npz,json}`` through ``gradlab.outputs.Writer``.

    Args:
      view: the explorer's view.
      out: the output directory (created if missing).
      run: an overlaid path (``gradlab.experiments.run_path``'s dict), drawn on every panel and saved
        as ``run_step``, ``run_mu_pos``, ``run_mu_neg``.
      run_source: where the path was read (recorded in the ``.json``).
      plot: False writes the ``.npz`` and ``.json`` only.

    The ``.npz`` holds the axes ``mu_pos``, ``mu_neg`` and one (G_pos, G_neg) array per panel as
    drawn: ``gd``, ``weight`` (absent for a loss without τ), ``ratio`` (masked cells NaN) and
    ``lemma1`` (the fraction of batches in which r satisfies Lemma 1), with ``gd_stderr`` and
    ``lemma1_r_low`` (the mean minimum ratio of Lemma 1 over the feasible batches). The
    ``.json`` holds the view, the protocol and ``commands``: per panel the ``gradlab`` command that
    computes the same numbers (``gradlab heatmap ... --component gd`` writes ``mean`` = ``gd``).

    Returns:
      The paths written.
    """
    from gradlab.outputs import Writer

    maps = view_maps(view)
    panels = panel_results(maps)
    commands = view_commands(view)
    writer = Writer(out, plot=plot, command_line=command_line,
                    meta={"command": "explore", "view": view.to_dict(), "protocol": view_protocol(view).to_dict(),
                          "commands": commands, "run": run_source})
    shown = [k for k in PANELS if panels[k] is not None]
    if plot:
        from gradlab.plot import trajectory_on_maps

        path = run or {"mu_pos": np.zeros(0), "mu_neg": np.zeros(0)}
        fig = trajectory_on_maps([panels[k] for k in shown], path["mu_pos"], path["mu_neg"],
                                 titles=[PANELS[k] for k in shown], quantities=[_QUANTITY[k] for k in shown],
                                 ranges=[_RANGE[k] for k in shown], inset=False,
                                 suptitle=f"{view_maps_title(view)}" + (f"\npath: {run_source}" if run_source else ""))
        writer.figure(STEM, fig)
    arrays = {"mu_pos": panels["gd"].coords["mu_pos"], "mu_neg": panels["gd"].coords["mu_neg"],
              "gd_stderr": np.asarray(panels["gd"].stderr)}
    arrays.update({k: np.asarray(panels[k].masked_mean()) for k in shown})
    arrays["lemma1_r_low"] = np.asarray(maps["lemma1"].mean)  # the mean minimum ratio, NaN where none is feasible
    if run is not None:
        arrays.update({f"run_{k}": np.asarray(run[k]) for k in ("step", "mu_pos", "mu_neg")})
    writer.data(STEM, arrays, dims={k: ["mu_pos", "mu_neg"] for k in [*shown, "gd_stderr", "lemma1_r_low"]})
    return writer.written


def view_maps_title(view: View) -> str:
    """A one-line title: the loss, its parameters, λ and r."""
    params = ", ".join(f"{k}={v:g}" for k, v in view.params)
    return f"{view.loss}" + (f" ({params})" if params else "") + f"; Lemma 1 at λ={view.lam:g}, r={view.r:g}"
