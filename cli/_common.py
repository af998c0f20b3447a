"""Shared CLI plumbing: option parsers, output checks, progress, writing figure + data + metadata."""

from __future__ import annotations

import ast
import contextlib
import math
import operator
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

FORMATS = ("png", "pdf", "svg")

#: The command line as typed (set by ``app.main`` for every run, in-process runs included).
COMMAND_LINE: list[str] | None = None

_DEBUG = {"on": False}


def set_debug(value: bool) -> bool:
    """``--debug`` callback: the one error handler (``app.main``) then re-raises instead."""
    if value:
        _DEBUG["on"] = True
    return value


def reset_debug() -> None:
    """At the start of every run: tracebacks only if ``GRADLAB_DEBUG`` is set (not 0)."""
    _DEBUG["on"] = os.environ.get("GRADLAB_DEBUG", "") not in ("", "0")


def debug_enabled() -> bool:
    return _DEBUG["on"]


def command_line() -> str:
    """The command line for metadata, as typed: ``gradlab heatmap --loss arccon``."""
    return shlex.join(["gradlab", *(COMMAND_LINE or [])])


def fail(message: str) -> ValueError:
    """A user error found by the CLI itself: ``app.main`` prints it as one line, exit code 2."""
    return ValueError(message)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _arith(node):
    """Evaluate + − × ÷, unary ±, numbers and π; nothing else (no powers, names or calls)."""
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id == "pi":
        return math.pi
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _arith(node.operand)
        return v if isinstance(node.op, ast.UAdd) else -v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_arith(node.left), _arith(node.right))
    raise ValueError("unsupported expression")


