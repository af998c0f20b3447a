"""A jitted function's outputs on the host in one device-to-host copy per dtype.

``jax.device_get`` of a pytree copies each leaf on its own. On a GPU every copy costs the host
the same tens of microseconds whatever its size, so a record of many scalars and short vectors
(the monitor's has 78 leaves) costs milliseconds in copies alone. :func:`host_outputs` joins
the leaves of each dtype into one vector inside the program and splits them again on the
host: the same arrays, bit for bit, in as many copies as the record has dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["host_outputs"]


def host_outputs(fn: Callable) -> Callable:
    """``fn`` (a JAX function of arrays) jitted; each call returns its outputs as a pytree of
    NumPy arrays, copied from the device in one transfer per dtype.

    The output layout (tree, shapes, dtypes) is traced once per input signature
    (``jax.eval_shape``) and cached beside the compiled program.

    Examples:
      >>> f = host_outputs(lambda x: {"n": jnp.sum(x > 0), "sum": jnp.sum(x), "sq": x * x})
      >>> out = f(jnp.arange(3.0))
      >>> int(out["n"]), float(out["sum"]), out["sq"].tolist()
      (2, 3.0, [0.0, 1.0, 4.0])
    """
    layouts: dict[Any, tuple] = {}

    @jax.jit
    def joined(*args):
        leaves = jax.tree.leaves(fn(*args))
        return tuple(jnp.concatenate([jnp.ravel(leaves[i]) for i in idx]) for idx in _by_dtype(leaves))

    def call(*args):
        signature = jax.tree.map(jax.typeof, args)
        layout = layouts.get(signature)
        if layout is None:
            out = jax.eval_shape(fn, *args)
            leaves, tree = jax.tree.flatten(out)
            layout = layouts[signature] = (tree, [leaf.shape for leaf in leaves], _by_dtype(leaves))
        tree, shapes, groups = layout
        vectors = jax.device_get(joined(*args))
        leaves: list[Any] = [None] * len(shapes)
        for idx, vector in zip(groups, vectors, strict=True):
            sizes = [int(np.prod(shapes[i], dtype=np.int64)) for i in idx]
            for i, part in zip(idx, np.split(np.asarray(vector), np.cumsum(sizes)[:-1]), strict=True):
                leaves[i] = part.reshape(shapes[i])
        return jax.tree.unflatten(tree, leaves)

    return call


def _by_dtype(leaves) -> list[list[int]]:
    """The leaves' indices grouped by dtype, the groups in order of first appearance."""
    groups: dict[Any, list[int]] = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(jnp.dtype(leaf.dtype), []).append(i)
    return list(groups.values())
