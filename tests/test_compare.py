"""``gradlab.compare`` and ``gradlab compare``: runs read back, grouped by configuration (equal but
for the seed), their best dev / test as mean ± Student t interval, the curves overlaid.

Witnesses: run folders written here as the trainer and the experiment store write them (known
scores), ``scipy.stats.t.interval`` computed in this file, and two real tiny ``gradlab train`` runs
(light encoder, 4 steps) whose own files give the expected numbers.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from gradlab.compare import compare, read_run, t_interval
from tests._cli import one_line_error, run


def _interval(values, confidence=0.95):
    v = np.asarray(values, float)
    if v.size < 2:
        return float(v.mean()), None, None
    low, high = stats.t.interval(confidence, df=v.size - 1, loc=v.mean(), scale=stats.sem(v))
    return float(v.mean()), float(low), float(high)


def _jsonl(path: Path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _monitor_records(seed: int, steps=(0, 1, 2, 4)):
    rng = np.random.default_rng(seed)
    return [{"step": s, "valid": True, "mu_pos": 0.3 + 0.01 * s + 0.001 * rng.random(), "mu_neg": 1.0 + 0.05 * s,
             "sigma_pos": 0.05, "sigma_neg": 0.1,
             "gd_mean": {"trained": 0.5 / (1 + s)}, "hardest_share": {"0.05": 0.4 + 0.1 * s},
             "ratio": {"trained": 1.0}, "m_o": 0.8 - 0.01 * s, "m_r": 0.6, "embedding_std": 0.2,
             "rankme": None} for s in steps]


def write_train_run(d: Path, *, loss="infonce", params=None, seed=0, best_dev=70.0, test=None, steps=4) -> Path:
    """A ``gradlab train`` folder as the trainer writes it (train.json, train_log.jsonl, paradigm_monitor.jsonl)."""
    d.mkdir(parents=True)
    config = {"encoder": "light", "steps": steps, "batch_size": 8, "seed": seed, "corpus": "News100",
              "loss": loss, "loss_params": dict(params or {}), "transform": None, "learning_rate": 0.001}
    log = [{"step": 0, "event": "eval", "dev_spearman": best_dev - 5, "test_spearman": None}]
    for s in range(1, steps + 1):
        log.append({"step": s, "event": "step", "loss": 2.0 / s + seed, "grad_norm": 1.0, "seconds": 0.01})
    log.append({"step": steps, "event": "eval", "dev_spearman": best_dev})
    _jsonl(d / "train_log.jsonl", log)
    _jsonl(d / "paradigm_monitor.jsonl", _monitor_records(seed))
    (d / "train.json").write_text(json.dumps({"config": config, "best_step": steps, "best_dev_spearman": best_dev,
                                              "test_spearman_after": test, "monitor": "attached"}))
    return d


INFONCE = {0: (70.1, 65.0), 1: (71.3, 66.5), 2: (69.8, 64.1)}
ARCCON = {0: (72.4, 67.2), 1: (73.9, 66.0)}


@pytest.fixture
def train_runs(tmp_path):
    paths = [write_train_run(tmp_path / f"infonce-{s}", params={"tau": 0.05}, seed=s, best_dev=d, test=t)
             for s, (d, t) in INFONCE.items()]
    paths += [write_train_run(tmp_path / f"arccon-{s}", loss="arccon", seed=s, best_dev=d, test=t)
              for s, (d, t) in ARCCON.items()]
    paths.append(write_train_run(tmp_path / "infonce-long", params={"tau": 0.05}, steps=8, best_dev=75.0))
    return paths


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _num(text: str) -> float | None:
    return None if text == "" else float(text)


def test_t_interval_matches_scipy():
    for values in ([71.0, 72.0, 73.0], [1.5, 2.5], [0.1, 0.4, 0.2, 0.9, 0.3]):
        for c in (0.9, 0.95, 0.99):
            mean, low, high = t_interval(values, c)
            want = _interval(values, c)
            assert mean == pytest.approx(want[0], rel=1e-12)
            assert low == pytest.approx(want[1], rel=1e-12) and high == pytest.approx(want[2], rel=1e-12)
    assert t_interval([3.0]) == (3.0, None, None)
    assert math.isnan(t_interval([None, float("nan")])[0])
    with pytest.raises(ValueError, match="confidence"):
        t_interval([1.0, 2.0], 1.5)


def test_runs_group_by_configuration_and_the_table_holds_the_t_intervals(train_runs):
    result = compare(train_runs)
    assert [len(g) for g in result.groups] == [3, 2, 1]  # the 8-step run is a configuration of its own
    assert result.labels == ["infonce(tau=0.05), steps=4", "arccon", "infonce(tau=0.05), steps=8"]
    rows = {r["label"]: r for r in result.rows()}
    for label, truth in (("infonce(tau=0.05), steps=4", INFONCE), ("arccon", ARCCON)):
        row = rows[label]
        assert row["seeds"] == sorted(truth) and row["n"] == len(truth)
        for key, i in (("best_dev", 0), ("test", 1)):
            mean, low, high = _interval([v[i] for v in truth.values()])
            assert row[f"{key}_mean"] == pytest.approx(mean, rel=1e-12)
            assert row[f"{key}_low"] == pytest.approx(low, rel=1e-12)
            assert row[f"{key}_high"] == pytest.approx(high, rel=1e-12)
    single = rows["infonce(tau=0.05), steps=8"]
    assert single["best_dev_mean"] == 75.0 and single["best_dev_low"] is None and single["test_mean"] is None


def test_curves_are_the_mean_and_range_over_seeds(train_runs):
    result = compare(train_runs[:3])
    panels = dict(result.panels())
    (label, steps, mean, low, high), = panels["training loss"]
    np.testing.assert_array_equal(steps, [1, 2, 3, 4])
    per_seed = np.array([[2.0 / s + seed for s in range(1, 5)] for seed in INFONCE])
    np.testing.assert_allclose(mean, per_seed.mean(0), rtol=1e-12)
    np.testing.assert_allclose(low, per_seed.min(0)), np.testing.assert_allclose(high, per_seed.max(0))
    (_, steps, mean, _, _), = panels["μ_pos (anchor–positive angle)"]
    want = np.mean([[r["mu_pos"] for r in _monitor_records(s)] for s in INFONCE], axis=0)
    np.testing.assert_array_equal(steps, [0, 1, 2, 4])
    np.testing.assert_allclose(mean, want, rtol=1e-12)
    assert "RankMe" not in panels  # never recorded (all null): no empty panel
    assert {"GD of the trained loss", "hardest negative's share (τ = 0.05)", "ratio R of the trained loss",
            "m_o (Zhang et al. 2022)", "STS-B dev Spearman x 100"} <= set(panels)


def test_cli_writes_csv_markdown_latex_figure_and_data(train_runs, tmp_path):
    out = tmp_path / "cmp"
    r = run("compare", *train_runs, "--out", out)
    assert r.exit_code == 0, r.output
    for name in ("compare.csv", "compare.md", "compare.tex", "compare.png", "compare.npz", "compare.json"):
        assert (out / name).is_file(), name
    rows = {row["configuration"]: row for row in _csv(out / "compare.csv")}
    mean, low, high = _interval([v[0] for v in ARCCON.values()])
    row = rows["arccon"]
    assert (row["seeds"], row["n"], row["confidence"]) == ("0 1", "2", "0.95")
    assert _num(row["best_dev_mean"]) == pytest.approx(mean, rel=1e-12)
    assert _num(row["best_dev_ci_low"]) == pytest.approx(low, rel=1e-12)
    assert _num(row["best_dev_ci_high"]) == pytest.approx(high, rel=1e-12)
    assert rows["infonce(tau=0.05), steps=8"]["best_dev_ci_low"] == ""
    md = (out / "compare.md").read_text()
    assert f"| arccon | 0 1 | {mean:.2f} ± {(high - low) / 2:.2f} |" in md
    tex = (out / "compare.tex").read_text()
    assert r"\begin{tabular}" in tex and f"{mean:.2f} $\\pm$ {(high - low) / 2:.2f}" in tex
    assert "infonce(tau=0.05), steps=4" in r.stdout
    meta = json.loads((out / "compare.json").read_text())
    assert [g["label"] for g in meta["groups"]] == ["infonce(tau=0.05), steps=4", "arccon", "infonce(tau=0.05), steps=8"]
    with np.load(out / "compare.npz") as z:
        np.testing.assert_array_equal(z["group1/dev/step"], [0, 4])


def test_cli_bad_runs_are_one_line_and_leave_nothing(train_runs, tmp_path):
    out = tmp_path / "nothing" / "here"
    err = one_line_error(run("compare", train_runs[0], tmp_path / "missing", "--out", out))
    assert "no such run" in err and "missing" in err
    (tmp_path / "junk").mkdir()
    err = one_line_error(run("compare", tmp_path / "junk", "--out", out))
    assert "is not a run" in err
    err = one_line_error(run("compare", train_runs[0], "--confidence", "2", "--out", out))
    assert "confidence" in err
    assert not (tmp_path / "nothing").exists()


def _experiment(out: Path, loss: str, seed: int, status="done", best_dev=None, test=None) -> str:
    """A committed run of the experiment store, written as the worker writes it."""
    from gradlab.experiments import RunSpec

    spec = RunSpec(loss=loss, seed=seed, steps=4, batch_size=8, max_sentences=200, corpus="News100")
    d = out / "runs" / spec.id
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"id": spec.id, "schema_json": spec.canonical_json(), **spec.to_dict()}))
    _jsonl(d / "train_log.jsonl", [{"step": s, "event": "step", "loss": 1.0 / s} for s in range(1, 5)]
           + [{"step": 4, "event": "eval", "dev_spearman": best_dev}] * (status == "done"))
    _jsonl(d / "paradigm_monitor.jsonl", _monitor_records(seed))
    if status == "done":
        (d / "result.json").write_text(json.dumps({"id": spec.id, "best_dev": best_dev, "test_after": test}))
        (d / "COMPLETE.json").write_text(json.dumps({"status": "done", "id": spec.id}))
    else:
        (d / "COMPLETE.json").write_text(json.dumps({"status": "failed", "id": spec.id, "error": "ValueError: nan"}))
    return spec.id


def test_experiment_folder_stands_for_its_runs(tmp_path):
    exp = tmp_path / "exp"
    devs = {0: (61.0, 58.5), 1: (63.5, 59.0), 2: (62.2, 57.7)}
    for s, (d, t) in devs.items():
        _experiment(exp, "infonce", s, best_dev=d, test=t)
    _experiment(exp, "arccon", 0, best_dev=64.0, test=60.0)
    _experiment(exp, "arccon", 1, status="failed")
    result = compare([exp])
    rows = {r["label"]: r for r in result.rows()}
    assert set(rows) == {"infonce(tau=0.05)", "arccon(tau=0.05, u=0.174533)"}
    infonce = rows["infonce(tau=0.05)"]
    for key, i in (("best_dev", 0), ("test", 1)):
        mean, low, high = _interval([v[i] for v in devs.values()])
        assert infonce[f"{key}_mean"] == pytest.approx(mean, rel=1e-12)
        assert (infonce[f"{key}_low"], infonce[f"{key}_high"]) == (pytest.approx(low, rel=1e-12),
                                                                    pytest.approx(high, rel=1e-12))
    arccon = rows["arccon(tau=0.05, u=0.174533)"]
    assert arccon["n"] == 1 and arccon["failed"] == 1 and arccon["best_dev_mean"] == 64.0
    assert sorted(arccon["seeds"]) == [0, 1]
    header, text_rows, _ = result.table()
    assert any("1 not done" in row[1] for row in text_rows)


def test_a_monitor_log_alone(tmp_path):
    log = tmp_path / "run" / "monitor.jsonl"
    log.parent.mkdir()
    _jsonl(log, _monitor_records(3))
    one = read_run(log)
    assert one.kind == "log" and one.best_dev is None and set(one.curves) >= {"mu_pos", "gd_mean/trained"}
    result = compare([log])
    assert result.table()[1] == [["run/monitor.jsonl", "-", "n/a", "n/a"]]


# --------------------------------------------------------------------------- real runs (the real extra)
#: A tiny ``gradlab train`` run of the light encoder (seconds on a CPU).
TINY_TRAIN = ("--loss", "infonce", "--steps", "4", "--batch-size", "8", "--max-sentences", "64", "--dev-pairs", "20",
              "--no-test", "--corpus", "News100", "--eval-every", "2", "--monitor-every", "2", "--dim", "16",
              "--no-plot")


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    from tests._real import require_real_extra

    require_real_extra()
    root = tmp_path_factory.mktemp("real")
    for seed in (0, 1):
        r = run("train", *TINY_TRAIN, "--seed", seed, "--out", root / f"seed{seed}")
        assert r.exit_code == 0, r.output
    return [root / "seed0", root / "seed1"]


def test_real_train_runs_read_back(real_runs):
    """Two tiny real ``gradlab train`` runs differing by seed: one configuration whose numbers are their own."""
    result = compare(real_runs)
    assert len(result.groups) == 1 and result.groups[0][0].seed in (0, 1)
    devs = [json.loads((p / "train.json").read_text())["best_dev_spearman"] for p in real_runs]
    mean, low, high = _interval(devs)
    row, = result.rows()
    assert (row["best_dev_mean"], row["best_dev_low"], row["best_dev_high"]) == (
        pytest.approx(mean, rel=1e-12), pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))
    losses = [[r["loss"] for r in map(json.loads, (p / "train_log.jsonl").read_text().splitlines())
               if r["event"] == "step"] for p in real_runs]
    (_, steps, curve, lo, hi), = dict(result.panels())["training loss"]
    np.testing.assert_allclose(curve, np.mean(losses, 0), rtol=1e-12)
    np.testing.assert_array_equal(steps, np.arange(1, len(losses[0]) + 1))
    assert "GD of the trained loss" in dict(result.panels())
