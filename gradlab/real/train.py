"""Fine-tune a sentence encoder with any gradlab loss (SimCSE-style dropout views), in JAX + optax.

Each step draws a batch of N unlabelled sentences, encodes it twice with two dropout
keys (h, h' — the two views of SimCSE, Gao et al. 2021), evaluates the registered loss
``gradlab.get_loss(name)(h, h')`` and takes one optax step. Every ``eval_every`` steps
the STS-B dev Spearman is measured; the parameters with the best dev score are kept
(the protocol of the papers). A ``gradlab.monitor.ParadigmMonitor`` watches the views
when that module is available.

Speed and scale: the step is one jitted function that compiles once per run (every batch
has one shape: MiniLM packs each batch's sentences end to end into fixed rows, see
:class:`gradlab.real.minilm.Packed`), runs both dropout views in one forward (as SimCSE's
trainer does), stores the layers' activations for the backward pass (``TrainConfig.remat``
recomputes them instead, for memory), and updates parameters and optimizer state in place.
The loop keeps one step in flight (the next is dispatched before the last one's loss is
read). With
several devices (``jax.devices()``, every host after ``jax.distributed.initialize()``) the
batch is sharded over a 1-D mesh and the parameters replicated; the loss sees the global
batch, so the negatives come from every device (docs/distributed.md). ``precision="bf16"``
(``TrainConfig.precision``) is mixed precision for GPUs: the encoder's forward and backward
pass run in bfloat16, while the master parameters, the optimizer state, the views given to
the loss and the monitor, the loss and the update stay float32 (:func:`make_train_step`).
Evaluation (STS-B dev and test) encodes with the float32 parameters, the model that is saved.

:func:`train` is a straight line of stages: the objective (:func:`_resolve_objective`), the
encoder (:func:`_encoder_for`), the data (:func:`_training_data`, :func:`dev_scorer`), the
loop (:func:`_make_loop`: optimizer, batches, jitted step), the starting state
(:func:`_initial_state`, or :func:`_saved_state` when resuming), the steps (:func:`_run_steps`,
which evaluates with :func:`_evaluate`, feeds the monitor (:class:`_Watch`) and saves the state
(:class:`_Checkpointer`)), and the outputs (:func:`_write_outputs`).

Files written to ``out_dir`` (when given):
  ``train_log.jsonl``   one record per step (loss, grad norm, seconds) and per evaluation
  ``paradigm_monitor.jsonl``  the monitor's records
  ``best_params.npz``   the best checkpoint (flattened pytree; keys are paths)
  ``checkpoint/``       transformer encoders: the best model in Hugging Face layout
                        (``config.json``, ``model.safetensors``, ``tokenizer.json``), which
                        ``load_encoder(OUT / "checkpoint")`` and transformers' ``AutoModel`` read
                        (:func:`gradlab.real.minilm.save_transformer`)
  ``train.json``        config, best step, dev / test scores, timings, versions
  ``state/state.npz``   with ``checkpoint_every``: the training state to resume from
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.real._deps import require
from gradlab.real.config import TrainConfig
from gradlab.real.encoders import load_encoder

__all__ = [
    "TrainResult",
    "load_encoder",
    "train",
    "make_train_step",
    "compute_dtype",
    "data_mesh",
    "monitor_steps",
    "batch_order",
    "flatten_params",
    "unflatten_params",
    "state_path",
    "dev_scorer",
]

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


# --------------------------------------------------------------------------- pytree files


def flatten_params(params: Any) -> dict[str, np.ndarray]:
    """Pytree -> ``{"layers/q_w": array, ...}`` (for ``np.savez``)."""
    flat = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        key = "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)
        flat[key] = np.asarray(leaf)
    return flat


def unflatten_params(flat: Mapping[str, np.ndarray], like: Any) -> Any:
    """Inverse of :func:`flatten_params`, given a pytree of the same structure."""
    paths = jax.tree_util.tree_leaves_with_path(like)
    leaves = []
    for path, leaf in paths:
        key = "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)
        if key not in flat:
            raise ValueError(f"checkpoint lacks {key!r}")
        arr = np.asarray(flat[key])
        if arr.shape != leaf.shape:
            raise ValueError(f"checkpoint {key!r} has shape {arr.shape}, expected {leaf.shape}")
        leaves.append(jnp.asarray(arr, dtype=leaf.dtype))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)


# --------------------------------------------------------------------------- the step


def compute_dtype(precision: str) -> Any:
    """The dtype the forward and backward pass of ``precision`` run in (``gradlab.real.PRECISIONS``).

    Examples:
      >>> compute_dtype("float32"), compute_dtype("bf16")
      (dtype('float32'), dtype(bfloat16))
    """
    from gradlab.real.config import PRECISIONS

    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return jnp.dtype(PRECISIONS[precision])


def _cast_floats(tree: Any, dtype: Any) -> Any:
    """Every floating-point array of ``tree`` cast to ``dtype`` (integer arrays and None kept)."""
    return jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def _views_fn(encoder, *, packed: bool, precision: str = "float32") -> Callable:
    """``(params, frozen, batch, key) -> (h, h_prime)``: two dropout views of a batch (Gao et al. 2021).

    With ``precision="bf16"`` the parameters (trained and frozen) are cast to bfloat16 on the
    way in, so the encoder computes in bfloat16, and the views are cast back to float32 on the
    way out; the gradient reaches the float32 parameters through both casts, in float32.
    """
    dtype = compute_dtype(precision)
    mixed = dtype != jnp.float32

    def views(params, frozen, batch, key):
        if mixed:
            params, frozen = _cast_floats((params, frozen), dtype)
        keys = jax.random.split(key)
        if packed:  # both views in one forward, as SimCSE's trainer does (the masks of two forwards)
            h, h_prime = encoder.forward_packed(params, frozen, batch, keys)
        else:
            ids, mask = batch
            h, h_prime = (encoder.forward(params, frozen, ids, mask, k) for k in keys)
        if mixed:
            h, h_prime = h.astype(jnp.float32), h_prime.astype(jnp.float32)
        return h, h_prime

    return views


def make_train_step(encoder, loss: Callable, optimizer, *, packed: bool = False, mesh=None,
                    precision: str = "float32") -> Callable:
    """A jitted SimCSE step: ``(params, opt_state, frozen, batch, key) -> (params, opt_state, aux)``.

    ``batch`` is ``(ids, mask)`` (padded (N, L) arrays) or, with ``packed``, the encoder's
    :class:`~gradlab.real.minilm.Packed` batch of N sentences. ``aux`` holds ``loss`` (),
    ``grad_norm`` (), and the two views ``h``, ``h_prime`` (N, D). ``params`` and
    ``opt_state`` are donated (updated in place): keep no other reference to them.

    With a ``mesh`` (a 1-D ``jax.sharding.Mesh`` named ``"batch"``), the batch is split
    over its devices along axis 0 and parameters and optimizer state are replicated; the
    loss is computed on the gathered global batch (negatives from every device).

    ``precision="bf16"`` is mixed precision (as in jmp / optax practice): ``params`` and
    ``opt_state`` stay float32 (the master copy), the encoder's forward and backward pass run
    in bfloat16, and ``h``, ``h_prime``, the loss, its gradient, ``grad_norm`` and the update are
    float32. bfloat16 has float32's exponent range, so no loss scaling is needed.
    """
    optax = require("optax", purpose="training")
    views = _views_fn(encoder, packed=packed, precision=precision)

    def objective(params, frozen, batch, key):
        h, h_prime = views(params, frozen, batch, key)
        if mesh is not None:  # the loss sees the whole batch on every device
            whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            h, h_prime = jax.lax.with_sharding_constraint((h, h_prime), whole)
        return loss(h, h_prime), (h, h_prime)

    def step(params, opt_state, frozen, batch, key):
        (value, (h, h_prime)), grads = jax.value_and_grad(objective, has_aux=True)(params, frozen, batch, key)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        grad_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(grads)))
        aux = {"loss": value, "grad_norm": grad_norm, "h": h, "h_prime": h_prime}
        return params, opt_state, aux

    return jax.jit(step, donate_argnums=(0, 1))


def data_mesh(devices: Sequence[Any] | None = None):
    """A 1-D mesh named ``"batch"`` over ``devices`` (default: every visible device, all hosts)."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.sharding.Mesh(np.asarray(devices), ("batch",))


