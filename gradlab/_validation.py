"""Input checks shared by the public entry points.

Checks that need values (finite entries, zero vectors) run only on concrete arrays:
under ``jit``/``vmap`` tracing they are skipped, so the jitted kernels stay pure.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_finite(arr, name: str) -> None:
    """ValueError naming the first non-finite entry of a concrete array (skipped when traced)."""
    if _is_concrete(arr) and not bool(jax.numpy.all(jax.numpy.isfinite(arr))):  # one bool to the host
        bad = np.argwhere(~np.isfinite(np.asarray(arr)))[0]
        raise ValueError(f"{name} has a non-finite entry at index {tuple(int(i) for i in bad)}")


def check_pair(h, h_prime, *, min_n: int = 2, name: str = "h", name_prime: str = "h_prime"):
    """Validate two views of a batch: same (N, D) shape, N >= min_n, finite, no zero rows.

    Returns the two inputs as JAX arrays (floating dtype preserved; ints become float32).
    """
    h = _as_float_array(h, name)
    h_prime = _as_float_array(h_prime, name_prime)
    if h.ndim != 2:
        raise ValueError(f"{name} must have shape (N, D); got rank {h.ndim} with shape {tuple(h.shape)}")
    if h_prime.ndim != 2:
        raise ValueError(
            f"{name_prime} must have shape (N, D); got rank {h_prime.ndim} with shape {tuple(h_prime.shape)}"
        )
    if h.shape != h_prime.shape:
        raise ValueError(
            f"{name} and {name_prime} must have the same shape; got {tuple(h.shape)} and {tuple(h_prime.shape)}"
        )
    if h.shape[0] < min_n:
        raise ValueError(f"need a batch of N >= {min_n} pairs; got N = {h.shape[0]} (shape {tuple(h.shape)})")
    if h.shape[1] < 1:
        raise ValueError(f"embedding dimension D must be >= 1; got shape {tuple(h.shape)}")
    for arr, nm in ((h, name), (h_prime, name_prime)):
        _check_finite(arr, nm)
        if _is_concrete(arr) and bool(jax.numpy.any(jax.numpy.all(arr == 0, axis=1))):  # one bool to the host
            row = int(np.flatnonzero(~np.any(np.asarray(arr) != 0, axis=1))[0])
            raise ValueError(f"{nm} has a zero vector at row {row}: it cannot be normalized to the sphere")
    return h, h_prime


def _as_float_array(x, name: str):
    if isinstance(x, jax.core.Tracer):
        return x
    try:
        arr = jax.numpy.asarray(x)
    except TypeError as exc:  # pragma: no cover - message depends on the input type
        raise TypeError(f"{name} must be an array of numbers; got {type(x).__name__}") from exc
    if not (jax.numpy.issubdtype(arr.dtype, jax.numpy.floating) or jax.numpy.issubdtype(arr.dtype, jax.numpy.integer)):
        raise TypeError(f"{name} must be a real floating array; got dtype {arr.dtype}")
    if not jax.numpy.issubdtype(arr.dtype, jax.numpy.floating):
        arr = arr.astype(jax.numpy.float32)
    return arr


def check_angles(theta_pos, theta_neg):
    """Validate angle-form input: theta_pos (...,), theta_neg (..., M) with M >= 1."""
    theta_pos = _as_float_array(theta_pos, "theta_pos")
    theta_neg = _as_float_array(theta_neg, "theta_neg")
    if theta_neg.ndim < 1 or theta_neg.shape[-1] < 1:
        raise ValueError(f"theta_neg must have shape (..., N-1) with N-1 >= 1; got {tuple(theta_neg.shape)}")
    if theta_neg.shape[:-1] != theta_pos.shape:
        raise ValueError(
            f"theta_pos of shape (...,) must match the leading axes of theta_neg (..., N-1); "
            f"got {tuple(theta_pos.shape)} and {tuple(theta_neg.shape)}"
        )
    _check_finite(theta_pos, "theta_pos")
    _check_finite(theta_neg, "theta_neg")
    return theta_pos, theta_neg


def check_param(loss_name: str, key: str, value, rule: str):
    """Check one hyper-parameter against its rule; return it as a Python float.

    A 0-d array counts as its number. A JAX tracer (a parameter under ``jax.grad``,
    ``vmap`` or ``jit``, e.g. a learnable temperature) has no value to check yet: it must
    be a real scalar and is passed through as it is.
    """
    if not _is_concrete(value):
        if np.ndim(value) != 0 or not (jax.numpy.issubdtype(value.dtype, jax.numpy.floating)
                                       or jax.numpy.issubdtype(value.dtype, jax.numpy.integer)):
            raise ValueError(f"{loss_name}: parameter {key!r} must be a real scalar; got {value!r}")
        return value.astype(jax.numpy.result_type(float))  # an int sweep traces as float
    if isinstance(value, (np.ndarray, np.generic, jax.Array)) and np.ndim(value) == 0 and not isinstance(value, np.bool_):
        value = np.asarray(value).item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{loss_name}: parameter {key!r} must be a real number; got {value!r}")
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"{loss_name}: parameter {key!r} is too large for a float; got {value!r}") from None
    if not np.isfinite(value):
        raise ValueError(f"{loss_name}: parameter {key!r} must be finite; got {value!r}")
    if rule == "positive" and not value > 0:
        raise ValueError(f"{loss_name}: parameter {key!r} must be > 0; got {value!r}")
    if rule == "nonnegative" and not value >= 0:
        raise ValueError(f"{loss_name}: parameter {key!r} must be >= 0; got {value!r}")
    if rule == "unit" and not 0 <= value <= 1:
        raise ValueError(f"{loss_name}: parameter {key!r} must lie in [0, 1]; got {value!r}")
    return value
