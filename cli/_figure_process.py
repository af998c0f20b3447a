"""A command's figures drawn in forked processes that import matplotlib while the command
imports JAX and computes.

``gradlab heatmap`` spends about as long importing and running matplotlib (0.5 s on a 2-core
CPU) as importing JAX and computing a paper map (a warm run); both are mostly Python, which one
process runs one at a time. So the command forks before it imports JAX: the child imports
matplotlib and waits; the parent computes, writes the data, and hands the child the map and the
paths to draw; the child draws, saves each figure atomically and answers. While it waits it
may draw a small figure of the same kind (``warm_up``), so that the first drawing's one-time
work (fonts, mathtext, the colour bar) is done before the map arrives. Where ``fork`` is not
a start method (Windows), or when anything goes wrong in the child, the figure is drawn in the
command's own process, as before.

``gradlab figures`` hands each paper figure's drawing to one of several such children as soon as
its data are computed, and computes the next figure meanwhile (``submit``, then ``wait``).
"""

from __future__ import annotations

import io
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FIGURE_WORKERS", "FigureProcess", "component_warm_up", "figure_processes"]

#: The most processes drawing a command's figures side by side (fewer on fewer cores: on 2 cores,
#: ``gradlab figures``' 12 took 8.2 s warm with one, 6.8 s with two, 7.0 s with three).
FIGURE_WORKERS = 4

#: The warm-up figure's resolution: its pixels are thrown away, only the one-time work counts.
_WARM_UP_DPI = 30


def component_warm_up(component: str, part: str = "pos") -> Callable[[], Any]:
    """A small figure of ``gradlab.figures.draw_component``'s kind ``component``, on a 2 × 2 map:
    the warm-up of a child that will draw a ``gradlab heatmap``."""

    def draw():
        import numpy as np

        from gradlab.figures import draw_component
        from gradlab.io import Result

        grid = np.array([0.5, 1.0])
        tiny = Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": grid, "mu_neg": grid + 1.0},
                      mean=np.array([[0.2, 0.8], [0.4, 0.6]]), meta={"loss": "infonce", "params": {"tau": 0.1}})
        return draw_component(tiny, "infonce", component=component, part=part, label="InfoNCE")

    return draw


