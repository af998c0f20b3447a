"""gradlab.io: the Result bundle round trip and atomic writes."""

import json
import os

import numpy as np
import pytest

from gradlab import io as gio
from gradlab.io import (
    Result,
    atomic_write_bytes,
    atomic_write_text,
    save_json_atomic,
    save_npz_atomic,
)


def _result(**over):
    rng = np.random.default_rng(0)
    kw = dict(
        dims=("mu_pos", "mu_neg"),
        coords={"mu_pos": np.linspace(0.1, 1.5, 3), "mu_neg": np.linspace(0.1, 3.1, 4).astype(np.float32)},
        mean=rng.normal(size=(3, 4)).astype(np.float32),
        stderr=np.abs(rng.normal(size=(3, 4))),
        mask=rng.random((3, 4)) > 0.5,
        extra={"feasible": rng.random((3, 4)), "hist": np.arange(10, dtype=np.int64).reshape(2, 5), "bin": np.arange(5.0)},
        extra_dims={"hist": ("lam", "bin")},
        meta={"loss": "infonce", "params": {"tau": 0.05}, "protocol": {"grid": 3, "range": (0.1, 1.5)},
              "seed": 7, "nan": float("nan"), "np": np.float32(0.5)},
    )
    kw.update(over)
    return Result(**kw)


def test_round_trip_is_lossless(tmp_path):
    r = _result()
    r.mean[0, 0] = np.nan
    npz, js = r.save(tmp_path / "sub" / "gd")
    assert npz.name == "gd.npz" and js.name == "gd.json" and npz.exists() and js.exists()
    back = Result.load(tmp_path / "sub" / "gd")
    assert back == r
    # dtypes and bits are preserved, not just values
    assert back.coords["mu_neg"].dtype == np.float32
    assert back.mean.dtype == np.float32
    assert back.extra["hist"].dtype == np.int64
    np.testing.assert_array_equal(back.mean.view(np.uint32), r.mean.view(np.uint32))
    # meta is normalized to its JSON form: tuples -> lists, numpy scalars -> float
    assert back.meta["protocol"]["range"] == [0.1, 1.5]
    assert back.meta["np"] == 0.5 and isinstance(back.meta["np"], float)
    # suffixes are accepted on both sides
    assert Result.load(str(npz)) == r and Result.load(js) == r


def test_round_trip_without_optional_fields(tmp_path):
    r = _result(stderr=None, mask=None, extra={}, extra_dims={}, meta={})
    r.save(tmp_path / "x.npz")
    back = Result.load(tmp_path / "x")
    assert back == r and back.stderr is None and back.mask is None


def test_equality_detects_differences():
    a, b = _result(), _result()
    assert a == b
    b.mean[1, 1] += 1
    assert a != b
    c = _result(meta={"loss": "arccon"})
    assert a != c


def test_attribute_access_and_masked_mean():
    r = _result()
    np.testing.assert_array_equal(r.mu_pos, r.coords["mu_pos"])
    np.testing.assert_array_equal(r.feasible, r.extra["feasible"])
    with pytest.raises(AttributeError, match="nope"):
        _ = r.nope
    mm = r.masked_mean()
    assert np.all(np.isnan(mm[r.mask])) and np.array_equal(mm[~r.mask], r.mean[~r.mask])
    assert r.shape == (3, 4)
    assert "mu_pos=3" in repr(r)


@pytest.mark.parametrize(
    "over, match",
    [
        (dict(mean=np.zeros((3, 5))), "mean has shape"),
        (dict(stderr=np.zeros((2, 4))), "stderr has shape"),
        (dict(mask=np.zeros((4, 3), bool)), "mask has shape"),
        (dict(dims=("mu_pos", "tau")), "without coordinates"),
        (dict(extra={"mean": np.zeros(2)}, extra_dims={}), "reuse"),
        (dict(extra_dims={"hist": ("mu_pos", "bin")}), "hist"),
        (dict(extra_dims={"missing": ("bin",)}), "not an extra"),
    ],
)
def test_validation_names_the_problem(over, match):
    with pytest.raises(ValueError, match=match):
        _result(**over)


def test_npz_holds_every_array_under_its_own_name(tmp_path):
    r = _result()
    npz, js = r.save(tmp_path / "gd", provenance={"command_line": "gradlab heatmap", "seed": 7})
    with np.load(npz) as data:  # a notebook needs no gradlab to read it
        assert set(data.files) == {"mu_pos", "mu_neg", "mean", "stderr", "mask", "feasible", "hist", "bin"}
        np.testing.assert_array_equal(data["mu_neg"], r.mu_neg)
        np.testing.assert_array_equal(data["hist"], r.hist)
    header = json.loads(js.read_text())
    assert header["command_line"] == "gradlab heatmap" and header["format_version"] == gio.FORMAT_VERSION
    assert Result.load(tmp_path / "gd") == r
    with pytest.raises(ValueError, match="header keys"):
        r.save(tmp_path / "x", provenance={"dims": []})
    with pytest.raises(ValueError, match="axes may not be named"):
        _result(dims=("mask",), coords={"mask": np.arange(3.0)}, mean=np.zeros(3), stderr=None, mask=None, extra={},
                extra_dims={})


