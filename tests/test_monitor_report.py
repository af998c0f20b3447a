"""``report`` (``gradlab.figures.report``, also ``gradlab.monitor.report``), the monitor's
``report_data`` it draws, and the CLI commands ``gradlab track`` / ``gradlab report``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gradlab.monitor import ParadigmMonitor, analyze, log_series, read_log, report
from tests._mpl import callers_settings_after

CFG = dict(losses=["infonce", "mpt"], taus=(0.1, 0.05), lambdas=(0.1, 0.5), ratio_losses=["arccon", "met"])
N, D = 12, 6


@pytest.fixture(scope="module")
def run_log(tmp_path_factory):
    """A small monitored 'run': positives drift closer to the anchors over 5 steps; one bad batch.

    Logged twice by the same monitor: ``monitor.jsonl`` (returned) and ``monitor.csv`` beside it.
    """
    d = tmp_path_factory.mktemp("run")
    log = d / "monitor.jsonl"
    rng = np.random.default_rng(0)
    h = rng.normal(size=(N, D)).astype(np.float32)
    with ParadigmMonitor(**CFG, sink=[str(log), str(d / "monitor.csv")], histograms=True) as mon:
        for step in range(5):
            hp = h + (1.0 - 0.2 * step) * rng.normal(size=h.shape).astype(np.float32)
            mon.update(step * 10, h, hp)
        bad = hp.copy()
        bad[0, 0] = np.nan
        mon.update(50, h, bad)
    with open(log, "a") as f:
        f.write('{"step": 60, "valid": tr')  # crash mid-write
    with open(d / "monitor.csv", "a") as f:
        f.write('60,1700000000.25,Tr')  # the same crash in the CSV log
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


def test_report_data_is_what_the_report_writes_and_draws_nothing(run_log, tmp_path):
    """The monitor computes the report (``report_data``) without loading matplotlib or gradlab.plot;
    ``report`` writes exactly those arrays and counts."""
    import subprocess

    _, log = run_log
    code = ("import sys\nfrom gradlab.monitor import report_data\n"
            f"d = report_data({str(log)!r})\n"
            "print(len(d.arrays), d.meta['valid'], sorted(m for m in sys.modules if m.startswith(('matplotlib', 'gradlab.plot', 'gradlab.figures'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    n_arrays, valid, drawing = out.stdout.split(maxsplit=2)
    assert int(valid) == 5 and drawing.strip() == "[]"
    from gradlab.monitor import report_data

    data = report_data(log)
    meta = report(log, tmp_path, plot=False)
    with np.load(tmp_path / "monitor.npz") as saved:
        assert sorted(saved.files) == sorted(data.arrays) and len(saved.files) == int(n_arrays)
        for k in saved.files:
            np.testing.assert_array_equal(saved[k], data.arrays[k])
    assert "histograms/cos_pos/first" in data.arrays and data.first["step"] == 0 and data.last["step"] == 40
    assert {k: meta[k] for k in data.meta} == data.meta


def test_the_report_keeps_its_old_names():
    import gradlab.figures
    import gradlab.monitor
    from gradlab import plot

    assert gradlab.monitor.report is gradlab.figures.report is report
    for name in ("FIGURES", "PaperFigure", "figure_ids", "paper_figure", "COMPONENTS", "component_figure"):
        assert getattr(plot, name) is getattr(gradlab.figures, name)
    with pytest.raises(AttributeError):
        plot.no_such_recipe  # noqa: B018


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


def _npz(path):
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def test_csv_log_reads_as_the_jsonl_log(run_log):
    d, log = run_log
    recs, csv_recs = read_log(log), read_log(d / "monitor.csv")
    assert len(recs) == 6 and [r["step"] for r in csv_recs] == [0, 10, 20, 30, 40, 50]
    assert csv_recs == recs  # every value, bit for bit (floats are written with repr); the crash line skipped
    ok, bad = csv_recs[0], csv_recs[-1]
    assert ok["valid"] is True and ok["reason"] is None and ok["n"] == N and isinstance(ok["step"], int)
    assert isinstance(ok["gd_mean"]["infonce"], float) and ok["gd_mean"]["infonce"] == recs[0]["gd_mean"]["infonce"]
    assert ok["lemma1_min_ratio"]["0.5"].keys() == recs[0]["lemma1_min_ratio"]["0.5"].keys()
    assert ok["histograms"]["cos_pos"] == recs[0]["histograms"]["cos_pos"] and sum(ok["histograms"]["cos_pos"]) == N
    assert len(ok["histograms"]["edges_cos"]) == len(ok["histograms"]["cos_pos"]) + 1
    # the bad batch comes back marked, with its reason and null statistics
    assert bad["valid"] is False and "non-finite" in bad["reason"] and bad["reason"] == recs[-1]["reason"]
    assert bad["mu_pos"] is None and bad["hardest_share"] == {"0.1": None, "0.05": None}
    s_json, s_csv = log_series(recs), log_series(csv_recs)
    assert list(s_csv) == list(s_json) and len(s_csv) > 30
    for k in s_json:
        np.testing.assert_array_equal(s_csv[k], s_json[k], err_msg=k)


def test_report_from_csv_equals_report_from_jsonl(run_log, tmp_path):
    d, log = run_log
    meta_j = report(log, tmp_path / "j", formats=("png",))
    meta_c = report(d / "monitor.csv", tmp_path / "c", formats=("png",))
    assert [Path(p).name for p in meta_c["files"]] == [Path(p).name for p in meta_j["files"]]
    assert "monitor_cosines.png" in [Path(p).name for p in meta_c["files"]]  # histograms read back too
    assert meta_c["log_format"] == "csv" and meta_j["log_format"] == "jsonl"
    for key in ("records", "valid", "invalid", "invalid_reasons", "steps", "losses", "taus", "lambdas", "series"):
        assert meta_c[key] == meta_j[key], key
    assert meta_c["records"] == 6 and meta_c["valid"] == 5 and meta_c["steps"] == [0, 40]
    data_j, data_c = _npz(tmp_path / "j" / "monitor.npz"), _npz(tmp_path / "c" / "monitor.npz")
    assert sorted(data_c) == sorted(data_j) and "histograms/cos_neg/last" in data_c
    for k in data_j:
        np.testing.assert_array_equal(data_c[k], data_j[k], err_msg=k)
    np.testing.assert_array_equal(data_c["step"], [0, 10, 20, 30, 40])
    assert data_c["mu_pos"][-1] < data_c["mu_pos"][0]
    for name in ("monitor_curves.png", "monitor_lemma1.png", "monitor_cosines.png"):
        assert (tmp_path / "c" / name).stat().st_size > 1000


def test_report_rejects_a_file_that_is_not_a_log(run_log, tmp_path):
    d, _ = run_log
    with pytest.raises(ValueError, match=r"emb\.npz is not a monitor log \(JSON Lines or CSV\): it holds binary"):
        report(d / "emb.npz", tmp_path)
    latin1 = tmp_path / "notes.csv"
    latin1.write_bytes("step,valid\n0,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match="notes.csv is not a monitor log"):
        read_log(latin1)
    text = tmp_path / "notes.txt"
    text.write_text("some notes\nabout a run\n")
    with pytest.raises(ValueError, match="notes.txt is not a monitor log .*'step' column"):
        report(text, tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("\n")
    assert read_log(empty) == []
    with pytest.raises(ValueError, match=r"no valid monitor record \(0 records read\)"):
        report(empty, tmp_path)


def test_csv_empty_cells_and_missing_columns_read_like_jsonl_missing_keys(tmp_path):
    csv_log = tmp_path / "m.csv"
    csv_log.write_text("step,valid,reason,mu_pos,ratio/met\n"
                       "0,True,,0.5,\n"
                       "1,True,,,1.2\n"
                       '2,False,"h: cannot read a str, ""x""",,\n')
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text('{"step":0,"valid":true,"reason":null,"mu_pos":0.5,"ratio":{"met":null}}\n'
                     '{"step":1,"valid":true,"reason":null,"mu_pos":null,"ratio":{"met":1.2}}\n'
                     '{"step":2,"valid":false,"reason":"h: cannot read a str, \\"x\\"","mu_pos":null,"ratio":{"met":null}}\n')
    assert read_log(csv_log) == read_log(jsonl)
    assert read_log(csv_log)[2]["reason"] == 'h: cannot read a str, "x"'
    s = log_series(read_log(csv_log))
    np.testing.assert_array_equal(s["mu_pos"], [0.5, np.nan])
    np.testing.assert_array_equal(s["ratio/met"], [np.nan, 1.2])
    assert "gd_mean/infonce" not in s  # a column the header lacks is a missing key, as in JSON Lines


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


