"""The live explorer's page (Panel, from the ``explore`` extra): widgets that set a ``View``, and the
four map figures of ``gradlab.explore._bokeh`` redrawn from ``view_maps`` whenever a widget moves.

``Explorer`` is the page of one session: it renders in Jupyter (display it, or its ``layout()``)
and ``serve`` serves a fresh one to each browser tab. Losses come from the menu (the registered
losses that have an angle form, a GD × W × R composition chosen block by block, and the one loss
given to the constructor, e.g. ``gradlab explore --loss FILE.py:FUNCTION``); nothing typed on the
page is run as code. A run's path is read by ``gradlab.experiments.run_path``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gradlab import defaults
from gradlab.explore import _bokeh
from gradlab.explore._deps import require_extra
from gradlab.explore._export import export_view
from gradlab.explore._maps import (
    LIVE,
    PANELS,
    View,
    panel_results,
    simulable_losses,
    slider_specs,
    view_commands,
    view_loss,
    view_maps,
)

__all__ = ["Explorer", "serve", "free_port"]

COMPOSITION = "composition (GD × W × R)"


def _blocks() -> dict[str, list[str]]:
    from gradlab.losses import GD_BLOCKS, RATIO_BLOCKS, WEIGHT_BLOCKS

    return {"gd": list(GD_BLOCKS), "weight": list(WEIGHT_BLOCKS), "ratio": list(RATIO_BLOCKS)}


def _blocks_of(text: str) -> dict[str, str]:
    """The blocks of ``compose:gd=...,weight=...,ratio=...`` (``gradlab.design.parse_compose``)."""
    from gradlab.design import parse_compose

    return parse_compose(text[len("compose:"):])


def _compose_text(blocks: Mapping[str, str]) -> str:
    return "compose:" + ",".join(f"{k}={blocks[k]}" for k in ("gd", "weight", "ratio"))


class Explorer:
    """One explorer page: a loss's GD map, hardest-negative share, ratio map and Lemma-1 panel,
    recomputed by ``gradlab.simulate`` whenever a slider moves (Li et al. 2024 Sec. 3.1).

    Args:
      loss: the initial loss, as ``gradlab.resolve_loss`` reads text: a registered name,
        ``compose:gd=...,weight=...,ratio=...`` or ``FILE.py:FUNCTION`` (added to the menu).
      params: its initial parameters.
      lam, r: Lemma 1's λ and the static ratio r it tests.
      grid, batches, batch_size, seed: the live protocol (50 × 50, 200 batches of 128); the page's
        toggle switches to the paper's (100 × 100, 1000 batches).
      run: a run folder (``gradlab train --out DIR``) or a monitor log whose (μ_pos, μ_neg) path is
        drawn on the maps.
      out: where the export button writes ``explore_view.{png,npz,json}``.

    Attributes:
      view: the ``View`` on show.
      last_ms: the milliseconds the last change took, from the widget to the new maps in the sources.

    Examples:
      >>> ex = Explorer("infonce", grid=4, batches=8, batch_size=8)      # doctest: +SKIP
      >>> ex.set(tau=0.1).arrays()["gd"].shape                          # doctest: +SKIP
      (4, 4)
    """

    def __init__(self, loss: str = "infonce", *, params: Mapping[str, float] | None = None,
                 lam: float = defaults.LEMMA1_LAM, r: float | None = None, grid: int = LIVE["grid"],
                 batches: int = LIVE["batches"], batch_size: int = LIVE["batch_size"], seed: int = 0,
                 run: str | os.PathLike | None = None, out: str | os.PathLike = "explore"):
        self._pn = require_extra("panel")
        require_extra("bokeh")
        pn = self._pn
        self.out = Path(out)
        self.last_ms = float("nan")
        self.run, self.run_source = None, None
        base = View(str(loss), grid=grid, batches=batches, batch_size=batch_size, seed=seed, lam=lam)
        self.view = self._fresh(base, str(loss), r).set(**dict(params or {}))
        view_loss(self.view)  # a bad loss or parameter: one line, before any widget
        if run is not None:
            self._load_run(run)
        self._updating = False

        text = self.view.loss.strip()
        self._menu = simulable_losses()
        if text not in self._menu and not text.startswith("compose:"):
            self._menu.append(text)  # the user's loss from the command line
        self._menu.append(COMPOSITION)
        self.loss_select = pn.widgets.Select(label="loss", options=self._menu,
                                             value=COMPOSITION if text.startswith("compose:") else text)
        blocks = _blocks_of(text) if text.startswith("compose:") else {"gd": "indicator", "weight": "softmax",
                                                                         "ratio": "static"}
        self.block_selects = {k: pn.widgets.Select(label=f"{k} block", options=v, value=blocks[k])
                              for k, v in _blocks().items()}
        self._compose_box = pn.Column(*self.block_selects.values(), visible=text.startswith("compose:"))
        self.sliders: dict[str, Any] = {}
        self._slider_box = pn.Column()
        self.full_toggle = pn.widgets.Toggle(label="paper grid: 100 × 100, 1000 batches", value=False)
        self.run_input = pn.widgets.TextInput(label="run folder or monitor log", placeholder="runs/my_run",
                                              value="" if run is None else str(run))
        self.run_button = pn.widgets.Button(label="overlay run")
        self.export_button = pn.widgets.Button(label="export view (PNG + npz + json)", color="primary")
        self.status = pn.pane.Markdown("", name="status", sizing_mode="stretch_width")
        self.commands = pn.pane.Markdown("", name="commands", sizing_mode="stretch_width")

        maps = view_maps(self.view)
        panels = panel_results(maps)
        self._maps: dict[str, Any] = {}
        self.path_source = _bokeh.path_source(self.run)
        self.figures, self.sources = {}, {}
        first = _bokeh.image_data(panels["gd"])
        for key, title in PANELS.items():
            data = first if panels[key] is None else _bokeh.image_data(panels[key])
            fig, src = _bokeh.map_figure(key, title, data, self.path_source)
            self.figures[key], self.sources[key] = fig, src
        self._build_sliders()
        self._show(maps)

        self.loss_select.param.watch(self._on_loss, "value")
        for sel in self.block_selects.values():
            sel.param.watch(self._on_loss, "value")
        self.full_toggle.param.watch(self._on_full, "value")
        self.run_button.on_click(lambda event: self._on_run())
        self.export_button.on_click(lambda event: self.export())

    # --- what the page shows -----------------------------------------------------------------------
    def layout(self):
        """The page as a Panel layout (what ``serve`` serves; Jupyter displays it)."""
        pn = self._pn
        controls = pn.Column(
            "## gradlab explore", self.loss_select, self._compose_box, self._slider_box, self.full_toggle,
            self.run_input, self.run_button, self.export_button, self.status, width=330)
        maps = pn.GridBox(*[pn.pane.Bokeh(self.figures[k]) for k in PANELS], ncols=2)
        return pn.Row(controls, pn.Column(maps, self.commands))

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.layout()._repr_mimebundle_(include, exclude)

    def arrays(self) -> dict[str, np.ndarray | None]:
        """What each panel draws now (the sources' ``image``); None for an empty panel."""
        empty = [k for k in PANELS if np.asarray(self.sources[k].data["image"][0]).shape == (1, 1)]
        return {k: None if k in empty else np.asarray(self.sources[k].data["image"][0]) for k in PANELS}

    def set(self, **values: float) -> Explorer:
        """Move sliders by parameter name (``tau``, ``m``, ``u``, ``r``, ``lam``, ...), as a user would."""
        unknown = sorted(set(values) - set(self.sliders))
        if unknown:
            raise ValueError(f"no slider {unknown[0]!r}; this loss's sliders: {', '.join(self.sliders)}")
        for name, value in values.items():
            self.sliders[name].value = float(value)
        return self

    def choose(self, loss: str) -> Explorer:
        """Pick a loss from the menu (a name of ``simulable_losses()``, the user's loss, or
        ``compose:gd=...,weight=...,ratio=...``), as a user would."""
        if loss.startswith("compose:"):
            blocks = _blocks_of(loss)
            self._updating = True
            try:
                for k, sel in self.block_selects.items():
                    sel.value = blocks[k]
            finally:
                self._updating = False
            loss = COMPOSITION
            if self.loss_select.value == COMPOSITION:
                self._on_loss()
        if loss not in self._menu:
            raise ValueError(f"{loss!r} is not in the menu; choose from {', '.join(self._menu)}")
        self.loss_select.value = loss
        return self

    def export(self, out: str | os.PathLike | None = None) -> list[Path]:
        """Write the view as ``explore_view.{png,npz,json}`` into ``out`` (default: the page's)."""
        try:
            written = export_view(self.view, self.out if out is None else out, run=self.run,
                                  run_source=self.run_source)
        except (ValueError, OSError) as exc:
            self.status.object = f"**export failed:** {exc}"
            return []
        self.status.object = "exported: " + ", ".join(f"`{p}`" for p in written)
        return written

    # --- reactions -----------------------------------------------------------------------------------
    def _fresh(self, base: View, text: str, r: float | None = None) -> View:
        """A view of loss ``text`` at its defaults, keeping λ, r and the protocol of ``base``."""
        view = dataclasses.replace(base, loss=text, params=(), r=base.r if r is None else float(r))
        loss = view_loss(view)
        return view.set(r=loss.params["r"]) if "r" in loss.params and r is None else view.set(r=view.r)

    def _loss_text(self) -> str:
        if self.loss_select.value == COMPOSITION:
            return _compose_text({k: s.value for k, s in self.block_selects.items()})
        return self.loss_select.value

    def _build_sliders(self):
        pn = self._pn
        self.sliders = {}
        for spec in slider_specs(self.view):
            slider = pn.widgets.FloatSlider(label=spec.label, start=spec.start, end=spec.end, step=spec.step,
                                            value=spec.value, width=300)
            slider.param.watch(lambda event, name=spec.name: self._on_slider(name, event.new), "value")
            self.sliders[spec.name] = slider
        self._slider_box.objects = list(self.sliders.values())

    def _update(self, view: View, *, rebuild: bool = False):
        t0 = time.perf_counter()
        try:
            maps = view_maps(view)
        except (ValueError, TypeError, OSError) as exc:
            self.status.object = f"**error:** {' '.join(str(exc).split())}"
            return
        self.view = view
        if rebuild:
            self._build_sliders()
        self._show(maps)
        self.last_ms = 1e3 * (time.perf_counter() - t0)
        self.status.object = f"maps in {self.last_ms:.0f} ms"

    def _show(self, maps):
        """Draw the maps that changed (a map is the same object while its inputs are: ``view_maps``'
        cache), so that a slider sends the browser only the panels it moved."""
        changed = [k for k in PANELS if k not in self._maps or maps[k] is not self._maps[k]]
        self._maps = dict(maps)
        panels = panel_results(maps)
        first = _bokeh.image_data(panels["gd"])
        for key, title in PANELS.items():
            if key not in changed:
                continue
            if panels[key] is None:
                data, title = _bokeh.empty_data(first), f"{title}: needs a temperature τ"
            else:
                data = first if key == "gd" else _bokeh.image_data(panels[key])
            _bokeh.show_data(self.figures[key], self.sources[key], data, title)
        self.commands.object = "\n".join(["**The same numbers from the command line:**", "```bash",
                                          *[c for c in view_commands(self.view).values() if c], "```"])

    def _on_slider(self, name: str, value: float):
        if self._updating:
            return
        try:
            view = self.view.set(**{name: value})
        except ValueError as exc:
            self.status.object = f"**error:** {exc}"
            return
        self._update(view)

    def _on_loss(self, *events):
        if self._updating:
            return
        text = self._loss_text()
        self._compose_box.visible = self.loss_select.value == COMPOSITION
        try:
            view = self._fresh(self.view, text)
        except (ValueError, TypeError) as exc:
            self.status.object = f"**error:** {' '.join(str(exc).split())}"
            return
        self._update(view, rebuild=True)

    def _on_full(self, event):
        self.status.object = "computing the paper grid ..." if event.new else self.status.object
        self._update(dataclasses.replace(self.view, full=bool(event.new)))

    def _load_run(self, run) -> None:
        from gradlab.experiments import run_path

        self.run, self.run_source = run_path(run), str(run)

    def _on_run(self):
        text = self.run_input.value.strip()
        try:
            if text:
                self._load_run(text)
            else:
                self.run, self.run_source = None, None
        except ValueError as exc:
            self.status.object = f"**error:** {exc}"
            return
        self.path_source.data = _bokeh.path_data(self.run)
        self.status.object = f"path of `{text}`: {len(self.run['step'])} steps" if self.run else "path removed"


def free_port(address: str = "127.0.0.1") -> int:
    """A port that is free on ``address`` now (for ``--port 0``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def serve(*, port: int = 5006, address: str = "127.0.0.1", show: bool = True,
          ready: Callable[[str], None] | None = None, **explorer: Any) -> None:
    """Serve the explorer on ``http://ADDRESS:PORT/`` until interrupted; each tab gets its own ``Explorer``.

    Args:
      port: the port (0: any free one).
      address: the interface to bind (default 127.0.0.1: this machine only).
      show: open the page in the default browser.
      ready: called with the URL once the server listens (the CLI prints it).
      **explorer: ``Explorer``'s arguments (loss, params, run, grid, batches, ...).

    The first page is built before the server starts, so that a bad loss or run fails at once and
    the compiled programs are ready for the first visitor.
    """
    pn = require_extra("panel")
    Explorer(**explorer)  # checks the arguments; compiles the programs
    port = free_port(address) if port == 0 else int(port)
    origins = sorted({f"{address}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"})
    server = pn.serve({"/": lambda: Explorer(**explorer).layout()}, port=port, address=address,
                      websocket_origin=origins, show=False, start=False, title="gradlab explore", verbose=False)
    url = f"http://{address}:{port}/"
    server.start()
    if ready is not None:
        ready(url)
    if show:
        server.io_loop.add_callback(server.show, "/")
    try:
        server.io_loop.start()
    finally:
        server.stop()