def test_any_array_name_saves_and_a_failed_save_writes_nothing(tmp_path):
    # np.savez(**arrays) cannot take these names; the bundle must still round-trip
    r = Result(dims=("file",), coords={"file": np.arange(3.0)}, mean=np.ones(3), extra={"allow_pickle": np.zeros(2)})
    r.save(tmp_path / "odd")
    assert Result.load(tmp_path / "odd") == r
    with np.load(tmp_path / "odd.npz") as data:
        assert set(data.files) == {"file", "mean", "allow_pickle"}
    # unserializable provenance: the error comes before either file is touched
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    r2 = Result(dims=("file",), coords={"file": np.arange(3.0)}, mean=np.zeros(3))
    with pytest.raises(TypeError, match="not JSON serializable"):
        r2.save(tmp_path / "odd", provenance={"obj": object()})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_load_reads_format_version_1(tmp_path):
    # version 1 kept axes and extras under coord__ / extra__ prefixes
    r = _result()
    np.savez(tmp_path / "old.npz", mean=r.mean, stderr=r.stderr, mask=r.mask,
             **{f"coord__{k}": v for k, v in r.coords.items()}, **{f"extra__{k}": v for k, v in r.extra.items()})
    header = {"format": "gradlab.Result", "format_version": 1, "dims": list(r.dims), "coords": list(r.coords),
              "extra": list(r.extra), "extra_dims": {k: list(v) for k, v in r.extra_dims.items()},
              "has_stderr": True, "has_mask": True, "npz": "old.npz", "meta": r.meta}
    (tmp_path / "old.json").write_text(json.dumps(header))
    assert Result.load(tmp_path / "old") == r


def test_load_errors_name_the_file(tmp_path):
    r = _result()
    npz, js = r.save(tmp_path / "a")
    np.savez(npz, mean=r.mean)  # the arrays the header lists are gone
    with pytest.raises(ValueError, match="lacks the array 'mu_pos'"):
        Result.load(tmp_path / "a")
    js.write_text("{not json")
    with pytest.raises(ValueError, match="a.json is not valid JSON"):
        Result.load(tmp_path / "a")


def test_load_rejects_foreign_json(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="not a gradlab Result"):
        Result.load(tmp_path / "a")


def test_atomic_writes_and_helpers(tmp_path):
    p = atomic_write_bytes(tmp_path / "d" / "b.bin", b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    atomic_write_text(tmp_path / "t.txt", "héllo")
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo"
    save_json_atomic(tmp_path / "j.json", {"a": np.arange(3), "b": np.float64(2.5), "c": (1, 2)})
    assert gio.load_json(tmp_path / "j.json") == {"a": [0, 1, 2], "b": 2.5, "c": [1, 2]}
    save_npz_atomic(tmp_path / "a.npz", x=np.arange(4), y=np.eye(2, dtype=bool))
    with np.load(tmp_path / "a.npz") as d:
        assert d["x"].tolist() == [0, 1, 2, 3] and d["y"].dtype == bool
    with pytest.raises(TypeError, match="object"):
        save_npz_atomic(tmp_path / "o.npz", x=np.array([{}, 1], dtype=object))
    with pytest.raises(TypeError, match="bytes"):
        atomic_write_bytes(tmp_path / "z", "text")
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".tmp")) == []


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "keep.json"
    save_json_atomic(target, {"v": 1})

    class Boom:
        pass

    with pytest.raises(TypeError):
        save_json_atomic(target, {"v": Boom()})  # fails while serializing
    assert gio.load_json(target) == {"v": 1}

    def interrupted(fh):
        fh.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gio._atomic_write(target, interrupted)  # fails mid-write
    assert gio.load_json(target) == {"v": 1}
    assert [f for f in os.listdir(tmp_path) if f != "keep.json"] == []


def test_runtime_meta_has_versions():
    m = gio.runtime_meta()
    import jax

    import gradlab

    assert m["gradlab_version"] == gradlab.__version__
    assert m["jax_version"] == jax.__version__
    assert m["device_count"] >= 1 and isinstance(m["device"], str)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_get_the_umask_mode_not_mkstemp_private(tmp_path, umask):
    """An output file is readable like one made by open(): 0o666 less the umask (mkstemp gives 0o600)."""
    import stat

    old = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "a.json", "{}")
        with open(tmp_path / "witness", "w"):  # the witness: what open() makes under this umask
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(os.stat(path).st_mode) == stat.S_IMODE(os.stat(tmp_path / "witness").st_mode)


def test_atomic_writes_never_touch_the_process_umask(tmp_path, monkeypatch):
    """The umask is process state (not thread-safe): a write must neither read nor set it."""

    def forbidden(*a):
        raise AssertionError("os.umask called during an atomic write")

    monkeypatch.setattr(os, "umask", forbidden)
    save_json_atomic(tmp_path / "m.json", {"a": 1})
    save_npz_atomic(tmp_path / "d.npz", a=np.arange(3))
    _result().save(tmp_path / "r")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npz", "m.json", "r.json", "r.npz"]


def test_atomic_writes_are_thread_safe(tmp_path):
    """Threads writing at once each get their own temp file and a complete target."""
    import threading

    errors = []

    def work(i):
        try:
            for k in range(5):
                atomic_write_text(tmp_path / f"t{i}.txt", f"{i}:{k}" * 100)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == sorted(f"t{i}.txt" for i in range(8))
    assert all((tmp_path / f"t{i}.txt").read_text() == f"{i}:4" * 100 for i in range(8))
