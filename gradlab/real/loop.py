"""The step loop of a run: the loop's parts (:class:`Loop`, :func:`make_loop`), the training
state (:class:`State`), the log and the monitor beside it (:class:`Log`, :class:`Watch`), the
evaluations, and :func:`run_steps`, which keeps one step in flight."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.real._deps import require
from gradlab.real.batches import Batches, StreamBatches, batch_order
from gradlab.real.config import TrainConfig
from gradlab.real.step import copy_on_device, data_mesh, make_train_step, shard, views_fn

__all__ = ["Loop", "State", "Log", "Watch", "make_optimizer", "make_loop", "monitor_steps", "initial_state", "eval_due",
           "evaluate", "run_steps", "attach_monitor", "TRACKED"]


def attach_monitor(trained, out_dir: Path | None, tracker: Callable[[dict], None] | None = None):
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


@dataclasses.dataclass
class Loop:
    """What every step needs: the encoder's frozen part, the optimizer, the batches, the jitted step
    (a :class:`~gradlab.real.step.ResidentStep`: its buffers stay in place from step to step)."""

    encoder: Any
    frozen: Any
    optimizer: Any
    batches: Batches
    step_fn: Callable
    root: Any
    mesh: Any = None

    def batch(self, step: int, rows: int | None = None) -> Any:
        """The batch of ``step`` on its way to the device (the copy overlaps the step in flight);
        ``rows``: a packed batch's rows, if not its own (:meth:`Batches.rows_of`)."""
        batch = self.batches(step, rows)
        if self.mesh is None:
            return jax.device_put(batch)
        return shard(batch, self.mesh, jax.sharding.PartitionSpec("batch"))

    def key(self, step: int) -> Any:
        return jax.random.fold_in(self.root, step)

    def optimizer_state(self, params) -> Any:
        """The optimizer's initial state for ``params`` (:func:`make_optimizer`'s ``init``, compiled
        once per kind and parameter shapes)."""
        return self.optimizer.init(params)


@dataclasses.dataclass
class State:
    """The training state after ``step`` updates (what a resumed run starts from).

    ``best_params`` are the encoder's own parameters (or, where the run trains those, a copy on
    the host) until an evaluation beats them, then a copy on the host (:func:`evaluate`)."""

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


class Log:
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


class Watch:
    """The ParadigmMonitor of a run, measuring the states of ``monitor_steps``; never stops training."""

    def __init__(self, config: TrainConfig, loss: Callable, out: Path | None, tracker: Callable | None = None):
        self.monitor, self.status = None, "off"
        if config.monitor:
            self.monitor, self.status = attach_monitor(loss, out, tracker)
            if self.monitor is None:
                warnings.warn(f"training without the ParadigmMonitor: {self.status}", RuntimeWarning, stacklevel=3)
        self.due = set(monitor_steps(config.steps, config.monitor_every)) if self.monitor is not None else set()

    def __call__(self, state: int, h, h_prime, *, wait: bool = True, last: bool = False) -> None:
        """Measure ``state`` if it is due; with ``wait=False`` its record comes with :meth:`flush`
        (``ParadigmMonitor.update``'s ``wait``: the statistics queue behind the step in flight);
        ``last``: the run's last state (its record carries every RankMe window)."""
        if self.monitor is None or state not in self.due:
            return
        try:
            self.monitor.update(state, h, h_prime, wait=wait, last=last)
        except Exception as exc:  # noqa: BLE001 - the monitor never stops training
            self._stop(f"at step {state}", exc)

    def flush(self) -> None:
        """Write the record a ``wait=False`` call started."""
        if self.monitor is None:
            return
        try:
            self.monitor.flush()
        except Exception as exc:  # noqa: BLE001
            self._stop("at its pending record", exc)

    def _stop(self, where: str, exc: Exception) -> None:
        self.status = f"stopped {where} ({type(exc).__name__}: {exc})"
        self.close()

    def close(self) -> None:
        if self.monitor is not None:
            monitor, self.monitor = self.monitor, None
            try:
                monitor.close()
            except Exception as exc:  # noqa: BLE001 - a pending record that fails to finish
                self.status = f"stopped at its pending record ({type(exc).__name__}: {exc})"


