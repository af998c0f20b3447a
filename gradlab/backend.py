"""The backend whose kernels gradlab chooses when it traces a program.

A few programs are written two ways, because one backend's fast kernel is another's slow one.
The choice is made while JAX traces, from :func:`current`; each is documented where it is made:

* ``gradlab.real``'s BERT on a CPU: the layer loop rolled (a GPU unrolls it), the feed-forward
  keeping only its hidden layer for the backward pass (a GPU keeps the activation too), dense
  layers and column sums as products with a vector of ones (XLA's CPU reductions are slow); on a
  GPU those sums, the dense layers' bias gradients among them, in two stages over blocks of rows,
  and the Q, K and V weights' gradients copied apart from the fused product's;
* ``gradlab.simulate``'s engine on a GPU: one step of the common mode's table stage takes a whole
  paper grid of μ_neg columns (a CPU takes 4), independent-mode cells are computed 128 side by
  side (a CPU takes one) with their normals drawn in pieces (a CPU draws them whole), and the
  tables' log-sum-exp is one pass (a CPU takes two);
* the training batches' planned compile cost per row (``gradlab.real.batches``);
* the training loop's step on a GPU hands its outputs over in the host's pinned memory (a CPU
  copies them on the device; ``gradlab.real.step.ResidentStep``, read at each call).

The rule: a CPU's workaround applies where :func:`current` is ``"cpu"``, a GPU's tuning where it
is ``"gpu"``; any other backend gets neither (the engine's sizes are then the CPU's).

:func:`current` is JAX's default backend unless :func:`choices_for` says otherwise. That is how a
program another backend would run is traced here: compiled for a GPU that is not attached
(``benchmarks/gpu_aot.py``), or run on this CPU to check that its numbers are the CPU program's
(the tests). The override is process-wide while it is open, and JAX's caches are cleared on entry
and exit so that no program traced with one backend's choices serves the other's. gradlab's
program store keeps the chosen backend in each entry's key for the same reason.

Examples:
  >>> from gradlab import backend
  >>> backend.current() == __import__("jax").default_backend()
  True
  >>> with backend.choices_for("gpu"):
  ...     backend.current()
  'gpu'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["BACKENDS", "choices_for", "current"]

#: The backends whose choices gradlab makes: JAX's names for them.
BACKENDS = ("cpu", "gpu", "tpu")

_chosen: list[str] = []


def current() -> str:
    """The backend whose choices the library makes when it traces: JAX's default backend
    (``"cpu"``, ``"gpu"``, ``"tpu"``), or the innermost open :func:`choices_for`'s."""
    if _chosen:
        return _chosen[-1]
    import jax

    return jax.default_backend()


@contextlib.contextmanager
def choices_for(name: str) -> Iterator[str]:
    """Trace with backend ``name``'s choices, whatever runs the program, until the block ends.

    Clears JAX's caches (``jax.clear_caches``) on entry and on exit: a function jitted before the
    block is traced again inside it, and again after it.

    Args:
      name: ``"cpu"``, ``"gpu"`` or ``"tpu"`` (:data:`BACKENDS`).

    Raises:
      ValueError: for another name.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}")
    import jax

    jax.clear_caches()
    _chosen.append(name)
    try:
        yield name
    finally:
        _chosen.pop()
        jax.clear_caches()
