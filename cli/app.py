"""The ``gradlab`` command line: thin commands over the library (parse, call gradlab, write files).

Each command parses its options, calls the library's public names and writes through the
one provenance writer, ``gradlab.outputs.Writer`` (``_common.Writer`` adds the command line
as typed and the parameters): into ``--out`` (default: the working directory) the figure
(``--format png|pdf|svg``, repeatable; ``--no-plot`` skips it), the data (``STEM.npz``:
the result's arrays under the engine's names ``mu_pos``, ``mu_neg``, ``mean``, ``stderr``,
``mask``, ...) and the metadata (``STEM.json``: command line, parameters, seed, versions,
device, wall time), each atomically. ``gradlab figures`` is a loop over the library's
registry, ``gradlab.figures.paper_figure``: a notebook gets the same figure and data.

Validation lives in the library (``Protocol``, the loss registry): the commands build library
objects from the options and let their ``ValueError`` / ``TypeError`` through. ONE handler,
``main``, turns those (and out-of-memory, and a missing optional dependency) into one line on
stderr with exit code 2; ``--debug`` or ``GRADLAB_DEBUG=1`` shows the traceback instead.

Plug-ins: the commands of ``cli/_monitor.py`` (``track``, ``report``), ``cli/_real.py``
(``stsb``, ``sts``, ``train``), ``cli/_experiments.py`` (``experiment``), ``cli/_compare.py`` (``compare``) and ``cli/_explore.py`` (``explore``) are registered explicitly through
their ``register(app)``, so they always appear in ``gradlab --help``. Data flows one way: this
module imports the plug-ins and ``_common.py`` (shared options, parsers, ``fail``,
``resolve_loss``, ``CONTEXT``, the ``Writer``); the plug-ins import only ``_common.py``, never
this module. Their heavy imports (JAX, the ``real`` extra) load inside the command, and a missing
extra is the one-line error that names it.
"""

from __future__ import annotations

import copy
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from gradlab_cli import _common, _compare, _experiments, _explore, _monitor, _real
from gradlab_cli._common import (
    CONTEXT,
    LOSS_HELP,
    Compose,
    Debug,
    Formats,
    NoPlot,
    Out,
    Params,
    Seed,
    angle,
    fail,
    make_writer,
    number,
    parse_params,
    pi_text,
    progress_bar,
    resolve_loss,
)
from typer.core import TyperGroup

from gradlab import defaults
from gradlab.errors import one_line

OOM_HINT = "out of memory for these sizes: reduce --grid, --batches or --batch-size"


def _message(exc: BaseException) -> str:
    """The error line's text: the message on one line (a KeyError's names the key)."""
    text = one_line(exc, typed=False)
    return f"unknown key {text}" if isinstance(exc, KeyError) else text


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or "RESOURCE_EXHAUSTED" in text or "Out of memory" in text


def _error(exc: Exception) -> tuple[int, str | None]:
    """The exit code and the one stderr line for an exception escaping a command."""
    if isinstance(exc, typer.Exit):
        return exc.exit_code, None
    if isinstance(exc, typer.Abort):
        return 130, "Aborted."
    if isinstance(exc, typer.TyperException):  # usage errors, typer.BadParameter from the parsers
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
        return exc.exit_code, f"Error: {' '.join(exc.format_message().split())}{hint}"
    if _out_of_memory(exc):
        return 2, f"Error: {OOM_HINT}"
    if isinstance(exc, (ValueError, TypeError, KeyError, OSError, ImportError, NotImplementedError)):
        return 2, f"Error: {_message(exc)}"
    return 1, f"Error: internal error ({type(exc).__name__}): {_message(exc)}; rerun with --debug"


