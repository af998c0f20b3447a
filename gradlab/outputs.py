"""One provenance writer: a run's figure(s), data (``.npz``) and metadata (``.json``), each atomic.

Every output that gradlab writes for a run goes through ``Writer``: the ``gradlab`` commands
(``gradlab heatmap``, ``gradlab figures``, ``gradlab train``, ...), the training studies
(``gradlab.experiments``: each study's folder, ``write_trajectory``) and the monitor's
``report``. A ``Writer`` checks the output directory and the figure formats
before any computation, then writes for each stem

- ``STEM.{png,pdf,svg}``: the figure, one file per format (skipped with ``plot=False``);
- ``STEM.npz``: the arrays under their own names (``np.load`` reads them);
- ``STEM.json``: the metadata: the command line, the run's fixed metadata (command,
  parameters, seed; or study, scale, seeds), the wall time since the writer started, the
  versions (gradlab, JAX, NumPy, matplotlib, Python) and the device.

A ``Result`` written by ``Writer.result`` reads back with ``gradlab.io.Result.load(out / STEM)``.
Under ``jax.distributed`` only process 0 writes (every process holds the gathered result).

This module sits above ``gradlab.io`` (atomic writes) and ``gradlab.plot`` (``save_figure``);
``gradlab.io`` cannot host it, as ``gradlab.plot`` saves figures with ``gradlab.io``.

Examples:
  >>> import numpy as np, tempfile
  >>> from gradlab.io import Result, load_json
  >>> w = Writer(tempfile.mkdtemp(), plot=False, command_line="python demo.py",
  ...            meta={"parameters": {"n": 3}, "seed": 0})
  >>> r = Result(dims=("x",), coords={"x": np.arange(3.0)}, mean=np.ones(3))
  >>> [p.name for p in w.result("demo", r)]
  ['demo.npz', 'demo.json']
  >>> Result.load(w.out / "demo") == r
  True
  >>> meta = load_json(w.out / "demo.json")
  >>> meta["command_line"], meta["seed"], "gradlab_version" in meta
  ('python demo.py', 0, True)
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMATS", "Writer", "check_formats", "check_out_dir", "primary_process", "versions"]

#: Figure formats a ``Writer`` writes.
FORMATS = ("png", "pdf", "svg")


def check_out_dir(out: str | os.PathLike) -> Path:
    """Create ``out`` if needed and prove it is writable (before any long computation).

    Raises:
      ValueError: one line naming the directory and why it cannot be written.
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".gradlab-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"cannot write to output directory {str(out)!r}: {exc.strerror or exc}") from None
    return out


def check_formats(formats: Iterable[str] | None) -> list[str]:
    """The figure formats, lower case, without dots or repeats (default ``["png"]``).

    Examples:
      >>> check_formats([".PNG", "pdf", "png"])
      ['png', 'pdf']
    """
    fmts = [str(f).lower().lstrip(".") for f in (formats or ["png"])]
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown figure format {bad[0]!r}; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(fmts))


def primary_process() -> bool:
    """False on every process but the first under ``jax.distributed``: results are written once."""
    if "jax" not in sys.modules:
        return True
    import jax

    return jax.process_index() == 0


def versions() -> dict[str, Any]:
    """``gradlab.io.runtime_meta()`` (gradlab, JAX, NumPy, device) plus Python and matplotlib."""
    from importlib.metadata import PackageNotFoundError, version

    from gradlab.io import runtime_meta

    meta = runtime_meta()
    meta["python"] = sys.version.split()[0]
    if "matplotlib" in sys.modules:  # drawn: its own version (no scan of the installed packages)
        meta["matplotlib_version"] = sys.modules["matplotlib"].__version__
        return meta
    try:
        meta["matplotlib_version"] = version("matplotlib")
    except PackageNotFoundError:  # pragma: no cover - matplotlib is a base dependency
        meta["matplotlib_version"] = None
    return meta


class Writer:
    """Writes a run's figures, ``.npz`` data and ``.json`` metadata into ``out``, atomically.

    Args:
      out: output directory, created and probed for writing on construction.
      formats: figure formats (``png``, ``pdf``, ``svg``).
      plot: False skips every figure (``figure`` returns ``[]``).
      command_line: the command line to record (default: this process's ``sys.argv``).
      meta: the run's fixed metadata, written into every ``.json`` after the command line
        (e.g. ``{"command": ..., "parameters": ..., "seed": ...}``).
      started: ``time.perf_counter()`` at the run's start (default: now); ``wall_time_s``
        in each ``.json`` counts from it.

    Attributes:
      written: every path written so far, in order.
    """

    def __init__(self, out: str | os.PathLike, *, formats: Iterable[str] | None = ("png",), plot: bool = True,
                 command_line: str | None = None, meta: Mapping[str, Any] | None = None,
                 started: float | None = None):
        self.primary = primary_process()
        self.out = check_out_dir(out) if self.primary else Path(out)
        self.formats = check_formats(formats)
        self.plot = bool(plot)
        self.command_line = shlex.join(sys.argv) if command_line is None else str(command_line)
        self.meta = dict(meta or {})
        self.start = time.perf_counter() if started is None else float(started)
        self.written: list[Path] = []

    def provenance(self, **more: Any) -> dict[str, Any]:
        """The ``.json`` metadata: command line, the fixed ``meta``, wall time, versions, ``more``."""
        return {"command_line": self.command_line, **self.meta,
                "wall_time_s": round(time.perf_counter() - self.start, 3), **versions(), **more}

    def figure(self, stem: str, fig, *, dpi: float | None = None) -> list[Path]:
        """``fig`` as ``out/STEM.FMT`` for every format (``dpi``: ``save_figure``'s default when None);
        nothing when ``plot`` is off or ``fig`` is None."""
        if not self.plot or fig is None or not self.primary:
            return []
        from gradlab.plot import save_figure

        paths = [save_figure(fig, self.out / f"{stem}.{fmt}", fmt, dpi=dpi) for fmt in self.formats]
        self.written.extend(paths)
        return paths

    def data(self, stem: str, arrays: Mapping[str, Any], *, result_meta: Mapping | None = None,
             dims: Mapping | None = None, extra_meta: Mapping | None = None) -> tuple[Path, Path]:
        """Arrays that are not one ``Result`` (curves, per-batch statistics): flat ``.npz`` + ``.json``."""
        from gradlab.io import save_json_atomic, save_npz_atomic

        npz_path, json_path = self.out / f"{stem}.npz", self.out / f"{stem}.json"
        if not self.primary:
            return npz_path, json_path
        clean = {k: np.asarray(v) for k, v in arrays.items()}
        meta = self.provenance(arrays={k: list(v.shape) for k, v in clean.items()}, array_dims=dict(dims or {}),
                               result_meta=dict(result_meta or {}), **dict(extra_meta or {}))
        self.written.extend([save_npz_atomic(npz_path, **clean), save_json_atomic(json_path, meta)])
        return npz_path, json_path

    def result(self, stem: str, result, fig=None, **extra_meta: Any) -> list[Path]:
        """One ``Result`` (and its figure): ``gradlab.io.Result.load(out / STEM)`` reads it back;
        the ``.json`` adds the provenance to the Result header. Returns the paths written."""
        paths = self.figure(stem, fig)
        if self.primary:
            saved = list(result.save(self.out / stem, provenance=self.provenance(**extra_meta)))
            self.written.extend(saved)
            paths.extend(saved)
        return paths
