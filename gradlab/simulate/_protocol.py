"""The simulation protocol: grid, sampling law, batch shape, mode, seed, dtype, chunk."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from gradlab import defaults

LAWS = ("normal", "reflected")
_INT32_MAX = 2**31 - 1  # seeds, and the element count of one cell's draws, are int32 in JAX
MODES = ("common", "independent")
DTYPES = ("float32", "float64")


def _as_pair(value, name: str, *, kind=float) -> tuple:
    if isinstance(value, numbers.Number):
        return (kind(value), kind(value))
    try:
        a, b = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or a pair; got {value!r}") from None
    return (kind(a), kind(b))


def _angle_range(value, name: str, points: int) -> tuple[float, float]:
    """A (low, high) of angles between unit vectors: finite, within [0, π], and low < high
    unless the axis has a single point (then low == high is allowed)."""
    try:
        lo, hi = _as_pair(value, name)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (low, high) pair of numbers; got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{name} must be finite; got {(lo, hi)}")
    if not (0 <= lo and hi <= math.pi):
        raise ValueError(f"{name} must lie within [0, pi] (angles between unit vectors); got {(lo, hi)}")
    if hi < lo or (hi == lo and points > 1):
        raise ValueError(f"{name} is empty: low = {lo:g} must be < high = {hi:g} for {points} grid points")
    return (lo, hi)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Everything that fixes a simulation's numbers (Li et al. 2024 App. A.1 defaults).

    Attributes:
      grid: points per axis, an int G (both axes) or a pair (G_pos, G_neg); ends included.
      mu_pos_range: (low, high) of μ_pos, radians.
      mu_neg_range: (low, high) of μ_neg, radians.
      sigma_pos, sigma_neg: standard deviations of θ_ii' and θ_ij'.
      batches: B, batches per cell.
      batch_size: N, 1 positive + N − 1 negatives per batch.
      law: ``"normal"`` (as given) or ``"reflected"`` (θ folded into [0, π]).
      mode: ``"common"`` (common random numbers) or ``"independent"`` (draws per cell).
      seed: the root of every key.
      dtype: ``"float32"`` (default) or ``"float64"`` (needs ``jax_enable_x64``).
      chunk: grid rows (common) or cells (independent) per compiled step; ``None`` picks
        one from a memory budget. It never changes the numbers.
    """

    grid: int | tuple[int, int] = defaults.GRID
    mu_pos_range: tuple[float, float] = defaults.MU_POS_RANGE
    mu_neg_range: tuple[float, float] = defaults.MU_NEG_RANGE
    sigma_pos: float = defaults.SIGMA_POS
    sigma_neg: float = defaults.SIGMA_NEG
    batches: int = defaults.BATCHES
    batch_size: int = defaults.BATCH_SIZE
    law: str = "normal"
    mode: str = "common"
    seed: int = 0
    dtype: Any = "float32"
    chunk: int | None = None

    def __post_init__(self):
        g = _as_pair(self.grid, "grid", kind=lambda x: x)
        if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1 for x in g):
            raise ValueError(f"grid must be a positive int or a pair of them; got {self.grid!r}")
        object.__setattr__(self, "grid", int(g[0]) if isinstance(self.grid, numbers.Integral) else (int(g[0]), int(g[1])))
        for name, points in zip(("mu_pos_range", "mu_neg_range"), self.grid_shape, strict=True):
            object.__setattr__(self, name, _angle_range(getattr(self, name), name, points))
        for name in ("sigma_pos", "sigma_neg"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0; got {v!r}")
            object.__setattr__(self, name, float(v))
        for name, low in (("batches", 1), ("batch_size", 2), ("seed", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not low <= v <= _INT32_MAX:
                raise ValueError(f"{name} must be an int in [{low}, 2**31 - 1]; got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.batches * self.batch_size > _INT32_MAX:
            raise ValueError(f"batches × batch_size (one cell's draws) must be below 2**31; got "
                             f"{self.batches} × {self.batch_size}")
        if self.law not in LAWS:
            raise ValueError(f"law must be one of {LAWS}; got {self.law!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {self.mode!r}")
        dt = np.dtype(self.dtype).name if not isinstance(self.dtype, str) else self.dtype
        if dt not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}; got {self.dtype!r}")
        object.__setattr__(self, "dtype", dt)
        if self.chunk is not None and (isinstance(self.chunk, bool) or not isinstance(self.chunk, numbers.Integral) or self.chunk < 1):
            raise ValueError(f"chunk must be None or an int >= 1; got {self.chunk!r}")

    # --- axes ----------------------------------------------------------------------------
    @property
    def grid_shape(self) -> tuple[int, int]:
        """(G_pos, G_neg)."""
        g = self.grid
        return (g, g) if isinstance(g, int) else tuple(g)

    @property
    def mu_pos(self) -> np.ndarray:
        """The μ_pos axis, (G_pos,) float64, both ends included."""
        return np.linspace(*self.mu_pos_range, self.grid_shape[0])

    @property
    def mu_neg(self) -> np.ndarray:
        """The μ_neg axis, (G_neg,) float64, both ends included."""
        return np.linspace(*self.mu_neg_range, self.grid_shape[1])

    @property
    def n_neg(self) -> int:
        """N − 1, negatives per batch."""
        return self.batch_size - 1

    def replace(self, **changes) -> Protocol:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields (for ``Result.meta``)."""
        d = dataclasses.asdict(self)
        d["grid"] = list(self.grid_shape)
        d["mu_pos_range"] = list(self.mu_pos_range)
        d["mu_neg_range"] = list(self.mu_neg_range)
        return d

    def jnp_dtype(self):
        """The JAX dtype; float64 requires ``jax_enable_x64`` (else ValueError)."""
        import jax
        import jax.numpy as jnp

        if self.dtype == "float64" and not jax.config.jax_enable_x64:
            raise ValueError("dtype='float64' needs jax.config.update('jax_enable_x64', True)")
        return jnp.dtype(self.dtype)