def make_optimizer(learning_rate: float, weight_decay: float = 0.0):
    """Adam, or AdamW with ``weight_decay`` > 0 (optax), whose hyperparameters (the learning rate,
    the weight decay, the betas, epsilon) are float32 values of the optimizer's state rather than
    constants of the step (``optax.inject_hyperparams``): runs with another rate compile to the
    same program, which JAX's persistent cache then serves. The updates are optax's Adam's to
    float32's last bits (a rate read at run time rounds as XLA schedules its products).

    Every optimizer of one kind (Adam; AdamW) has the same ``update`` function, which reads the
    rates from the state, so the runs of one process share their compiled step
    (:func:`gradlab.real.step.step_programs`); ``init`` is compiled once per kind and parameter
    shapes, and writes this optimizer's rates into the state.

    Examples:
      >>> import jax.numpy as jnp
      >>> make_optimizer(3e-5).init({"w": jnp.zeros(2)}).hyperparams["learning_rate"].dtype
      dtype('float32')
      >>> make_optimizer(3e-5).update is make_optimizer(1e-3).update
      True
    """
    optax = require("optax", purpose="training")
    base, init_base = _adam(bool(weight_decay))
    rates = {"learning_rate": learning_rate, **({"weight_decay": weight_decay} if weight_decay else {})}

    def init(params):
        state = init_base(params)
        return state._replace(hyperparams={**state.hyperparams, **{k: jnp.asarray(v, jnp.float32)
                                                                   for k, v in rates.items()}})

    return optax.GradientTransformationExtraArgs(init, base.update)


@functools.cache
def _adam(decoupled: bool):
    """optax's Adam (AdamW if ``decoupled``) with its hyperparameters in its state (placeholder rates
    that :func:`make_optimizer`'s ``init`` replaces), and its ``init`` jitted: one of each per kind."""
    optax = require("optax", purpose="training")
    if decoupled:
        base = optax.inject_hyperparams(optax.adamw, hyperparam_dtype=jnp.float32)(learning_rate=0.0, weight_decay=0.0)
    else:
        base = optax.inject_hyperparams(optax.adam, hyperparam_dtype=jnp.float32)(learning_rate=0.0)
    return base, jax.jit(base.init)


def make_loop(config: TrainConfig, encoder, loss: Callable, token_ids) -> Loop:
    """Optimizer, batch order, batches (in as few shapes as pay for their compilation) and the jitted step."""
    from gradlab.real.light import LightEncoder

    n_devices = jax.device_count()
    if config.batch_size % n_devices:
        raise ValueError(f"batch_size={config.batch_size} must be a multiple of the {n_devices} devices")
    mesh = data_mesh() if n_devices > 1 else None
    fixed = config.fixed_length if config.fixed_length is not None else isinstance(encoder, LightEncoder)
    optimizer = make_optimizer(config.learning_rate, config.weight_decay)
    if config.stream:
        batches = StreamBatches(encoder, config.corpus, seed=config.seed, buffer=config.shuffle_buffer,
                                 batch_size=config.batch_size, n_devices=n_devices)
    else:
        order = batch_order(len(token_ids), config.steps, config.batch_size, np.random.default_rng(config.seed))
        batches = Batches(encoder, token_ids, order, fixed=fixed, n_devices=n_devices)
    step_fn = make_train_step(encoder, loss, optimizer, packed=batches.packed, mesh=mesh, precision=config.precision,
                              resident=True)
    frozen = encoder.frozen if mesh is None else shard(encoder.frozen, mesh, jax.sharding.PartitionSpec())
    return Loop(encoder, frozen, optimizer, batches, step_fn, jax.random.key(config.seed), mesh)