def _shard(tree: Any, mesh, spec) -> Any:
    """``jax.device_put`` every array of ``tree`` with ``NamedSharding(mesh, spec)`` (global arrays)."""
    sharding = jax.sharding.NamedSharding(mesh, spec)
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    # multi-host: every process holds the same host batch; each device takes its slice
    return jax.tree_util.tree_map(
        lambda a: jax.make_array_from_callback(np.shape(a), sharding, lambda idx: np.asarray(a)[idx]), tree
    )


class _Batches:
    """The batch of every step as NumPy arrays of one shape per run (so the step compiles once).

    A packing encoder (one with ``forward_packed``, i.e. MiniLM) gets :class:`Packed` batches:
    width C = length bucket of the longest planned sentence, and rows R = the most any
    step's first-fit packing needs, rounded up to a multiple of the device count. Other
    encoders get (ids, mask) padded to the corpus-wide bucket (``fixed``) or the batch's own.
    """

    def __init__(self, encoder, token_ids, order: np.ndarray, *, fixed: bool, n_devices: int):
        from gradlab.real.minilm import first_fit, length_bucket

        self.encoder, self.token_ids, self.order = encoder, token_ids, order
        max_len = encoder.max_seq_length
        self.packed = hasattr(encoder, "forward_packed")
        if self.packed:
            used = np.unique(order)
            self.width = length_bucket(max(len(token_ids[i]) for i in used), max_len)
            n = order.shape[1]
            rows = 1
            for batch in order:
                (placed,) = first_fit([len(token_ids[i]) for i in batch], width=self.width, rows=n, slots=n)
                rows = max(rows, int(placed[:, 1].max()) + 1)
            self.rows = -(-rows // n_devices) * n_devices
        else:
            longest = max(max(1, len(t)) for t in token_ids)
            self.length = length_bucket(longest, max_len) if fixed else None

    @property
    def batch_size(self) -> int:
        return self.order.shape[1]

    def __call__(self, step: int) -> Any:
        return _assemble(self, [self.token_ids[i] for i in self.order[step - 1]])


def _assemble(batches, lists: list) -> Any:
    """One batch of token-id lists: packed (rows, width) or padded (ids, mask) to ``batches.length``."""
    if batches.packed:
        return batches.encoder.pack(lists, rows=batches.rows, width=batches.width)
    from gradlab.real.minilm import length_bucket

    L = batches.length or length_bucket(max(max(1, len(t)) for t in lists), batches.encoder.max_seq_length)
    ids = np.zeros((len(lists), L), dtype=np.int32)
    mask = np.zeros((len(lists), L), dtype=np.int32)
    for r, t in enumerate(lists):
        t = t[:L]
        ids[r, : len(t)] = t
        mask[r, : max(1, len(t))] = 1
    return ids, mask


class _StreamBatches:
    """The batches of a one-sentence-per-line file read as training goes (``TrainConfig.stream``).

    Lines come from :func:`gradlab.real.data.stream_lines` and are tokenized per batch; every
    batch has ``batch_size`` rows of the encoder's full length (its length bucket), so any
    sentence fits and the step compiles once. Steps are served in order; asking for a later
    step skips the batches before it without tokenizing them (a resumed run replays the stream).
    """

    order = None

    def __init__(self, encoder, path, *, seed: int, buffer: int | None, batch_size: int, n_devices: int):
        from gradlab.real.data import SHUFFLE_BUFFER, stream_lines
        from gradlab.real.minilm import length_bucket

        self.encoder, self.batch_size, self.next_step = encoder, batch_size, 1
        self.lines = stream_lines(path, seed=seed, buffer=buffer or SHUFFLE_BUFFER)
        self.packed = hasattr(encoder, "forward_packed")
        self.width = self.length = length_bucket(encoder.max_seq_length, encoder.max_seq_length)
        self.rows = -(-batch_size // n_devices) * n_devices

    def __call__(self, step: int) -> Any:
        if step < self.next_step:
            raise ValueError(f"a streamed corpus goes forward only: step {step} after {self.next_step - 1}")
        for _ in range(step - self.next_step):  # skipped steps: read, not tokenized
            next(itertools.islice(self.lines, self.batch_size - 1, None), None)
        self.next_step = step + 1
        return _assemble(self, self.encoder.token_ids(list(itertools.islice(self.lines, self.batch_size))))


def _attach_monitor(trained, out_dir: Path | None, tracker: Callable[[dict], None] | None = None):
    """A ParadigmMonitor watching the trained loss (or None) and a status string. Never raises.

    The trainer decides when to measure (``monitor_steps``), so the monitor measures every
    call. The comparison losses keep the monitor's documented defaults. The records go to
    ``paradigm_monitor.jsonl`` and to the ``tracker`` (through a forwarder: the monitor closes
    its sinks, and the tracker outlives it).
    """
    try:
        from gradlab.monitor import ParadigmMonitor
    except Exception as exc:  # noqa: BLE001 - the monitor is optional
        return None, f"unavailable ({type(exc).__name__}: {exc})"
    sink = [str(out_dir / "paradigm_monitor.jsonl")] if out_dir is not None else []
    if tracker is not None:
        sink.append(lambda record: tracker(record))
    try:
        return ParadigmMonitor(trained=trained, every=1, sink=sink or None), "attached"
    except Exception as exc:  # noqa: BLE001
        return None, f"failed to start ({type(exc).__name__}: {exc})"


def monitor_steps(steps: int, every: int) -> list[int]:
    """The states the monitor measures: 0 (before the first update), 1, every ``every``-th, and the last.

    State s is the model after s updates, measured on the two views the next update
    computes its gradient from (the last state on two fresh views of the last batch).

    Examples:
      >>> monitor_steps(20, 5)
      [0, 1, 5, 10, 15, 20]
      >>> monitor_steps(3, 10)
      [0, 1, 3]
    """
    return sorted({0, 1, steps, *range(every, steps + 1, every)})


def batch_order(n: int, steps: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """(steps, batch_size) sentence indices: reshuffled epochs, no repeats within a batch."""
    need = steps * batch_size
    chunks, total = [], 0
    while total < need:
        perm = rng.permutation(n)
        usable = (n // batch_size) * batch_size
        chunks.append(perm[:usable])
        total += usable
    return np.concatenate(chunks)[:need].reshape(steps, batch_size)


@dataclasses.dataclass
class _Loop:
    """What every step needs: the encoder's frozen part, the optimizer, the batches, the jitted step."""

    encoder: Any
    frozen: Any
    optimizer: Any
    batches: _Batches
    step_fn: Callable
    root: Any
    mesh: Any = None

    def batch(self, step: int) -> Any:
        batch = self.batches(step)
        if self.mesh is None:
            return batch
        return _shard(batch, self.mesh, jax.sharding.PartitionSpec("batch"))

    def key(self, step: int) -> Any:
        return jax.random.fold_in(self.root, step)


@dataclasses.dataclass
class _State:
    """The training state after ``step`` updates (what a resumed run starts from)."""

    step: int
    params: Any
    opt_state: Any
    best_params: Any
    best_step: int
    best_dev: float
    losses: np.ndarray
    evals: list[dict[str, float]]
    dev_before: float
    test_before: float | None


#: The training log's curves a tracker receives (under ``train/``).
TRACKED = ("loss", "grad_norm", "dev_spearman", "test_spearman")


class _Log:
    """``train_log.jsonl`` (a ``gradlab.monitor.JSONLSink``), the ``progress`` callback and the tracker."""

    def __init__(self, out: Path | None, progress: Callable | None, tracker: Callable | None = None):
        from gradlab.monitor import JSONLSink

        self.sink = JSONLSink(out / "train_log.jsonl") if out is not None else None
        self.progress = progress
        self.tracker = tracker

    def __call__(self, rec: dict[str, Any]) -> None:
        if self.sink is not None:
            self.sink(rec)
        if self.tracker is not None:
            curves = {k: rec[k] for k in TRACKED if isinstance(rec.get(k), (int, float))}
            try:
                self.tracker({"step": int(rec["step"]), "train": curves})
            except Exception as exc:  # noqa: BLE001 - a tracker never stops training
                warnings.warn(f"training without the tracker from step {rec['step']}: {exc}", RuntimeWarning,
                              stacklevel=2)
                self.tracker = None
        if self.progress is not None:
            self.progress(int(rec["step"]), rec)

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()


class _Watch:
    """The ParadigmMonitor of a run, measuring the states of ``monitor_steps``; never stops training."""

    def __init__(self, config: TrainConfig, loss: Callable, out: Path | None, tracker: Callable | None = None):
        self.monitor, self.status = None, "off"
        if config.monitor:
            self.monitor, self.status = _attach_monitor(loss, out, tracker)
            if self.monitor is None:
                warnings.warn(f"training without the ParadigmMonitor: {self.status}", RuntimeWarning, stacklevel=3)
        self.due = set(monitor_steps(config.steps, config.monitor_every)) if self.monitor is not None else set()

    def __call__(self, state: int, h, h_prime) -> None:
        if self.monitor is None or state not in self.due:
            return
        try:
            self.monitor.update(state, h, h_prime)
        except Exception as exc:  # noqa: BLE001 - the monitor never stops training
            self.status = f"stopped at step {state} ({type(exc).__name__}: {exc})"
            self.close()

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None


# --------------------------------------------------------------------------- the stages


def _resolve_objective(config: TrainConfig) -> Callable:
    """The trained loss: the registered / composed / user loss, or a Rho et al. 2023 transform of InfoNCE."""
    if config.transform is None:
        from gradlab.design import resolve_loss

        return resolve_loss(config.loss, params=config.loss_params, symmetric=config.symmetric)
    from gradlab.losses import apply_transform

    return apply_transform(config.transform, symmetric=config.symmetric, **dict(config.loss_params))


def _encoder_for(config: TrainConfig, encoder):
    """The encoder trained: the recipe's two views, the one given, or ``load_encoder(config.encoder)``,
    its training forward recomputing layers iff ``config.remat``."""
    if config.recipe:
        encoder = _recipe_encoder(config, encoder)
    elif encoder is None:
        encoder = load_encoder(config.encoder, seed=config.seed)
    return _with_remat(encoder, config.remat)


def _with_remat(encoder, remat: bool):
    """``encoder`` whose training forward recomputes its layers iff ``remat`` (transformers only)."""
    if hasattr(encoder, "train_view"):  # a recipe's encoder trains its train view
        return dataclasses.replace(encoder, train_view=_with_remat(encoder.train_view, remat))
    if getattr(encoder, "remat", remat) != remat:
        return dataclasses.replace(encoder, remat=remat)
    return encoder


def _recipe_encoder(config: TrainConfig, encoder):
    """The recipe's two-view encoder, of ``encoder``'s checkpoint (default: ``config.encoder``)."""
    from gradlab.real.recipe import SimCSEUnsup, simcse_unsup_encoder

    if isinstance(encoder, SimCSEUnsup):
        return encoder
    source = getattr(encoder, "source", None) if encoder is not None else None
    return simcse_unsup_encoder(source or config.encoder, seed=config.seed)


def _training_data(config: TrainConfig, encoder, sentences, token_ids) -> tuple[list[str], Sequence]:
    """The training sentences (the corpus, sampled) and their token ids (none when streaming)."""
    from gradlab.real.data import load_news_sentences, sample_sentences

    if config.stream:
        if sentences is not None or token_ids is not None:
            raise ValueError("stream reads config.corpus itself: pass no sentences / token_ids")
        return [], None

    if sentences is None and config.recipe is not None:
        from gradlab.real.data import read_lines

        sentences = read_lines(config.corpus)
    if sentences is None:
        named = config.corpus in ("NewsArticles", "News100")
        sentences = load_news_sentences(config.corpus) if named else load_news_sentences(path=config.corpus)
    if config.max_sentences is not None:
        sentences = sample_sentences(sentences, config.max_sentences, seed=config.seed)
    sentences = list(sentences)
    if len(sentences) < config.batch_size:
        raise ValueError(f"{len(sentences)} training sentences is fewer than batch_size={config.batch_size}")
    if token_ids is None:
        token_ids = encoder.token_ids(sentences)
    elif len(token_ids) != len(sentences):
        raise ValueError(f"token_ids has {len(token_ids)} entries for {len(sentences)} sentences")
    return sentences, token_ids


def _dev_pairs(config: TrainConfig):
    """STS-B dev (its first ``dev_pairs`` pairs)."""
    from gradlab.real.data import STSPairs, load_stsb

    dev = load_stsb("dev")
    if config.dev_pairs is None:
        return dev
    k = config.dev_pairs
    return STSPairs(dev.sentence1[:k], dev.sentence2[:k], dev.score[:k], dev.genre[:k])


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


# --------------------------------------------------------------------------- training state


def state_path(out_dir: str | Path) -> Path:
    """Where :func:`train` keeps the training state of a run writing to ``out_dir``."""
    return Path(out_dir) / "state" / "state.npz"


def _resumable(config: TrainConfig) -> dict[str, Any]:
    """The config fields a resumed run must share with the one that wrote the state."""
    d = json.loads(json.dumps(config.to_dict(), default=str))
    d.pop("checkpoint_every")
    return d


def _save_state(path: Path, config: TrainConfig, loop: _Loop, state: _State) -> None:
    """Everything a resumed run needs, in one ``.npz`` written atomically."""
    from gradlab.io import save_npz_atomic

    arrays = {f"params/{k}": v for k, v in flatten_params(state.params).items()}
    arrays.update({f"best/{k}": v for k, v in flatten_params(state.best_params).items()})
    arrays.update({f"opt/{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree_util.tree_leaves(state.opt_state))})
    meta = {"step": state.step, "best_step": state.best_step, "best_dev": state.best_dev, "evals": state.evals,
            "dev_before": state.dev_before, "test_before": state.test_before, "config": _resumable(config)}
    if loop.batches.order is not None:
        arrays["order"] = loop.batches.order
    save_npz_atomic(path, **arrays, losses=state.losses,
                    key=np.asarray(jax.random.key_data(loop.root)), meta=np.asarray(json.dumps(meta)))


def _load_state(path: Path, config: TrainConfig, loop: _Loop) -> _State:
    """The state :func:`_save_state` wrote; ValueError if another configuration wrote it."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    # a field added since the state was written takes its default (e.g. precision: float32)
    saved = {**{k: v for k, v in _resumable(TrainConfig()).items() if k not in meta["config"]}, **meta["config"]}
    if saved != _resumable(config):
        diff = sorted(k for k in {*saved, *_resumable(config)} if saved.get(k) != _resumable(config).get(k))
        raise ValueError(f"{path} was written by another configuration (differs in {', '.join(diff)})")
    order = loop.batches.order
    if not ((order is None or np.array_equal(arrays["order"], order))
            and np.array_equal(arrays["key"], np.asarray(jax.random.key_data(loop.root)))):
        raise ValueError(f"{path} was written with another batch order or PRNG key (another corpus?)")

    def tree(prefix: str) -> Any:
        flat = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        return unflatten_params(flat, loop.encoder.params)

    params = tree("params/")
    if loop.mesh is not None:
        params = _shard(params, loop.mesh, jax.sharding.PartitionSpec())
    like = loop.optimizer.init(params)
    leaves = [jnp.asarray(arrays[f"opt/{i}"], dtype=leaf.dtype)
              for i, leaf in enumerate(jax.tree_util.tree_leaves(like))]
    opt_state = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)
    if loop.mesh is not None:
        opt_state = _shard(opt_state, loop.mesh, jax.sharding.PartitionSpec())
    return _State(step=int(meta["step"]), params=params, opt_state=opt_state, best_params=tree("best/"),
                  best_step=int(meta["best_step"]), best_dev=float(meta["best_dev"]),
                  losses=np.asarray(arrays["losses"], dtype=np.float64), evals=meta["evals"],
                  dev_before=float(meta["dev_before"]), test_before=meta["test_before"])


def _saved_state(config: TrainConfig, loop: _Loop, out_dir: str | Path | None) -> _State | None:
    """The state a resumed run continues from (None: there is none yet, start afresh)."""
    if out_dir is None:
        raise ValueError("resume needs out_dir (the training state lives in OUT/state/)")
    path = state_path(out_dir)
    return _load_state(path, config, loop) if path.is_file() else None


class _Checkpointer:
    """``after_step`` of :func:`_run_steps`: write the state every ``checkpoint_every`` steps."""

    def __init__(self, config: TrainConfig, loop: _Loop, out: Path | None):
        self.config, self.loop, self.out = config, loop, out
        self.every = config.checkpoint_every if out is not None and jax.process_index() == 0 else 0

    def due(self, step: int) -> bool:
        """Whether the state after ``step`` is written (so it must be read before the next step)."""
        return bool(self.every) and step % self.every == 0

    def __call__(self, state: _State) -> None:
        if self.due(state.step):
            _save_state(state_path(self.out), self.config, self.loop, state)


def _make_loop(config: TrainConfig, encoder, loss: Callable, token_ids) -> _Loop:
    """Optimizer, batch order, batches of one shape (one compilation per run) and the jitted step."""
    optax = require("optax", purpose="training")
    from gradlab.real.light import LightEncoder

    n_devices = jax.device_count()
    if config.batch_size % n_devices:
        raise ValueError(f"batch_size={config.batch_size} must be a multiple of the {n_devices} devices")
    mesh = data_mesh() if n_devices > 1 else None
    fixed = config.fixed_length if config.fixed_length is not None else isinstance(encoder, LightEncoder)
    if config.weight_decay:
        optimizer = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    else:
        optimizer = optax.adam(config.learning_rate)
    if config.stream:
        batches = _StreamBatches(encoder, config.corpus, seed=config.seed, buffer=config.shuffle_buffer,
                                 batch_size=config.batch_size, n_devices=n_devices)
    else:
        order = batch_order(len(token_ids), config.steps, config.batch_size, np.random.default_rng(config.seed))
        batches = _Batches(encoder, token_ids, order, fixed=fixed, n_devices=n_devices)
    step_fn = make_train_step(encoder, loss, optimizer, packed=batches.packed, mesh=mesh, precision=config.precision)
    frozen = encoder.frozen if mesh is None else _shard(encoder.frozen, mesh, jax.sharding.PartitionSpec())
    return _Loop(encoder, frozen, optimizer, batches, step_fn, jax.random.key(config.seed), mesh)


def dev_scorer(config: TrainConfig, encoder) -> Callable[[Any], float]:
    """``params -> STS-B dev Spearman × 100`` of the run (:func:`gradlab.real.stsb.stsb_scorer`): the
    dev sentences tokenized and packed once per run, each evaluation only embeds and ranks."""
    from gradlab.real.stsb import stsb_scorer

    prepare = getattr(encoder, "embedder", None)
    if prepare is None:
        def prepare(sentences):
            return lambda params: encoder.encode(sentences, params=params)
    return stsb_scorer(prepare, _dev_pairs(config))


def _test_score(config: TrainConfig, encoder, params) -> float | None:
    from gradlab.real.stsb import stsb_spearman

    return stsb_spearman(lambda s: encoder.encode(s, params=params), "test") if config.eval_test else None


def _initial_state(config: TrainConfig, loop: _Loop, dev, log: _Log) -> _State:
    """State 0: the encoder's parameters (copied: the step donates its inputs), scored before training."""
    params0 = loop.encoder.params
    test_before = _test_score(config, loop.encoder, params0)
    t0 = time.perf_counter()
    dev_before = dev(params0)
    log({"step": 0, "event": "eval", "dev_spearman": dev_before, "test_spearman": test_before,
         "seconds": time.perf_counter() - t0})
    params = jax.tree_util.tree_map(jnp.copy, params0)
    if loop.mesh is not None:  # device_put may share the copy's buffers: it is private, so that is fine
        params = _shard(params, loop.mesh, jax.sharding.PartitionSpec())
    return _State(step=0, params=params, opt_state=loop.optimizer.init(params), best_params=params0,
                  best_step=0, best_dev=dev_before, losses=np.zeros(config.steps, dtype=np.float64),
                  evals=[{"step": 0, "dev_spearman": dev_before}], dev_before=dev_before, test_before=test_before)


def _eval_due(config: TrainConfig, step: int) -> bool:
    """Every ``eval_every`` steps, and after the last step."""
    return (config.eval_every and step % config.eval_every == 0) or step == config.steps


def _evaluate(state: _State, dev: Callable[[Any], float], log: _Log) -> None:
    """Score the current parameters on dev; keep a copy of them if they are the best so far."""
    t0 = time.perf_counter()
    d = dev(state.params)
    state.evals.append({"step": state.step, "dev_spearman": d})
    log({"step": state.step, "event": "eval", "dev_spearman": d, "seconds": time.perf_counter() - t0})
    if d > state.best_dev:
        state.best_params = jax.tree_util.tree_map(jnp.copy, state.params)
        state.best_step, state.best_dev = state.step, d


def _run_steps(config: TrainConfig, loop: _Loop, state: _State, dev, log: _Log, watch: _Watch,
               after_step: _Checkpointer) -> None:
    """Steps ``state.step + 1 .. config.steps`` (stops at a non-finite loss), evaluating when due.

    One step stays in flight: step k + 1 is dispatched before step k's loss is read, so the
    device never waits for the host's bookkeeping (logging, the next batch). A step after
    which the state is read (an evaluation, a saved state, the last step) is read at once.
    Each step record has ``elapsed`` (seconds since the first step was dispatched, when its
    loss was read) and ``seconds`` (the wall time since the previous record of a step).
    """
    batch = loop.batch(min(state.step + 1, config.steps))
    t_start = last = time.perf_counter()
    pending = None  # (step, aux) dispatched, not read yet

    def read(step: int, aux) -> bool:
        """Log step ``step``; False (and the abort logged) if its loss is not finite."""
        nonlocal last
        value = float(aux["loss"])
        now = time.perf_counter()
        state.losses[step - 1] = value
        rec = {"step": step, "event": "step", "loss": value, "grad_norm": float(aux["grad_norm"]),
               "seconds": now - last, "elapsed": now - t_start}
        last = now
        if not math.isfinite(value):
            log({**rec, "event": "abort", "reason": "non-finite loss"})
            state.losses = state.losses[:step]
            return False
        log(rec)
        state.step = step
        return True

    for step in range(state.step + 1, config.steps + 1):
        state.params, state.opt_state, aux = loop.step_fn(state.params, state.opt_state, loop.frozen, batch,
                                                          loop.key(step))
        watch(step - 1, aux["h"], aux["h_prime"])  # the views of this update: the state after step − 1
        if step < config.steps:  # build the next batch while this step runs
            batch = loop.batch(step + 1)
        if pending is not None and not read(*pending):
            return
        pending = (step, aux)
        due = _eval_due(config, step) or after_step.due(step)
        if not due:
            continue
        pending = None
        if not read(step, aux):
            return
        if _eval_due(config, step):
            _evaluate(state, dev, log)
        after_step(state)
    if pending is not None and not read(*pending):
        return
    if watch.monitor is not None and config.steps in watch.due:  # the state after the last update, on fresh views of the last batch
        views = jax.jit(_views_fn(loop.encoder, packed=loop.batches.packed, precision=config.precision))
        watch(config.steps, *views(state.params, loop.frozen, batch, loop.key(config.steps + 1)))


def train(
    config: TrainConfig,
    *,
    encoder: Any = None,
    sentences: Sequence[str] | None = None,
    out_dir: str | Path | None = None,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
    token_ids: Sequence[Sequence[int]] | None = None,
    resume: bool = False,
    tracker: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Fine-tune an encoder with a gradlab loss; keep the best checkpoint by STS-B dev Spearman.

    Args:
      config: a :class:`TrainConfig`.
      encoder: an already loaded encoder (default: ``load_encoder(config.encoder, seed=config.seed)``);
        its ``params`` are the starting point and are not modified.
      sentences: training sentences (default: the corpus named in ``config``).
      out_dir: write logs, checkpoint and summary here (None: write nothing).
      progress: called as ``progress(step, record)`` after every step and evaluation.
      token_ids: ``encoder.token_ids(sentences)`` if already computed (saves re-tokenizing
        the corpus when many runs share it); must match ``sentences`` after sampling.
      resume: continue from ``out_dir``'s training state (:func:`state_path`, written every
        ``config.checkpoint_every`` steps) if there is one, else start afresh. A resumed run
        gives the numbers of an uninterrupted one (losses, evaluations, best step, parameters).
      tracker: a monitor sink (``gradlab.monitor.tracker_sink("tb:DIR" | "wandb" | "mlflow")``, or
        any callable taking a record) that receives the training log's curves as
        ``{"step": s, "train": {"loss", "grad_norm", "dev_spearman", "test_spearman"}}`` and the
        monitor's records as they are; the caller closes it.

    Returns:
      A :class:`TrainResult`.

    Raises:
      ValueError: a bad configuration or corpus; ``resume`` without ``out_dir``, or with a
        state written by another configuration.
    """
    t_start = time.perf_counter()
    loss = _resolve_objective(config)
    encoder = _encoder_for(config, encoder)
    sentences, token_ids = _training_data(config, encoder, sentences, token_ids)
    dev = dev_scorer(config, encoder)
    loop = _make_loop(config, encoder, loss, token_ids)
    state = _saved_state(config, loop, out_dir) if resume else None
    out = _prepare_out(out_dir, None if state is None else state.step)
    watch, log = _Watch(config, loss, out, tracker), _Log(out, progress, tracker)
    try:
        state = _initial_state(config, loop, dev, log) if state is None else state
        _run_steps(config, loop, state, dev, log, watch, after_step=_Checkpointer(config, loop, out))
    finally:
        log.close()
        watch.close()
    result = TrainResult(
        params=state.best_params, best_step=state.best_step, best_dev=state.best_dev, dev_before=state.dev_before,
        test_before=state.test_before, test_after=_test_score(config, encoder, state.best_params),
        losses=state.losses, evals=state.evals, seconds=time.perf_counter() - t_start, monitor=watch.status,
        out_dir=out)
    if out is not None:
        _write_outputs(out, config, result, encoder, n_sentences=None if config.stream else len(sentences))
    return result


def _save_model(out: Path, encoder, params) -> str | None:
    """The best model as a HF-layout ``checkpoint/`` (transformer encoders; None for the light one)."""
    from gradlab.real.minilm import MiniLM, save_transformer

    encoder = getattr(encoder, "eval_view", encoder)  # a recipe's MLP head is not part of the model
    if not isinstance(encoder, MiniLM) or encoder.source is None:
        return None
    save_transformer(encoder, out / "checkpoint", params=params)
    return "checkpoint"


def _write_outputs(out: Path, config: TrainConfig, result: TrainResult, encoder, *, n_sentences: int | None) -> None:
    from gradlab.io import runtime_meta, save_json_atomic, save_npz_atomic

    save_npz_atomic(out / "best_params.npz", **flatten_params(result.params))
    model = _save_model(out, encoder, result.params)
    summary = {
        "config": config.to_dict(),
        "n_sentences": n_sentences,
        **result.summary(),
        "files": {"log": "train_log.jsonl", "checkpoint": "best_params.npz", "model": model,
                  "monitor": "paradigm_monitor.jsonl" if result.monitor == "attached" else None},
        "meta": runtime_meta(),
    }
    save_json_atomic(out / "train.json", summary)
