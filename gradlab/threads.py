"""How many threads a process's XLA (CPU) and BLAS may use: set in the environment before JAX starts.

``limit_threads(n)`` is what a worker of the training studies calls first (``--jobs J`` runs J
one-thread workers; ``--executor-opt threads=N`` on SLURM or Dask). With JAX 0.10 on a CPU:

* ``PJRT_NPROC=n`` sizes the CPU client's thread pool, which runs XLA's intra-op parallelism
  (the client reads it when JAX creates its CPU backend; XLA's ``--xla_cpu_multi_thread_eigen=false``
  alone leaves that pool as it is: measured, a matmul still kept three threads busy);
* with ``n == 1``, also ``--xla_cpu_multi_thread_eigen=false`` in ``XLA_FLAGS`` (Eigen's own
  single-thread path);
* ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` = n (the BLAS of NumPy and
  SciPy, read when they load).

Once JAX has created its CPU backend (or NumPy loaded its BLAS) the change does nothing for this
process: call it first, or set the same variables for a child process (``thread_env``).
A leaf: no JAX, no NumPy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["BLAS_VARIABLES", "limit_threads", "thread_env"]

#: The thread counts of the BLAS / OpenMP libraries NumPy and SciPy may load.
BLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_ONE_THREAD_FLAG = "--xla_cpu_multi_thread_eigen=false"


def thread_env(threads: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``limit_threads(threads)`` sets, given the environment ``environ`` (default:
    this process's): ``PJRT_NPROC``, the BLAS variables, and ``XLA_FLAGS`` when ``threads == 1``
    (the flags already there kept; an ``xla_cpu_multi_thread_eigen`` already set wins).

    Raises:
      ValueError: ``threads`` is not an integer >= 1.

    Examples:
      >>> thread_env(2, {})
      {'PJRT_NPROC': '2', 'OMP_NUM_THREADS': '2', 'OPENBLAS_NUM_THREADS': '2', 'MKL_NUM_THREADS': '2'}
      >>> thread_env(1, {"XLA_FLAGS": "--xla_dump_to=/tmp/x"})["XLA_FLAGS"]
      '--xla_dump_to=/tmp/x --xla_cpu_multi_thread_eigen=false'
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1; got {threads!r}")
    environ = os.environ if environ is None else environ
    env = {"PJRT_NPROC": str(threads), **{var: str(threads) for var in BLAS_VARIABLES}}
    flags = environ.get("XLA_FLAGS", "")
    if threads == 1 and "xla_cpu_multi_thread_eigen" not in flags:
        env["XLA_FLAGS"] = f"{flags} {_ONE_THREAD_FLAG}".strip()
    return env


def limit_threads(threads: int) -> None:
    """Let this process's XLA (CPU) and BLAS use ``threads`` threads: ``os.environ.update(thread_env(threads))``.
    Call it before JAX computes anything (before NumPy is imported, for its BLAS)."""
    os.environ.update(thread_env(threads))