class _Gradlab(TyperGroup):
    """The root group: records the command line, and runs every command under ``_error``."""

    def get_command(self, ctx, name):
        # the listing's one-liner is the docstring's first line whole: click's default stops at
        # the first word ending in "." and would print "Lemma 1 (Li et al."
        command = super().get_command(ctx, name)
        if command is not None and command.short_help is None and command.help:
            command.short_help = command.help.strip().split("\n\n")[0].replace("\n", " ")
        return command

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        args = list(sys.argv[1:] if args is None else args)
        _common.COMMAND_LINE = args
        _common.reset_debug()
        try:
            rv = super().main(args=args, prog_name=prog_name or "gradlab", complete_var=complete_var,
                              standalone_mode=False, **extra)
            code, line = (rv if isinstance(rv, int) else 0), None
        except KeyboardInterrupt:
            if _common.debug_enabled():
                raise
            code, line = 130, "Aborted."
        except Exception as exc:  # noqa: BLE001 - never a traceback without --debug
            if _common.debug_enabled() and not isinstance(exc, (typer.Exit, typer.TyperException)):
                raise
            code, line = _error(exc)
        if line is not None:
            typer.echo(line, err=True)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="gradlab",
    cls=_Gradlab,
    help="gradlab: the GD / W / R gradient paradigm of contrastive losses, as an instrument.\n\n"
    "Examples:\n\n"
    "\b\n"
    "  gradlab heatmap --loss arccon        # Li et al. 2024 Fig. 2 (GD map)\n"
    "  gradlab lemma1 --lambda 0.1          # Lemma 1 map + distribution\n"
    "  gradlab figures --out figures/       # every paper figure\n"
    "  gradlab losses                       # the registry",
    context_settings=CONTEXT,
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version_callback(value: bool):
    if value:
        from gradlab import __version__

        typer.echo(f"gradlab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Debug = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the compilation cache (also GRADLAB_CACHE_DIR=off).")] = False,
):
    """gradlab: the GD / W / R gradient paradigm of contrastive losses."""
    if ctx.invoked_subcommand is None:  # bare `gradlab`: the help
        typer.echo(ctx.get_help())
        raise typer.Exit()
    _start_cache(no_cache)
    _start_distributed()


def _start_distributed() -> None:
    """``GRADLAB_DISTRIBUTED=1``: join a multi-process JAX run. ``jax.distributed.initialize()`` reads
    the cluster's environment (SLURM, Open MPI, TPU pods); by hand, ``JAX_COORDINATOR_ADDRESS``
    with ``GRADLAB_NUM_PROCESSES`` and ``GRADLAB_PROCESS_ID``."""
    import os

    if os.environ.get("GRADLAB_DISTRIBUTED", "") in ("", "0"):
        return
    kwargs = {}
    for env, name in (("GRADLAB_NUM_PROCESSES", "num_processes"), ("GRADLAB_PROCESS_ID", "process_id")):
        raw = os.environ.get(env, "").strip()
        if raw:
            if not raw.isdigit():
                raise ValueError(f"{env} must be a whole number; got {raw!r}")
            kwargs[name] = int(raw)
    import jax

    jax.distributed.initialize(**kwargs)


def _start_cache(no_cache: bool) -> None:
    """The persistent compilation cache, on by default for every command (env only: no JAX import)."""
    import gradlab

    if no_cache:
        gradlab.disable_cache()
    else:
        gradlab.enable_cache()


# --- shared options ------------------------------------------------------------------------------
class Component(str, Enum):
    gd = "gd"
    ratio = "ratio"
    weight = "weight"
    norm = "norm"


class Part(str, Enum):
    pos = "pos"
    neg = "neg"


class Mode(str, Enum):
    common = "common"
    independent = "independent"


def _alpha_law(raw: str) -> str | float:
    """Typer ``parser=`` of ``--alpha-law``: ``uniform`` or an angle in [0, π]."""
    if str(raw).strip().lower() == "uniform":
        return "uniform"
    try:
        return angle(raw)
    except typer.BadParameter as exc:
        raise typer.BadParameter(f"'uniform' or an angle: {exc.message}") from None