def initial_state(config: TrainConfig, loop: Loop, dev, log: Log, test=None, *,
                  keep_encoder_params: bool = True) -> State:
    """State 0: the encoder's parameters, scored before training on dev and, when ``test``
    (``params -> Spearman``) is given, on test. The step donates its inputs, so it trains a copy
    of them; with ``keep_encoder_params=False`` it trains the encoder's own arrays (deleted by
    the first step), and the best parameters so far start as a copy on the host."""
    params0 = loop.encoder.params
    test_before = test(params0) if test is not None else None
    t0 = time.perf_counter()
    dev_before = dev(params0)
    log({"step": 0, "event": "eval", "dev_spearman": dev_before, "test_spearman": test_before,
         "seconds": time.perf_counter() - t0})
    if keep_encoder_params:
        params, best = copy_on_device(params0), params0
    else:
        params, best = params0, jax.tree_util.tree_map(np.array, params0)
    if loop.mesh is not None:  # device_put may share the buffers: they are the run's, so that is fine
        params = shard(params, loop.mesh, jax.sharding.PartitionSpec())
    return State(step=0, params=params, opt_state=loop.optimizer_state(params), best_params=best,
                  best_step=0, best_dev=dev_before, losses=np.zeros(config.steps, dtype=np.float64),
                  evals=[{"step": 0, "dev_spearman": dev_before}], dev_before=dev_before, test_before=test_before)


def eval_due(config: TrainConfig, step: int) -> bool:
    """Every ``eval_every`` steps, and after the last step."""
    return (config.eval_every and step % config.eval_every == 0) or step == config.steps


def evaluate(state: State, dev: Callable[[Any], float], log: Log) -> None:
    """Score the current parameters on dev; keep a copy of them on the host (NumPy) if they are
    the best so far. A copy on the device would hold one more set of weights there for the rest
    of the run (438 MB for BERT-base in float32)."""
    t0 = time.perf_counter()
    d = dev(state.params)
    state.evals.append({"step": state.step, "dev_spearman": d})
    log({"step": state.step, "event": "eval", "dev_spearman": d, "seconds": time.perf_counter() - t0})
    if d > state.best_dev:
        state.best_params = jax.tree_util.tree_map(np.array, state.params)
        state.best_step, state.best_dev = state.step, d


def run_steps(config: TrainConfig, loop: Loop, state: State, dev, log: Log, watch: Watch,
               after_step: Any) -> None:
    """Steps ``state.step + 1 .. config.steps`` (stops at a non-finite loss), evaluating when due.

    One step stays in flight: step k + 1 is dispatched before step k's loss is read, so the
    device never waits for the host's bookkeeping (logging, the next batch); nor for the monitor,
    whose statistics of a measured state queue behind the step in flight and whose record is
    written once the next step is dispatched. A step after which the state is read (an
    evaluation, a saved state, the last step) is read at once.
    ``after_step`` (:class:`gradlab.real.checkpoints.StateSaver`) says by ``due(step)`` whether the
    state after ``step`` is saved, and saves it when called with the state.
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
        watch.flush()  # a state measured at the step before: its statistics ran before this step
        if step < config.steps:  # build the next batch while this step runs
            batch = loop.batch(step + 1)
        if pending is not None and not read(*pending):
            return
        # the views of this update (the state after step − 1): their statistics queue behind this
        # step, and their record is written once the next step is dispatched
        watch(step - 1, aux["h"], aux["h_prime"], wait=False)
        pending = (step, aux)
        due = eval_due(config, step) or after_step.due(step)
        if not due:
            continue
        pending = None
        if not read(step, aux):
            return
        if eval_due(config, step):
            evaluate(state, dev, log)
        after_step(state)
    if pending is not None and not read(*pending):
        return
    if watch.monitor is not None and config.steps in watch.due:  # the state after the last update, on fresh views of the last batch
        # not wrapped in a new jax.jit: the encoders' forwards are jitted per configuration
        # (gradlab.real.bert.embed_packed), so the next run in this process reuses the program
        views = views_fn(loop.encoder, packed=loop.batches.packed, precision=config.precision)
        watch(config.steps, *views(state.params, loop.frozen, batch, loop.key(config.steps + 1)), last=True)
