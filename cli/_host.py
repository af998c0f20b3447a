"""Huge pages for the temporaries of a training command's programs on a CPU.

XLA's CPU runtime allocates a compiled program's temporaries when it is called and frees them
when it returns. glibc's malloc serves blocks that large with fresh mappings, which the kernel
fills one 4 KiB page at a time, a page fault each: 400,000 a step for the BERT-base SimCSE
step. With the tunable ``glibc.malloc.hugetlb=1`` (glibc 2.35 and later) malloc asks for
transparent huge pages on those mappings, 2 MiB at a fault, where the kernel's mode is
``madvise`` (``always`` gives them already; ``never`` none). The tunable is read when a process
starts, so ``gradlab train`` and ``gradlab experiment`` (whose local workers and SLURM jobs
inherit the environment) start again, once, with it added to ``GLIBC_TUNABLES``, when JAX will
run on the CPU.
``GRADLAB_HUGE_PAGES=0`` leaves glibc as it is; a ``glibc.malloc.hugetlb`` already in
``GLIBC_TUNABLES`` is kept. The numbers: docs/performance.md, "A CPU step's fresh memory".
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

HUGE_PAGES = "glibc.malloc.hugetlb=1"
ENV = "GRADLAB_HUGE_PAGES"
#: The commands that run a compiled program call after call (training steps, evaluations).
COMMANDS = frozenset({"train", "experiment"})
_OFF = {"0", "off", "false", "no"}
_THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def glibc_version() -> tuple[int, int] | None:
    """This process's glibc version, or None (another C library, another system)."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (AttributeError, ValueError, OSError):
        return None


def thp_mode(path: str = _THP) -> str | None:
    """The kernel's transparent-huge-page mode (``always``, ``madvise``, ``never``), or None."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand of ``gradlab ARGV``: its first word that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def cpu_only(environ: Mapping[str, str]) -> bool:
    """Whether JAX will run on the CPU, read without importing it: ``JAX_PLATFORMS`` names ``cpu``
    first, or no accelerator plugin is installed (JAX finds its CUDA, ROCm and TPU plugins in the
    ``jax_plugins`` namespace or entry points, TPUs' in ``libtpu``)."""
    import importlib.metadata
    import importlib.util

    platforms = environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    if any(importlib.util.find_spec(name) is not None for name in ("jax_plugins", "libtpu")):
        return False
    return not importlib.metadata.entry_points(group="jax_plugins")


def huge_pages_env(argv: Sequence[str], environ: Mapping[str, str], *, glibc: tuple[int, int] | None,
                   thp: str | None, on_cpu: bool) -> dict[str, str] | None:
    """The environment to run ``gradlab ARGV`` again in, with huge pages; None: run it as it is.

    Examples:
      >>> env = huge_pages_env(["train", "--steps", "9"], {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
      ...                      glibc=(2, 36), thp="madvise", on_cpu=True)
      >>> env["GLIBC_TUNABLES"]
      'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1'
      >>> huge_pages_env(["heatmap"], {}, glibc=(2, 36), thp="madvise", on_cpu=True) is None
      True
    """
    tunables = environ.get("GLIBC_TUNABLES", "")
    if (_command(argv) not in COMMANDS or environ.get(ENV, "").strip().lower() in _OFF
            or "glibc.malloc.hugetlb" in tunables or glibc is None or glibc < (2, 35) or thp != "madvise"
            or not on_cpu):
        return None
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES}


def start_with_huge_pages(argv: Sequence[str]) -> None:
    """Start this process again with huge pages (``huge_pages_env``) if ``gradlab ARGV`` wants them;
    else return. Only the console command calls it (``sys.orig_argv`` is how it was started)."""
    if _command(argv) not in COMMANDS:  # the common case: nothing read from the system
        return
    env = huge_pages_env(argv, os.environ, glibc=glibc_version(), thp=thp_mode(), on_cpu=cpu_only(os.environ))
    if env is None or not sys.executable or not sys.orig_argv:  # an embedded interpreter: run as it is
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, env)
    except OSError:  # huge pages are an optimization: without them the command runs all the same
        return