Grid = Annotated[int, typer.Option("--grid", help=f"Points per μ axis (the paper: {defaults.GRID}).")]
Batches = Annotated[int, typer.Option("--batches", help=f"Batches per (μ_pos, μ_neg) cell (the paper: {defaults.BATCHES}).")]
BatchSize = Annotated[int, typer.Option("--batch-size", "-N", help=f"N: 1 positive + N-1 negatives (the paper: {defaults.BATCH_SIZE}).")]
SigmaPos = Annotated[float, typer.Option("--sigma-pos", help=f"σ_pos of θ_ii' (the paper: {defaults.SIGMA_POS:g}; 0 draws every angle at its mean).")]
SigmaNeg = Annotated[float, typer.Option("--sigma-neg", help=f"σ_neg of θ_ij' (the paper: {defaults.SIGMA_NEG:.2f}).")]
#: The paper's μ ranges (``gradlab.defaults``) as the π text the options show and parse back.
MU_POS_RANGE = tuple(map(pi_text, defaults.MU_POS_RANGE))
MU_NEG_RANGE = tuple(map(pi_text, defaults.MU_NEG_RANGE))
MuPosRange = Annotated[tuple[float, float], typer.Option("--mu-pos-range", parser=number, metavar="LO HI", help=f"LO HI of μ_pos, radians within [0, pi]; pi allowed ({' '.join(MU_POS_RANGE)}).")]
MuNegRange = Annotated[tuple[float, float], typer.Option("--mu-neg-range", parser=number, metavar="LO HI", help=f"LO HI of μ_neg, radians within [0, pi] ({' '.join(MU_NEG_RANGE)}).")]
ModeOpt = Annotated[Mode, typer.Option("--mode", help="common: one set of draws for every cell (fast); independent: draws per cell.")]


def _loss(name: str | None, params: dict, compose: str | None = None):
    return resolve_loss(name, compose, params)


def _safe(name: str) -> str:
    return name.replace("+", "plus").replace("/", "_")


def _param_tag(params: dict) -> str:
    """The parameters given on the command line, for file names: ``_tau0.1_u0.17453292519943295``
    (so that a sweep into one --out does not overwrite itself; defaults add nothing). Short
    ``%g`` text where it is exact, else the full ``repr``, so distinct values never share a name."""

    def text(v: float) -> str:
        short = f"{v:g}"
        return (short if float(short) == v else repr(v)).replace("+", "")

    return "".join(f"_{k}{text(v)}" for k, v in sorted(params.items()))


