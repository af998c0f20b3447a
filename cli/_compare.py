"""CLI plug-in: ``gradlab compare RUN...`` (several training runs side by side).

Registered by ``cli/app.py`` through ``register(app)``. Thin: ``gradlab.compare.compare`` reads
and aggregates the runs (every bad path is its one-line error, before anything is written), and
the command writes the table, the figure and the data through the command's ``Writer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from gradlab_cli._common import CONTEXT, Debug, Formats, NoPlot, Out, make_writer

from gradlab import defaults


def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(help="gradlab train folders (train.json, train_log.jsonl, paradigm_monitor.jsonl), experiment runs (OUT/runs/<id>) or experiment folders (every run in OUT/runs), or monitor logs (.jsonl / .csv).")],
    confidence: Annotated[float | None, typer.Option("--confidence", help=f"Confidence level of the t intervals over seeds (default {defaults.CONFIDENCE:g}).")] = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """Overlay training runs' curves and table their best dev and test scores (mean ± t interval over seeds).

    Runs whose configurations are equal but for the seed form one row: the mean over the seeds and
    its Student t interval (95 %). Writes compare.csv, compare.md and compare.tex (the table),
    compare.png (loss, STS-B dev Spearman and the monitor's curves: μ_pos, μ_neg, GD, hardest
    negative's share, R, RankMe, m_o, m_r, ...; --format, --no-plot) and compare.npz / compare.json
    (the curves and the provenance). A failed comparison leaves nothing in --out.

    Examples:

      gradlab compare runs/infonce runs/arccon --out cmp/

      gradlab compare exp/ --out cmp/ --format pdf

      gradlab compare runs/a/paradigm_monitor.jsonl runs/b/paradigm_monitor.jsonl --no-plot
    """
    from gradlab.compare import compare
    from gradlab.outputs import removed_on_failure, table_text

    result = compare(runs, confidence=confidence)
    header, rows, values = result.table()
    with removed_on_failure(out):
        writer = make_writer(out, fmt, no_plot, "compare", runs=[str(r) for r in runs], confidence=result.confidence)
        caption = (f"Best STS-B dev and test Spearman x 100: mean over seeds ± the half-width of its "
                   f"{100 * result.confidence:g} % t interval")
        writer.table("compare", header, rows, values=values, caption=caption)
        if writer.plot:
            from gradlab.plot import compare_curves

            writer.figure("compare", compare_curves(result.panels(), title=f"{len(result.runs)} runs, "
                                                                           f"{len(result.groups)} configurations"))
        arrays, meta = result.arrays()
        writer.data("compare", arrays, extra_meta=meta)
    typer.echo(table_text(header, rows, "md"))
    writer.report()


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the gradlab CLI."""
    app.command("compare", context_settings=CONTEXT)(compare_cmd)
