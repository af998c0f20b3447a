"""Operations that fail fast: one line, exit code 2, and nothing left on disk.

An unreachable Dask scheduler (within 10 s, no ``OUT/runs``), ``--status`` of a folder that does
not exist, SLURM options where there is no SLURM, and failed ``sts`` / ``stsb`` / ``train`` /
``report`` runs (``gradlab.outputs.removed_on_failure``, the one mechanism they share).
"""

from __future__ import annotations

import json
import os
import time
import types
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from gradlab.outputs import removed_on_failure
from tests._cli import one_line_error, run


# --------------------------------------------------------------------------- the mechanism
def test_removed_on_failure_removes_only_what_the_command_created(tmp_path):
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError):
        with removed_on_failure(out):
            out.mkdir(parents=True)
            (out / "partial.npz").write_bytes(b"x")
            (out / "sub").mkdir()
            (out / "sub" / "f").write_text("y")
            raise RuntimeError("boom")
    assert not (tmp_path / "a").exists()  # the folders it created go too
    assert os.listdir(tmp_path) == []

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "old.txt").write_text("keep me")
    with pytest.raises(KeyboardInterrupt):
        with removed_on_failure(existing):
            (existing / "new.txt").write_text("drop me")
            raise KeyboardInterrupt
    assert sorted(os.listdir(existing)) == ["old.txt"]
    assert (existing / "old.txt").read_text() == "keep me"


def test_removed_on_failure_keeps_what_it_is_told_and_success_keeps_all(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError):
        with removed_on_failure(out, keep=lambda: ("state",)):
            (out / "state").mkdir(parents=True)
            (out / "log.jsonl").write_text("{}")
            raise ValueError("bad")
    assert sorted(os.listdir(out)) == ["state"]
    with removed_on_failure(tmp_path / "ok") as o:
        o.mkdir()
        (o / "f").write_text("z")
    assert (tmp_path / "ok" / "f").read_text() == "z"