# --- heatmap -------------------------------------------------------------------------------------
@app.command(context_settings=CONTEXT)
def heatmap(
    loss: Annotated[str | None, typer.Option("--loss", "-l", help=LOSS_HELP)] = None,
    compose: Compose = None,
    component: Annotated[Component, typer.Option("--component", "-c", help="gd (Figs. 2, 10), ratio (Fig. 4), weight (hardest-negative share where GD >= --gd-threshold) or norm (Nie et al. 2023's closed-form norm at the mean angles).")] = Component.gd,
    grid: Grid = defaults.GRID,
    batches: Batches = defaults.BATCHES,
    batch_size: BatchSize = defaults.BATCH_SIZE,
    sigma_pos: SigmaPos = defaults.SIGMA_POS,
    sigma_neg: SigmaNeg = defaults.SIGMA_NEG,
    mu_pos_range: MuPosRange = MU_POS_RANGE,
    mu_neg_range: MuNegRange = MU_NEG_RANGE,
    seed: Seed = 0,
    mode: ModeOpt = Mode.common,
    exact: Annotated[bool, typer.Option("--exact", help="Quadrature instead of Monte Carlo (GD of MPT, MET, MAT).")] = False,
    gd_threshold: Annotated[float, typer.Option("--gd-threshold", help="ratio: shade cells whose mean GD is below; weight: count only batches with GD at least this.")] = defaults.GD_THRESHOLD,
    part: Annotated[Part, typer.Option("--part", help="norm only: alignment (pos) or uniformity (neg) part.")] = Part.pos,
    param: Params = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """A (μ_pos, μ_neg) map of one paradigm component of any loss (Li et al. 2024 Figs. 2, 4, 10).

    Examples:

      gradlab heatmap --loss arccon

      gradlab heatmap --loss met --component ratio --out out/

      gradlab heatmap --loss infonce --param tau=0.1 --grid 50 --batches 200 -f png -f pdf

      gradlab heatmap --loss mpt --exact

      gradlab heatmap --loss my_losses.py:focal --param gamma=2

      gradlab heatmap --compose gd=indicator,weight=softmax,ratio=static --param m=0.3
    """
    params = parse_params(param)
    if exact and component is not Component.gd:
        raise fail("--exact applies to --component gd only (quadrature of MPT, MET, MAT)")
    if exact and mode is Mode.independent:
        raise fail("--exact computes by quadrature: --mode does not apply")
    from gradlab_cli._figure_process import component_warm_up, figure_processes

    # matplotlib's import and first drawing overlap JAX's import and the map
    with figure_processes(no_plot, 1, component_warm_up(component.value, part.value)) as figures:
        from gradlab.simulate import Protocol

        protocol = Protocol(grid=grid, batches=batches, batch_size=batch_size, sigma_pos=sigma_pos,
                            sigma_neg=sigma_neg, mu_pos_range=mu_pos_range, mu_neg_range=mu_neg_range, seed=seed,
                            mode=mode.value)
        the_loss = _loss(loss, params, compose)
        writer = make_writer(out, fmt, no_plot, "heatmap", loss=the_loss.name, component=component.value,
                             params=dict(the_loss.params), protocol=protocol.to_dict(), seed=seed, exact=exact,
                             gd_threshold=gd_threshold, part=part.value)
        from gradlab.figures import Drawing, component_figure, draw_component
        from gradlab.plot import loss_title

        comp = component.value
        with progress_bar(f"{comp} map of {the_loss.name}") as cb:
            _, result = component_figure(the_loss, protocol, component=comp, exact=exact, gd_threshold=gd_threshold,
                                         part=part.value, progress=cb, plot=False)
        variant = ("_neg" if comp == "norm" and part is Part.neg else "") + ("_exact" if exact else "")
        stem = f"heatmap_{_safe(the_loss.name)}{_param_tag(params)}_{comp}{variant}"
        drawing = Drawing(draw_component, (result, the_loss.name), {"component": comp, "gd_threshold": gd_threshold,
                                                                   "part": part.value, "label": loss_title(the_loss.name)})
        writer.written.extend(figures.save(drawing, writer.figure_paths(stem)))
        writer.result(stem, result)
    writer.report()


# --- weight --------------------------------------------------------------------------------------
@app.command(context_settings=CONTEXT)
def weight(
    tau: Annotated[list[float] | None, typer.Option("--tau", help="Temperature τ (repeatable; default the paper's six).")] = None,
    mu_pos: Annotated[float, typer.Option("--mu-pos", parser=angle, help="Fixed μ_pos, radians within [0, pi] (pi allowed).")] = pi_text(defaults.WEIGHT_MU_POS),
    loss: Annotated[str, typer.Option("--loss", "-l", help="A loss with a temperature tau: " + LOSS_HELP)] = "infonce",
    gd_gate: Annotated[float | None, typer.Option("--gd-gate", help="Count only batches with GD >= this.")] = None,
    grid: Grid = defaults.GRID,
    batches: Batches = defaults.BATCHES,
    batch_size: BatchSize = defaults.BATCH_SIZE,
    sigma_pos: SigmaPos = defaults.SIGMA_POS,
    sigma_neg: SigmaNeg = defaults.SIGMA_NEG,
    mu_neg_range: MuNegRange = MU_NEG_RANGE,
    seed: Seed = 0,
    mode: ModeOpt = Mode.common,
    param: Params = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """The hardest negative's share of the weight vs μ_neg, one curve per τ (Li et al. 2024 Fig. 3).

    Examples:

      gradlab weight

      gradlab weight --tau 0.05 --tau 0.01 --mu-pos pi/4 --out out/
    """
    taus = list(tau) if tau else list(defaults.TAUS)
    bad = [t for t in taus if not (math.isfinite(t) and t > 0)]
    if bad:
        raise fail(f"--tau must be > 0; got {bad[0]:g}")
    params = parse_params(param)
    if "tau" in params:
        raise fail("weight sweeps τ with --tau; do not also give --param tau")
    from gradlab_cli._figure_process import figure_processes

    with figure_processes(no_plot, 1) as figures:  # matplotlib's import beside JAX's and the curves
        from gradlab import plot, simulate
        from gradlab.figures import Drawing
        from gradlab.simulate import Protocol

        protocol = Protocol(grid=grid, batches=batches, batch_size=batch_size, sigma_pos=sigma_pos,
                            sigma_neg=sigma_neg, mu_neg_range=mu_neg_range, seed=seed, mode=mode.value)
        the_loss = _loss(loss, params)
        writer = make_writer(out, fmt, no_plot, "weight", loss=the_loss.name, taus=taus, mu_pos=mu_pos,
                             gd_gate=gd_gate, params=dict(the_loss.params), protocol=protocol.to_dict(), seed=seed)
        with progress_bar("weight share") as cb:
            result = simulate.weight_share(protocol, taus=taus, mu_pos=mu_pos, loss=the_loss, gd_gate=gd_gate,
                                           progress=cb)
        stem = f"weight_{_safe(the_loss.name)}{_param_tag(params)}"
        figures.submit(Drawing(plot.weight_share_curves, (result,)), writer.figure_paths(stem))
        writer.result(stem, result)
        writer.written.extend(figures.wait())
    writer.report()


# --- lemma1 --------------------------------------------------------------------------------------
@app.command(context_settings=CONTEXT)
def lemma1(
    lam: Annotated[list[float] | None, typer.Option("--lambda", help="Step size λ (repeatable). The map uses the first; the distribution all (default 0.01 0.1 0.5 1).")] = None,
    ratio: Annotated[list[float] | None, typer.Option("--ratio", "-r", help="Static ratio r to test (repeatable; default 1 1.25 1.5 1.75 2).")] = None,
    alpha_law: Annotated[str, typer.Option("--alpha-law", parser=_alpha_law, help="Law of α, the angle between the planes: 'uniform' on [0, π] or a fixed angle (pi allowed).")] = "uniform",
    embeddings: Annotated[Path | None, typer.Option("--embeddings", help="An .npz with two views 'h' and 'h_prime' (N, D): the distribution from real embeddings.")] = None,
    dist_mu_pos: Annotated[float, typer.Option("--dist-mu-pos", parser=angle, help="μ_pos of the simulated distribution (pi allowed).")] = pi_text(defaults.LEMMA1_MU_POS),
    dist_mu_neg: Annotated[float, typer.Option("--dist-mu-neg", parser=angle, help="μ_neg of the simulated distribution.")] = pi_text(defaults.LEMMA1_MU_NEG),
    grid: Grid = defaults.GRID,
    batches: Batches = defaults.BATCHES,
    batch_size: BatchSize = defaults.BATCH_SIZE,
    sigma_pos: SigmaPos = defaults.SIGMA_POS,
    sigma_neg: SigmaNeg = defaults.SIGMA_NEG,
    mu_pos_range: MuPosRange = MU_POS_RANGE,
    mu_neg_range: MuNegRange = MU_NEG_RANGE,
    seed: Seed = 0,
    mode: ModeOpt = Mode.common,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """Lemma 1 (Li et al. 2024): minimum-ratio map, satisfied fractions, and the distribution (Fig. 8a).

    Examples:

      gradlab lemma1 --lambda 0.1

      gradlab lemma1 --lambda 0.1 --ratio 1 --ratio 1.5 --alpha-law pi/4

      gradlab lemma1 --lambda 0.1 --lambda 1 --embeddings views.npz --out out/
    """
    lams = list(lam) if lam else list(defaults.LEMMA1_LAMS)
    bad = [x for x in lams if not (math.isfinite(x) and x > 0)]
    if bad:
        raise fail(f"--lambda must be > 0; got {bad[0]:g}")
    ratios = list(ratio) if ratio else list(defaults.LEMMA1_RATIOS)
    if not all(math.isfinite(r) for r in ratios):
        raise fail("--ratio must be finite")
    law = alpha_law
    views = None
    if embeddings is not None:
        from gradlab.io import load_views

        views = load_views(embeddings)
    mp, mn = dist_mu_pos, dist_mu_neg
    from gradlab_cli._figure_process import figure_processes

    with figure_processes(no_plot, 2) as figures:  # matplotlib beside JAX, the two figures side by side
        from gradlab import plot, simulate
        from gradlab.figures import Drawing
        from gradlab.simulate import Protocol

        protocol = Protocol(grid=grid, batches=batches, batch_size=batch_size, sigma_pos=sigma_pos,
                            sigma_neg=sigma_neg, mu_pos_range=mu_pos_range, mu_neg_range=mu_neg_range, seed=seed,
                            mode=mode.value)
        writer = make_writer(out, fmt, no_plot, "lemma1", lams=lams, ratios=ratios, alpha_law=law,
                             protocol=protocol.to_dict(), seed=seed,
                             embeddings=None if embeddings is None else str(embeddings), dist_mu_pos=mp, dist_mu_neg=mn)
        with progress_bar("Lemma-1 map") as cb:
            lmap = simulate.lemma1_map(protocol, lam=lams[0], ratios=ratios, alpha_law=law, progress=cb)
        figures.submit(Drawing(plot.lemma1_maps, (lmap,)), writer.figure_paths("lemma1_map"))
        writer.result("lemma1_map", lmap)
        if views is not None:
            from gradlab import monitor

            dist = monitor.min_ratio_distribution(*views, lams=lams, ratios=ratios)
        else:
            dist = simulate.min_ratio_distribution(protocol, lams=lams, mu_pos=mp, mu_neg=mn, alpha_law=law,
                                                   ratios=ratios)
        title = "distribution of the minimum ratio (embeddings)" if views is not None else None
        figures.submit(Drawing(plot.min_ratio_distribution, (dist,), {"ratio": ratios[0], "title": title}),
                       writer.figure_paths("lemma1_distribution"))
        writer.result("lemma1_distribution", dist)
        writer.written.extend(figures.wait())
    import numpy as np

    sat = np.asarray(lmap.extra["satisfied"])
    for r, frac in zip(np.asarray(lmap.coords.get("r", ratios)), sat, strict=False):
        typer.echo(f"r = {r:g}: satisfies Lemma 1 (λ = {lams[0]:g}) in {100 * float(np.nanmean(frac)):.1f}% of batches over the grid")
    writer.report()


# --- norms ---------------------------------------------------------------------------------------
@app.command(context_settings=CONTEXT)
def norms(
    loss: Annotated[list[str] | None, typer.Option("--loss", "-l", help="infonce, align, uniform, dcl, dcl+, mpt, met, mat (closed forms), or any loss of cosines as path/to/file.py:FUNCTION, package.module:FUNCTION or compose:gd=G,weight=W,ratio=R (norms by autodiff); repeatable; default: the eight closed forms.")] = None,
    negatives: Annotated[list[int] | None, typer.Option("--negatives", "-K", help="Number of negatives K (repeatable). InfoNCE gets one panel per K; others use the first (default 64; InfoNCE: 64 512 4096 32768).")] = None,
    part: Annotated[Part | None, typer.Option("--part", help="pos (alignment, Fig. 2) or neg (uniformity, Fig. 4); default: both.")] = None,
    grid: Annotated[int, typer.Option("--grid", help="Points per θ axis over [0, π].")] = 200,
    param: Params = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """Nie et al. 2023's gradient-norm maps over θ_ii' × θ_ij' (Eqs. 7–9, 16–22; Figs. 2 and 4).

    Examples:

      gradlab norms

      gradlab norms --loss infonce --negatives 16 --negatives 64 --negatives 1024 --part pos

      gradlab norms --loss dcl+ --param tau=0.1

      gradlab norms --loss my_losses.py:focal --loss infonce --part pos
    """
    ks = list(negatives) if negatives else None
    if ks is not None and any(k < 1 for k in ks):
        raise fail(f"--negatives must be >= 1; got {min(ks)}")
    if grid < 2:
        raise fail(f"--grid must be >= 2; got {grid}")
    params = parse_params(param)
    parts = [part.value] if part else ["pos", "neg"]
    from gradlab_cli._figure_process import figure_processes

    with figure_processes(no_plot, len(parts)) as figures:  # matplotlib beside JAX, the parts' figures side by side
        from gradlab import design, plot
        from gradlab import norms as gn
        from gradlab.figures import Drawing

        names = list(loss) if loss else list(gn.NORM_LOSSES)
        losses = [design.resolve_loss(n) if ":" in n else n for n in names]  # a user loss: its defaults, then --param
        panels = gn.norm_panels(losses, parts=parts, negatives=ks, grid=grid, **params)
        writer = make_writer(out, fmt, no_plot, "norms", losses=names, parts=parts, negatives=ks, params=params,
                             grid=grid)
        for p in parts:
            rs = [r for r in panels if r.meta["part"] == p]
            if not rs:
                continue
            stem = f"norms_{p}{_param_tag(params)}"
            figures.submit(Drawing(plot.norm_maps, (rs,), {"ncols": min(4, len(rs))}), writer.figure_paths(stem))
            writer.result(stem, gn.stack_panels(rs))
        writer.written.extend(figures.wait())
    writer.report()


# --- losses --------------------------------------------------------------------------------------
@app.command(context_settings=CONTEXT)
def losses(
    family: Annotated[str | None, typer.Option("--family", help="effective, ineffective, modified or margin.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
    debug: Debug = False,
):
    """The loss registry as a table: name, family, parameters, GD / W / R in words (Li et al. 2024 Tables 1–2).

    Examples:

      gradlab losses

      gradlab losses --family effective --json
    """
    from gradlab.losses import loss_table

    rows = loss_table()
    if family is not None:
        from gradlab.losses import FAMILIES

        if family not in FAMILIES:
            raise fail(f"unknown --family {family!r}; choose from {', '.join(FAMILIES)}")
        rows = [r for r in rows if r["family"] == family]
    if as_json:
        import json

        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="gradlab losses: ∂L_i/∂h_i = GD · Σ_j W_j (h_j' − R h_i')", show_lines=True)
    for col in ("name", "family", "params", "GD", "W", "R"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["name"], r["family"], r["params"], r["gd"], r["weight"], r["ratio"])
    Console(width=160).print(table)


# --- figures -------------------------------------------------------------------------------------
@app.command(context_settings=CONTEXT)
def figures(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("figures"),
    quick: Annotated[bool, typer.Option("--quick", help="Small grids and few batches: a fast smoke run.")] = False,
    only: Annotated[list[str] | None, typer.Option("--only", help="Regenerate only these figure ids (repeatable).")] = None,
    fmt: Formats = None,
    no_plot: NoPlot = False,
    seed: Seed = 0,
    debug: Debug = False,
):
    """Regenerate every paper figure (Li et al. 2024, Nie et al. 2023, Rho et al. 2023) with its data and metadata.

    Examples:

      gradlab figures --out figures/

      gradlab figures --quick --out /tmp/figs

      gradlab figures --only li2024_fig2 --only nie2023_fig4
    """
    from gradlab_cli._figure_process import component_warm_up, figure_processes

    from gradlab.figures import figure_ids, paper_drawing  # no JAX

    ids = figure_ids(only)
    # each figure drawn in a forked process while the next is computed
    with figure_processes(no_plot, len(ids), component_warm_up("gd")) as figures:
        writer = make_writer(out, fmt, no_plot, "figures", quick=quick, only=ids, seed=seed)
        with progress_bar("figures") as cb:
            for n, fid in enumerate(ids):
                drawing, data = paper_drawing(fid, quick=quick, seed=seed)
                figures.submit(drawing, writer.figure_paths(fid))
                writer.result(fid, data)
                if cb:
                    cb(n + 1, len(ids))
            writer.written.extend(figures.wait())
    writer.report()


# --- plug-ins ------------------------------------------------------------------------------------
#: The plug-in modules, each with ``register(app)``; registered explicitly, so their commands
#: always appear in ``gradlab --help`` (a missing extra is reported when the command runs).
PLUGINS = (_monitor, _real, _experiments, _compare, _explore)


def _register_plugins(target: typer.Typer, plugins=PLUGINS) -> list[str]:
    """Call every plug-in's ``register(target)``; returns the plug-in module names."""
    for plugin in plugins:
        plugin.register(target)
    return [plugin.__name__ for plugin in plugins]


_register_plugins(app)


def _app_for(argv: list[str]) -> typer.Typer:
    """``app`` with only the command that ``argv`` names (the first word that is not a root option):
    Typer turns each registered command's signature into click options when the group is built,
    and a run needs only its own. The whole app for ``gradlab``, ``--help``, ``--version`` or an
    unknown name (its listing and suggestions need every command)."""
    name = next((word for word in argv if not word.startswith("-")), None)
    chosen = [c for c in app.registered_commands
              if typer.main.get_command_name(c.name or c.callback.__name__) == name]
    if len(chosen) != 1:
        return app
    one = copy.copy(app)
    one.registered_commands = chosen
    return one


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point (``gradlab``); ``_Gradlab.main`` is the one error handler."""
    if argv is None:  # the command itself: a training command on a CPU may start again with huge pages
        from gradlab_cli._host import start_with_huge_pages

        start_with_huge_pages(sys.argv[1:])
    argv = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(_app_for(argv))
    return command.main(args=argv, prog_name="gradlab", standalone_mode=True)


if __name__ == "__main__":  # pragma: no cover
    main()
