"""Fine-tune a sentence encoder with any gradlab loss (SimCSE-style dropout views), in JAX + optax.

Each step draws a batch of N unlabelled sentences, encodes it twice with two dropout
keys (h, h' — the two views of SimCSE, Gao et al. 2021), evaluates the trained loss on
(h, h') and takes one optax step. Every ``eval_every`` steps the STS-B dev Spearman is
measured; the parameters with the best dev score are kept (the protocol of the papers). A
``gradlab.monitor.ParadigmMonitor`` watches the views when that module is available.

:func:`train` is a straight line: the run resolved once (:func:`gradlab.real.run.resolve_run`:
objective, encoder, data, dev scorer), the loop (:func:`gradlab.real.loop.make_loop`:
optimizer, batches of one shape, the jitted step of :mod:`gradlab.real.step`), the starting
state (:func:`gradlab.real.loop.initial_state`, or :func:`gradlab.real.checkpoints.saved_state`
when resuming), the steps (:func:`gradlab.real.loop.run_steps`), and the outputs the caller
asks for (:data:`OUTPUTS`).

Speed and scale: the step compiles once per run (MiniLM packs each batch's sentences into
rows of one shape, :class:`gradlab.real.packing.Packed`), runs both dropout views in one
forward (as SimCSE's trainer does), stores the layers' activations for the backward pass
(``TrainConfig.remat`` recomputes them, for memory) and updates parameters and optimizer state
in place; the loop keeps one step in flight. With several devices (``jax.devices()``, every
host after ``jax.distributed.initialize()``) the batch is sharded over a 1-D mesh and the
parameters replicated; the loss sees the global batch, so the negatives come from every
device (docs/distributed.md). ``precision="bf16"`` is mixed precision: the encoder's forward
and backward pass run in bfloat16; the master parameters, the optimizer state, the views
given to the loss and the monitor, the loss and the update stay float32. Evaluation encodes
with the float32 parameters, the model that is saved.

Files written to ``out_dir`` (when given; ``outputs`` chooses among the first five):
  ``train_log.jsonl``         ``"log"``: one record per step (loss, grad norm, seconds, elapsed) and per evaluation
  ``paradigm_monitor.jsonl``  ``"monitor"``: the monitor's records
  ``best_params.npz``         ``"params"``: the best parameters (:mod:`gradlab.real.checkpoints`)
  ``model/``                  ``"model"``: transformer encoders: the best model as a Hugging Face
                              checkpoint folder with its evaluation pooling recorded, which
                              ``load_encoder(OUT / "model")``, transformers and sentence-transformers read
  ``train.json``              ``"summary"``: config, best step, dev / test scores, timings, versions
  ``state/state.npz``         with ``save_state_every``: the training state to resume from
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from gradlab._memory import relieve_mappings
from gradlab.real.checkpoints import save_model, save_params
from gradlab.real.config import TrainConfig
from gradlab.real.loop import Log, Watch, initial_state, make_loop, run_steps
from gradlab.real.run import Run, resolve_run
from gradlab.real.state import StateSaver, saved_state

__all__ = ["TrainResult", "train", "OUTPUTS"]

#: What :func:`train` can write to ``out_dir``: the step log, the monitor's log, the best
#: parameters, the best model (transformer encoders) and the summary.
OUTPUTS = ("log", "monitor", "params", "model", "summary")


@dataclasses.dataclass
class TrainResult:
    """Outcome of :func:`train`.

    Attributes:
      params: the best parameters (by dev Spearman; the last ones if never evaluated).
      best_step: step of the best checkpoint (0 = before training).
      best_dev: its dev Spearman × 100.
      dev_before: dev Spearman before training.
      test_before, test_after: STS-B test Spearman before / with the best checkpoint (None if skipped).
      losses: (steps,) training loss per step.
      evals: list of ``{"step", "dev_spearman"}``.
      seconds: wall time of the whole run.
      monitor: ``"attached"`` or why not.
      out_dir: where files went (None if not written).
      files: what was written to ``out_dir``: ``{output: path relative to it}`` (:data:`OUTPUTS`).
    """

    params: Any
    best_step: int
    best_dev: float
    dev_before: float
    test_before: float | None
    test_after: float | None
    losses: np.ndarray
    evals: list[dict[str, float]]
    seconds: float
    monitor: str
    out_dir: Path | None = None
    files: dict[str, str] = dataclasses.field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "best_step": self.best_step,
            "best_dev_spearman": self.best_dev,
            "dev_spearman_before": self.dev_before,
            "test_spearman_before": self.test_before,
            "test_spearman_after": self.test_after,
            "loss_first": float(self.losses[0]) if len(self.losses) else None,
            "loss_last": float(self.losses[-1]) if len(self.losses) else None,
            "evals": self.evals,
            "seconds": self.seconds,
            "monitor": self.monitor,
        }


def _prepare_out(out_dir: str | Path | None, resume_step: int | None = None) -> Path | None:
    """The output folder, emptied of a previous run's logs (or, resuming, of their records after the state).

    A run owns its logs: a previous run's records in the same folder would interleave with
    this one's by step. Each file is still appended record by record (crash-safe). A run
    resumed from the state after step k keeps the log's records of steps <= k and the
    monitor's of states < k (state k is measured by step k + 1).
    """
    if out_dir is None:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, keep in (("paradigm_monitor.jsonl", -1), ("train_log.jsonl", 0)):
        if resume_step is None or not (out / name).is_file():
            (out / name).unlink(missing_ok=True)
        else:
            _truncate_log(out / name, resume_step + keep)
    return out


def _truncate_log(path: Path, last_step: int) -> None:
    """Keep the JSON lines of ``path`` whose ``step`` is <= ``last_step`` (and drop a torn last line)."""
    from gradlab.io import atomic_write_text

    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if int(rec.get("step", 0)) <= last_step:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


def train(
    config: TrainConfig | Run,
    *,
    encoder: Any = None,
    sentences: Sequence[str] | None = None,
    out_dir: str | Path | None = None,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
    token_ids: Sequence[Sequence[int]] | None = None,
    resume: bool = False,
    tracker: Callable[[dict[str, Any]], None] | None = None,
    outputs: Collection[str] = OUTPUTS,
    keep_encoder_params: bool = True,
) -> TrainResult:
    """Fine-tune an encoder with a gradlab loss; keep the best parameters by STS-B dev Spearman.

    Args:
      config: a :class:`TrainConfig`, or a :class:`gradlab.real.run.Run` already resolved
        (then ``encoder``, ``sentences`` and ``token_ids`` must not be given).
      encoder: an already loaded encoder (default: ``load_encoder(config.encoder, seed=config.seed)``);
        its ``params`` are the starting point and are not modified (see ``keep_encoder_params``).
      sentences: training sentences (default: the corpus named in ``config``).
      out_dir: write the ``outputs`` here (None: write nothing).
      progress: called as ``progress(step, record)`` after every step and evaluation.
      token_ids: ``encoder.token_ids(sentences)`` if already computed (saves re-tokenizing
        the corpus when many runs share it); must match ``sentences`` after sampling.
      resume: continue from ``out_dir``'s training state
        (:func:`gradlab.real.checkpoints.state_path`, written every ``config.save_state_every``
        steps) if there is one, else start afresh. A resumed run gives the numbers of an
        uninterrupted one (losses, evaluations, best step, parameters).
      tracker: a monitor sink (``gradlab.monitor.tracker_sink("tb:DIR" | "wandb" | "mlflow")``, or
        any callable taking a record) that receives the training log's curves as
        ``{"step": s, "train": {"loss", "grad_norm", "dev_spearman", "test_spearman"}}`` and the
        monitor's records as they are; the caller closes it.
      outputs: which of :data:`OUTPUTS` to write to ``out_dir`` (the state for ``resume`` is
        written whenever ``config.save_state_every`` asks for it).
      keep_encoder_params: the encoder's parameters stay valid after the run (True). False: the
        run trains the encoder's own arrays, which the step donates (they are deleted), and the
        starting weights wait in host memory as the best so far: one set of weights less on the
        device, for a caller that does not use the encoder afterwards (``gradlab train``).

    A process whose memory mappings crowd the kernel's limit first drops the programs it has
    compiled (:func:`gradlab._memory.relieve_mappings`): a worker may train many configurations.

    Returns:
      A :class:`TrainResult`; its ``files`` name what was written.

    Raises:
      ValueError: a bad configuration, corpus or output name; ``resume`` without ``out_dir``,
        or with a state written by another configuration.
    """
    t_start = time.perf_counter()
    relieve_mappings()  # a process that trains run after run compiles each run's programs anew
    unknown = sorted(set(outputs) - set(OUTPUTS))
    if unknown:
        raise ValueError(f"unknown outputs {unknown}; choose from {', '.join(OUTPUTS)}")
    if isinstance(config, Run):
        if encoder is not None or sentences is not None or token_ids is not None:
            raise ValueError("a resolved Run carries its encoder and data: give no encoder, sentences or token_ids")
        run = config
    else:
        run = resolve_run(config, encoder=encoder, sentences=sentences, token_ids=token_ids)
    config = run.config
    loop = make_loop(config, run.encoder, run.loss, run.token_ids)
    state = saved_state(config, loop, out_dir) if resume else None
    out = _prepare_out(out_dir, None if state is None else state.step)
    keep = (lambda name: out if name in outputs else None)  # noqa: E731
    watch, log = Watch(config, run.loss, keep("monitor"), tracker), Log(keep("log"), progress, tracker)
    try:
        state = (initial_state(config, loop, run.dev, log, run.test, keep_encoder_params=keep_encoder_params)
                 if state is None else state)
        run_steps(config, loop, state, run.dev, log, watch, after_step=StateSaver(config, loop, out))
    finally:
        log.close()
        watch.close()
    best = jax.device_put(state.best_params)  # kept on the host during the run (gradlab.real.loop.evaluate)
    result = TrainResult(
        params=best, best_step=state.best_step, best_dev=state.best_dev, dev_before=state.dev_before,
        test_before=state.test_before, test_after=run.test(best) if run.test is not None else None,
        losses=state.losses, evals=state.evals, seconds=time.perf_counter() - t_start, monitor=watch.status,
        out_dir=out)
    if out is not None:
        result.files = _write_outputs(out, run, result, outputs)
    return result


def _write_outputs(out: Path, run: Run, result: TrainResult, outputs: Collection[str]) -> dict[str, str]:
    """The asked-for outputs after training; returns ``{output: path relative to out}`` of what exists."""
    from gradlab.io import runtime_meta, save_json_atomic

    files = {"log": "train_log.jsonl"} if "log" in outputs else {}
    if "monitor" in outputs and result.monitor == "attached":
        files["monitor"] = "paradigm_monitor.jsonl"
    if "params" in outputs:
        save_params(out / "best_params.npz", result.params)
        files["params"] = "best_params.npz"
    if "model" in outputs:
        model = save_model(out, run.encoder, result.params)
        if model is not None:
            files["model"] = model
    if "summary" in outputs:
        files["summary"] = "train.json"
        summary = {
            "config": run.config.to_dict(),
            "n_sentences": None if run.config.stream else len(run.sentences),
            **result.summary(),
            "files": files,
            "meta": runtime_meta(),
        }
        save_json_atomic(out / "train.json", summary)
    return files
