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

This module sits on ``gradlab.io`` (atomic writes) and draws nothing: a figure comes drawn
from its caller, and ``save_figure`` writes it with the figure's own ``savefig``. So the
monitor, the engine and the training studies write through it without importing plotting.

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

import contextlib
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMATS", "TABLE_FORMATS", "Writer", "check_formats", "check_out_dir", "removed_on_failure",
           "save_figure", "table_text", "primary_process", "versions"]

#: Figure formats a ``Writer`` writes.
FORMATS = ("png", "pdf", "svg")
#: ``save_figure``'s resolution when none is given (dots per inch).
FIGURE_DPI = 150
#: Table formats ``Writer.table`` writes: comma-separated values, Markdown, LaTeX (a ``tabular``).
TABLE_FORMATS = ("csv", "md", "tex")


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


@contextlib.contextmanager
def removed_on_failure(out: str | os.PathLike,
                       keep: Iterable[str] | Callable[[], Iterable[str]] = ()) -> Iterator[Path]:
    """A command's writing into ``out``: if it fails, whatever it created there is removed.

    The one mechanism by which a failed command (``gradlab train``, ``sts``, ``stsb``,
    ``report``, ``compare``) leaves nothing behind: on any exception (Ctrl-C included) the
    entries of ``out`` that were not there on entry are deleted, then ``out`` itself and the
    parent folders the command created, if they are empty. Entries that were there before are
    left as they are (a file the command overwrote keeps its new content). Each file is
    still written atomically, so no reader ever sees a half-written one.

    Args:
      out: the output folder (it need not exist yet).
      keep: names of entries to keep on failure, or a callable giving them at that moment
        (``gradlab train --save-state-every``: the state a ``--resume`` continues from).

    Examples:
      >>> import tempfile
      >>> root = Path(tempfile.mkdtemp())
      >>> try:
      ...     with removed_on_failure(root / "run" / "a") as out:
      ...         _ = check_out_dir(out)
      ...         _ = (out / "partial.json").write_text("{")
      ...         raise ValueError("bad input")
      ... except ValueError:
      ...     pass
      >>> (root / "run").exists()
      False
    """
    out = Path(out)
    created = []  # the folders this command will have created, deepest first
    for folder in (out, *out.parents):
        if folder.exists():
            break
        created.append(folder)
    before = set(os.listdir(out)) if out.is_dir() else set()
    try:
        yield out
    except BaseException:
        kept = set(keep() if callable(keep) else keep)
        with contextlib.suppress(OSError):
            for name in set(os.listdir(out)) - before - kept:
                path = out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        path.unlink()
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty: never what another process put there meanwhile
        raise


def save_figure(fig, path, fmt: str | None = None, *, dpi: float | None = None):
    """Save ``fig`` atomically to ``path`` (format from ``fmt`` or the suffix; ``dpi``
    default ``FIGURE_DPI``). The figures use constrained layout, which already fits their labels; a
    tight bounding box would lay each figure out a second time. ``fig`` is anything with
    matplotlib's ``savefig``: this module imports no plotting library."""
    import io

    from gradlab.io import atomic_write_bytes

    fmt = fmt or str(path).rsplit(".", 1)[-1]
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=FIGURE_DPI if dpi is None else dpi)
    return atomic_write_bytes(path, buf.getvalue())


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


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "μ": r"$\mu$", "τ": r"$\tau$", "×": r"$\times$", "−": "-"}


def _latex(cell: Any) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(cell))


