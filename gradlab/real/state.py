"""The resumable training state (``OUT/state/state.npz``): everything a run interrupted after
step k needs to continue with the numbers of an uninterrupted one (parameters, optimizer state,
best-so-far, losses, evaluations, batch order, PRNG key), written atomically every
``TrainConfig.save_state_every`` steps (:class:`StateSaver`) and read back by :func:`saved_state`
(``gradlab train --resume``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.real.checkpoints import flatten_params, unflatten_params
from gradlab.real.config import TrainConfig
from gradlab.real.loop import Loop, State
from gradlab.real.step import shard

__all__ = ["state_path", "save_state", "load_state", "saved_state", "StateSaver", "resumable_config"]


def state_path(out_dir: str | Path) -> Path:
    """Where :func:`train` keeps the training state of a run writing to ``out_dir``."""
    return Path(out_dir) / "state" / "state.npz"


def resumable_config(config: TrainConfig) -> dict[str, Any]:
    """The config fields a resumed run must share with the one that wrote the state (all but
    how often the state is saved and whether layers are recomputed: neither changes a number)."""
    d = json.loads(json.dumps(config.to_dict(), default=str))
    for name in ("save_state_every", "remat"):
        d.pop(name)
    return d


def save_state(path: Path, config: TrainConfig, loop: Loop, state: State) -> None:
    """Everything a resumed run needs, in one ``.npz`` written atomically."""
    from gradlab.io import save_npz_atomic

    arrays = {f"params/{k}": v for k, v in flatten_params(state.params).items()}
    arrays.update({f"best/{k}": v for k, v in flatten_params(state.best_params).items()})
    arrays.update({f"opt/{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree_util.tree_leaves(state.opt_state))})
    meta = {"step": state.step, "best_step": state.best_step, "best_dev": state.best_dev, "evals": state.evals,
            "dev_before": state.dev_before, "test_before": state.test_before, "config": resumable_config(config)}
    if loop.batches.order is not None:
        arrays["order"] = loop.batches.order
    save_npz_atomic(path, **arrays, losses=state.losses,
                    key=np.asarray(jax.random.key_data(loop.root)), meta=np.asarray(json.dumps(meta)))


def load_state(path: Path, config: TrainConfig, loop: Loop) -> State:
    """The state :func:`save_state` wrote; ValueError if another configuration wrote it."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    # a field added since the state was written takes its default (e.g. precision: float32)
    saved = {**{k: v for k, v in resumable_config(TrainConfig()).items() if k not in meta["config"]}, **meta["config"]}
    if saved != resumable_config(config):
        diff = sorted(k for k in {*saved, *resumable_config(config)} if saved.get(k) != resumable_config(config).get(k))
        raise ValueError(f"{path} was written by another configuration (differs in {', '.join(diff)})")
    order = loop.batches.order
    if not ((order is None or np.array_equal(arrays["order"], order))
            and np.array_equal(arrays["key"], np.asarray(jax.random.key_data(loop.root)))):
        raise ValueError(f"{path} was written with another batch order or PRNG key (another corpus?)")

    def tree(prefix: str, on_host: bool = False) -> Any:
        flat = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        return unflatten_params(flat, loop.encoder.params, on_host=on_host)

    params = tree("params/")
    if loop.mesh is not None:
        params = shard(params, loop.mesh, jax.sharding.PartitionSpec())
    like, structure = jax.tree_util.tree_flatten(jax.eval_shape(loop.optimizer.init, params))  # shapes and dtypes
    saved_opt = [arrays[f"opt/{i}"] for i in range(sum(k.startswith("opt/") for k in arrays))]
    if [np.shape(a) for a in saved_opt] != [leaf.shape for leaf in like]:
        raise ValueError(f"{path} holds another optimizer state ({len(saved_opt)} arrays, this run's has "
                         f"{len(like)}): written by another version of gradlab?")
    leaves = [jnp.asarray(a, dtype=leaf.dtype) for a, leaf in zip(saved_opt, like, strict=True)]
    opt_state = jax.tree_util.tree_unflatten(structure, leaves)
    if loop.mesh is not None:
        opt_state = shard(opt_state, loop.mesh, jax.sharding.PartitionSpec())
    return State(step=int(meta["step"]), params=params, opt_state=opt_state,
                  best_params=tree("best/", on_host=True),  # where evaluate keeps them
                  best_step=int(meta["best_step"]), best_dev=float(meta["best_dev"]),
                  losses=np.asarray(arrays["losses"], dtype=np.float64), evals=meta["evals"],
                  dev_before=float(meta["dev_before"]), test_before=meta["test_before"])


def saved_state(config: TrainConfig, loop: Loop, out_dir: str | Path | None) -> State | None:
    """The state a resumed run continues from (None: there is none yet, start afresh)."""
    if out_dir is None:
        raise ValueError("resume needs out_dir (the training state lives in OUT/state/)")
    path = state_path(out_dir)
    return load_state(path, config, loop) if path.is_file() else None


class StateSaver:
    """``after_step`` of :func:`run_steps`: write the state every ``save_state_every`` steps."""

    def __init__(self, config: TrainConfig, loop: Loop, out: Path | None):
        self.config, self.loop, self.out = config, loop, out
        self.every = config.save_state_every if out is not None and jax.process_index() == 0 else 0

    def due(self, step: int) -> bool:
        """Whether the state after ``step`` is written (so it must be read before the next step)."""
        return bool(self.every) and step % self.every == 0

    def __call__(self, state: State) -> None:
        if self.due(state.step):
            save_state(state_path(self.out), self.config, self.loop, state)
