"""JAX's persistent compilation cache for gradlab: where it lives, how big it grows, how to turn it off.

The CLI switches the cache on for every command (``--no-cache`` or ``GRADLAB_CACHE_DIR=off``
switch it off); the library leaves it off until ``gradlab.enable_cache()`` is called. A
program compiled once (same shapes, same static arguments, same JAX/jaxlib and device) is
then read back from disk by every later process instead of being compiled again.

Where: ``GRADLAB_CACHE_DIR`` if set, else the platform's user cache directory + ``gradlab/jax``:
``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS,
``%LOCALAPPDATA%`` on Windows.

Bounded: JAX's least-recently-used eviction keeps the directory under ``max_size`` bytes
(``GRADLAB_CACHE_MAX_BYTES``, default 1 GiB). Concurrent processes: JAX then serializes every
read and write of the directory through one file lock (the ``filelock`` package), so a
process never reads an entry another is still writing; an unreadable entry is a cache miss
(a warning and a fresh compilation), never a wrong program.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Environment variable that moves the cache (``off`` disables it).
ENV_DIR = "GRADLAB_CACHE_DIR"
#: Environment variable that bounds the cache size in bytes.
ENV_MAX = "GRADLAB_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2**30
_ACTIVE: dict = {"dir": None, "off": False}
_OFF = ("off", "0", "false", "no", "none", "")


def user_cache_dir(environ: dict | None = None, platform: str | None = None) -> Path:
    """The platform's per-user cache directory (no gradlab suffix).

    Args:
      environ: mapping read instead of ``os.environ`` (for tests).
      platform: ``sys.platform`` value to assume (for tests).

    Examples:
      >>> str(user_cache_dir({"XDG_CACHE_HOME": "/tmp/xdg"}, "linux"))
      '/tmp/xdg'
    """
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if plat.startswith("win"):
        base = env.get("LOCALAPPDATA")
        return Path(base) if base else home / "AppData" / "Local"
    if plat == "darwin":
        return home / "Library" / "Caches"
    xdg = env.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else home / ".cache"


def cache_dir(directory: str | os.PathLike | None = None, environ: dict | None = None) -> Path | None:
    """The directory the cache uses, or None where it is switched off.

    ``directory`` wins; then ``GRADLAB_CACHE_DIR`` (``off`` disables); then
    ``user_cache_dir() / "gradlab" / "jax"``.

    Examples:
      >>> cache_dir(environ={"GRADLAB_CACHE_DIR": "off"}) is None
      True
      >>> str(cache_dir(environ={"GRADLAB_CACHE_DIR": "/tmp/gl"}))
      '/tmp/gl'
    """
    env = os.environ if environ is None else environ
    raw = os.fspath(directory) if directory is not None else env.get(ENV_DIR)
    if raw is None:
        return user_cache_dir(env) / "gradlab" / "jax"
    if raw.strip().lower() in _OFF:
        return None
    return Path(raw).expanduser()


def _max_bytes(max_size: int | None, environ) -> int:
    if max_size is None:
        raw = environ.get(ENV_MAX, "").strip()
        try:
            max_size = int(raw) if raw else DEFAULT_MAX_BYTES
        except ValueError:
            raise ValueError(f"{ENV_MAX} must be a whole number of bytes; got {raw!r}") from None
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
        raise ValueError(f"max_size must be a positive number of bytes; got {max_size!r}")
    return max_size


def _settings(path: Path | None, max_bytes: int) -> dict:
    if path is None:
        return {"jax_enable_compilation_cache": False}
    return {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": str(path),
        "jax_compilation_cache_max_size": max_bytes,
        # gradlab's programs compile in well under JAX's default 1 s threshold: cache them all
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": -1,
    }


def enable_cache(directory: str | os.PathLike | None = None, *, max_size: int | None = None) -> Path | None:
    """Switch JAX's persistent compilation cache on for this process (opt-in for the library).

    Call it before the first computation. Without JAX imported yet, it only sets the
    ``JAX_*`` environment variables JAX reads at import (so the CLI stays light); otherwise
    it updates ``jax.config`` and resets JAX's cache handle so that the next compilation
    uses the new directory.

    Args:
      directory: where to keep compiled programs; None = ``GRADLAB_CACHE_DIR`` or the
        platform's user cache directory (``cache_dir``). ``"off"`` disables the cache.
      max_size: bound in bytes (least recently used entries are evicted); None =
        ``GRADLAB_CACHE_MAX_BYTES`` or 1 GiB.

    Returns:
      The cache directory, or None if the cache is off.

    Examples:
      >>> import gradlab
      >>> gradlab.enable_cache("off") is None
      True
    """
    path = cache_dir(directory)
    settings = _settings(path, _max_bytes(max_size, os.environ))
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot create the compilation cache directory {str(path)!r} "
                             f"({exc.strerror or exc}); set {ENV_DIR}=off or another directory") from None
    _apply(settings)
    _ACTIVE["dir"], _ACTIVE["off"] = path, path is None
    return path


def disable_cache() -> None:
    """Switch the persistent compilation cache off for this process."""
    _apply(_settings(None, DEFAULT_MAX_BYTES))
    _ACTIVE["dir"], _ACTIVE["off"] = None, True


def worker_setting() -> str:
    """The cache location a launcher hands to its worker processes (``gradlab.experiments``).

    The directory this process switched on (``enable_cache``), ``"off"`` if it switched the
    cache off, else what ``cache_dir()`` resolves (``"off"`` when that is off), so the CLI, the
    library and every worker of a study use one cache.

    Examples:
      >>> disable_cache(); worker_setting()
      'off'
    """
    if _ACTIVE["off"]:
        return "off"
    path = _ACTIVE["dir"] or cache_dir()
    return "off" if path is None else str(path)


def _apply(settings: dict) -> None:
    if "jax" not in sys.modules:
        for name, value in settings.items():
            os.environ[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
        if not settings["jax_enable_compilation_cache"]:
            os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    for name, value in settings.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()
