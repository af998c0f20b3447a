"""The live explorer without a browser: its maps are gradlab.simulate's, its commands reproduce an
export, its page (Panel) redraws from the engine, and the CLI's misuse is one line (exit 2)."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradlab
from gradlab import simulate
from gradlab.explore import (
    View,
    export_view,
    heatmap_command,
    lemma1_command,
    panel_results,
    slider_specs,
    view_loss,
    view_maps,
)

from ._cli import one_line_error, run

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"grid": 6, "batches": 16, "batch_size": 16}
FOCAL = """
import jax, jax.numpy as jnp

def focal(c_pos, c_neg, *, tau=0.1, gamma=1.0):
    logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
    log_p = c_pos / tau - jax.nn.logsumexp(logits, axis=-1)
    return -((1 - jnp.exp(log_p)) ** gamma) * log_p
"""


def _protocol(**kw):
    return simulate.Protocol(**{**SMALL, **kw})


def _nan_equal(a, b):
    np.testing.assert_array_equal(np.asarray(a, float), np.asarray(b, float))


# --------------------------------------------------------------------------- the numbers
def test_view_maps_are_the_engines_maps_at_the_slider_values():
    view = View("arccon", **SMALL).set(tau=0.1, u=0.3, lam=0.4, r=1.25)
    maps = view_maps(view)
    loss, proto = gradlab.get_loss("arccon", tau=0.1, u=0.3), _protocol()
    _nan_equal(maps["gd"].mean, simulate.gd_map(loss, proto).mean)
    _nan_equal(maps["ratio"].masked_mean(), simulate.ratio_map(loss, proto).masked_mean())
    _nan_equal(maps["weight"].mean, simulate.weight_map(loss, proto, gd_gate=0.05).mean)
    lemma = simulate.lemma1_map(proto, lam=0.4, ratios=[1.25])
    _nan_equal(panel_results(maps)["lemma1"].mean, lemma.extra["satisfied"][0])
    # r_low is continuous in λ (the fractions are multiples of 1/B); computed in steps of fewer rows: last bit
    np.testing.assert_allclose(maps["lemma1"].mean, lemma.mean, rtol=1e-6)
    # a slider moves the maps it feeds
    assert not np.allclose(view_maps(view.set(tau=0.3))["gd"].mean, maps["gd"].mean)


def test_moving_lambda_recomputes_only_the_lemma1_panel():
    view = View("infonce", **SMALL)
    before, after = view_maps(view), view_maps(view.set(lam=0.7))
    assert after["gd"] is before["gd"] and after["ratio"] is before["ratio"]
    assert not np.array_equal(after["lemma1"].extra["satisfied"], before["lemma1"].extra["satisfied"])


def test_r_is_the_losss_static_ratio_when_it_has_one():
    view = View("baseline", **SMALL).set(r=2.0)
    assert dict(view.params)["r"] == 2.0 and view.r == 2.0
    assert view_loss(view).params["r"] == 2.0
    lemma = simulate.lemma1_map(_protocol(), lam=view.lam, ratios=[2.0])
    _nan_equal(panel_results(view_maps(view))["lemma1"].mean, lemma.extra["satisfied"][0])
    assert "r" not in dict(View("infonce").set(r=2.0).params)  # InfoNCE has no r: the Lemma-1 panel's alone


def test_sliders_are_the_losss_parameters_then_r_and_lambda(tmp_path):
    assert [s.name for s in slider_specs(View("met"))] == ["m", "r", "lam"]
    assert [s.label for s in slider_specs(View("infonce"))] == ["τ", "r", "λ"]
    (tmp_path / "mine.py").write_text(FOCAL)
    specs = {s.name: s for s in slider_specs(View(f"{tmp_path / 'mine.py'}:focal"))}
    assert list(specs) == ["tau", "gamma", "r", "lam"]
    assert specs["gamma"].value == 1.0 and specs["gamma"].start <= 1.0 <= specs["gamma"].end


def test_a_loss_without_an_angle_form_is_one_line():
    with pytest.raises(ValueError, match="no angle form") as err:
        view_maps(View("barlow_twins"))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="lam must be > 0"):
        View(lam=0.0)


def test_the_paper_grid_on_request():
    from gradlab.explore import view_protocol

    assert view_protocol(View(full=True)) == simulate.Protocol()
    assert view_protocol(View()).grid_shape == (50, 50) and view_protocol(View()).batches == 200


# --------------------------------------------------------------------------- export and its commands
@pytest.mark.parametrize("spec, values", [
    ("infonce", {"tau": 0.07, "lam": 0.3, "r": 1.25}),
    ("compose:gd=indicator,weight=softmax,ratio=static", {"m": 0.2, "tau": 0.1, "r": 1.5}),
    ("FILE", {"gamma": 2.0}),
])
def test_the_exported_commands_reproduce_the_exported_view(tmp_path, spec, values):
    if spec == "FILE":
        (tmp_path / "mine.py").write_text(FOCAL)
        spec = f"{tmp_path / 'mine.py'}:focal"
    view = View(spec, **SMALL).set(**values)
    written = export_view(view, tmp_path / "view", plot=False)
    assert sorted(p.name for p in written) == ["explore_view.json", "explore_view.npz"]
    meta = json.loads((tmp_path / "view" / "explore_view.json").read_text())
    shown = np.load(tmp_path / "view" / "explore_view.npz")
    assert meta["view"]["params"] == dict(view.params)
    for key, command in meta["commands"].items():
        argv = shlex.split(command)
        assert argv[0] == "gradlab"
        out = tmp_path / key
        result = run(*argv[1:], "--out", out, "--no-plot")
        assert result.exit_code == 0, result.output
        if key == "lemma1":
            lemma = gradlab.io.Result.load(out / "lemma1_map")
            np.testing.assert_allclose(shown["lemma1_r_low"], lemma.mean, rtol=1e-6)
            got = lemma.extra["satisfied"][0]
        else:
            (stem,) = {p.stem for p in out.glob("heatmap_*.npz")}
            got = gradlab.io.Result.load(out / stem).masked_mean()
        _nan_equal(shown[key], got)


def test_export_writes_the_png_and_the_runs_path(tmp_path):
    log = tmp_path / "run" / "paradigm_monitor.jsonl"
    log.parent.mkdir()
    steps = [{"step": s, "valid": True, "mu_pos": 0.3 + 0.01 * s, "mu_neg": 1.4 - 0.02 * s, "sigma_pos": 0.05,
              "sigma_neg": 0.1} for s in range(5)]
    log.write_text("".join(json.dumps(r) + "\n" for r in steps))
    from gradlab.experiments import run_path

    written = export_view(View("met", **SMALL), tmp_path / "out", run=run_path(log.parent), run_source=str(log.parent))
    assert {p.name for p in written} == {"explore_view.png", "explore_view.npz", "explore_view.json"}
    data = np.load(tmp_path / "out" / "explore_view.npz")
    np.testing.assert_allclose(data["run_mu_neg"], [r["mu_neg"] for r in steps])
    assert "weight" not in data.files  # MET has no τ: no share panel
    assert json.loads((tmp_path / "out" / "explore_view.json").read_text())["commands"]["weight"] is None


def test_commands_spell_every_value_exactly():
    view = View("infonce").set(tau=0.1 + 0.2)  # 0.30000000000000004
    assert "--param tau=0.30000000000000004" in heatmap_command(view, "gd")
    assert lemma1_command(View(lam=0.25, r=1.5)).startswith("gradlab lemma1 --lambda 0.25 --ratio 1.5 ")
    assert "--grid 100 --batches 1000 --batch-size 128" in heatmap_command(View(full=True), "ratio")


# --------------------------------------------------------------------------- the page, without a browser
@pytest.fixture
def explorer():
    pytest.importorskip("panel")
    from gradlab.explore import Explorer

    return Explorer("infonce", **SMALL)


def test_a_slider_redraws_the_panels_from_the_engine(explorer):
    before = explorer.arrays()
    explorer.set(tau=0.2)
    after = explorer.arrays()
    assert not np.allclose(before["gd"], after["gd"])
    loss = gradlab.get_loss("infonce", tau=0.2)
    _nan_equal(after["gd"], simulate.gd_map(loss, _protocol()).mean)
    _nan_equal(after["ratio"], simulate.ratio_map(loss, _protocol()).masked_mean())
    explorer.set(lam=0.5)
    _nan_equal(explorer.arrays()["lemma1"], simulate.lemma1_map(_protocol(), lam=0.5, ratios=[1.5]).extra["satisfied"][0])
    assert explorer.last_ms > 0


def test_the_menu_switches_losses_and_compositions(explorer, tmp_path):
    explorer.choose("met")
    assert list(explorer.sliders) == ["m", "r", "lam"] and explorer.arrays()["weight"] is None
    explorer.choose("compose:gd=sigmoid,weight=softmax,ratio=arccon")
    assert explorer.view.loss == "compose:gd=sigmoid,weight=softmax,ratio=arccon"
    assert list(explorer.sliders) == ["m", "width", "tau", "u", "r", "lam"]
    loss = gradlab.compose(gd="sigmoid", weight="softmax", ratio="arccon")
    _nan_equal(explorer.arrays()["gd"], simulate.gd_map(loss, _protocol()).mean)
    with pytest.raises(ValueError, match="not in the menu"):
        explorer.choose("my_file.py:f")  # no code from the page: only the menu
    with pytest.raises(ValueError, match="no slider 'tau'"):
        explorer.choose("met").set(tau=0.1)


def test_the_page_overlays_a_run_and_reports_a_bad_one(explorer, tmp_path):
    (tmp_path / "paradigm_monitor.jsonl").write_text(json.dumps(
        {"step": 3, "valid": True, "mu_pos": 0.4, "mu_neg": 1.1, "sigma_pos": 0.05, "sigma_neg": 0.1}) + "\n")
    explorer.run_input.value = str(tmp_path)
    explorer.run_button.clicks += 1
    assert explorer.path_source.data["x"] == [1.1] and explorer.path_source.data["y"] == [0.4]
    explorer.run_input.value = str(tmp_path / "missing")
    explorer.run_button.clicks += 1
    assert "no monitor log" in explorer.status.object
    written = explorer.export(tmp_path / "out")
    assert {p.name for p in written} == {"explore_view.png", "explore_view.npz", "explore_view.json"}


# --------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("args, words", [
    (["--loss", "barlow_twins"], "no angle form"),
    (["--loss", "nowhere.py:focal"], "loss file not found"),
    (["--loss", "infonce", "--param", "m=0.3"], "unknown"),
    (["--loss", "infonce", "--compose", "gd=none,weight=uniform,ratio=static"], "at most one of --loss and --compose"),
    (["--port", "70000"], "--port"),
    (["--run", "/nonexistent/run"], "no monitor log"),
])
def test_explore_misuse_is_one_line(args, words):
    err = one_line_error(run("explore", "--no-browser", *args))
    assert words in err, err


@pytest.mark.parametrize("args, words", [
    (["--loss", "barlow_twins"], "no angle form"),
    (["--loss", "infonce", "--compose", "gd=none,weight=uniform,ratio=static"], "at most one of --loss and --compose"),
    (["--run", "/nonexistent/run"], "no monitor log"),
])
def test_explore_misuse_is_named_before_a_missing_extra(monkeypatch, args, words):
    """Without the explore extra a misused command still says what is wrong with its arguments
    (none needs Panel); the missing extra is named once they are right (the test below)."""
    monkeypatch.setitem(sys.modules, "panel", None)  # import panel -> ImportError
    err = one_line_error(run("explore", "--no-browser", *args))
    assert words in err and "panel" not in err, err


def test_a_missing_explore_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "panel", None)  # import panel -> ImportError
    err = one_line_error(run("explore", "--no-browser"))
    assert 'pip install -e ".[explore]"' in err, err


def test_the_clis_defaults_are_the_live_protocol():
    import inspect

    from gradlab_cli.app import app

    from gradlab.explore import LIVE

    (command,) = [c for c in app.registered_commands if c.callback.__name__ == "explore"]
    defaults = {k: p.default for k, p in inspect.signature(command.callback).parameters.items()}
    assert {k: defaults[k] for k in LIVE} == LIVE


def test_explore_help_loads_neither_jax_nor_panel():
    code = ("import sys\nfrom gradlab_cli.app import main\ntry:\n    main(['explore', '--help'])\n"
            "except SystemExit as e:\n    assert e.code in (0, None)\n"
            "print('loaded:', *(m for m in ('jax', 'panel', 'bokeh') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gradlab explore --no-browser" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "loaded:"


def _help_examples() -> list[list[str]]:
    proc = subprocess.run([sys.executable, "-c", "from gradlab_cli.app import main; main(['explore', '--help'])"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return [ln.split()[1:] for ln in proc.stdout.splitlines() if ln.strip().startswith("gradlab explore ")]


def test_the_help_example_serves_the_page_and_stops_cleanly():
    pytest.importorskip("panel")
    import re
    import signal
    import time
    import urllib.request

    (args,) = [a for a in _help_examples() if "--no-browser" in a]
    proc = subprocess.Popen([sys.executable, "-u", "-c", "from gradlab_cli.app import main; main()", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line, end = "", time.monotonic() + 240
        while "serving" not in line and time.monotonic() < end and proc.poll() is None:
            line = proc.stdout.readline()
        url = re.search(r"serving (http://127\.0\.0\.1:\d+/)", line)
        assert url, line
        page = urllib.request.urlopen(url.group(1), timeout=60).read().decode()
        assert "gradlab explore" in page and "bokeh" in page.lower()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in out, out[-2000:]


def test_a_busy_port_is_one_line():
    pytest.importorskip("panel")
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = one_line_error(run("explore", "--no-browser", "--port", port, "--grid", 3, "--batches", 4,
                                 "--batch-size", 4))
    assert f"cannot serve on 127.0.0.1:{port}" in err, err
