"""The hook's plumbing: inputs from any framework, bad input, sinks, ``every``, strict mode."""

from __future__ import annotations

import gc
import json
import math
import subprocess
import sys
import textwrap
import warnings
import weakref

import numpy as np
import pytest

from gradlab.monitor import CSVSink, JSONLSink, MonitorInputError, ParadigmMonitor, read_log

# One small configuration and one shape shared by every test here: one compilation.
CFG = dict(losses=["infonce", "mpt"], taus=(0.05,), lambdas=(0.1,), ratio_losses=["arccon"])
N, D = 8, 5


def _batch(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(N, D)).astype(dtype)
    return h, (h + 0.5 * rng.normal(size=(N, D))).astype(dtype)


def _mon(**kw):
    kw = {**CFG, "sink": None, **kw}
    return ParadigmMonitor(**kw)


@pytest.fixture(scope="module")
def expected():
    h, hp = _batch()
    return _mon().update(0, h, hp)


def _same_stats(a, b):
    keys = ("mu_pos", "sigma_neg", "gd_mean", "hardest_share", "lemma1_min_ratio", "m_o", "uniform")
    for k in keys:
        assert json.dumps(a[k], sort_keys=True) == json.dumps(b[k], sort_keys=True), k


# --- inputs ----------------------------------------------------------------------------
class ArrayOnly:
    """Exposes only ``__array__`` (like many third-party tensors)."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._a, dtype=dtype)


class DLPackOnly:
    """Exposes only the DLPack protocol, delegating to a NumPy or JAX array."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class GradTracked:
    """Refuses export until ``detach()`` (like a tensor with requires_grad)."""

    dlpack_error = RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
    array_error = RuntimeError("Can't call numpy() on Tensor that requires grad.")
    device = (1, 0)

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *a, **k):
        raise self.dlpack_error

    def __dlpack_device__(self):
        return self.device

    def __array__(self, dtype=None, copy=None):
        raise self.array_error

    def detach(self):
        return ArrayOnly(self._a)


class OnAnotherDevice(GradTracked):
    """Like a CUDA tensor with a CPU-only JAX: no host export until ``cpu()``."""

    dlpack_error = BufferError("unsupported device")
    array_error = TypeError("can't convert cuda:0 device type tensor to numpy")
    device = (2, 0)  # kDLCUDA

    def detach(self):
        return self

    def cpu(self):
        return ArrayOnly(self._a)


class GradTrackedOnAnotherDevice(GradTracked):
    def detach(self):
        return OnAnotherDevice(self._a)


def test_numpy_jax_array_dlpack_inputs_agree(expected):
    import jax
    import jax.numpy as jnp

    def pinned(a):  # a JAX array in the host's pinned memory, as gradlab's training step hands its views over on a GPU
        return jax.device_put(jnp.asarray(a), jax.sharding.SingleDeviceSharding(jax.devices()[0],
                                                                                 memory_kind="pinned_host"))

    assert pinned(np.ones(2)).sharding.memory_kind == "pinned_host"
    h, hp = _batch()
    mon = _mon()
    for wrap in (np.asarray, jnp.asarray, ArrayOnly, DLPackOnly, lambda a: DLPackOnly(jnp.asarray(a)), GradTracked,
                 GradTrackedOnAnotherDevice, lambda a: a.tolist(), pinned):
        rec = mon.update(0, wrap(h), wrap(hp))
        assert rec["valid"], rec["reason"]
        _same_stats(rec, expected)


def test_float64_and_float16_inputs_are_cast(expected):
    h, hp = _batch()
    rec = _mon().update(0, h.astype(np.float64), hp.astype(np.float64))
    _same_stats(rec, expected)
    rec16 = _mon().update(0, h.astype(np.float16), hp.astype(np.float16))
    assert rec16["valid"] and rec16["mu_pos"] == pytest.approx(expected["mu_pos"], rel=1e-2)


def test_callers_arrays_are_neither_modified_nor_retained():
    h, hp = _batch()
    h0, hp0 = h.copy(), hp.copy()
    mon = _mon()
    mon.update(0, h, hp)
    np.testing.assert_array_equal(h, h0)
    np.testing.assert_array_equal(hp, hp0)
    assert h.flags.writeable  # untouched flags too
    refs = [weakref.ref(h), weakref.ref(hp)]
    wrapped = ArrayOnly(h0.copy())
    refs.append(weakref.ref(wrapped))
    mon.update(1, wrapped, hp0)
    del h, hp, wrapped
    gc.collect()
    assert all(r() is None for r in refs), "the monitor kept a reference to the caller's array"


