"""A command's figure drawn in a forked process that imports matplotlib while the command
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
"""

from __future__ import annotations

import io
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FigureProcess", "component_warm_up"]

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
    the one job sent (None: nothing to draw)."""
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
        job = conn.recv()
        if job is None:
            return
        draw, args, kwargs, paths = job
        from gradlab.outputs import save_figure

        fig = draw(*args, **kwargs)
        conn.send([str(save_figure(fig, path, fmt)) for path, fmt in paths])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which draws itself
        try:
            conn.send(f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - the parent sees the pipe closed
            pass
    finally:
        conn.close()


class FigureProcess:
    """Draw one figure in a child forked now (see the module docstring); a context manager.

    Args:
      enabled: False forks nothing (no figure will be drawn, or JAX is already imported, which
        a fork must not copy).
      warm_up: returns a figure like the one to come (``component_warm_up``), drawn by the child
        while it waits, its pixels thrown away.
    """

    def __init__(self, enabled: bool = True, warm_up: Callable[[], Any] | None = None):
        self._conn = self._proc = None
        if not enabled or "jax" in sys.modules or "fork" not in multiprocessing.get_all_start_methods():
            return
        try:
            ctx = multiprocessing.get_context("fork")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_child, args=(child, warm_up), daemon=True)
            self._proc.start()
            child.close()
        except OSError:  # no process to spare: draw here
            self._conn = self._proc = None

    @property
    def forked(self) -> bool:
        """Whether a child waits to draw (False: the figure is drawn in this process)."""
        return self._proc is not None

    def save(self, draw: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
             paths: Sequence[tuple[Path, str]]) -> list[Path]:
        """``draw(*args, **kwargs)`` saved as each ``(path, format)``; the paths written."""
        from gradlab.outputs import save_figure

        if self._conn is not None and paths:
            try:
                self._conn.send((draw, tuple(args), dict(kwargs), [(str(p), f) for p, f in paths]))
                answer = self._conn.recv()
            except (OSError, EOFError) as exc:
                answer = f"{type(exc).__name__}: {exc}"
            self.close()
            if isinstance(answer, list):
                return [Path(p) for p in answer]
        fig = draw(*args, **kwargs)  # no child, or it failed: draw here
        return [save_figure(fig, path, fmt) for path, fmt in paths]

    def close(self) -> None:
        """Let the child go (it exits when told there is nothing to draw)."""
        if self._conn is None:
            return
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._conn.close()
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.terminate()
        self._conn = self._proc = None

    def __enter__(self) -> FigureProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
