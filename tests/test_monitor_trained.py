"""The monitor measures the loss being trained, with the run's own parameters (key ``"trained"``).

Witnesses: the closed-form GD of each loss computed in NumPy from the very views the
monitor saw (captured by a spy on ``ParadigmMonitor.update``), and the training log's loss
values, which pin each monitored state to the update that used its views.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradlab
from gradlab.monitor import ParadigmMonitor
from tests._real import require_real_extra


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _cosines(h, hp):
    """c_pos (N,), C (N, N) = h_i · h_j' of the normalized views, float64."""
    C = _unit(h) @ _unit(hp).T
    return np.diag(C).copy(), C


def _hardest(C):
    off = C.copy()
    np.fill_diagonal(off, -np.inf)
    return off.max(axis=1), off.argmax(axis=1)


def baseline_gd(h, hp, m):
    """Li et al. 2024 Eq. 5: GD_i = 1[c_ii' − max_{j≠i} c_ij' < m]."""
    c_pos, C = _cosines(h, hp)
    return (c_pos - _hardest(C)[0] < m).astype(float)


def infonce_gd_and_share(h, hp, tau):
    """InfoNCE (Li et al. 2024 Table 1): GD_i = 1 − p_ii, W_j = E_j/(τ S); the share is softmax over the negatives.

    (A loss of the cosines split by autodiff, ``gradlab.loss_from_cosines``, puts 1/τ into GD
    instead, so that W sums to one: GD_i = Σ_j ∂L_i/∂c_ij = (1 − p_ii)/τ.)
    """
    c_pos, C = _cosines(h, hp)
    z = C / tau
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    gd = 1.0 - np.diag(p)
    neg = p.copy()
    np.fill_diagonal(neg, 0.0)
    w = neg / neg.sum(axis=1, keepdims=True)
    _, hard = _hardest(C)
    return gd, w[np.arange(len(w)), hard]


@pytest.fixture
def views():
    rng = np.random.default_rng(3)
    h = rng.normal(size=(48, 24)).astype(np.float32)
    return h, (h + 0.6 * rng.normal(size=h.shape)).astype(np.float32)


@pytest.mark.parametrize("block", [256, 16])
def test_trained_baseline_uses_its_own_margin(views, block):
    h, hp = views
    for m in (0.05, 1.0):
        mon = ParadigmMonitor(trained=gradlab.get_loss("baseline", m=m), rankme_window=None, block=block)
        rec = mon.update(0, h, hp)
        gd = baseline_gd(h, hp, m)
        assert rec["gd_mean"]["trained"] == pytest.approx(gd.mean(), abs=1e-7)
        assert rec["gd_off_fraction"]["trained"] == pytest.approx(1 - gd.mean(), abs=1e-7)
        # the comparison gate keeps the monitor's documented m = 0.3, under its own name
        assert rec["gd_mean"]["baseline"] == pytest.approx(baseline_gd(h, hp, 0.3).mean(), abs=1e-7)
        assert rec["losses"]["trained"] == {"loss": "baseline", "params": {"m": m, "tau": 0.05, "r": 1.0}}
        assert rec["losses"]["baseline"]["params"] == {"m": 0.3}
        # R = r at every anchor passing the gate (a static ratio)
        if gd.any():
            assert rec["ratio"]["trained"] == pytest.approx(1.0)
        assert rec["ratio_pass_fraction"]["trained"] == pytest.approx(gd.mean(), abs=1e-7)


def test_trained_infonce_equals_its_comparison_entry_and_the_closed_form(views):
    h, hp = views
    mon = ParadigmMonitor(trained=gradlab.get_loss("infonce", tau=0.05), rankme_window=None)
    rec = mon.update(0, h, hp)
    gd, share = infonce_gd_and_share(h, hp, 0.05)
    assert rec["gd_mean"]["trained"] == pytest.approx(rec["gd_mean"]["infonce"], rel=1e-6)
    assert rec["weight_share"]["trained"] == pytest.approx(rec["weight_share"]["0.05"], rel=1e-5)
    assert rec["gd_mean"]["trained"] == pytest.approx(gd.mean(), rel=1e-5)
    assert rec["weight_share"]["trained"] == pytest.approx(share.mean(), rel=1e-5)


def test_trained_infonce_at_another_tau_leaves_the_comparison_at_its_default(views):
    h, hp = views
    rec = ParadigmMonitor(trained=gradlab.get_loss("infonce", tau=0.2), rankme_window=None).update(0, h, hp)
    assert rec["gd_mean"]["trained"] == pytest.approx(infonce_gd_and_share(h, hp, 0.2)[0].mean(), rel=1e-5)
    assert rec["gd_mean"]["infonce"] == pytest.approx(infonce_gd_and_share(h, hp, 0.05)[0].mean(), rel=1e-5)
    assert rec["losses"]["infonce"] == {"loss": "infonce", "params": {"tau": 0.05}}


