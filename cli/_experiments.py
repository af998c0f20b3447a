"""CLI plug-in: ``gradlab experiment NAME`` (the training studies of Li et al. 2024, resumable).

Registered by ``cli/app.py`` through ``register(app)``. Top-level imports stay light; the
library (JAX, tokenizers, optax) loads inside the command. Every bad input is a one-line
error (exit 2) raised before anything is written; Ctrl-C cancels what was submitted, keeps
the finished runs and exits 130 (the next invocation resumes); exit 1 when a run of the
study is not done, one line per such run on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from gradlab_cli._common import (
    CONTEXT,
    LOSS_HELP,
    Debug,
    Formats,
    Params,
    fail,
    number,
    parse_params,
    progress_bar,
)


def _loss_dicts(texts: list[str] | None, params: dict) -> list[dict] | None:
    """``--loss`` texts -> run loss dicts: a registered name, compose:..., FILE.py:FUNCTION, module:FUNCTION."""
    if not texts:
        if params:
            raise fail("--param sets the parameters of --loss; give --loss too")
        return None
    from gradlab.design import parse_compose

    out = []
    for text in texts:
        if text.startswith("compose:"):
            out.append({"compose": parse_compose(text[len("compose:"):]), "params": params})
        elif ":" in text:
            out.append({"user": text, "params": params})
        else:
            out.append({"loss": text, "params": params})
    return out


def _values(items: list[str] | None) -> dict[str, tuple[float, ...]]:
    """``["m=0.3,0.5", "tau=0.05"]`` -> ``{"m": (0.3, 0.5), "tau": (0.05,)}`` (one-line errors)."""
    out: dict[str, tuple[float, ...]] = {}
    for item in items or ():
        comp, sep, raw = item.partition("=")
        comp = comp.strip()
        if not sep or comp not in ("m", "tau", "r") or not raw.strip():
            raise fail(f"--values expects m=V1,V2,... (or tau=..., r=...); got {item!r}")
        try:
            vals = tuple(number(v) for v in raw.split(","))
        except typer.BadParameter as exc:
            raise fail(f"--values {comp}: {exc.message}") from None
        bad = [v for v in vals if v < 0 or (comp == "tau" and v == 0)]
        if bad:
            raise fail(f"--values {comp}: {bad[0]:g} is not a valid {comp} (must be >= 0{', and tau > 0' if comp == 'tau' else ''})")
        out[comp] = vals
    return out


def experiment(
    name: Annotated[str, typer.Argument(help="Study: fig6, fig5, fig7, fig8, fig9, table3, fig1, nie2023, trajectory, simcse or all (every study but simcse).")],
    quick: Annotated[bool, typer.Option("--quick", help="Smoke mode: 20 steps, 1 seed, 2,000 sentences, fewer fig6 values (about 20 CPU-seconds per run).")] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="Experiment directory: runs/<id>/ and one folder per study.")] = Path("experiments"),
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Runs in parallel, one process each (default: the number of cores).")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Seeds 0..K-1 per configuration (default 5; --quick 1).")] = None,
    encoder: Annotated[str | None, typer.Option("--encoder", "-e", help="light (default, CPU), minilm, or the PATH of a BERT / RoBERTa checkpoint (named in run ids by its content, not its path); simcse: minilm (default) or a PATH.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Adam steps per run (default 100, simcse 40 or one epoch of --corpus; --quick 20, simcse 4).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", "-N", help="Sentences per step (default 64).")] = None,
    corpus: Annotated[Path | None, typer.Option("--corpus", help="simcse: train on this file (one sentence per line, SimCSE's wiki1m_for_simcse.txt): one epoch in the recipe's batch size, STS-B dev every 250 steps (the paper's setting, with --senteval). Named in run ids by its content.")] = None,
    senteval: Annotated[Path | None, typer.Option("--senteval", help="simcse: SentEval's data/downstream directory; every run's best checkpoint and state 0 are scored on the seven STS tasks, and the claims are decided on their average (Li et al. 2024 Table 3's metric).")] = None,
    precision: Annotated[str | None, typer.Option("--precision", help="float32 (default), or bf16: mixed precision for GPUs (forward and backward in bfloat16; master weights, optimizer state, loss and evaluation in float32).")] = None,
    values: Annotated[list[str] | None, typer.Option("--values", help="fig6: replace a component's values, e.g. --values tau=0.01,0.05,0.3 (repeatable).")] = None,
    loss: Annotated[list[str] | None, typer.Option("--loss", "-l", help="trajectory: train these losses and draw each on its own simulated maps (repeatable; default: the baseline and ArcCon). " + LOSS_HELP)] = None,
    param: Params = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Also redo runs recorded as failed (by default a failed run stays failed: same config, same seed, same error).")] = False,
    executor: Annotated[str, typer.Option("--executor", help="Where runs execute: local (process pool), submitit (a SLURM job array where sbatch exists, else local processes; slurm_* options without sbatch are an error unless --executor-opt cluster=local) or dask (a dask.distributed scheduler; an unreachable one fails after --executor-opt connect_timeout_s=S). submitit and dask need pip install \"gradlab[cluster]\".")] = "local",
    scheduler: Annotated[str | None, typer.Option("--scheduler", help="dask: the scheduler's address (tcp://HOST:8786) or a scheduler file (default: a local cluster of --jobs processes).")] = None,
    executor_opt: Annotated[list[str] | None, typer.Option("--executor-opt", help="An executor option KEY=VALUE (repeatable): submitit's timeout_min, gpus_per_node, cpus_per_task, mem_gb, slurm_partition, slurm_array_parallelism, ...; dask's resources=GPU:1; threads=N (XLA threads per run).")] = None,
    retries: Annotated[int, typer.Option("--retries", help="Extra attempts of a run after an environmental fault (full disk, killed worker, out of memory, preemption) before it is left not done.")] = 2,
    status: Annotated[bool, typer.Option("--status", help="List each run of the study as done, running (host, heartbeat age), failed (why) or missing; runs nothing (an --out that does not exist is an error).")] = False,
    fmt: Formats = None,
    debug: Debug = False,
):
    """Run a training study of Li et al. 2024 at CPU scale (or GPU scale with --encoder minilm).

    Each run (one loss configuration and seed) is stored once under OUT/runs/<id>/ (id = hash of
    its configuration) and reused by every study and every later invocation; only missing runs
    execute. Each study writes OUT/<study>/: figure(s), Result bundles (.npz + .json) and
    results.md (table, exact command, seeds, wall time). A failed run is marked in the tables.
    On a CPU the runs take glibc's huge pages where they apply (GRADLAB_HUGE_PAGES=0: not).

    Examples:

      gradlab experiment fig6 --quick --out exp/

      gradlab experiment all --out exp/ --jobs 2

      gradlab experiment table3 --encoder minilm --steps 1000 --batch-size 64 --seeds 3

      gradlab experiment simcse --out exp/   (SimCSE's recipe on MiniLM: 25 runs of about 7 min, 2 at a time on 2 CPU cores)

      gradlab experiment simcse --encoder path/to/bert-base-uncased --corpus wiki1m_for_simcse.txt --senteval SentEval/data/downstream --precision bf16 --out exp-gpu/   (the paper's setting)

      gradlab experiment trajectory --loss my_losses.py:focal --param gamma=1 --quick

      gradlab experiment all --out /shared/exp --executor submitit --executor-opt gpus_per_node=1 --executor-opt timeout_min=120

      gradlab experiment fig6 --out /shared/exp --executor dask --scheduler tcp://head:8786

      gradlab experiment all --out /shared/exp --status

    Exit status 1 when any run of the study is not done (one line per run on stderr says why).
    """
    from gradlab_cli._common import check_formats, command_line

    from gradlab.experiments import STUDIES

    if name not in STUDIES:
        raise fail(f"unknown study {name!r}; choose from {', '.join(STUDIES)}")
    if jobs is not None and jobs < 1:
        raise fail(f"--jobs must be >= 1; got {jobs}")
    parsed = _values(values)
    if parsed and name not in ("fig6", "all"):
        raise fail(f"--values applies to fig6 (and all); not to {name!r}")
    if loss and name not in ("trajectory", "all"):
        raise fail(f"--loss chooses the losses of trajectory (and all); not of {name!r}")
    for given, option in ((corpus, "--corpus"), (senteval, "--senteval")):
        if given is not None and name != "simcse":
            raise fail(f"{option} applies to the simcse study; not to {name!r}")
    if corpus is not None and not corpus.is_file():
        raise fail(f"--corpus: no file at {str(corpus)!r} (one sentence per line)")
    losses = _loss_dicts(loss, parse_params(param))
    formats = check_formats(fmt)
    options = _executor_options(executor, scheduler, executor_opt, retries)
    from gradlab.experiments import Scale, run_study

    try:
        scale = Scale.make(study=name, quick=quick, encoder=encoder, steps=steps, batch_size=batch_size,
                           precision=precision, seeds=seeds, values=parsed,
                           corpus=None if corpus is None else str(corpus),
                           senteval=None if senteval is None else str(senteval))
    except (TypeError, ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    if losses:
        from gradlab.experiments import canonical_loss

        losses = [canonical_loss(d) for d in losses]  # a bad loss: one line, before anything is written
    if status:
        _print_status(name, out, scale, losses)
        return
    try:  # run_study reaches the executor before it creates anything under --out
        with progress_bar(f"{name}: runs", unit="run", status_lines=True) as bar:
            def progress(done, total, record):
                if bar is not None:
                    bar(done, total)

            res = run_study(name, out, scale=scale, jobs=jobs, retry_failed=retry_failed, progress=progress,
                            command=command_line(), fmt=formats[0], losses=losses, executor=executor,
                            executor_options=options, retries=retries)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: finished runs are kept in {str(out / 'runs')!r}; rerun the same command to "
                   "resume", err=True)
        raise typer.Exit(130) from None
    for path in res["files"]:
        typer.echo(str(path))
    n = len(res["records"])
    typer.echo(f"{n} runs: {res['executed']} executed, {n - res['executed']} reused, {res['failed']} failed; "
               f"{res['wall_s']:.0f} s", err=True)
    for run_id, reason in res["not_done"].items():
        typer.echo(f"not done: {run_id} {_label(res['records'][run_id])}: {reason}", err=True)
    if res["not_done"]:
        raise typer.Exit(1)


def _label(record: dict) -> str:
    from gradlab.experiments import RunSpec

    return RunSpec.from_dict(record["spec"]).label


def _executor_options(executor: str, scheduler: str | None, items: list[str] | None, retries: int) -> dict:
    """Check --executor / --scheduler / --executor-opt / --retries (one-line errors) into executor options."""
    import importlib.util

    from gradlab.experiments import parse_executor_option

    if retries < 0:
        raise fail(f"--retries must be >= 0; got {retries}")
    need = {"submitit": "submitit", "dask": "distributed"}.get(executor)
    if need and importlib.util.find_spec(need) is None:
        raise fail(f"--executor {executor} needs {need!r}: pip install \"gradlab[cluster]\"")
    if scheduler is not None and executor != "dask":
        raise fail("--scheduler is the dask scheduler's address; give --executor dask too")
    try:
        options = dict(parse_executor_option(item) for item in items or ())
    except ValueError as exc:
        raise fail(str(exc)) from None
    if executor == "local" and options:
        raise fail(f"the local executor takes no --executor-opt; got {', '.join(sorted(options))}")
    if scheduler is not None:
        is_file = scheduler.endswith(".json") or Path(scheduler).is_file()
        options["scheduler_file" if is_file else "address"] = scheduler
    return options


def _print_status(name: str, out: Path, scale, losses) -> None:
    """``--status``: one line per run of the study; runs nothing and writes nothing."""
    from gradlab.experiments import study_status

    rows = study_status(name, out, scale=scale, losses=losses)
    for row in rows:
        state = row["state"]
        if state == "running":
            state = f"running (host {row['host']}, pid {row['pid']}, heartbeat {row['heartbeat_age']:.0f} s ago)"
        elif state == "failed":
            state = f"failed ({row.get('error')})"
        elif row.get("stale_lease"):
            state = f"missing (stale lease of host {row['stale_lease']})"
        typer.echo(f"{row['id']}  {state:<9}  {row['label']}")
    counts = {k: sum(1 for r in rows if r["state"] == k) for k in ("done", "running", "failed", "missing")}
    typer.echo(f"{len(rows)} runs: " + ", ".join(f"{v} {k}" for k, v in counts.items()), err=True)


def register(app: typer.Typer) -> None:
    """Add ``experiment`` to the gradlab CLI."""
    app.command("experiment", context_settings=CONTEXT)(experiment)
