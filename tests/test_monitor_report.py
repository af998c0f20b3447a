"""``report`` and the CLI commands ``gradlab track`` / ``gradlab report``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gradlab.monitor import ParadigmMonitor, analyze, read_log
from gradlab.monitor._report import log_series, report

CFG = dict(losses=["infonce", "mpt"], taus=(0.1, 0.05), lambdas=(0.1, 0.5), ratio_losses=["arccon", "met"])
N, D = 12, 6


@pytest.fixture(scope="module")
def run_log(tmp_path_factory):
    """A small monitored 'run': positives drift closer to the anchors over 5 steps; one bad batch."""
    d = tmp_path_factory.mktemp("run")
    log = d / "monitor.jsonl"
    rng = np.random.default_rng(0)
    h = rng.normal(size=(N, D)).astype(np.float32)
    with ParadigmMonitor(**CFG, sink=str(log), histograms=True) as mon:
        for step in range(5):
            hp = h + (1.0 - 0.2 * step) * rng.normal(size=h.shape).astype(np.float32)
            mon.update(step * 10, h, hp)
        bad = hp.copy()
        bad[0, 0] = np.nan
        mon.update(50, h, bad)
    with open(log, "a") as f:
        f.write('{"step": 60, "valid": tr')  # crash mid-write
    np.savez(d / "emb.npz", h=np.concatenate([h, h]), h_prime=np.concatenate([hp, hp]) + 0.01)
    return d, log


def test_report_writes_figures_data_metadata(run_log, tmp_path):
    _, log = run_log
    meta = report(log, tmp_path / "rep", formats=("png",))
    names = sorted(p.split("/")[-1] for p in meta["files"])
    assert names == sorted(["monitor.npz", "monitor.json", "monitor_curves.png", "monitor_lemma1.png",
                            "monitor_cosines.png"])
    for p in meta["files"]:
        assert (tmp_path / "rep" / p.split("/")[-1]).stat().st_size > 1000
    assert meta["records"] == 6 and meta["valid"] == 5 and meta["invalid"] == 1
    assert "non-finite" in next(iter(meta["invalid_reasons"]))
    assert meta["losses"] == ["baseline", "infonce", "mpt"] and meta["taus"] == ["0.05", "0.1"]
    on_disk = json.loads((tmp_path / "rep" / "monitor.json").read_text())
    assert on_disk["valid"] == 5
    # the data are the logged values, under the record names
    data = np.load(tmp_path / "rep" / "monitor.npz")
    recs = [r for r in read_log(log) if r["valid"]]
    np.testing.assert_array_equal(data["step"], [0, 10, 20, 30, 40])
    np.testing.assert_allclose(data["mu_pos"], [r["mu_pos"] for r in recs])
    np.testing.assert_allclose(data["hardest_share/0.05"], [r["hardest_share"]["0.05"] for r in recs])
    np.testing.assert_allclose(data["lemma1_min_ratio/0.5/q50"],
                               [np.nan if r["lemma1_min_ratio"]["0.5"]["q50"] is None else r["lemma1_min_ratio"]["0.5"]["q50"]
                                for r in recs])
    assert data["mu_pos"][-1] < data["mu_pos"][0]  # the positives did come closer


    import matplotlib.image as mpimg

    for name in ("monitor_curves.png", "monitor_lemma1.png", "monitor_cosines.png"):
        assert mpimg.imread(tmp_path / "rep" / name).std() > 0.05, f"{name} looks blank"


def test_report_svg_and_no_plot(run_log, tmp_path):
    _, log = run_log
    meta = report(log, tmp_path, formats="svg", plot=False)
    assert sorted(p.split("/")[-1] for p in meta["files"]) == ["monitor.json", "monitor.npz"]


def test_report_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        report(tmp_path / "missing.jsonl", tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "valid": false, "reason": "x"}\n')
    with pytest.raises(ValueError, match="no valid"):
        report(bad, tmp_path)
    with pytest.raises(ValueError, match="format"):
        report(bad, tmp_path, formats=("jpg",))


def test_log_series_missing_values_are_nan():
    recs = [{"step": 0, "valid": True, "mu_pos": 0.5, "ratio": {"met": None}},
            {"step": 1, "valid": True, "mu_pos": None, "ratio": {"met": 1.2}}]
    s = log_series(recs)
    np.testing.assert_array_equal(s["step"], [0, 1])
    assert np.isnan(s["mu_pos"][1]) and np.isnan(s["ratio/met"][0]) and s["ratio/met"][1] == 1.2


# --- CLI ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli():
    from gradlab_cli.app import app
    from typer.testing import CliRunner

    return CliRunner(), app


def test_cli_report(cli, run_log, tmp_path):
    runner, app = cli
    _, log = run_log
    res = runner.invoke(app, ["report", str(log), "--out", str(tmp_path), "--no-plot"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "monitor.npz").exists() and not (tmp_path / "monitor_curves.png").exists()
    assert str(tmp_path / "monitor.npz") in res.output
    meta = json.loads((tmp_path / "monitor.json").read_text())
    assert "report" in meta["command_line"]


def test_cli_report_errors_one_line(cli, tmp_path):
    runner, app = cli
    res = runner.invoke(app, ["report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "Traceback" not in res.output and "no such log file" in res.output
    res = runner.invoke(app, ["report", str(tmp_path / "nope.jsonl"), "--format", "bmp"])
    assert res.exit_code == 2 and "format" in res.output


def test_cli_track_matches_analyze(cli, run_log, tmp_path, monkeypatch):
    runner, app = cli
    d, _ = run_log
    res = runner.invoke(app, ["track", str(d / "emb.npz"), "--batch-size", str(N), "--out", str(tmp_path),
                              "--tau", "0.05", "--lambda", "0.1"])
    assert res.exit_code == 0, res.output
    data = np.load(tmp_path / "track.npz")
    emb = np.load(d / "emb.npz")
    want = analyze(emb["h"], emb["h_prime"], batch_size=N, taus=(0.05,), lambdas=(0.1,), histograms=True)
    np.testing.assert_allclose(data["mu_pos"], want["mu_pos"])
    np.testing.assert_allclose(data["hardest_share/0.05"], want["hardest_share"]["0.05"])
    assert data["lemma1_min_ratio_per_anchor/0.1"].shape == (2, N)
    assert (tmp_path / "track.png").stat().st_size > 1000
    meta = json.loads((tmp_path / "track.json").read_text())
    assert meta["n_batches"] == 2 and meta["parameters"]["batch_size"] == N


def test_cli_track_errors_one_line(cli, run_log, tmp_path):
    runner, app = cli
    d, _ = run_log
    for args, msg in (
        (["track", str(tmp_path / "none.npz")], "cannot read"),
        (["track", str(d / "emb.npz"), "--batch-size", "1"], "--batch-size"),
        (["track", str(d / "emb.npz"), "--batch-size", "500"], "fewer than one batch"),
        (["track", str(d / "emb.npz"), "-N", str(N), "--tau", "-1", "--out", str(tmp_path)], "tau"),
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert msg in res.output and "Traceback" not in res.output