def test_monitors_of_one_loss_at_other_parameters_share_one_compiled_program(views):
    """The trained loss's parameters are an argument of the statistics' program, not constants:
    the monitor of a later run of a sweep (InfoNCE at another τ, the baseline at another m)
    compiles nothing, and measures its own parameters (the closed forms)."""
    from tests._xla import compilations

    h, hp = views
    ParadigmMonitor(trained=gradlab.get_loss("infonce", tau=0.07), rankme_window=None).update(0, h, hp)
    ParadigmMonitor(trained=gradlab.get_loss("baseline", m=0.5), rankme_window=None).update(0, h, hp)
    with compilations() as compiled:
        rec = ParadigmMonitor(trained=gradlab.get_loss("infonce", tau=0.3), rankme_window=None).update(0, h, hp)
        gate = ParadigmMonitor(trained=gradlab.get_loss("baseline", m=0.05), rankme_window=None).update(0, h, hp)
    assert not compiled, compiled
    gd, share = infonce_gd_and_share(h, hp, 0.3)
    assert rec["gd_mean"]["trained"] == pytest.approx(gd.mean(), rel=1e-5)
    assert rec["weight_share"]["trained"] == pytest.approx(share.mean(), rel=1e-5)
    assert rec["losses"]["trained"] == {"loss": "infonce", "params": {"tau": 0.3}}
    assert gate["gd_mean"]["trained"] == pytest.approx(baseline_gd(h, hp, 0.05).mean(), abs=1e-7)


def test_a_batch_level_loss_is_measured_from_its_exact_components(views):
    """Barlow Twins has no cosine kernel: its GD is that of ``components`` on the batch; its R is a matrix."""
    h, hp = views
    loss = gradlab.get_loss("vicreg")
    rec = ParadigmMonitor(trained=loss, rankme_window=None).update(0, h, hp)
    comps = loss.components(h, hp)
    assert rec["gd_mean"]["trained"] == pytest.approx(float(np.mean(comps.gd)), rel=1e-5)
    bt = ParadigmMonitor(trained=gradlab.get_loss("barlow_twins"), rankme_window=None).update(0, h, hp)
    assert np.isfinite(bt["gd_mean"]["trained"]) and bt["ratio"]["trained"] is None  # NaN -> null


def test_a_gradient_transform_is_measured_through_its_surrogate(views):
    """Rho et al. 2023's ``none`` transform trains exactly InfoNCE: same GD; ``emphasize`` scales the positive's pull."""
    from gradlab.losses import apply_transform

    h, hp = views
    none = ParadigmMonitor(trained=apply_transform("none", tau=0.1), rankme_window=None).update(0, h, hp)
    assert none["gd_mean"]["trained"] == pytest.approx(infonce_gd_and_share(h, hp, 0.1)[0].mean() / 0.1, rel=1e-5)
    assert none["losses"]["trained"]["loss"] == "transform:none"
    emph = ParadigmMonitor(trained=apply_transform("emphasize", tau=0.1, s=3.0), rankme_window=None).update(0, h, hp)
    # the positive's gradient is s times InfoNCE's, the negatives' unchanged: R = s · 1
    assert emph["ratio"]["trained"] == pytest.approx(3.0, rel=1e-5)


def test_records_without_a_trained_loss_have_no_trained_key(views):
    h, hp = views
    rec = ParadigmMonitor(rankme_window=None).update(0, h, hp)
    assert "trained" not in rec["gd_mean"] and "trained" not in rec["losses"]


# --- in the training loop -------------------------------------------------------------------
@pytest.fixture(scope="module")
def real():
    require_real_extra()
    from gradlab.real import load_minilm, load_news_sentences
    from gradlab.real.light import light_from_minilm

    return light_from_minilm(load_minilm(), dim=32, seed=0, dropout=0.1), load_news_sentences("News100")[:300]


@pytest.fixture
def spy(monkeypatch):
    """The views each monitored state was measured on, by state."""
    seen = {}
    original = ParadigmMonitor.update

    def update(self, step, h, h_prime, **kwargs):
        seen[int(step)] = (np.asarray(h, dtype=np.float64), np.asarray(h_prime, dtype=np.float64))
        return original(self, step, h, h_prime, **kwargs)

    monkeypatch.setattr(ParadigmMonitor, "update", update)
    return seen


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train(real, tmp_path, **cfg):
    from gradlab.real import TrainConfig
    from gradlab.real.trainer import train

    enc, sentences = real
    config = TrainConfig(**{"steps": 6, "batch_size": 16, "lr": 1e-2, "eval_every": 0, "seed": 0,
                                  "dev_pairs": 20, "eval_test": False, **cfg})
    res = train(config, encoder=enc, sentences=sentences, out_dir=tmp_path)
    assert res.monitor == "attached"
    return res, _records(tmp_path / "paradigm_monitor.jsonl"), _records(tmp_path / "train_log.jsonl")


