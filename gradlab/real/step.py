"""The SimCSE step: two dropout views of a batch (Gao et al. 2021), the loss, one optax update,
jitted once per run; data parallelism over a 1-D device mesh; mixed precision."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.real._deps import require

__all__ = ["compute_dtype", "cast_floats", "views_fn", "make_train_step", "data_mesh", "shard"]


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


def cast_floats(tree: Any, dtype: Any) -> Any:
    """Every floating-point array of ``tree`` cast to ``dtype`` (integer arrays and None kept)."""
    return jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def views_fn(encoder, *, packed: bool, precision: str = "float32") -> Callable:
    """``(params, frozen, batch, key) -> (h, h_prime)``: two dropout views of a batch (Gao et al. 2021).

    With ``precision="bf16"`` the parameters (trained and frozen) are cast to bfloat16 on the
    way in, so the encoder computes in bfloat16, and the views are cast back to float32 on the
    way out; the gradient reaches the float32 parameters through both casts, in float32. An
    encoder with a ``compute_params(params, dtype)`` method casts its trained parameters itself
    (MiniLM keeps its embedding tables in float32: :func:`gradlab.real.bert.compute_params`).
    """
    dtype = compute_dtype(precision)
    mixed = dtype != jnp.float32
    cast = getattr(encoder, "compute_params", None) or cast_floats

    def views(params, frozen, batch, key):
        if mixed:
            params, frozen = cast(params, dtype), cast_floats(frozen, dtype)
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
    views = views_fn(encoder, packed=packed, precision=precision)

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


def shard(tree: Any, mesh, spec) -> Any:
    """``jax.device_put`` every array of ``tree`` with ``NamedSharding(mesh, spec)`` (global arrays)."""
    sharding = jax.sharding.NamedSharding(mesh, spec)
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    # multi-host: every process holds the same host batch; each device takes its slice
    return jax.tree_util.tree_map(
        lambda a: jax.make_array_from_callback(np.shape(a), sharding, lambda idx: np.asarray(a)[idx]), tree
    )