def test_cli_report_csv(cli, run_log, tmp_path):
    runner, app = cli
    d, log = run_log
    res = runner.invoke(app, ["report", str(d / "monitor.csv"), "--out", str(tmp_path / "c"), "--no-plot"])
    assert res.exit_code == 0, res.output
    assert res.output.split() == [str(tmp_path / "c" / "monitor.npz"), str(tmp_path / "c" / "monitor.json")]
    meta = json.loads((tmp_path / "c" / "monitor.json").read_text())
    assert meta["log_format"] == "csv" and meta["valid"] == 5 and meta["invalid"] == 1
    report(log, tmp_path / "j", plot=False)
    data_c, data_j = _npz(tmp_path / "c" / "monitor.npz"), _npz(tmp_path / "j" / "monitor.npz")
    assert sorted(data_c) == sorted(data_j)
    for k in data_j:
        np.testing.assert_array_equal(data_c[k], data_j[k], err_msg=k)


def test_cli_report_binary_file_one_line(cli, tmp_path):
    runner, app = cli
    views = tmp_path / "views.npz"
    np.savez(views, h=np.ones((4, 3)), h_prime=np.ones((4, 3)))
    res = runner.invoke(app, ["report", str(views), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output
    assert f"{views} is not a monitor log (JSON Lines or CSV)" in lines[0]
    assert "codec" not in res.output and "Traceback" not in res.output
    assert not (tmp_path / "rep" / "monitor.npz").exists()


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


# --- the monitor's figures are gradlab.plot recipes --------------------------------------------


def _first_last(log):
    valid = sorted((r for r in read_log(log) if r.get("valid")), key=lambda r: r["step"])
    return valid[0], valid[-1]


def test_monitor_curves_recipe_draws_the_logged_series(run_log):
    from gradlab import plot

    _, log = run_log
    series = log_series(read_log(log))
    fig = plot.monitor_curves(series)
    assert len(fig.axes) == 12
    ax_mu = fig.axes[0]
    np.testing.assert_array_equal(ax_mu.lines[0].get_xdata(), series["step"])
    np.testing.assert_array_equal(ax_mu.lines[0].get_ydata(), series["mu_pos"])
    assert "Fig. 9" in ax_mu.get_title()
    share = fig.axes[3]  # one solid (projected) and one dashed (weight) line per τ, in log order
    taus = [k.split("/")[1] for k in series if k.startswith("hardest_share/")]
    labels = [line.get_label() for line in share.lines if not line.get_label().startswith("_")]
    assert sorted(taus) == ["0.05", "0.1"] and labels == [rf"$\tau$={t}" for t in taus]
    np.testing.assert_array_equal(share.lines[0].get_ydata(), series[f"hardest_share/{taus[0]}"])
    assert share.lines[1].get_linestyle() == "--"
    assert all(ax.get_xlabel() == "step" for ax in fig.axes)
    std_panel = fig.axes[10]
    np.testing.assert_array_equal(std_panel.lines[0].get_ydata(), series["embedding_std"])
    assert not fig.axes[9].lines and fig.axes[9].texts  # no RankMe window completed in 12-row batches
    empty = plot.monitor_curves({"step": np.arange(3.0)})  # nothing recorded: each panel says so
    assert all(ax.texts for ax in empty.axes)
    assert sum(len(ax.lines) for ax in empty.axes) == 1  # only the ratio panel's reference line at 1


def test_monitor_distribution_recipes(run_log):
    from gradlab import plot

    _, log = run_log
    first, last = _first_last(log)
    fig = plot.lemma1_before_after(first, last)
    assert [ax.get_title() for ax in fig.axes] == [r"Lemma-1 minimum ratio, $\lambda$=0.1",
                                                   r"Lemma-1 minimum ratio, $\lambda$=0.5"]
    fig = plot.cosine_before_after(first, last)
    assert len(fig.axes) == 2 and all("Fig. 5" in ax.get_title() for ax in fig.axes)
    # one density step per monitored step: the area under each is 1
    for patch in fig.axes[0].patches:
        vals, edges = patch.get_data().values, patch.get_data().edges
        assert float(np.sum(vals * np.diff(edges))) == pytest.approx(1.0, rel=1e-9)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["step 0", "step 40"]


def test_track_summary_recipe(run_log):
    from gradlab import plot

    d, _ = run_log
    emb = np.load(d / "emb.npz")
    res = analyze(emb["h"], emb["h_prime"], batch_size=N, taus=(0.1, 0.05), lambdas=(0.1,), histograms=True)
    fig = plot.track_summary(res)
    assert len(fig.axes) == 4
    assert "Fig. 7" in fig.axes[1].get_title() and fig.axes[1].get_xscale() == "log"
    x = fig.axes[1].lines[0].get_xdata()
    np.testing.assert_array_equal(x, [0.05, 0.1])
    want = np.nanmean(np.stack([np.asarray(res["hardest_share"][t], float) for t in ("0.05", "0.1")]), axis=1)
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), want)