def test_training_a_baseline_with_m_1_records_its_own_gd(real, tmp_path, spy):
    res, mon, log = _train(real, tmp_path, loss="baseline", loss_params={"m": 1.0}, monitor_every=5)
    assert [r["step"] for r in mon] == [0, 1, 5, 6]
    for r in mon:
        h, hp = spy[r["step"]]
        assert r["gd_mean"]["trained"] == pytest.approx(baseline_gd(h, hp, 1.0).mean(), abs=1e-6)
        assert r["losses"]["trained"]["params"]["m"] == 1.0
    # m = 1 keeps the gate open where m = 0.3 (the comparison entry) may not
    assert min(r["gd_mean"]["trained"] for r in mon) >= max(r["gd_mean"]["baseline"] for r in mon)


def test_state_s_is_the_model_after_s_updates(real, tmp_path, spy):
    """State s is measured on the views update s + 1 computes its loss from: the logged loss of step s + 1."""
    res, mon, log = _train(real, tmp_path, loss="infonce", loss_params={"tau": 0.05}, monitor_every=2)
    assert [r["step"] for r in mon] == [0, 1, 2, 4, 6]
    steps = {r["step"]: r["loss"] for r in log if r["event"] == "step"}
    loss = gradlab.get_loss("infonce", tau=0.05)
    for state in (0, 1, 2, 4):
        h, hp = spy[state]
        assert float(loss(h, hp)) == pytest.approx(steps[state + 1], rel=1e-4)
    for r in mon:  # the trained entry and the comparison entry are the same loss here
        assert r["gd_mean"]["trained"] == pytest.approx(r["gd_mean"]["infonce"], rel=1e-5)


def test_fewer_steps_than_monitor_every_still_writes(real, tmp_path, spy):
    _, mon, _ = _train(real, tmp_path, loss="infonce", steps=3, monitor_every=10)
    assert [r["step"] for r in mon] == [0, 1, 3]


def test_a_user_loss_from_a_file_gets_a_trained_entry(real, tmp_path, spy):
    src = tmp_path / "my_losses.py"
    src.write_text(
        "import jax, jax.numpy as jnp\n"
        "def nce(c_pos, c_neg, *, tau=0.1):\n"
        "    logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau\n"
        "    return jax.nn.logsumexp(logits, axis=-1) - c_pos / tau\n"
    )
    _, mon, _ = _train(real, tmp_path / "run", loss=f"{src}:nce", monitor_every=3)
    for r in mon:
        h, hp = spy[r["step"]]
        assert r["gd_mean"]["trained"] == pytest.approx(infonce_gd_and_share(h, hp, 0.1)[0].mean() / 0.1, rel=1e-4)
        assert r["losses"]["trained"]["loss"] == "nce"


@pytest.mark.parametrize("block", [256, 16])
def test_distance_gap_matches_a_loop(views, block):
    """Nie et al. 2023 Fig. 3's gap: mean_i (mean_{j≠i} ‖h_i − h_j'‖ − ‖h_i − h_i'‖), unit rows."""
    h, hp = views
    u, up = _unit(h), _unit(hp)
    n = len(u)
    gaps = [np.mean([np.linalg.norm(u[i] - up[j]) for j in range(n) if j != i]) - np.linalg.norm(u[i] - up[i])
            for i in range(n)]
    rec = ParadigmMonitor(rankme_window=None, block=block).update(0, h, hp)
    assert rec["distance_gap"] == pytest.approx(float(np.mean(gaps)), rel=1e-5)


def test_the_runs_last_state_is_measured_as_the_last_record(real, tmp_path, monkeypatch):
    """The final state's update waits for the RankMe window in flight (``last=True``), no other."""
    flags = {}
    original = ParadigmMonitor.update

    def update(self, step, h, h_prime, **kwargs):
        flags[int(step)] = kwargs.get("last", False)
        return original(self, step, h, h_prime, **kwargs)

    monkeypatch.setattr(ParadigmMonitor, "update", update)
    _, mon, _ = _train(real, tmp_path, loss="infonce", steps=4, monitor_every=2)
    assert [r["step"] for r in mon] == [0, 1, 2, 4]
    assert flags == {0: False, 1: False, 2: False, 4: True}
