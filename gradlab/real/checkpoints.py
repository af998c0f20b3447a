"""What a run writes to disk for later use, each format's writer beside its reader (the page
"Checkpoints" of the documentation says which option and folder is which):

* the parameters file (``OUT/best_params.npz``: a flattened pytree, keys are paths;
  :func:`save_params`, :func:`load_params`), what ``gradlab train --init-params`` and
  ``gradlab sts --params`` start from;
* the model (``OUT/model/``: a Hugging Face checkpoint folder with its pooling recorded,
  :func:`save_model`; read by :func:`gradlab.real.load_encoder`, transformers and
  sentence-transformers);
* the resumable training state (``OUT/state/state.npz``), in :mod:`gradlab.real.state`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["flatten_params", "unflatten_params", "save_params", "read_params", "load_params", "save_model"]


def flatten_params(params: Any) -> dict[str, np.ndarray]:
    """Pytree -> ``{"layers/q_w": array, ...}`` (for ``np.savez``)."""
    flat = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        key = "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)
        flat[key] = np.asarray(leaf)
    return flat


def unflatten_params(flat: Mapping[str, np.ndarray], like: Any, *, on_host: bool = False) -> Any:
    """Inverse of :func:`flatten_params`, given a pytree of the same structure: JAX arrays on the
    default device, or with ``on_host`` NumPy arrays (of ``like``'s dtypes)."""
    paths = jax.tree_util.tree_leaves_with_path(like)
    leaves = []
    for path, leaf in paths:
        key = "/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)
        if key not in flat:
            raise ValueError(f"the parameters file lacks {key!r}")
        arr = np.asarray(flat[key])
        if arr.shape != leaf.shape:
            raise ValueError(f"parameter {key!r} has shape {arr.shape}, expected {leaf.shape}")
        leaves.append(arr.astype(leaf.dtype, copy=False) if on_host else jnp.asarray(arr, dtype=leaf.dtype))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)


def save_model(out: Path, encoder, params) -> str | None:
    """The best model as the Hugging Face checkpoint folder ``out/model/``, its evaluation pooling
    recorded (:func:`gradlab.real.hf.save_transformer`); None for the light encoder (not a transformer).
    Returns the folder's name."""
    from gradlab.real.hf import save_transformer
    from gradlab.real.minilm import MiniLM

    encoder = getattr(encoder, "eval_view", encoder)  # a recipe's MLP head is not part of the model
    if not isinstance(encoder, MiniLM) or encoder.source is None:
        return None
    save_transformer(encoder, out / "model", params=params)
    return "model"


def save_params(path: str | Path, params: Any) -> Path:
    """Write ``params`` as a parameters file (:func:`flatten_params` in an ``.npz``), atomically."""
    from gradlab.io import save_npz_atomic

    return save_npz_atomic(Path(path), **flatten_params(params))


def read_params(path: str | Path) -> dict[str, np.ndarray]:
    """The flat arrays of a parameters file; ValueError (one line) if it cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"cannot read the parameters file {str(path)!r}: {exc}") from None


def load_params(path: str | Path, like: Any) -> Any:
    """The parameters of a file :func:`save_params` wrote, in the structure (and dtypes) of ``like``."""
    return unflatten_params(read_params(path), like)
