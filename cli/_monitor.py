"""CLI plug-in: ``gradlab track EMB.npz`` and ``gradlab report LOG`` (the training hook's side).

Registered by ``cli/app.py`` through ``register(app)``. Top-level imports stay light:
gradlab, JAX and matplotlib load inside the command bodies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from gradlab_cli._common import CONTEXT, Debug, Formats, NoPlot, Out

from gradlab import defaults


def _flat_arrays(tree, prefix=""):
    import numpy as np

    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat_arrays(v, key + "/"))
        else:
            out[key] = np.asarray(v)
    return out


def track(
    embeddings: Annotated[Path, typer.Argument(help="An .npz holding two views 'h' and 'h_prime' of shape (M, D).")],
    batch_size: Annotated[int, typer.Option("--batch-size", "-N", help="N per batch (the paper: 128, App. A.2).")] = 128,
    tau: Annotated[list[float] | None, typer.Option("--tau", help=f"Temperature of the hardest-negative share (repeatable; default {' '.join(f'{t:g}' for t in defaults.TAUS)}).")] = None,
    lam: Annotated[list[float] | None, typer.Option("--lambda", help=f"Lemma-1 step size λ (repeatable; default {' '.join(f'{x:g}' for x in defaults.MONITOR_LAMS)}).")] = None,
    margin: Annotated[float, typer.Option("--margin", help="Margin m of the baseline's GD gate (Li et al. 2024 Eq. 5).")] = 0.3,
    rankme_window: Annotated[int, typer.Option("--rankme-window", help="Rows per RankMe / α-ReQ window (tumbling, over the batches in order).")] = defaults.RANKME_WINDOW,
    tensorboard: Annotated[Path | None, typer.Option("--tensorboard", help="Also write each batch's statistics as TensorBoard events into this directory (step = batch index; needs the tensorboard extra).")] = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """The monitor's statistics on saved embeddings, per batch of N (Li et al. 2024 Sec. 3.2, App. A.2).

    Writes track.npz (every per-batch statistic under its record name, e.g. 'mu_pos',
    'hardest_share/0.05', 'lemma1_min_ratio_per_anchor/0.1'), track.json and track.png
    (Figs. 5, 7, 8a, 8b for these embeddings).

    Examples:

      gradlab track views.npz

      gradlab track views.npz --batch-size 64 --tau 0.05 --lambda 0.1 --out out/

      gradlab track views.npz --tensorboard runs/views
    """
    from gradlab_cli._common import fail, make_writer

    from gradlab.io import load_views

    if batch_size < 2:
        raise fail(f"--batch-size N must be >= 2; got {batch_size}")
    if rankme_window < 2:
        raise fail(f"--rankme-window must be >= 2 rows; got {rankme_window}")
    if tensorboard is not None:
        import importlib.util

        if importlib.util.find_spec("tensorboardX") is None:
            raise fail("--tensorboard needs tensorboardX: pip install 'gradlab[tensorboard]'")
    from gradlab.monitor import DEFAULT_LAMBDAS, DEFAULT_TAUS, analyze

    taus = list(tau) if tau else list(DEFAULT_TAUS)
    lams = list(lam) if lam else list(DEFAULT_LAMBDAS)
    h, hp = load_views(embeddings)
    if h.shape[0] < batch_size:
        raise fail(f"{str(embeddings)!r} holds M = {h.shape[0]} pairs, fewer than one batch of N = {batch_size}")
    writer = make_writer(out, fmt, no_plot, "track", embeddings=str(embeddings), batch_size=batch_size,
                     taus=taus, lambdas=lams, margin=margin)
    res = analyze(h, hp, batch_size=batch_size, taus=taus, lambdas=lams, margin=margin, histograms=True,
                  rankme_window=rankme_window)
    if tensorboard is not None:
        from gradlab.monitor import TensorBoardSink, analysis_records

        sink = TensorBoardSink(tensorboard)
        for record in analysis_records(res):
            sink(record)
        sink.close()
    meta = {"n_batches": res.pop("n_batches"), "dropped": res.pop("dropped"), "batch_size": res.pop("batch_size"),
            "pairs": int(h.shape[0]), "dim": int(h.shape[1])}
    if writer.plot:
        from gradlab.plot import track_summary

        writer.figure("track", track_summary(res))
    writer.data("track", _flat_arrays(res), extra_meta=meta)
    writer.report()


def report_cmd(
    log: Annotated[Path, typer.Argument(help="A log written by ParadigmMonitor: JSON Lines or CSV (told apart by content).")],
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
    on_map: Annotated[bool, typer.Option("--on-map", help="LOG is a run directory (gradlab experiment / gradlab train): draw its monitored (μ_pos, μ_neg) path on the simulated GD and ratio maps of its loss.")] = False,
):
    """Plot a monitor log over training steps (Li et al. 2024 Figs. 5, 7, 8, 9; Zhang et al. 2022's m_o / m_r).

    Reads the JSON Lines or the CSV log (ParadigmMonitor(sink="run/monitor.csv")); both give the
    same outputs. Writes monitor_curves.png, monitor_lemma1.png (and monitor_cosines.png
    when the run recorded histograms), monitor.npz (every series by its record name) and
    monitor.json. A file that is not a monitor log is a one-line error (exit code 2), and a failed
    report leaves nothing in --out.

    Examples:

      gradlab report run/monitor.jsonl

      gradlab report run/monitor.csv --out report/ --format pdf

      gradlab report exp/runs/0123abcd4567ef89 --on-map --out report/
    """
    from gradlab_cli._common import check_formats, check_out_dir, command_line
    from gradlab_cli._figure_process import figure_processes

    from gradlab.outputs import removed_on_failure

    formats = check_formats(fmt)
    with removed_on_failure(out):  # a log that is not one, a run without a loss: nothing left behind
        check_out_dir(out)
        if on_map:
            from gradlab.experiments import write_trajectory

            paths = write_trajectory(log, out, fmt=formats[0], command_line=command_line())
        else:
            # the figures drawn side by side in forked processes (inside: on a failure they stop
            # before the folder is removed)
            with figure_processes(no_plot, 3) as figures:
                from gradlab.figures import report

                meta = report(log, out, formats=formats, plot=not no_plot, extra_meta={"command_line": command_line()},
                              figures=figures)
            paths = meta["files"]
    for path in paths:
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Add ``track`` and ``report`` to the gradlab CLI."""
    app.command("track", context_settings=CONTEXT)(track)
    app.command("report", context_settings=CONTEXT)(report_cmd)
