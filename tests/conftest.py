"""Test-wide settings: float64 available for verification; float32 tests pass float32 arrays explicitly."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
# the suite never depends on the persistent compilation cache (tests/test_cache.py turns it on in subprocesses)
os.environ["GRADLAB_CACHE_DIR"] = "off"
for _name in ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE"):
    os.environ.pop(_name, None)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)
