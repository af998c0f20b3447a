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

Stored programs. JAX's cache still traces and lowers a function before it can look it up (its
key is the lowered program), which is most of a warm command's own time. gradlab's fixed
programs (the simulation engine's stages for a registered loss, the normal map of the draws)
are therefore also kept whole, as serialized executables, in ``programs/`` inside the cache
directory (``stored_program``), with the few numbers the memory check traces for
(``stored_value``). Their key is what the computation depends on beyond its arguments: the
program's own identity (statistic, registered loss, stage, chunk), the shapes and dtypes of
its arguments, the backend whose choices it was traced with (``gradlab.backend``), and a
fingerprint of gradlab's source files (size and modification time), of JAX, jaxlib and their
configuration, of the devices and of the host CPU, so that a new version, an edited checkout or
another machine reads nothing stale. A user's loss (a file or a module) has no such identity
and always goes through ``jax.jit`` and JAX's cache. An entry that cannot be read is a miss (it
is compiled again and rewritten), never a failure; the directory keeps at most
``PROGRAMS_MAX`` entries (least recently used removed).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import sys
import tempfile
from pathlib import Path

from gradlab import backend

#: Environment variable that moves the cache (``off`` disables it).
ENV_DIR = "GRADLAB_CACHE_DIR"
#: Environment variable that bounds the cache size in bytes.
ENV_MAX = "GRADLAB_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2**30
_ACTIVE: dict = {"dir": None, "off": False, "programs": True}
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


def enable_cache(directory: str | os.PathLike | None = None, *, max_size: int | None = None,
                 programs: bool = True) -> Path | None:
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
      programs: also keep gradlab's fixed programs whole (``stored_program``), so that a later
        process neither traces nor lowers them; False leaves only JAX's cache.

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
    _ACTIVE.update(dir=path, off=path is None, programs=bool(programs))
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


# --- stored programs ---------------------------------------------------------------------------
#: Entries kept in ``programs/`` (each a few tens of kB); the least recently used go first.
PROGRAMS_MAX = 512
#: The program store: this folder of the cache directory.
PROGRAMS = "programs"
_FINGERPRINT: dict = {}
_LOADED: dict = {}  # entry path -> the program read or compiled by this process


def release_programs() -> None:
    """Forget the programs this process read from the store or compiled for it (they are read
    again when next used): :func:`gradlab._memory.relieve_mappings` lets their memory go."""
    _LOADED.clear()


def _programs_dir() -> Path | None:
    """``<cache>/programs``, or None where the cache is off or this process never switched it on."""
    if _ACTIVE["off"] or _ACTIVE["dir"] is None or not _ACTIVE["programs"]:
        return None
    import jax

    if jax.process_count() > 1:  # a program spanning several processes is compiled by each, together
        return None
    return _ACTIVE["dir"] / PROGRAMS


def source_stamp(root: str | os.PathLike | None = None) -> list:
    """(relative path, size, modification time in ns) of every ``.py`` file under ``root``
    (default: the installed gradlab package): any edit of the sources changes it."""
    root = Path(__file__).resolve().parent if root is None else Path(root)
    stamp = []
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        stamp.append((str(path.relative_to(root)), st.st_size, st.st_mtime_ns))
    return stamp


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def fingerprint() -> str:
    """What every stored program depends on besides its own key (computed once per process).

    gradlab's source files (relative path, size, modification time), the versions of gradlab,
    JAX and jaxlib, JAX's configuration (all of ``jax.config.values`` but the cache settings),
    ``XLA_FLAGS``, the devices (platform, platform version, kinds, count) and the host CPU
    (architecture and instruction-set flags).
    """
    if "value" not in _FINGERPRINT:
        import jax
        import jaxlib

        from gradlab._version import __version__

        devices = jax.devices()
        config = sorted((k, repr(v)) for k, v in jax.config.values.items() if "cache" not in k)
        parts = [__version__, jax.__version__, jaxlib.__version__, config, os.environ.get("XLA_FLAGS", ""),
                 devices[0].platform, devices[0].client.platform_version, [d.device_kind for d in devices],
                 platform.machine(), _cpu_flags(), source_stamp()]
        _FINGERPRINT["value"] = hashlib.sha256(repr(parts).encode()).hexdigest()
    return _FINGERPRINT["value"]


