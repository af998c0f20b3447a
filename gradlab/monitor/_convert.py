"""Turn whatever a training loop hands over into a private array, without importing its framework.

Accepted: NumPy arrays, JAX arrays, any object with ``__dlpack__`` (a torch or CuPy
tensor, ...) or ``__array__``, and nested sequences of numbers. A tensor that refuses
export because it tracks gradients is retried through its own ``detach()``, and one
that JAX cannot import from its device (a CUDA tensor with a CPU-only JAX) through
``detach().cpu()`` (duck typing; no import). The result never aliases the caller's memory: NumPy
inputs are copied, so later in-place changes by the caller cannot reach the
monitor, and the monitor never writes to the caller's array. A JAX array in host memory (memory
kind ``pinned_host``) is copied to its devices' default memory.
"""

from __future__ import annotations

import numpy as np

__all__ = ["to_array", "InputError"]


class InputError(ValueError):
    """The input cannot be turned into an (N, D) array of real numbers."""


def _from_dlpack(x):
    try:
        return np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError, ValueError, AttributeError):
        pass
    # Not on the host (a GPU tensor): let JAX import it, on its own device.
    import jax.dlpack

    return jax.dlpack.from_dlpack(x)


def _in_device_memory(x):
    """``x``, or its copy in its devices' default memory if it is held elsewhere (the host's pinned
    memory, where ``gradlab.real``'s training step hands its outputs over on a GPU): the
    statistics run where the device's programs read."""
    import jax

    kind = getattr(x.sharding, "memory_kind", None)
    default = next(iter(x.devices())).default_memory().kind
    if kind is None or kind == default:
        return x
    return jax.device_put(x, x.sharding.with_memory_kind(default))


def _convert_once(x):
    import jax

    if isinstance(x, np.ndarray):
        return np.array(x, copy=True)
    if isinstance(x, jax.Array):
        return _in_device_memory(x)  # immutable: no copy needed, no alias possible
    if hasattr(x, "__dlpack__"):
        try:
            arr = _from_dlpack(x)
            return np.array(arr, copy=True) if isinstance(arr, np.ndarray) else arr
        except Exception:  # noqa: BLE001 - fall through to __array__
            if not hasattr(x, "__array__"):
                raise
    return np.array(x, copy=True)


def to_array(x, name: str = "h"):
    """A private NumPy or JAX array holding the values of ``x``.

    Args:
      x: an array-like (see module doc).
      name: the argument's name, for error messages.

    Returns:
      ``numpy.ndarray`` (a fresh copy) or ``jax.Array``.

    Raises:
      InputError: ``x`` cannot be read as an array of real numbers.
    """
    try:
        arr = _convert_once(x)
    except Exception as first:  # noqa: BLE001
        detach = getattr(x, "detach", None)
        if detach is None:
            raise InputError(f"{name}: cannot read a {type(x).__name__} as an array ({first})") from first
        try:
            arr = _convert_once(detach())
        except Exception as exc:  # noqa: BLE001
            cpu = getattr(detach(), "cpu", None)
            if cpu is None:
                raise InputError(f"{name}: cannot read a {type(x).__name__} as an array ({exc})") from exc
            try:
                arr = _convert_once(cpu())
            except Exception as exc2:  # noqa: BLE001
                raise InputError(f"{name}: cannot read a {type(x).__name__} as an array ({exc2})") from exc2
    dtype = np.dtype(arr.dtype) if not hasattr(arr.dtype, "name") or arr.dtype.name != "bfloat16" else None
    if dtype is not None and dtype.kind not in "fiub":
        raise InputError(f"{name}: need real numbers; got dtype {arr.dtype}")
    return arr