def number(raw: str) -> float:
    """Typer ``parser=``: a finite float, also written with π: ``0.15pi``, ``pi/18``, ``3*pi/4``."""
    if not isinstance(raw, str):  # a default already given as a number
        raw = repr(raw)
    text = raw.strip().lower().replace("π", "pi")
    text = re.sub(r"(?<=[0-9.])\s*(?=pi|\()", "*", text)  # 0.15pi -> 0.15*pi, 2(pi) -> 2*(pi)
    text = re.sub(r"(?<=\))\s*(?=[0-9.(]|pi)", "*", text)  # (1)(2) -> (1)*(2)
    try:
        value = _arith(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        raise typer.BadParameter(f"not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise typer.BadParameter(f"not a finite number: {raw!r}")
    return value


def angle(raw: str) -> float:
    """Typer ``parser=``: ``number`` for an angle between unit vectors, within [0, π]."""
    value = number(raw)
    if not 0 <= value <= math.pi:
        raise typer.BadParameter(f"must lie within [0, pi]; got {value:g}")
    return value


def key_value(raw: str) -> tuple[str, float]:
    """Typer ``parser=`` of ``--param``: ``"u=pi/18"`` -> ``("u", 0.1745...)``."""
    if isinstance(raw, tuple):
        return raw
    key, sep, value = str(raw).partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(f"expects KEY=VALUE; got {raw!r}")
    try:
        return key.strip(), number(value)
    except typer.BadParameter as exc:
        raise typer.BadParameter(f"{key.strip()}: {exc.message}") from None


def parse_params(items: Sequence[str | tuple[str, float]] | None) -> dict[str, float]:
    """``--param`` values (already parsed by ``key_value``, or raw ``KEY=VALUE``) as a dict."""
    return dict(key_value(item) for item in items or ())


def compose_blocks(raw: str) -> str:
    """Typer ``parser=`` of ``--compose``: ``"gd=indicator,weight=softmax,ratio=static"``, checked."""
    from gradlab.design import parse_compose

    try:
        parse_compose(raw)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return str(raw)


def resolve_loss(loss: str | None, compose: str | None, params: dict, *, symmetric: bool = False):
    """The ``Loss`` of ``--loss`` (a name, FILE.py:FUNCTION, module:FUNCTION) or ``--compose``; errors are one line."""
    from gradlab import design

    if (loss is None) == (compose is None):
        raise fail("give exactly one of --loss and --compose")
    return design.resolve_loss(loss if compose is None else f"compose:{compose}", params=params, symmetric=symmetric)


LOSS_HELP = ("A registered loss (see 'gradlab losses'), path/to/file.py:FUNCTION or package.module:FUNCTION "
             "(a function of the cosines, or a gradlab Loss); parameters via --param.")
Compose = Annotated[str | None, typer.Option("--compose", parser=compose_blocks, metavar="gd=G,weight=W,ratio=R",
                                             help="A GD x W x R composition (Li et al. 2024 Eq. 5): gd fraction|indicator|sigmoid|none, "
                                                  "weight softmax|hardest|uniform, ratio static|arccon|met|mat; parameters via --param.")]

# Options every command shares.
Out = Annotated[Path, typer.Option("--out", "-o", help="Output directory (created if missing).")]
Formats = Annotated[list[str] | None, typer.Option("--format", "-f", help="Figure format: png, pdf or svg (repeatable).")]
NoPlot = Annotated[bool, typer.Option("--no-plot", help="Write the data and metadata only, no figure.")]
Debug = Annotated[bool, typer.Option("--debug", callback=set_debug, help="Show a traceback on errors.")]
Params = Annotated[list[str] | None, typer.Option("--param", "-p", parser=key_value, metavar="KEY=VALUE",
                                                   help="Loss parameter KEY=VALUE (repeatable); values may use pi, e.g. u=pi/18.")]


def check_out_dir(out: Path) -> Path:
    """Create ``out`` if needed and prove it is writable (before any long computation)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".gradlab-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise fail(f"cannot write to output directory {str(out)!r}: {exc.strerror or exc}") from None
    return out


def check_formats(formats: Iterable[str] | None) -> list[str]:
    fmts = [f.lower().lstrip(".") for f in (formats or ["png"])]
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise fail(f"unknown --format {bad[0]!r}; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(fmts))


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool | None = None):
    """Yield a ``callable(done, total)`` that drives a rich bar on a TTY (no-op otherwise)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done, total):
            bar.update(task, completed=done, total=total)

        yield update


def _versions() -> dict[str, Any]:
    from gradlab.io import runtime_meta

    meta = runtime_meta()
    meta["python"] = sys.version.split()[0]
    for mod in ("typer", "matplotlib"):
        try:
            from importlib.metadata import version

            meta[f"{mod}_version"] = version(mod)
        except Exception:  # noqa: BLE001
            meta[f"{mod}_version"] = None
    return meta


def primary_process() -> bool:
    """False on every process but the first under ``jax.distributed``: results are written once."""
    if "jax" not in sys.modules:
        return True
    import jax

    return jax.process_index() == 0


class Writer:
    """Writes a command's outputs into ``out``: figures, ``.npz`` data and ``.json`` metadata, atomically.

    Under ``jax.distributed`` only process 0 writes (every process holds the gathered result)."""

    def __init__(self, out: Path, formats: Sequence[str], plot: bool, command: str, parameters: Mapping[str, Any]):
        self.primary = primary_process()
        self.out = check_out_dir(out) if self.primary else Path(out)
        self.formats = check_formats(formats)
        self.plot = plot
        self.command = command
        self.parameters = dict(parameters)
        self.start = time.perf_counter()
        self.written: list[Path] = []

    def figure(self, stem: str, fig) -> list[Path]:
        if not self.plot or fig is None or not self.primary:
            return []
        from gradlab.plot import save_figure

        paths = []
        for fmt in self.formats:
            paths.append(save_figure(fig, self.out / f"{stem}.{fmt}", fmt))
        self.written.extend(paths)
        return paths

    def _provenance(self, **more) -> dict[str, Any]:
        return {
            "command_line": command_line(),
            "command": self.command,
            "parameters": self.parameters,
            "seed": self.parameters.get("seed"),
            "wall_time_s": round(time.perf_counter() - self.start, 3),
            **_versions(),
            **more,
        }

    def data(self, stem: str, arrays: Mapping[str, Any], *, result_meta: Mapping | None = None,
             dims: Mapping | None = None, extra_meta: Mapping | None = None) -> tuple[Path, Path]:
        """Arrays that are not one Result (stacked panels, curves): flat ``.npz`` + ``.json``."""
        from gradlab.io import save_json_atomic, save_npz_atomic

        if not self.primary:
            return self.out / f"{stem}.npz", self.out / f"{stem}.json"
        npz = save_npz_atomic(self.out / f"{stem}.npz", **{k: np.asarray(v) for k, v in arrays.items()})
        meta = self._provenance(
            arrays={k: list(np.shape(v)) for k, v in arrays.items()},
            array_dims=dict(dims or {}),
            result_meta=dict(result_meta or {}),
            **dict(extra_meta or {}),
        )
        js = save_json_atomic(self.out / f"{stem}.json", meta)
        self.written.extend([npz, js])
        return npz, js

    def result(self, stem: str, result, fig=None, **extra_meta) -> None:
        """One Result: ``gradlab.io.Result.load(out / stem)`` reads it back; the JSON adds
        the command line, parameters, seed, versions and wall time to the Result header."""
        self.figure(stem, fig)
        if not self.primary:
            return
        paths = result.save(self.out / stem, provenance=self._provenance(**extra_meta))
        self.written.extend(paths)

    def report(self) -> None:
        for p in self.written:
            typer.echo(str(p))


def load_views(path: Path):
    """Read ``h`` and ``h_prime`` (N, D) from an .npz; one-line errors for anything unreadable."""
    path = Path(path)
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise fail(f"embeddings file {str(path)!r} must be an .npz holding arrays 'h' and 'h_prime' "
                       f"(np.savez); got a single array")
        with loaded as data:
            keys = set(data.files)
            if not {"h", "h_prime"} <= keys:
                raise fail(f"embeddings file {str(path)!r} must hold arrays 'h' and 'h_prime'; found {sorted(keys)}")
            raw = {k: np.asarray(data[k]) for k in ("h", "h_prime")}
            for k, arr in raw.items():
                if arr.dtype.kind not in "fiu":
                    raise fail(f"embeddings {k!r} must be a real numeric array; got dtype {arr.dtype}")
            h, hp = raw["h"].astype(float), raw["h_prime"].astype(float)
    except OSError as exc:
        raise fail(f"cannot read embeddings file {str(path)!r}: {exc.strerror or exc}") from None
    except (ValueError, EOFError) as exc:
        raise fail(f"cannot read embeddings file {str(path)!r}: not a valid .npz ({exc})") from None
    if h.ndim != 2 or h.shape != hp.shape:
        raise fail(f"embeddings 'h' and 'h_prime' must both have shape (N, D); got {h.shape} and {hp.shape}")
    if h.shape[0] < 2:
        raise fail(f"embeddings need N >= 2 pairs; got N = {h.shape[0]}")
    if not (np.all(np.isfinite(h)) and np.all(np.isfinite(hp))):
        raise fail("embeddings contain non-finite values")
    return h, hp
