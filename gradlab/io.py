"""Results as data: the ``Result`` bundle (arrays + metadata) and atomic file writes.

A ``Result`` is what every gradlab statistic returns: named axes (``mu_pos``, ``mu_neg``,
``tau``, ``lam``, ...), the ``mean`` over those axes, its Monte-Carlo ``stderr``, an
optional ``mask`` (True = the cell is *not reported*: it does not occur, or no batch
passed a gate), extra named arrays, and a JSON-able ``meta`` dict (loss, parameters,
protocol, seed, gradlab / JAX versions, device).

``Result.save(stem)`` writes ``stem.npz`` (every array, bit for bit) and ``stem.json``
(dims, axis names, metadata); ``Result.load(stem)`` reads them back, equal to the original.

Every write is atomic: the bytes go to a temporary file in the target's directory,
are flushed and fsync'ed, and only then ``os.replace``-d onto the target. A failure or
an interrupt (KeyboardInterrupt included) leaves the old file, or no file, never half
of a new one.

Examples:
  >>> import numpy as np, tempfile, os
  >>> r = Result(dims=("mu_pos", "mu_neg"),
  ...            coords={"mu_pos": np.array([0.1, 0.2]), "mu_neg": np.array([0.3, 0.4, 0.5])},
  ...            mean=np.zeros((2, 3)), stderr=np.zeros((2, 3)), meta={"loss": "infonce"})
  >>> stem = os.path.join(tempfile.mkdtemp(), "gd")
  >>> _ = r.save(stem)
  >>> Result.load(stem) == r
  True
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Result",
    "atomic_write_bytes",
    "atomic_write_text",
    "save_npz_atomic",
    "save_json_atomic",
    "load_json",
    "runtime_meta",
    "load_views",
    "series_keys",
    "FORMAT_VERSION",
]

# 1: arrays under coord__ / extra__ prefixes (still read); 2: every array under its own name
FORMAT_VERSION = 2

PathLike = str | os.PathLike


# --- atomic writes ---------------------------------------------------------------------
def _create_temp(directory: Path, name: str) -> tuple[int, Path]:
    """Create a fresh temp file beside the target, mode 0o666 less the process umask.

    ``os.open(O_CREAT | O_EXCL, 0o666)`` lets the kernel apply the umask, as ``open()`` does,
    without reading or changing the process umask (``os.umask`` is process state and not
    thread-safe; ``mkstemp`` would make every output private, 0o600).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits collide
            continue
    raise FileExistsError(f"cannot create a temporary file in {str(directory)!r}")  # pragma: no cover


def _atomic_write(path: PathLike, write) -> Path:
    """Run ``write(fileobj)`` on a temp file beside ``path``, fsync, then ``os.replace``."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(directory, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable (best effort: not every platform allows it)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - platform dependent
        pass
    return path


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, replace).

    Args:
      path: target file; missing parent directories are created.
      data: the bytes to write.

    Returns:
      The target path.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes; got {type(data).__name__}")
    return _atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see ``atomic_write_bytes``)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str; got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode(encoding))


def _write_npz(fh, arrays: Mapping[str, np.ndarray]) -> None:
    """The ``np.savez`` file format (one ``NAME.npy`` per array in a zip), for any names:
    ``np.savez(**arrays)`` cannot take an array called ``file`` or ``allow_pickle``."""
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arr, allow_pickle=False)


def save_npz_atomic(path: PathLike, **arrays: Any) -> Path:
    """Write ``.npz`` data (``np.load`` reads it) to ``path`` atomically; the file name is
    used as given (no ``.npz`` added).

    Object arrays are refused (they would need pickle to load back).
    """
    clean = {}
    for key, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TypeError(f"array {key!r} has dtype object; only numeric/bool/str arrays can be saved")
        clean[key] = arr
    return _atomic_write(path, lambda fh: _write_npz(fh, clean))


def _json_default(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serializable")


def save_json_atomic(path: PathLike, obj: Any, *, indent: int = 2) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically. NumPy scalars / arrays become numbers / lists.

    Non-finite floats are written as the JSON extensions ``NaN`` / ``Infinity`` (Python's
    ``json`` reads them back).
    """
    return atomic_write_text(path, _json_text(obj, indent))


