"""A jitted function's outputs on the host in one device-to-host copy per dtype.

``jax.device_get`` of a pytree copies each leaf on its own. On a GPU every copy costs the host
the same tens of microseconds whatever its size, so a record of many scalars and short vectors
(the monitor's has 78 leaves) costs milliseconds in copies alone. :func:`host_outputs` joins
the leaves of each dtype into one vector inside the program and splits them again on the
host: the same arrays, bit for bit, in as many copies as the record has dtypes. Its ``start``
dispatches and starts the copies without waiting (a record collected later, when the device has
caught up).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["host_outputs", "HostOutputs"]


def host_outputs(fn: Callable) -> HostOutputs:
    """``fn`` (a JAX function of arrays) jitted; each call returns its outputs as a pytree of
    NumPy arrays, copied from the device in one transfer per dtype (:class:`HostOutputs`).

    Examples:
      >>> f = host_outputs(lambda x: {"n": jnp.sum(x > 0), "sum": jnp.sum(x), "sq": x * x})
      >>> out = f(jnp.arange(3.0))
      >>> int(out["n"]), float(out["sum"]), out["sq"].tolist()
      (2, 3.0, [0.0, 1.0, 4.0])
      >>> finish = f.start(jnp.arange(4.0))  # dispatched and its copies started; the host goes on
      >>> int(finish()["n"])
      3
    """
    return HostOutputs(fn)


class HostOutputs:
    """A jitted function whose outputs come to the host in one transfer per dtype.

    Calling it waits for the outputs; :meth:`start` only dispatches the program and starts the
    copies, and returns the function that waits for them. The output layout (tree, shapes,
    dtypes) is traced once per input signature (``jax.eval_shape``) and kept.
    """

    def __init__(self, fn: Callable):
        self.fn = fn
        self._layouts: dict[Any, tuple] = {}

        def joined(*args):
            leaves = jax.tree.leaves(fn(*args))
            return tuple(jnp.concatenate([jnp.ravel(leaves[i]) for i in idx]) for idx in _by_dtype(leaves))

        self._joined = jax.jit(joined)

    def __call__(self, *args) -> Any:
        return self.start(*args)()

    def start(self, *args) -> Callable[[], Any]:
        """Dispatch the program and start its copies to the host; returns ``() -> outputs``."""
        leaves, tree = jax.tree.flatten(args)
        signature = (tree, tuple(map(jax.typeof, leaves)))  # (a pytree of types may not hash: a Loss's leaves)
        layout = self._layouts.get(signature)
        if layout is None:
            leaves, tree = jax.tree.flatten(jax.eval_shape(self.fn, *args))
            layout = self._layouts[signature] = (tree, [leaf.shape for leaf in leaves], _by_dtype(leaves))
        vectors = self._joined(*args)
        for vector in vectors:
            vector.copy_to_host_async()
        return lambda: _split(jax.device_get(vectors), layout)


def _split(vectors, layout) -> Any:
    """The outputs' pytree from the joined vectors of each dtype."""
    tree, shapes, groups = layout
    leaves: list[Any] = [None] * len(shapes)
    for idx, vector in zip(groups, vectors, strict=True):
        sizes = [int(np.prod(shapes[i], dtype=np.int64)) for i in idx]
        for i, part in zip(idx, np.split(np.asarray(vector), np.cumsum(sizes)[:-1]), strict=True):
            leaves[i] = part.reshape(shapes[i])
    return jax.tree.unflatten(tree, leaves)


def _by_dtype(leaves) -> list[list[int]]:
    """The leaves' indices grouped by dtype, the groups in order of first appearance."""
    groups: dict[Any, list[int]] = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(jnp.dtype(leaf.dtype), []).append(i)
    return list(groups.values())