def test_torch_never_imported():
    code = textwrap.dedent(
        """
        import sys, numpy as np
        from gradlab.monitor import ParadigmMonitor, analyze
        class DL:
            def __init__(s, a): s.a = a
            def __dlpack__(s, *a, **k): return s.a.__dlpack__(*a, **k)
            def __dlpack_device__(s): return s.a.__dlpack_device__()
        rng = np.random.default_rng(0)
        h = rng.normal(size=(6, 4)).astype(np.float32)
        m = ParadigmMonitor(losses=["infonce"], taus=(0.05,), lambdas=(0.1,), ratio_losses=[], sink=None)
        assert m.update(0, DL(h), DL(h + 0.1))["valid"]
        analyze(h, h + 0.1, batch_size=3, losses=["infonce"], taus=(0.05,), lambdas=(0.1,), ratio_losses=[])
        import gradlab.monitor._report  # the report's data too
        import gradlab.figures  # and the report that draws it
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
    assert "torch" not in sys.modules


# --- bad input ---------------------------------------------------------------------------
def _bad_cases():
    h, hp = _batch()
    nan = h.copy()
    nan[2, 3] = np.nan
    inf = hp.copy()
    inf[0, 0] = np.inf
    zero = h.copy()
    zero[4] = 0.0
    zero_p = hp.copy()
    zero_p[1] = 0.0
    return {
        "nan": (nan, hp, "non-finite"),
        "inf": (h, inf, "h_prime has 1 non-finite"),
        "zero_h": (zero, hp, "h has a zero vector at row 4"),
        "zero_h_prime": (h, zero_p, "h_prime has a zero vector at row 1"),
        "mismatch": (h, hp[:, :3], "same shape"),
        "rows_mismatch": (h, hp[:5], "same shape"),
        "n_lt_2": (h[:1], hp[:1], "N >= 2"),
        "rank1": (h[0], hp[0], "shape (N, D)"),
        "rank3": (h[None], hp[None], "shape (N, D)"),
        "complex": (h.astype(np.complex64), hp, "real numbers"),
        "strings": ("abc", hp, "real numbers"),
        "object": (object(), hp, "h"),
        "none": (None, hp, "h"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_gives_marked_record(case, tmp_path):
    h, hp, reason = _bad_cases()[case]
    log = tmp_path / "m.jsonl"
    mon = _mon(sink=[str(log), str(tmp_path / "m.csv")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning
        rec = mon.update(3, h, hp)
    assert rec["valid"] is False and reason in rec["reason"]
    assert rec["mu_pos"] is None and rec["gd_mean"]["infonce"] is None
    assert rec["lemma1_min_ratio"]["0.1"]["q50"] is None
    mon.close()
    (logged,) = read_log(log)
    assert logged["valid"] is False and logged["reason"] == rec["reason"] and logged["step"] == 3
    assert read_log(tmp_path / "m.csv") == [logged]  # the CSV log reads back the same marked record
    # the next good batch is measured normally
    good = mon.update(4, *_batch())
    assert good["valid"]


@pytest.mark.parametrize("case", ["nan", "zero_h", "mismatch", "n_lt_2", "strings"])
def test_strict_raises(case):
    h, hp, reason = _bad_cases()[case]
    with pytest.raises(MonitorInputError, match=reason.split(" at ")[0][:12]):
        _mon(strict=True).update(0, h, hp)


def test_invalid_record_has_same_keys_as_valid(expected):
    h, hp, _ = _bad_cases()["nan"]
    bad = _mon().update(0, h, hp)
    assert set(bad) == set(expected)
    assert set(bad["hardest_share"]) == set(expected["hardest_share"]) == {"0.05"}


# --- schedule, sinks ------------------------------------------------------------------------
def test_every_and_callable_sink():
    got = []
    mon = _mon(every=3, sink=got.append)
    h, hp = _batch()
    outs = [mon.update(s, h, hp) for s in range(7)]
    assert [o is not None for o in outs] == [True, False, False, True, False, False, True]
    assert [r["step"] for r in got] == [0, 3, 6]
    assert got[0]["update_s"] > 0 and got[0]["time"] > 1e9
    mon2 = _mon(every=2, sink=got.append)
    mon2(None, h, hp)  # callback form; step None counts calls
    assert got[-1]["step"] == 0


def test_a_record_started_without_waiting_is_written_later_and_the_same(expected, tmp_path):
    """``update(..., wait=False)`` starts the statistics and returns None; the record comes with
    the next update (written before that update's own), with ``flush`` or with ``close``, and it
    is the record ``update`` returns (every statistic; only ``time`` and ``update_s`` differ)."""
    got = []
    mon = _mon(every=2, sink=got.append)
    h, hp = _batch()
    assert mon.update(0, h, hp, wait=False) is None and got == []
    assert mon.update(1, h, hp, wait=False) is None  # a skipped step: nothing started
    assert [r["step"] for r in got] == [0]  # ... but the pending record is written first
    assert mon.flush() is None
    record = got[0]
    assert record["valid"] and record["update_s"] > 0
    assert {k: v for k, v in record.items() if k not in ("time", "update_s")} == \
        {k: v for k, v in expected.items() if k not in ("time", "update_s")}
    _same_stats(record, expected)
    mon.update(2, h, hp, wait=False)
    last = mon.update(4, *_batch(1))  # writes step 2's record, then its own
    assert [r["step"] for r in got] == [0, 2, 4] and last is got[-1]
    mon.update(6, h[:1], hp[:1], wait=False)  # a bad batch: its invalid record is pending too
    assert mon.flush()["valid"] is False
    path = tmp_path / "log.jsonl"
    with ParadigmMonitor(**CFG, sink=str(path)) as mon2:
        mon2.update(0, h, hp, wait=False)
    assert [r["step"] for r in read_log(path)] == [0]  # close wrote it


def test_jsonl_append_safe_after_crash(tmp_path):
    log = tmp_path / "sub" / "m.jsonl"
    h, hp = _batch()
    mon = _mon(sink=str(log))
    for s in range(3):
        mon.update(s, h, hp)
    mon.close()
    with open(log, "a") as f:  # a crash mid-write: a truncated last line
        f.write('{"step": 3, "mu_pos": 0.1')
    recs = read_log(log)
    assert [r["step"] for r in recs] == [0, 1, 2]
    mon2 = _mon(sink=str(log))
    mon2.update(4, h, hp)
    mon2.close()
    recs = read_log(log)
    assert [r["step"] for r in recs] == [0, 1, 2, 4]
    for line in open(log).read().splitlines()[:3]:
        json.loads(line)  # strict JSON: no NaN tokens


def test_jsonl_nan_written_as_null(tmp_path):
    log = tmp_path / "m.jsonl"
    sink = JSONLSink(log)
    sink({"step": 0, "x": float("nan"), "y": {"a": float("inf")}})
    sink.close()
    text = log.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert read_log(log) == [{"step": 0, "x": None, "y": {"a": None}}]


def test_csv_sink_appends_and_keeps_header(tmp_path):
    import csv

    path = tmp_path / "m.csv"
    h, hp = _batch()
    mon = _mon(sink=str(path))
    mon.update(0, h, hp)
    mon.update(1, *_bad_cases()["nan"][:2])
    mon.close()
    mon2 = ParadigmMonitor(**CFG, sink=CSVSink(path))
    mon2.update(2, h, hp)
    mon2.close()
    rows = list(csv.DictReader(open(path, newline="")))
    assert [r["step"] for r in rows] == ["0", "1", "2"]
    assert rows[1]["valid"] == "False" and rows[1]["mu_pos"] == ""
    assert math.isclose(float(rows[0]["hardest_share/0.05"]), float(rows[2]["hardest_share/0.05"]))
    assert "lemma1_min_ratio/0.1/q50" in rows[0]


def test_csv_append_safe_after_crash(tmp_path):
    log, csv_log = tmp_path / "m.jsonl", tmp_path / "sub" / "m.csv"
    h, hp = _batch()
    mon = _mon(sink=[str(log), str(csv_log)])
    for s in range(3):
        mon.update(s, h, hp)
    mon.close()
    with open(csv_log, "a") as f:  # a crash mid-write: a truncated last row (inside a quoted list, too)
        f.write('3,1700000000.5,True,,8,5,0.1,"[1.0, 2.')
    assert [r["step"] for r in read_log(csv_log)] == [0, 1, 2]
    with open(log, "a") as f:
        f.write('{"step": 3, "mu_pos": 0.1')
    mon2 = _mon(sink=[str(log), CSVSink(csv_log)])
    mon2.update(4, h, hp)
    mon2.close()
    recs = read_log(csv_log)
    assert [r["step"] for r in recs] == [0, 1, 2, 4]  # the cut row now sits mid-file: still only it is lost
    assert recs == read_log(log)
    assert recs[3]["mu_pos"] == recs[0]["mu_pos"] and recs[3]["valid"] is True


def test_csv_sink_is_lossless(tmp_path):
    path = tmp_path / "m.csv"
    floats = [0.1 + 0.2, 1 / 3, 5e-324, 1e-300, -0.0, 1.7976931348623157e308, float(np.float32(0.7083474))]
    rec = {"step": 2**53 + 1, "valid": False, "reason": 'line one\nline "two", three', "x": floats,
           "y": {"a": float("nan"), "b": {"c": float("-inf"), "d": 2.5}}, "z": None, "n": 0, "t": 1.0}
    sink = CSVSink(path)
    sink(rec)
    sink.close()
    assert len(path.read_text().splitlines()) == 2  # header + one line per record, whatever the reason holds
    (back,) = read_log(path)
    assert back == {**rec, "reason": 'line one line "two", three', "y": {"a": None, "b": {"c": None, "d": 2.5}}}
    assert math.copysign(1.0, back["x"][4]) == -1.0  # -0.0 kept its sign
    assert type(back["step"]) is int and type(back["t"]) is float and type(back["n"]) is int


def test_csv_log_with_huge_cells_and_a_cut_last_row(tmp_path):
    path = tmp_path / "m.csv"
    sink = CSVSink(path)
    edges = [i / 7 for i in range(20_000)]  # one cell of ~400k characters (csv's default limit: 128k)
    for step in range(3):
        sink({"step": step, "edges": edges, "update_s": 0.123456789})
    sink.close()
    text = path.read_text()
    assert len(text.splitlines()[1]) > 131_072
    assert [r["step"] for r in read_log(path)] == [0, 1, 2] and read_log(path)[2]["edges"] == edges
    path.write_text(text[:-4])  # a crash inside the last row's last cell
    assert [r["step"] for r in read_log(path)] == [0, 1]  # the cut row is not read with a shortened value


def test_unflatten_inverts_flatten(expected):
    from gradlab.monitor import flatten, unflatten

    rec = json.loads(json.dumps(expected))  # as a log holds it
    flat = flatten(rec)
    assert "lemma1_min_ratio/0.1/q50" in flat and "gd_mean/infonce" in flat
    assert unflatten(flat) == rec
    assert unflatten({"a/b": 1, "a/c": "[1, null]", "r": "[not json", "s": "x"}) == \
        {"a": {"b": 1, "c": [1, None]}, "r": "[not json", "s": "x"}
    assert unflatten({"a": 1, "a/b": 2}) == {"a": 1, "a/b": 2}  # a value/group clash stays flat
    assert unflatten({"a/b": 2, "a": 1}) == {"a": {"b": 2}}  # ... and never overwrites


def test_failing_sink_warns_but_does_not_raise():
    def broken(record):
        raise OSError("disk full")

    mon = _mon(sink=[broken])
    with pytest.warns(RuntimeWarning, match="disk full"):
        rec = mon.update(0, *_batch())
    assert rec["valid"]


def test_constructor_validation():
    with pytest.raises(ValueError, match="every"):
        ParadigmMonitor(every=0, sink=None)
    with pytest.raises(ValueError, match="unknown loss"):
        ParadigmMonitor(losses=["nope"], sink=None)
    with pytest.raises(ValueError, match="tau"):
        ParadigmMonitor(taus=(0.0,), sink=None)
    with pytest.raises(ValueError, match="twice"):
        ParadigmMonitor(losses=["infonce", "infonce"], sink=None)
    with pytest.raises(TypeError, match="sink"):
        ParadigmMonitor(sink=3.5)


# --- edges ------------------------------------------------------------------------------------
def test_identical_views_and_collapsed_batch_float32():
    h, _ = _batch()
    rec = _mon().update(0, h, h.copy())
    assert rec["valid"]
    assert abs(rec["mu_pos"]) < 1e-6 and abs(rec["sigma_pos"]) < 1e-6  # not arccos(1 - ulp) ≈ 3e-4
    assert rec["cos_pos_mean"] == pytest.approx(1.0, abs=1e-6) and rec["align"] == pytest.approx(0.0, abs=1e-6)
    # sin θ_ii' -> 0: the minimum ratio diverges (or the lemma is infeasible); r = 1 never suffices
    q10 = rec["lemma1_min_ratio"]["0.1"]["q10"]
    assert q10 is None or q10 > 1e3
    assert rec["lemma1_satisfied_fraction"]["0.1"] == 0.0
    collapsed = np.tile(h[:1], (N, 1)) * np.arange(1, N + 1, dtype=np.float32)[:, None]
    rec = _mon().update(0, collapsed, collapsed)
    assert rec["valid"]
    assert rec["m_o"] == pytest.approx(1.0, abs=1e-6) and rec["m_r"] == pytest.approx(0.0, abs=1e-3)
    assert rec["mu_neg"] == pytest.approx(0.0, abs=1e-3)
    assert rec["hardest_share"]["0.05"] is None  # no push direction at all: undefined, not invented
    assert rec["uniform"] == pytest.approx(0.0, abs=1e-5)
