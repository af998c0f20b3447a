"""Test-wide settings: float64 available for verification; float32 tests pass float32 arrays explicitly."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