def _json_text(obj: Any, indent: int = 2) -> str:
    return json.dumps(obj, indent=indent, default=_json_default, sort_keys=False) + "\n"


def load_json(path: PathLike) -> Any:
    """Read a JSON file (the counterpart of ``save_json_atomic``)."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _jsonable(obj: Any) -> Any:
    """The value ``obj`` becomes after a JSON round trip (tuples -> lists, NumPy -> Python)."""
    return json.loads(json.dumps(obj, default=_json_default))


def runtime_meta() -> dict[str, Any]:
    """gradlab / JAX / NumPy versions and the default JAX device(s), for ``Result.meta``."""
    from gradlab._version import __version__

    meta: dict[str, Any] = {"gradlab_version": __version__, "numpy_version": np.__version__}
    if os.environ.get("GLIBC_TUNABLES"):  # how the C library served memory (gradlab train's huge pages)
        meta["glibc_tunables"] = os.environ["GLIBC_TUNABLES"]
    try:
        import jax

        devices = jax.devices()
        meta["jax_version"] = jax.__version__
        meta["backend"] = jax.default_backend()
        meta["device"] = str(devices[0].device_kind) if devices else "none"
        meta["device_count"] = len(devices)
    except Exception as exc:  # pragma: no cover - JAX missing or broken
        meta["jax_version"] = None
        meta["device"] = f"unavailable ({type(exc).__name__})"
    return meta


def load_views(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read two views ``h`` and ``h_prime`` (N, D) of N pairs from an ``.npz`` (``np.savez(f, h=..., h_prime=...)``).

    Returns:
      ``(h, h_prime)`` as float64 arrays.

    Raises:
      ValueError: one line for anything unreadable: not an ``.npz``, missing arrays, a
        non-numeric dtype, shapes that differ or are not (N, D) with N >= 2, non-finite values.

    Examples:
      >>> import numpy as np, tempfile, os
      >>> path = os.path.join(tempfile.mkdtemp(), "views.npz")
      >>> np.savez(path, h=np.eye(3), h_prime=np.eye(3))
      >>> [v.shape for v in load_views(path)]
      [(3, 3), (3, 3)]
    """
    path = Path(path)
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded as data:
                keys = set(data.files)
                raw = {k: np.asarray(data[k]) for k in ("h", "h_prime") if k in keys}
    except OSError as exc:
        raise ValueError(f"cannot read embeddings file {str(path)!r}: {exc.strerror or exc}") from None
    except (ValueError, EOFError) as exc:
        raise ValueError(f"cannot read embeddings file {str(path)!r}: not a valid .npz ({exc})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(f"embeddings file {str(path)!r} must be an .npz holding arrays 'h' and 'h_prime' "
                         f"(np.savez); got a single array")
    if len(raw) < 2:
        raise ValueError(f"embeddings file {str(path)!r} must hold arrays 'h' and 'h_prime'; found {sorted(keys)}")
    for k, arr in raw.items():
        if arr.dtype.kind not in "fiu":
            raise ValueError(f"embeddings {k!r} must be a real numeric array; got dtype {arr.dtype}")
    h, hp = raw["h"].astype(float), raw["h_prime"].astype(float)
    if h.ndim != 2 or h.shape != hp.shape:
        raise ValueError(f"embeddings 'h' and 'h_prime' must both have shape (N, D); got {h.shape} and {hp.shape}")
    if h.shape[0] < 2:
        raise ValueError(f"embeddings need N >= 2 pairs; got N = {h.shape[0]}")
    if not (np.all(np.isfinite(h)) and np.all(np.isfinite(hp))):
        raise ValueError("embeddings contain non-finite values")
    return h, hp