# --------------------------------------------------------------------------- experiments
def test_unreachable_dask_scheduler_fails_within_10_s_and_leaves_nothing(tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "exp"
    t0 = time.perf_counter()
    err = one_line_error(run("experiment", "fig6", "--quick", "--executor", "dask", "--scheduler",
                             "tcp://127.0.0.1:1", "--out", out))
    seconds = time.perf_counter() - t0
    assert seconds < 10, seconds
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err
    assert not out.exists()


def test_dask_connect_timeout_is_an_option(tmp_path):
    pytest.importorskip("distributed")
    from gradlab.experiments import make_executor

    t0 = time.perf_counter()
    with pytest.raises(OSError, match="within 1 s"):
        make_executor("dask", tmp_path, options={"address": "tcp://127.0.0.1:1", "connect_timeout_s": 1})
    assert time.perf_counter() - t0 < 5
    with pytest.raises(ValueError, match="connect_timeout_s"):
        make_executor("dask", tmp_path, options={"address": "tcp://127.0.0.1:1", "connect_timeout_s": 0})


def test_status_of_a_missing_directory_is_an_error(tmp_path):
    err = one_line_error(run("experiment", "fig6", "--quick", "--status", "--out", tmp_path / "typo"))
    assert "no experiment directory" in err and "typo" in err
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    r = run("experiment", "fig6", "--quick", "--status", "--out", tmp_path / "empty")
    assert r.exit_code == 0, r.output
    assert "missing" in r.stdout


def test_slurm_options_without_sbatch_are_an_error(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import shutil

    from gradlab.experiments import make_executor

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "sbatch" else real_which(name, *a, **k))
    out = tmp_path / "exp"
    err = one_line_error(run("experiment", "fig6", "--quick", "--executor", "submitit", "--executor-opt",
                             "slurm_partition=gpu", "--out", out))
    assert "slurm_partition" in err and "sbatch is not on PATH" in err and "cluster=local" in err
    assert not out.exists()
    # said explicitly, it runs locally; and without slurm_* options it is submitit's local executor as before
    assert make_executor("submitit", tmp_path, options={"cluster": "local", "slurm_partition": "gpu"}).cluster == "local"
    assert make_executor("submitit", tmp_path, options={"timeout_min": 5}).cluster == "local"


# --------------------------------------------------------------------------- failed commands leave nothing
def test_failed_report_leaves_nothing(tmp_path):
    log = tmp_path / "empty.jsonl"
    log.write_text('{"step": 0, "valid": false, "reason": "nan"}\n')
    out = tmp_path / "report" / "here"
    err = one_line_error(run("report", log, "--out", out))
    assert "no valid monitor record" in err
    assert not (tmp_path / "report").exists()
    err = one_line_error(run("report", tmp_path, "--on-map", "--out", out))
    assert not (tmp_path / "report").exists()


class _Encoder:
    params = {"w": np.eye(2)}

    def encode(self, sentences, **kw):
        return np.ones((len(sentences), 2))


def test_failed_sts_leaves_nothing(tmp_path):
    out = tmp_path / "sts" / "out"
    err = one_line_error(run("sts", "--senteval", tmp_path / "nowhere", "--out", out))
    assert "nowhere" in err
    assert not (tmp_path / "sts").exists()


def test_failed_stsb_leaves_nothing(tmp_path):
    out = tmp_path / "stsb"
    with mock.patch("gradlab_cli._real._encoder", return_value=_Encoder()), \
         mock.patch("gradlab.real.stsb.stsb_scores", side_effect=ValueError("no such split file")):
        err = one_line_error(run("stsb", "--encoder", "light", "--out", out))
    assert "no such split file" in err
    assert not out.exists()


def _resolved(cfg):
    """A stand-in for the resolved run (nothing loaded): its configuration and the loss's name."""
    return types.SimpleNamespace(config=cfg, loss=types.SimpleNamespace(name=str(cfg.loss)))


def _train_that_fails(run, *, out_dir, **kw):
    cfg = run.config
    out = Path(out_dir)
    (out / "train_log.jsonl").write_text('{"step": 1, "event": "step", "loss": 1.0}\n')
    (out / "paradigm_monitor.jsonl").write_text("{}\n")
    if cfg.save_state_every:
        (out / "state").mkdir()
        (out / "state" / "state.npz").write_bytes(b"state")
    raise ValueError("corpus has too few sentences")


def test_failed_train_leaves_nothing(tmp_path):
    out = tmp_path / "runs" / "mb"
    with mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=_train_that_fails):
        err = one_line_error(run("train", "--loss", "infonce", "--no-test", "--out", out))
    assert "too few sentences" in err
    assert not (tmp_path / "runs").exists()
    # into a folder that holds other files: those stay, the run's own go
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    with mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=_train_that_fails):
        one_line_error(run("train", "--loss", "infonce", "--out", tmp_path / "keep"))
    assert os.listdir(tmp_path / "keep") == ["notes.txt"]


def test_failed_train_with_checkpoints_keeps_what_resume_needs(tmp_path):
    out = tmp_path / "run"
    with mock.patch("gradlab.real.run.resolve_run", side_effect=_resolved), \
         mock.patch("gradlab.real.trainer.train", side_effect=_train_that_fails):
        one_line_error(run("train", "--loss", "infonce", "--save-state-every", "5", "--out", out))
    assert sorted(os.listdir(out)) == ["paradigm_monitor.jsonl", "state", "train_log.jsonl"]
    assert json.loads((out / "train_log.jsonl").read_text())["step"] == 1


def test_unknown_executor_is_one_line_from_the_library_and_leaves_nothing(tmp_path):
    err = one_line_error(run("experiment", "fig6", "--quick", "--executor", "nope", "--out", tmp_path / "e"))
    assert err == "Error: unknown executor 'nope'; choose from local, submitit, dask"
    assert not (tmp_path / "e").exists()