def _signature(args) -> str:
    import jax

    leaves, treedef = jax.tree.flatten(args)
    return repr((str(treedef), [(getattr(x, "shape", ()), str(getattr(x, "dtype", type(x).__name__)),
                                 bool(getattr(x, "weak_type", False))) for x in leaves]))


def _entry(directory: Path, key: tuple, args, kind: str) -> Path:
    # the backend whose choices the program was traced with (gradlab.backend.choices_for)
    digest = hashlib.sha256(repr((fingerprint(), backend.current(), kind, key, _signature(args))).encode()).hexdigest()
    return directory / f"{kind}-{digest}"


def _write(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    trim(path.parent)


def _used(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # removed meanwhile by another process
        return 0


def trim(directory: str | os.PathLike, keep: int | None = None) -> None:
    """Remove the least recently used entries of a program store beyond ``keep`` (``PROGRAMS_MAX``)."""
    keep = PROGRAMS_MAX if keep is None else keep
    entries = [p for p in Path(directory).iterdir() if not p.name.startswith(".")]
    for p in sorted(entries, key=_used)[: max(0, len(entries) - keep)]:
        p.unlink(missing_ok=True)


def _read(path: Path) -> bytes | None:
    try:
        payload = path.read_bytes()
        os.utime(path)  # recently used
        return payload
    except OSError:
        return None


def _compile_fresh(jitted, args: tuple):
    """``jitted`` compiled for ``args`` without JAX's persistent cache. An executable that JAX read
    back from its cache serializes without the code of its fused kernels (jaxlib 0.10 on the CPU:
    the next process fails with "Function ... not found"), so only a fresh compilation is stored."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    was = bool(jax.config.jax_enable_compilation_cache)
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        return jitted.lower(*args).compile()
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        compilation_cache.reset_cache()


def stored_program(jitted, args: tuple, key: tuple | None):
    """``jitted`` compiled for ``args``: read whole from the program store, or compiled and stored.

    Args:
      jitted: a ``jax.jit`` function without static arguments (close over them, and name them
        in ``key``).
      args: example arguments; the program is called later with arguments of the same shapes,
        dtypes and structure.
      key: what the computation is, beyond the shapes of its arguments, as plain data (names,
        numbers); None when nothing stable names it (a user's loss): then ``jitted`` itself is
        returned and JAX's own cache serves it.

    Returns:
      A callable: a ``jax.stages.Compiled`` (from the store, or compiled now), or ``jitted``.
    """
    directory = None if key is None else _programs_dir()
    if directory is None:
        return jitted
    from jax.experimental import serialize_executable

    path = _entry(directory, key, args, "program")
    if path in _LOADED:  # read once per process, like jax.jit's own in-memory cache
        return _LOADED[path]
    payload = _read(path)
    if payload is not None:
        try:
            _LOADED[path] = serialize_executable.deserialize_and_load(*pickle.loads(payload))
            return _LOADED[path]
        except Exception:  # noqa: BLE001 - an unreadable entry is a miss: compiled again below
            path.unlink(missing_ok=True)
    compiled = _LOADED[path] = _compile_fresh(jitted, args)
    try:
        _write(path, pickle.dumps(serialize_executable.serialize(compiled)))
    except Exception:  # noqa: BLE001 - a store that cannot be written only costs the next start
        pass
    return compiled


def stored_value(key: tuple, make, args=()):
    """``make()`` (JSON data: numbers, lists, strings), kept in the program store under ``key`` and
    the shapes of ``args``, so that a later process skips the tracing behind it. Without a store
    (cache off) or without a key, ``make()`` is called."""
    directory = None if key is None else _programs_dir()
    if directory is None:
        return make()
    path = _entry(directory, key, args, "value")
    payload = _read(path)
    if payload is not None:
        try:
            return json.loads(payload)
        except ValueError:
            path.unlink(missing_ok=True)
    value = make()
    try:
        _write(path, json.dumps(value).encode())
    except (OSError, TypeError, ValueError):
        pass
    return value