def test_monitor_recipes_leave_the_callers_matplotlib_settings_alone(run_log):
    d, log = run_log
    out = callers_settings_after(f"from gradlab.monitor import report\nreport({str(log)!r}, {str(d / 'rep_rc')!r})")
    assert out == ["17.0", "True", "False"]
    assert (d / "rep_rc" / "monitor_curves.png").stat().st_size > 1000


def test_monitor_curves_draws_rankme_only_where_a_window_completed(tmp_path):
    """One RankMe / α-ReQ point per recorded window, at the step that completed it (records repeat
    the latest window's value until the next)."""
    from gradlab import plot

    rng = np.random.default_rng(1)
    log = tmp_path / "m.jsonl"
    with ParadigmMonitor(losses=["infonce"], taus=(0.05,), lambdas=(0.5,), rankme_window=2 * N, sink=str(log)) as mon:
        for step in range(6):
            h = rng.normal(size=(N, D)).astype(np.float32)
            mon.update(step, h, h + 0.1 * rng.normal(size=h.shape).astype(np.float32))
            mon.window.close()  # deterministic: each window's values arrive with the next update
    records = [r for r in read_log(log) if r.get("valid")]
    done = sorted({(r["rankme_step"], r["rankme"]) for r in records if r["rankme"] is not None})
    # Windows complete at steps 1, 3, 5; the next update carries each, so the one of step 5 has none.
    assert [s for s, _ in done] == [1, 3]
    assert [r["rankme_step"] for r in records] == [None, None, 1, 1, 3, 3]
    series = log_series(read_log(log))
    fig = plot.monitor_curves(series)
    rank_panel, alpha_panel = fig.axes[9], fig.axes[11]
    np.testing.assert_array_equal(rank_panel.lines[0].get_xdata(), [s for s, _ in done])
    np.testing.assert_allclose(rank_panel.lines[0].get_ydata(), [v for _, v in done])
    assert 1.0 < min(v for _, v in done) <= D  # RankMe of 24 Gaussian rows in 6 dims
    assert f"{2 * N} rows" in rank_panel.get_title()
    assert len(alpha_panel.lines[0].get_xdata()) == len(done)


def test_gradlab_report_draws_its_figures_in_forked_processes_as_report_does(run_log, tmp_path):
    """``gradlab report`` in a process of its own (its three figures drawn by forked children)
    writes the files ``report`` writes here, the figures pixel for pixel."""
    import os
    import subprocess

    import matplotlib.image

    _, log = run_log
    code = "import sys; from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()"
    proc = subprocess.run([sys.executable, "-c", code, "report", str(log), "--out", str(tmp_path / "cli")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GRADLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    meta = report(log, tmp_path / "here")
    names = [Path(p).name for p in meta["files"]]
    assert [Path(p).name for p in proc.stdout.split()] == names
    for name in (n for n in names if n.endswith(".png")):
        a, b = (matplotlib.image.imread(tmp_path / d / name) for d in ("cli", "here"))
        assert a.shape == b.shape and np.array_equal(a, b), name
