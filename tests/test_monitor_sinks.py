"""Where records go: nowhere by default, TensorBoard (read back with TensorBoard's own reader), trackers."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from gradlab.monitor import LogSink, ParadigmMonitor, TensorBoardSink, scalars
from gradlab.monitor._sinks import make_sink  # private on purpose: the sink factory behind sink=

CFG = dict(losses=["infonce", "mpt"], taus=(0.05,), lambdas=(0.1,), ratio_losses=["arccon"])
N, D = 8, 5


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(N, D)).astype(np.float32)
    return h, (h + 0.5 * rng.normal(size=(N, D))).astype(np.float32)


def test_bare_monitor_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with ParadigmMonitor(**CFG) as mon:
        rec = mon.update(0, *_batch())
    assert rec["valid"] and mon.sinks == []
    assert os.listdir(tmp_path) == []


def test_scalars_flatten_the_curves():
    rec = {"step": 4, "time": 1.0, "valid": True, "reason": None, "n": 8, "d": 5, "mu_pos": 0.5, "sigma_pos": None,
           "gd_mean": {"infonce": 0.25, "mpt": float("nan")}, "hardest_share": {"0.05": 0.125},
           "lemma1_min_ratio": {"0.1": {"q50": 1.5}}, "rankme": 3.0, "rankme_rows": 64, "rankme_step": 2,
           "histograms": {"cos_pos": [1, 2]}}
    assert scalars(rec) == {"mu_pos": 0.5, "gd_mean/infonce": 0.25, "hardest_share/0.05": 0.125,
                            "lemma1_min_ratio/0.1/q50": 1.5, "rankme": 3.0}


def test_log_sink_calls_log_with_step_and_new_windows_once():
    calls = []

    def log(data, step=None):  # wandb.log's and trackio.log's signature
        calls.append((step, data))

    mon = ParadigmMonitor(**CFG, sink=LogSink(log, prefix="paradigm/"), rankme_window=2 * N)
    recs = []
    for step in range(4):
        recs.append(mon.update(step, *_batch(step)))
        mon.window.close()  # deterministic: each window's values arrive with the next update
    assert [c[0] for c in calls] == [0, 1, 2, 3]
    for (_, data), rec in zip(calls, recs, strict=True):
        assert data["paradigm/gd_mean/infonce"] == rec["gd_mean"]["infonce"]
        assert data["paradigm/hardest_share/0.05"] == rec["hardest_share"]["0.05"]
    with_rankme = [step for step, data in calls if "paradigm/rankme" in data]
    assert with_rankme == [2]  # window of steps 0-1 arrives at step 2; step 3 repeats it: not re-logged
    assert calls[2][1]["paradigm/rankme_step"] == 1.0
    assert calls[2][1]["paradigm/rankme"] == recs[2]["rankme"]


def test_log_sink_rejects_a_non_callable():
    with pytest.raises(TypeError, match="LogSink"):
        LogSink("wandb")


def test_tb_sink_spec_needs_a_directory():
    with pytest.raises(ValueError, match="tb:"):
        make_sink("tb:")


def _read_events(logdir):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


@pytest.mark.parametrize("spec", ["object", "string"])
def test_tensorboard_events_read_back(tmp_path, spec):
    pytest.importorskip("tensorboardX")
    logdir = tmp_path / "runs" / "exp"
    sink = TensorBoardSink(logdir) if spec == "object" else f"tb:{logdir}"
    recs = []
    with ParadigmMonitor(**CFG, sink=sink, histograms=True, hist_bins=20, rankme_window=2 * N) as mon:
        for step in (0, 10, 20):
            recs.append(mon.update(step, *_batch(step)))
            mon.window.close()
    acc = _read_events(logdir)
    tags = acc.Tags()
    for tag in ("mu_pos", "mu_neg", "gd_mean/infonce", "gd_mean/baseline", "hardest_share/0.05",
                "weight_share/0.05", "lemma1_min_ratio/0.1/q50", "embedding_std", "rankme", "alpha_req"):
        assert tag in tags["scalars"], tag
    for tag, get in (("mu_pos", lambda r: r["mu_pos"]), ("gd_mean/infonce", lambda r: r["gd_mean"]["infonce"]),
                     ("hardest_share/0.05", lambda r: r["hardest_share"]["0.05"])):
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [0, 10, 20]
        for e, rec in zip(events, recs, strict=True):  # event files hold float32
            assert e.value == pytest.approx(get(rec), rel=1e-6)
            assert e.wall_time == pytest.approx(rec["time"], abs=1e-3)
    rank = acc.Scalars("rankme")
    assert [e.step for e in rank] == [10]  # the window of steps 0 and 10, written at the step that completed it
    assert rank[0].value == pytest.approx(recs[2]["rankme"], rel=1e-6)
    # θ_ij' histogram: the monitor's cos bins, in radians; all N(N − 1) negatives
    hist = acc.Histograms("theta_neg")
    assert [h.step for h in hist] == [0, 10, 20]
    edges = np.linspace(-1, 1, 21)
    for h, rec in zip(hist, recs, strict=True):
        v = h.histogram_value
        assert v.num == N * (N - 1)
        np.testing.assert_allclose(v.bucket_limit, np.arccos(edges)[::-1][1:], rtol=1e-12)
        np.testing.assert_array_equal(v.bucket, np.asarray(rec["histograms"]["cos_neg"])[::-1])
        assert 0 <= v.min <= rec["mu_neg"] <= v.max <= math.pi
    assert "theta_pos" in tags["histograms"] and "lemma1_min_ratio/0.1" in tags["histograms"]


def test_tensorboard_sink_never_imports_torch(tmp_path):
    pytest.importorskip("tensorboardX")
    import subprocess
    import sys

    code = ("import sys, numpy as np\nfrom gradlab.monitor import ParadigmMonitor\n"
            f"m = ParadigmMonitor(losses=['infonce'], taus=(0.05,), lambdas=(0.1,), sink='tb:{tmp_path}')\n"
            "m.update(0, np.eye(4) + 0.1, np.eye(4)); m.close()\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_track_cli_writes_tensorboard_events(tmp_path):
    pytest.importorskip("tensorboardX")
    from gradlab.monitor import analyze
    from tests._cli import run

    rng = np.random.default_rng(5)
    h = rng.normal(size=(48, 6)).astype(np.float32)
    hp = (h + 0.4 * rng.normal(size=h.shape)).astype(np.float32)
    np.savez(tmp_path / "views.npz", h=h, h_prime=hp)
    result = run("track", tmp_path / "views.npz", "-N", 16, "--tau", 0.05, "--lambda", 0.5, "--rankme-window", 32,
                 "--tensorboard", tmp_path / "tb", "--no-plot", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    acc = _read_events(tmp_path / "tb")
    res = analyze(h, hp, batch_size=16, taus=(0.05,), lambdas=(0.5,), rankme_window=32)
    events = acc.Scalars("gd_mean/infonce")
    assert [e.step for e in events] == [0, 1, 2]
    np.testing.assert_allclose([e.value for e in events], res["gd_mean"]["infonce"], rtol=1e-6)
    assert [(e.step, pytest.approx(e.value, rel=1e-6)) for e in acc.Scalars("rankme")] == [(1, res["rankme"][1])]
    assert "theta_neg" in acc.Tags()["histograms"]


def test_track_cli_bad_rankme_window_is_one_line(tmp_path):
    from tests._cli import one_line_error, run

    np.savez(tmp_path / "views.npz", h=np.eye(4), h_prime=np.eye(4))
    err = one_line_error(run("track", tmp_path / "views.npz", "-N", 2, "--rankme-window", 1, "--out", tmp_path / "o"))
    assert "--rankme-window" in err and not (tmp_path / "o").exists()
