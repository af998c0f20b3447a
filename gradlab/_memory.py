"""Memory estimates, checked before anything is allocated: a run that cannot fit is refused at once;
and the process's memory mappings, kept below the kernel's limit (:func:`relieve_mappings`).

Every entry point that allocates in proportion to its sizes (the simulate statistics, the
norm maps, the monitor's statistics, the CLI's ``track``) estimates the bytes of its result
and of its largest working set, and calls ``check_fits``. What exceeds the limit raises a
one-line ``ValueError`` naming both numbers, instead of a crash inside XLA minutes later.

The limit is the machine's physical memory (``os.sysconf``), or ``GRADLAB_MEMORY_LIMIT``
(bytes, or with a unit: ``512M``, ``16G``, ``1.5T``; ``off`` disables the check).
"""

from __future__ import annotations

import os
import re

ENV_LIMIT = "GRADLAB_MEMORY_LIMIT"
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_bytes(text: str) -> int:
    """``"16G"`` -> 17179869184 (binary units K, M, G, T; an optional trailing ``B``/``iB``).

    Examples:
      >>> parse_bytes("1.5k"), parse_bytes("2 GiB")
      (1536, 2147483648)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(?:i?b)?\s*", str(text).lower())
    if m is None:
        raise ValueError(f"{ENV_LIMIT} must be a size like 512M or 16G; got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (``os.sysconf``), or None where unknown."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # Windows has no sysconf
        return None
    return int(pages) * int(size) if pages > 0 and size > 0 else None


def memory_limit() -> int | None:
    """The byte limit checked against: ``GRADLAB_MEMORY_LIMIT`` or the physical memory; None = no check."""
    raw = os.environ.get(ENV_LIMIT, "").strip()
    if raw.lower() in ("off", "none", "0"):
        return None
    return parse_bytes(raw) if raw else physical_memory()


def human(nbytes: float) -> str:
    """``human(3 * 2**30)`` -> ``'3.0 GiB'``.

    Examples:
      >>> human(512), human(3 * 2**30)
      ('512 B', '3.0 GiB')
    """
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def check_fits(what: str, result_bytes: float, working_bytes: float = 0) -> None:
    """Raise ``ValueError`` if ``result_bytes + working_bytes`` exceeds ``memory_limit()``.

    Args:
      what: the computation, as the message names it (``"gd_map on a 80000 × 80000 grid"``).
      result_bytes: bytes of the returned arrays.
      working_bytes: bytes of the largest working set alive beside the result.

    Examples:
      >>> import os
      >>> os.environ["GRADLAB_MEMORY_LIMIT"] = "1G"
      >>> check_fits("a small map", 2**20)
      >>> try:
      ...     check_fits("a big map", 2**31, 2**30)
      ... except ValueError as exc:
      ...     print(exc)
      a big map needs about 3.0 GiB (2.0 GiB result + 1.0 GiB working set), more than the 1.0 GiB limit (physical memory, or GRADLAB_MEMORY_LIMIT): reduce the sizes
      >>> del os.environ["GRADLAB_MEMORY_LIMIT"]
    """
    limit = memory_limit()
    total = float(result_bytes) + float(working_bytes)
    if limit is not None and total > limit:
        raise ValueError(
            f"{what} needs about {human(total)} ({human(result_bytes)} result + {human(working_bytes)} "
            f"working set), more than the {human(limit)} limit (physical memory, or {ENV_LIMIT}): reduce the sizes"
        )


#: Elementwise temporaries a closed-form map keeps alive per cell (angles, sines, terms).
MAP_TEMPORARIES = 8
#: (N, N) temporaries of one monitored batch (cosines, weights, masks, their gradients).
PAIRWISE_TEMPORARIES = 6


def check_map(what: str, rows: int, cols: int, itemsize: int) -> None:
    """A (rows, cols) closed-form map: its result, and ``MAP_TEMPORARIES`` maps of working set."""
    cells = float(rows) * float(cols) * itemsize
    check_fits(f"{what} on a {rows} × {cols} grid", cells, MAP_TEMPORARIES * cells)


def check_pairwise(what: str, n: int, d: int, itemsize: int) -> None:
    """One batch of N pairs of D-dimensional views: ``PAIRWISE_TEMPORARIES`` (N, N) arrays besides the views."""
    check_fits(f"{what} of a batch of N = {n} pairs (D = {d})", 0,
               PAIRWISE_TEMPORARIES * float(n) * n * itemsize + 4.0 * n * d * itemsize)


# --- memory mappings ---------------------------------------------------------------------------
#: The share of the kernel's limit on one process's memory mappings past which
#: :func:`relieve_mappings` drops the compiled programs the process keeps.
MAPPINGS_SHARE = 0.5


def memory_mappings() -> tuple[int, int] | None:
    """(this process's memory mappings, the kernel's limit on them: ``vm.max_map_count``), or None
    where the kernel does not say (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count", encoding="ascii") as fh:
            limit = int(fh.read())
        with open("/proc/self/maps", "rb") as fh:
            count = sum(1 for _ in fh)
    except (OSError, ValueError):
        return None
    return count, limit


def relieve_mappings(share: float = MAPPINGS_SHARE) -> bool:
    """Drop the compiled programs this process keeps when its memory mappings pass ``share`` of the
    kernel's limit; True if it did.

    XLA on a CPU maps each program it compiles in several pieces (about six mappings), and JAX
    keeps every program compiled in the process. A process that compiles many thousands (a
    worker that trains configuration after configuration: each loss, encoder architecture and
    batch shape is a step of its own, compiled or read from JAX's cache, though runs of one loss
    at another τ or rate share theirs, :func:`gradlab.real.step.step_programs`; a long test
    session) reaches Linux's limit (``vm.max_map_count``, 65,530 by default), and the next
    compilation crashes the process (a segmentation fault, not an error). Called before each training run
    (:func:`gradlab.real.train`): past the share, ``jax.clear_caches()`` and the program store's
    loaded programs (:func:`gradlab._cache.release_programs`) let the mappings go; what runs
    next compiles (or reads from the store) again.
    """
    counted = memory_mappings()
    if counted is None or counted[0] <= share * counted[1]:
        return False
    import jax

    from gradlab._cache import release_programs

    release_programs()
    jax.clear_caches()
    return True
