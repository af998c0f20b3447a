"""Shared CLI plumbing: option parsers, shared options, the error line, progress, and the command's
``Writer`` (``gradlab.outputs.Writer``, the one provenance writer, with the command line as typed)."""

from __future__ import annotations

import ast
import contextlib
import math
import operator
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

import typer

from gradlab import outputs
from gradlab.outputs import check_out_dir  # noqa: F401 - for the plug-ins

#: The command line as typed (set by ``app.main`` for every run, in-process runs included).
COMMAND_LINE: list[str] | None = None

#: Context settings of every command (``-h`` and the help width).
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

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


def pi_text(value: float, max_denominator: int = 360) -> str:
    """A radian value as π text that ``number`` reads back exactly, else the float's ``repr``.

    For the defaults shown by ``--help`` (``gradlab.defaults``): a simple rational multiple of π
    (numerator and denominator at most ``max_denominator``) is written ``pi/20``, ``pi``,
    ``3*pi/4``; any other value (or one whose π text would not parse back to the very same
    float) as ``repr(value)``.

    Examples:
      >>> pi_text(math.pi / 20), pi_text(math.pi), pi_text(3 * math.pi / 4), pi_text(0.5)
      ('pi/20', 'pi', '3*pi/4', '0.5')
    """
    if not math.isfinite(value):
        return repr(value)
    ratio = Fraction(value / math.pi).limit_denominator(max_denominator)
    p, q = abs(ratio.numerator), ratio.denominator
    text = ("-" if ratio < 0 else "") + ("pi" if p == 1 else f"{p}*pi") + ("" if q == 1 else f"/{q}")
    return text if 0 < p <= max_denominator and number(text) == value else repr(value)


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
Seed = Annotated[int, typer.Option("--seed", help="Root seed in [0, 2**31 - 1]: fixes every number bit for bit.")]


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool | None = None, *, unit: str = "", status_lines: bool = False):
    """Yield a ``callable(done, total, **fields)`` that drives a rich bar on a TTY (``fields``, e.g. the
    loss, shown beside it). Without a TTY: ``None``, or with ``status_lines`` a
    ``gradlab.progress.StatusLine`` (one line on stderr every ``GRADLAB_STATUS_INTERVAL_S`` seconds,
    for SLURM logs and pipes). Commands whose library call works differently when given a callback
    (the simulator takes finer chunks to report progress) leave ``status_lines`` off."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        if status_lines:
            from gradlab.progress import StatusLine

            yield StatusLine(label, unit=unit)
        else:
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

    from gradlab.progress import format_fields

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None, status="")

        def update(done, total, **fields):
            bar.update(task, completed=done, total=total, status=format_fields(fields))

        yield update


def check_formats(formats: Sequence[str] | None) -> list[str]:
    """The ``--format`` values, checked by the library; the error names the option."""
    try:
        return outputs.check_formats(formats)
    except ValueError as exc:
        raise fail(f"--format: {exc}") from None


class Writer(outputs.Writer):
    """A command's ``gradlab.outputs.Writer``: the command line as typed, the command, its
    parameters and seed in every ``.json``; ``report()`` prints the paths written."""

    def __init__(self, out: Path, formats: Sequence[str] | None, plot: bool, command: str,
                 parameters: Mapping[str, Any]):
        parameters = dict(parameters)
        super().__init__(out, formats=check_formats(formats), plot=plot, command_line=command_line(),
                         meta={"command": command, "parameters": parameters, "seed": parameters.get("seed"),
                               "typer_version": typer.__version__})

    def report(self) -> None:
        for p in self.written:
            typer.echo(str(p))


def make_writer(out: Path, formats: Sequence[str] | None, no_plot: bool, command: str, **parameters: Any) -> Writer:
    """The ``Writer`` of a command from its ``--out``, ``--format`` and ``--no-plot`` options."""
    return Writer(out, formats, not no_plot, command, parameters)