# --- flat series --------------------------------------------------------------------------
def series_keys(series: Mapping[str, Any], stat: str) -> list[str]:
    """The keys k of the flat series ``"<stat>/<k>"`` (one level), in order: the τ, λ or losses of
    a monitor log's series (``gradlab.monitor.log_series``), as its report saves them.

    Examples:
      >>> series_keys({"step": 0, "hardest_share/0.05": 0, "hardest_share/0.1": 0, "ratio/arccon/x": 0}, "hardest_share")
      ['0.05', '0.1']
    """
    return [k.split("/", 1)[1] for k in series if k.startswith(stat + "/") and k.count("/") == 1]


# --- the bundle --------------------------------------------------------------------------
def _stem(stem: PathLike) -> Path:
    p = Path(stem)
    if p.suffix in (".npz", ".json"):
        p = p.with_suffix("")
    return p


def _arrays_equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def _meta_equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_meta_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_meta_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@dataclasses.dataclass(eq=False)
class Result:
    """One statistic on named axes, with its standard error, mask and metadata.

    Attributes:
      dims: the axis names of ``mean`` in order, e.g. ``("mu_pos", "mu_neg")``.
      coords: axis name -> 1-D coordinate array (one per name in ``dims``; extra axes
        used only by ``extra`` arrays, e.g. ``"bin"``, may be added).
      mean: the estimate, shape ``tuple(len(coords[d]) for d in dims)``.
      stderr: its Monte-Carlo standard error (same shape), or None for exact values.
      mask: optional bool array (same shape): True where the cell is not reported.
      extra: further named arrays (e.g. ``feasible``, ``satisfied``, ``histogram``).
      extra_dims: optional axis names for each extra array (name -> tuple of dims).
      meta: JSON-able metadata: ``statistic``, ``loss``, ``params``, ``protocol``, ``seed``,
        versions, device, ... (normalized on construction to its JSON round-trip form).

    Axis and extra arrays are also attributes: ``r.mu_pos``, ``r.feasible``.
    """

    dims: tuple[str, ...]
    coords: dict[str, np.ndarray]
    mean: np.ndarray
    stderr: np.ndarray | None = None
    mask: np.ndarray | None = None
    extra: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    extra_dims: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.dims = tuple(str(d) for d in self.dims)
        self.coords = {str(k): np.asarray(v) for k, v in self.coords.items()}
        self.mean = np.asarray(self.mean)
        if self.stderr is not None:
            self.stderr = np.asarray(self.stderr)
        if self.mask is not None:
            self.mask = np.asarray(self.mask, dtype=bool)
        self.extra = {str(k): np.asarray(v) for k, v in self.extra.items()}
        self.extra_dims = {str(k): tuple(str(d) for d in v) for k, v in self.extra_dims.items()}
        self.meta = _jsonable(dict(self.meta))
        self._validate()

    def _validate(self):
        missing = [d for d in self.dims if d not in self.coords]
        if missing:
            raise ValueError(f"dims {self.dims} name axes without coordinates: {missing}")
        for name, c in self.coords.items():
            if c.ndim != 1:
                raise ValueError(f"coordinate {name!r} must be 1-D; got shape {c.shape}")
        shape = self.shape
        if self.mean.shape != shape:
            raise ValueError(f"mean has shape {self.mean.shape}; dims {self.dims} need {shape}")
        for nm in ("stderr", "mask"):
            arr = getattr(self, nm)
            if arr is not None and arr.shape != shape:
                raise ValueError(f"{nm} has shape {arr.shape}; dims {self.dims} need {shape}")
        named = {"mean", "stderr", "mask"} & set(self.coords)
        if named:
            raise ValueError(f"axes may not be named {sorted(named)}")
        reserved = {"mean", "stderr", "mask"} | set(self.coords)
        clash = reserved & set(self.extra)
        if clash:
            raise ValueError(f"extra arrays may not reuse the names {sorted(clash)}")
        for name, dd in self.extra_dims.items():
            if name not in self.extra:
                raise ValueError(f"extra_dims names {name!r}, which is not an extra array")
            want = tuple(len(self.coords[d]) if d in self.coords else -1 for d in dd)
            got = self.extra[name].shape
            if len(want) != len(got) or any(w not in (-1, g) for w, g in zip(want, got, strict=False)):
                raise ValueError(f"extra array {name!r} has shape {got}; its dims {dd} need {want}")
        for name, arr in [*self.coords.items(), *self.extra.items(), ("mean", self.mean)]:
            if arr.dtype == object:
                raise TypeError(f"array {name!r} has dtype object; use numeric, bool or str arrays")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(self.coords[d]) for d in self.dims)

    def __getattr__(self, name: str):
        # only called when normal lookup fails: expose axes and extra arrays by name
        if name.startswith("_") or name in ("coords", "extra"):
            raise AttributeError(name)
        if name in self.coords:
            return self.coords[name]
        if name in self.extra:
            return self.extra[name]
        raise AttributeError(f"Result has no field, axis or extra array named {name!r}")

    def masked_mean(self) -> np.ndarray:
        """``mean`` with masked cells set to NaN (for plotting)."""
        if self.mask is None:
            return self.mean
        out = np.array(self.mean, dtype=np.result_type(self.mean.dtype, np.float32))
        out[self.mask] = np.nan
        return out

    def __eq__(self, other) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (
            self.dims == other.dims
            and self.coords.keys() == other.coords.keys()
            and all(_arrays_equal(self.coords[k], other.coords[k]) for k in self.coords)
            and _arrays_equal(self.mean, other.mean)
            and _arrays_equal(self.stderr, other.stderr)
            and _arrays_equal(self.mask, other.mask)
            and self.extra.keys() == other.extra.keys()
            and all(_arrays_equal(self.extra[k], other.extra[k]) for k in self.extra)
            and self.extra_dims == other.extra_dims
            and _meta_equal(self.meta, other.meta)
        )

    __hash__ = None  # mutable arrays inside

    def __repr__(self) -> str:
        axes = ", ".join(f"{d}={len(self.coords[d])}" for d in self.dims)
        extra = f", extra={sorted(self.extra)}" if self.extra else ""
        stat = self.meta.get("statistic", "")
        loss = self.meta.get("loss", "")
        what = " ".join(str(s) for s in (stat, loss) if s)
        return f"Result({what + ': ' if what else ''}{axes}{extra})"

    @classmethod
    def stack(cls, results: Sequence[Result], dim: str, labels: Sequence[str],
              meta: Mapping[str, Any] | None = None) -> Result:
        """Same-shaped Results as one, along a new first axis ``dim`` labelled by ``labels``.

        ``mean`` is stacked; ``stderr``, ``mask`` and each extra array when every Result has
        them. The meta is ``meta`` plus ``panels``: each Result's own meta, in order.

        Examples:
          >>> import numpy as np
          >>> a = Result(dims=("x",), coords={"x": np.arange(2.0)}, mean=np.zeros(2), meta={"loss": "a"})
          >>> b = Result(dims=("x",), coords={"x": np.arange(2.0)}, mean=np.ones(2), meta={"loss": "b"})
          >>> s = Result.stack([a, b], "loss", ["a", "b"])
          >>> s.dims, s.mean.tolist(), [p["loss"] for p in s.meta["panels"]]
          (('loss', 'x'), [[0.0, 0.0], [1.0, 1.0]], ['a', 'b'])
        """
        results = list(results)
        if not results or len(labels) != len(results):
            raise ValueError(f"stack needs one label per Result; got {len(labels)} labels for {len(results)} Results")
        first = results[0]
        if any(r.dims != first.dims or r.shape != first.shape for r in results):
            raise ValueError(f"stack needs Results of one shape; got {sorted({(r.dims, r.shape) for r in results})}")

        def stacked(get):
            parts = [get(r) for r in results]
            return None if any(p is None for p in parts) else np.stack(parts)

        extra = {k: stacked(lambda r, k=k: r.extra.get(k)) for k in first.extra}
        extra = {k: v for k, v in extra.items() if v is not None}
        return cls(dims=(dim, *first.dims), coords={dim: np.asarray(labels, dtype=str), **first.coords},
                   mean=np.stack([r.mean for r in results]), stderr=stacked(lambda r: r.stderr),
                   mask=stacked(lambda r: r.mask), extra=extra,
                   extra_dims={k: (dim, *v) for k, v in first.extra_dims.items() if k in extra},
                   meta={**dict(meta or {}), "panels": [r.meta for r in results]})

    # --- files -------------------------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        """Every array under its own name: the axes, ``mean``, ``stderr`` and ``mask`` (when
        present) and the extras. This is the ``.npz`` layout: ``np.load(f)["mu_pos"]``."""
        arrays = dict(self.coords)
        arrays["mean"] = self.mean
        if self.stderr is not None:
            arrays["stderr"] = self.stderr
        if self.mask is not None:
            arrays["mask"] = self.mask
        arrays.update(self.extra)
        return arrays

    def save(self, stem: PathLike, *, provenance: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
        """Write ``stem.npz`` and ``stem.json`` atomically; return both paths.

        ``stem`` may carry a ``.npz`` / ``.json`` suffix; it is dropped. ``provenance``
        adds top-level JSON keys (the CLI's command line, parameters, versions, ...); they
        may not reuse the header's own keys.
        """
        base = _stem(stem)
        npz_path = base.with_name(base.name + ".npz")
        json_path = base.with_name(base.name + ".json")
        header = {
            "format": "gradlab.Result",
            "format_version": FORMAT_VERSION,
            "dims": list(self.dims),
            "coords": list(self.coords),
            "extra": list(self.extra),
            "extra_dims": {k: list(v) for k, v in self.extra_dims.items()},
            "has_stderr": self.stderr is not None,
            "has_mask": self.mask is not None,
            "npz": npz_path.name,
            "meta": self.meta,
        }
        clash = set(header) & set(provenance or {})
        if clash:
            raise ValueError(f"provenance may not reuse the header keys {sorted(clash)}")
        text = _json_text({**header, **dict(provenance or {})})  # fails before anything is written
        save_npz_atomic(npz_path, **self.arrays())
        atomic_write_text(json_path, text)
        return npz_path, json_path

    @classmethod
    def load(cls, stem: PathLike) -> Result:
        """Read a bundle written by ``save`` or by a ``gradlab`` command (``stem`` with or
        without suffix)."""
        base = _stem(stem)
        json_path = base.with_name(base.name + ".json")
        try:
            header = load_json(json_path)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{json_path} is not valid JSON ({exc})") from None
        if not isinstance(header, dict) or header.get("format") != "gradlab.Result":
            raise ValueError(f"{json_path} is not a gradlab Result header")
        version = header.get("format_version", 0)
        if version > FORMAT_VERSION:
            raise ValueError(f"{json_path} has format version {version}; this gradlab reads <= {FORMAT_VERSION}")
        npz_path = json_path.with_name(header.get("npz", base.name + ".npz"))
        with np.load(npz_path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        coord_key, extra_key = ("coord__{}", "extra__{}") if version < 2 else ("{}", "{}")

        def get(key):
            if key not in arrays:
                raise ValueError(f"{npz_path} lacks the array {key!r} that {json_path.name} lists")
            return arrays[key]

        return cls(
            dims=tuple(header["dims"]),
            coords={k: get(coord_key.format(k)) for k in header["coords"]},
            mean=get("mean"),
            stderr=get("stderr") if header["has_stderr"] else None,
            mask=get("mask") if header["has_mask"] else None,
            extra={k: get(extra_key.format(k)) for k in header["extra"]},
            extra_dims={k: tuple(v) for k, v in header.get("extra_dims", {}).items()},
            meta=header["meta"],
        )