def _child(conn, warm_up) -> None:
    """Import matplotlib, draw ``warm_up()`` (if given, and no job has come yet), then draw and save
    each job sent, answering each with the paths written, until None (or the parent's end)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.backends.backend_agg  # noqa: F401 - what savefig renders with
        import matplotlib.figure  # noqa: F401
        from matplotlib.font_manager import FontProperties, findfont

        findfont(FontProperties())  # the font manager's cache read, the default font found
        if warm_up is not None and not conn.poll():
            try:
                warm_up().savefig(io.BytesIO(), format="png", dpi=_WARM_UP_DPI)
            except Exception:  # noqa: BLE001 - a warm-up only saves time; the job is drawn all the same
                pass
        from gradlab.outputs import save_figure

        while (job := conn.recv()) is not None:
            drawing, paths, dpi = job
            fig = drawing()
            conn.send([str(save_figure(fig, path, fmt, dpi=dpi)) for path, fmt in paths])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which draws the job itself
        try:
            conn.send(f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - the parent sees the pipe closed
            pass
    finally:
        conn.close()


class FigureProcess:
    """Draw figures in children forked now (see the module docstring); a context manager.

    ``save`` draws one figure and waits for it; ``submit`` hands one to an idle child (waiting for
    one only when all are busy) and returns, and ``wait`` collects every figure submitted, in
    order. A job a child could not draw is drawn in this process.

    Args:
      enabled: False forks nothing (no figure will be drawn, or JAX is already imported, which
        a fork must not copy).
      warm_up: returns a figure like the ones to come (``component_warm_up``), drawn by each
        child while it waits for its first job, its pixels thrown away.
      workers: how many children draw side by side.
    """

    def __init__(self, enabled: bool = True, warm_up: Callable[[], Any] | None = None, workers: int = 1):
        self._idle: list = []  # (connection, process) of each child waiting for a job
        self._busy: dict = {}  # connection -> (process, the index of the job it draws)
        self._jobs: list[tuple] = []
        self._done: dict[int, list[Path] | None] = {}  # job index -> paths (None: to draw here)
        if not enabled or "jax" in sys.modules or "fork" not in multiprocessing.get_all_start_methods():
            return
        ctx = multiprocessing.get_context("fork")
        for _ in range(max(1, int(workers))):
            try:
                conn, child = ctx.Pipe()
                proc = ctx.Process(target=_child, args=(child, warm_up), daemon=True)
                proc.start()
                child.close()
            except OSError:  # no process to spare: the others (or this process) draw
                break
            self._idle.append((conn, proc))

    @property
    def forked(self) -> bool:
        """Whether a child waits to draw (False: the figures are drawn in this process)."""
        return bool(self._idle or self._busy)

    def save(self, drawing: Callable[[], Any], paths: Sequence[tuple[Path, str]]) -> list[Path]:
        """``drawing()`` saved as each ``(path, format)``; the paths written."""
        self.submit(drawing, paths)
        written = self.wait()
        self.close()
        return written

    def submit(self, drawing: Callable[[], Any], paths: Sequence[tuple[Path, str]], dpi: float | None = None) -> None:
        """Hand ``drawing()`` (a ``gradlab.figures.Drawing``, or any callable that pickles and returns
        a Figure), to be saved as each ``(path, format)`` (``save_figure``'s ``dpi``), to an idle child."""
        index = len(self._jobs)
        self._jobs.append((drawing, [(str(p), f) for p, f in paths], dpi))
        if not paths:
            self._done[index] = []
            return
        while not self._idle and self._busy:
            self._collect()
        if not self._idle:
            self._done[index] = None
            return
        conn, proc = self._idle.pop()
        try:
            conn.send(self._jobs[index])
        except OSError:  # the child is gone: this process draws the job
            self._done[index] = None
            self._retire(conn, proc)
            return
        self._busy[conn] = (proc, index)

    def wait(self) -> list[Path]:
        """Every figure submitted, saved (by a child or, where it failed, here): their paths, in order."""
        from gradlab.outputs import save_figure

        while self._busy:
            self._collect()
        written = []
        for index, (drawing, paths, dpi) in enumerate(self._jobs):
            done = self._done.get(index)
            if done is None:
                fig = drawing()
                done = [save_figure(fig, Path(path), fmt, dpi=dpi) for path, fmt in paths]
            written.extend(done)
        self._jobs, self._done = [], {}
        return written

    def _collect(self) -> None:
        """Wait for a busy child's answer: its paths, or (a failure) its job left to this process."""
        from multiprocessing.connection import wait

        for conn in wait(list(self._busy)):
            proc, index = self._busy.pop(conn)
            try:
                answer = conn.recv()
            except (OSError, EOFError) as exc:
                answer = f"{type(exc).__name__}: {exc}"
            if isinstance(answer, list):
                self._done[index] = [Path(p) for p in answer]
                self._idle.append((conn, proc))
            else:
                self._done[index] = None
                self._retire(conn, proc)

    @staticmethod
    def _retire(conn, proc) -> None:
        """Let a child go (it exits when told there is nothing to draw, or when its pipe closes)."""
        try:
            conn.send(None)
        except OSError:
            pass
        conn.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.terminate()

    def close(self, *, drain: bool = True) -> None:
        """Let every child go. ``drain``: a figure submitted and not collected is saved first
        (``wait``); else it is dropped (the command failed or was interrupted)."""
        if drain and self._jobs:
            self.wait()
        for conn, (proc, _) in self._busy.items():
            self._retire(conn, proc)
        for conn, proc in self._idle:
            self._retire(conn, proc)
        self._idle, self._busy, self._jobs, self._done = [], {}, [], {}

    def __enter__(self) -> FigureProcess:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(drain=exc_type is None)


def figure_processes(no_plot: bool, figures: int, warm_up: Callable[[], Any] | None = None) -> FigureProcess:
    """The processes, forked now (before JAX is imported), that draw a command's ``figures``
    figures side by side while it computes: at most ``FIGURE_WORKERS``, and the cores this process
    may use."""
    workers = 1
    if figures > 1:
        from gradlab.experiments import default_jobs  # no JAX

        workers = min(figures, FIGURE_WORKERS, default_jobs())
    return FigureProcess(enabled=not no_plot, warm_up=warm_up, workers=workers)
