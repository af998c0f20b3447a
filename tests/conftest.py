"""Test-wide settings. JAX runs its float32 default, as users do; a test that checks against a
float64 reference asks for float64 with ``@pytest.mark.x64`` (a file: ``pytestmark``) or the
``x64`` fixture, and gets ``jax_enable_x64`` for its duration only."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
# the suite never depends on the persistent compilation cache (tests/test_cache.py turns it on in subprocesses)
os.environ["GRADLAB_CACHE_DIR"] = "off"
for _name in ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE"):
    os.environ.pop(_name, None)
# Most of the suite's time is XLA compiling many small programs. The CPU backend's LLVM
# optimization level 0 halves it (the real-model test files: 147 -> 78 s on 2 cores). Results
# move by rounding only (the fixture BERT's losses by 2e-6), which every tolerance here allows;
# the notebooks built by `make docs` and the benchmarks run at XLA's default level. Child
# processes inherit the flag; a caller's own optimization level in XLA_FLAGS is kept.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()

import contextlib  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

from gradlab._memory import relieve_mappings  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)


@contextlib.contextmanager
def _enabled_x64():
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


@pytest.fixture(autouse=True, scope="module")
def _mappings_module():
    """After each file, the compiled programs are dropped if the process's memory mappings have
    passed half the kernel's limit (``gradlab._memory.relieve_mappings``): the whole suite in one
    process (``pytest`` without ``-n``) compiles more programs than Linux lets one process map."""
    yield
    relieve_mappings()


@pytest.fixture(autouse=True, scope="module")
def _x64_module(request):
    """A file marked ``pytestmark = pytest.mark.x64`` runs in float64, its module fixtures too."""
    marks = getattr(request.module, "pytestmark", [])
    marked = any(getattr(m, "name", None) == "x64" for m in (marks if isinstance(marks, list) else [marks]))
    with _enabled_x64() if marked else contextlib.nullcontext():
        yield


@pytest.fixture(autouse=True)
def _x64_marker(request):
    """A test marked ``@pytest.mark.x64`` runs in float64."""
    with _enabled_x64() if request.node.get_closest_marker("x64") else contextlib.nullcontext():
        yield


@pytest.fixture
def x64():
    """float64 for the test that asks for it (``jax_enable_x64``, restored afterwards)."""
    with _enabled_x64():
        yield