def table_text(header: Iterable[Any], rows: Iterable[Iterable[Any]], fmt: str, *, caption: str | None = None) -> str:
    """One table as text: ``"csv"`` (RFC 4180, values as given), ``"md"`` (a Markdown pipe table) or
    ``"tex"`` (a LaTeX ``tabular`` with booktabs rules, special characters escaped, ± as ``$\\pm$``).

    Examples:
      >>> print(table_text(["loss", "best dev"], [["infonce", "71.2 ± 0.3"]], "md"))
      | loss | best dev |
      | --- | --- |
      | infonce | 71.2 ± 0.3 |
      >>> print(table_text(["loss", "n"], [["a_b", 3]], "tex"))
      \\begin{tabular}{ll}
      \\toprule
      loss & n \\\\
      \\midrule
      a\\_b & 3 \\\\
      \\bottomrule
      \\end{tabular}
    """
    import csv
    import io

    header = [str(h) for h in header]
    rows = [list(r) for r in rows]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(["" if v is None else v for v in r] for r in rows)
        return buf.getvalue()
    if fmt == "md":
        def line(cells):
            return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

        lines = [line(header), "| " + " | ".join("---" for _ in header) + " |", *(line(r) for r in rows)]
        return "\n".join(([f"{caption}", ""] if caption else []) + lines)
    if fmt == "tex":
        lines = [rf"\begin{{tabular}}{{{'l' * len(header)}}}", r"\toprule",
                 " & ".join(_latex(h) for h in header) + r" \\", r"\midrule",
                 *(" & ".join(_latex(c) for c in r) + r" \\" for r in rows), r"\bottomrule", r"\end{tabular}"]
        if caption:
            lines = [r"\begin{table}", r"\centering", rf"\caption{{{_latex(caption)}}}", *lines, r"\end{table}"]
        return "\n".join(lines)
    raise ValueError(f"unknown table format {fmt!r}; choose from {', '.join(TABLE_FORMATS)}")


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
        if fig is None:
            return []
        paths = [save_figure(fig, path, fmt, dpi=dpi) for path, fmt in self.figure_paths(stem)]
        self.written.extend(paths)
        return paths

    def figure_paths(self, stem: str) -> list[tuple[Path, str]]:
        """``(out/STEM.FMT, FMT)`` for every format: where :meth:`figure` would save ``stem``, for a
        figure saved elsewhere (another process); none when ``plot`` is off or this process is not
        the one that writes."""
        if not self.plot or not self.primary:
            return []
        return [(self.out / f"{stem}.{fmt}", fmt) for fmt in self.formats]

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

    def table(self, stem: str, header: Iterable[Any], rows: Iterable[Iterable[Any]], *,
              values: tuple[Iterable[Any], Iterable[Iterable[Any]]] | None = None,
              caption: str | None = None, formats: Iterable[str] = TABLE_FORMATS) -> list[Path]:
        """A table as ``STEM.csv``, ``STEM.md`` and ``STEM.tex`` (``table_text``), each atomic.

        Args:
          header, rows: the table as shown (text cells, e.g. ``"71.2 ± 0.3"``) in Markdown and LaTeX.
          values: ``(header, rows)`` of raw values for the CSV (numbers a program reads back);
            default: the shown table.
          caption: a line above the Markdown table, the LaTeX table's ``\\caption``.
        """
        from gradlab.io import atomic_write_text

        header, rows = list(header), [list(r) for r in rows]
        paths = []
        for fmt in formats:
            h, r = values if (fmt == "csv" and values is not None) else (header, rows)
            path = self.out / f"{stem}.{fmt}"
            if self.primary:
                text = table_text(h, r, fmt, caption=None if fmt == "csv" else caption)
                paths.append(atomic_write_text(path, text if text.endswith("\n") else text + "\n"))
        self.written.extend(paths)
        return paths

    def result(self, stem: str, result, fig=None, **extra_meta: Any) -> list[Path]:
        """One ``Result`` (and its figure): ``gradlab.io.Result.load(out / STEM)`` reads it back;
        the ``.json`` adds the provenance to the Result header. Returns the paths written."""
        paths = self.figure(stem, fig)
        if self.primary:
            saved = list(result.save(self.out / stem, provenance=self.provenance(**extra_meta)))
            self.written.extend(saved)
            paths.extend(saved)
        return paths
