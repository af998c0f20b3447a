"""Dimensional-collapse metrics (RankMe, embedding_std, α-ReQ) against closed-form witnesses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradlab.defaults import RANKME_EPS
from gradlab.monitor import ParadigmMonitor, alpha_req, analyze, embedding_std, rankme
from gradlab.monitor._collapse import (
    CollapseWindow,  # private on purpose: the window behind the monitor
)

CFG = dict(losses=["infonce"], taus=(0.05,), lambdas=(0.5,), ratio_losses=[])


def _hadamard(d):
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def _rankme_closed_form(k, m, eps=RANKME_EPS):
    """RankMe of k equal singular values among m: p = 1/k + ε (k times), ε (m − k times)."""
    p = 1.0 / k + eps
    return math.exp(-(k * p * math.log(p) + (m - k) * eps * math.log(eps)))


def _gram_tolerance(k, m, d):
    """How far RankMe may sit from the closed form because σ comes from float64 eigenvalues of ZᵀZ.

    A zero singular value comes out as at most δ = sqrt(d · eps64) · σ_max (the square root
    of an eigenvalue error of d · eps64 · λ_max); each of the m − k trailing p_k moves by
    ≤ δ / (k σ_max), and −p log p by ≤ that times (|log ε| + 1): a bound on |Δ log RankMe|.
    """
    delta = math.sqrt(d * np.finfo(np.float64).eps)
    return (m - k) * delta / k * (abs(math.log(RANKME_EPS)) + 1)


def _rank_k_rows(k, d, w):
    """W rows cycling through k orthogonal ±1 Hadamard rows: k equal singular values, exact in float32."""
    return _hadamard(d)[np.arange(w) % k]


@pytest.mark.parametrize("k", [1, 3, 7])
def test_rankme_rank_k_equal_singular_values(k):
    d, w = 16, 42  # w divisible by k: equal multiplicities, so equal singular values
    z = _rank_k_rows(k, d, w)
    expected = _rankme_closed_form(k, m=d)
    tol = _gram_tolerance(k, d, d)
    assert abs(math.log(rankme(z)) - math.log(expected)) <= tol
    assert abs(math.log(rankme(z.astype(np.float32))) - math.log(expected)) <= tol  # ±1 entries: exact
    assert abs(expected - k) < 2e-4 * k  # what ε costs: the closed form is k to ~ m ε |log ε|
    assert tol < math.log(expected / k)  # the check resolves what ε adds to k


def test_rankme_rotated_rank_k_float64():
    """A generic rank-k matrix (random orthonormal frame) with equal singular values."""
    rng = np.random.default_rng(0)
    k, d, w = 4, 32, 400
    frame, _ = np.linalg.qr(rng.normal(size=(d, k)))  # (d, k) orthonormal columns
    coeff, _ = np.linalg.qr(rng.normal(size=(w, k)))  # (w, k) orthonormal columns
    z = 3.0 * coeff @ frame.T  # singular values all 3
    expected = _rankme_closed_form(k, m=d)
    assert abs(math.log(rankme(z)) - math.log(expected)) <= _gram_tolerance(k, d, d)
    assert rankme(z) == pytest.approx(k, rel=1e-3)


def test_rankme_is_on_embeddings_as_given():
    """Not normalized: scaling one row changes the singular values, hence RankMe."""
    z = _rank_k_rows(2, 8, 8).astype(float)
    before = rankme(z)
    z[0] *= 10.0
    assert rankme(z) < before - 0.3


def test_embedding_std_isotropic_gaussian():
    rng = np.random.default_rng(1)
    n, d = 4096, 64
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    got = float(embedding_std(x))
    # Each coordinate of a uniform unit vector has variance 1/D; its sample std has
    # standard deviation ≈ sqrt(1 / (2 D N)) (Var x² ≈ 2/D², delta method), and the mean
    # over D coordinates is no more spread than one of them: 5 such sd's.
    assert abs(got - 1 / math.sqrt(d)) < 5 * math.sqrt(1 / (2 * d * n))


@pytest.mark.x64
def test_embedding_std_one_hot_rows_closed_form():
    """Rows e_{i mod D}: every coordinate is Bernoulli(1/D) over rows; the std (ddof 1) is exact."""
    n, d = 60, 6
    x = np.eye(d)[np.arange(n) % d]
    p = 1.0 / d
    assert float(embedding_std(x)) == pytest.approx(math.sqrt(p * (1 - p) * n / (n - 1)), rel=1e-12)


def test_embedding_std_in_record_collapsed_and_healthy():
    rng = np.random.default_rng(2)
    n, d = 64, 32
    direction = rng.normal(size=d)
    h = np.outer(rng.uniform(0.5, 2.0, size=n), direction)  # collapsed: one direction, any scale
    hp = h + 0.3 * rng.normal(size=(n, d))
    rec = ParadigmMonitor(**CFG, rankme_window=None).update(0, h.astype(np.float32), hp.astype(np.float32))

    def ref(x):  # float64 NumPy reference: normalize, std over rows (ddof 1), mean over dimensions
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return np.std(x, axis=0, ddof=1).mean()

    assert ref(h) < 1e-12
    assert rec["embedding_std"] == pytest.approx(0.5 * (ref(h) + ref(hp)), abs=1e-6)
    assert rec["rankme"] is None and rec["rankme_rows"] is None


def _power_law_rows(w, d, alpha, seed=0):
    """Rows whose centered covariance (ddof 1) has eigenvalues exactly ∝ k^-α (k = 1 … D)."""
    x = np.random.default_rng(seed).normal(size=(w, d))
    q, _ = np.linalg.qr(x - x.mean(axis=0))  # orthonormal columns, each of mean 0
    return 1.0 + q * np.arange(1, d + 1) ** (-alpha / 2)  # a shift leaves the covariance alone


@pytest.mark.parametrize("alpha", [0.7, 1.3, 2.0])
def test_alpha_req_recovers_power_law(alpha):
    w, d = 512, 48
    z = _power_law_rows(w, d, alpha)
    # covariance = (ZᵀZ − W m mᵀ)/(W − 1) in float64 with entries of size ~1 (the shift):
    # eigenvalue error ≲ d · eps64, against the smallest eigenvalue d^-α / (W − 1)
    tol = 10 * d * np.finfo(np.float64).eps * (w - 1) * d**alpha
    assert alpha_req(z) == pytest.approx(alpha, abs=tol)
    assert tol < 1e-6


def test_alpha_req_nan_when_rank_deficient():
    z = np.zeros((10, 4))
    z[:, 0] = np.arange(10)
    assert math.isnan(alpha_req(z))


def test_window_tumbles_and_is_bounded():
    w = CollapseWindow(8)
    z = _rank_k_rows(2, 8, 16)
    assert w.add(z[:5], step=0)["rankme"] is None
    out = w.add(z[5:11], step=1)  # completes rows 0..7, keeps 8..10
    assert out["rankme_rows"] == 8 and out["rankme_step"] == 1
    assert out["rankme"] == pytest.approx(rankme(z[:8]), rel=1e-12)
    assert w._buf.shape == (8, 8) and w._fill == 3
    big = np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32)  # the window holds float32
    out = w.add(big, step=2)  # a batch of >= W rows is a window by itself: its last W rows
    assert out["rankme"] == pytest.approx(rankme(big[-8:]), rel=1e-12)
    assert out["alpha_req"] == pytest.approx(alpha_req(big[-8:]), rel=1e-12)


def test_background_window_gives_the_synchronous_values():
    z = np.random.default_rng(3).normal(size=(40, 8)).astype(np.float32)
    sync, bg = CollapseWindow(16), CollapseWindow(16, background=True)
    for step in range(5):
        sync.add(z[8 * step:8 * step + 8], step)
        bg.add(z[8 * step:8 * step + 8], step)
        bg.close()  # waits for the window in flight (else a window completed meanwhile is skipped)
        assert bg.value == sync.value
    assert sync.value["rankme_step"] == 3 and bg.skipped == 0


def test_background_window_never_waits_and_skips_while_busy(monkeypatch):
    import threading

    from gradlab.monitor import _collapse

    release, finished = threading.Event(), threading.Event()
    real = _collapse._window_values

    def slow(z, eps, step):
        release.wait(120)
        finished.set()
        return real(z, eps, step)

    monkeypatch.setattr(_collapse, "_window_values", slow)
    z = np.random.default_rng(5).normal(size=(24, 4)).astype(np.float32)
    w = CollapseWindow(8, background=True)
    for step in range(3):  # three windows complete; the first is still computing
        assert w.add(z[8 * step:8 * step + 8], step)["rankme"] is None
    # add never waited: the first window is still blocked (how long add takes: benchmarks/monitor.py)
    assert not finished.is_set() and w.skipped == 2
    release.set()
    w.close()
    assert w.value["rankme_step"] == 0 and w.value["rankme"] == pytest.approx(rankme(z[:8]), rel=1e-12)


def _slow_windows(monkeypatch):
    """Background windows that wait for the returned event (a loaded CPU's slow spectra)."""
    import threading

    from gradlab.monitor import _collapse

    release = threading.Event()
    real = _collapse._window_values

    def slow(z, eps, step):
        release.wait(120)
        return real(z, eps, step)

    monkeypatch.setattr(_collapse, "_window_values", slow)
    return release


def test_a_waiting_add_collects_the_window_in_flight_and_computes_its_own(monkeypatch):
    release = _slow_windows(monkeypatch)
    z = np.random.default_rng(6).normal(size=(24, 4)).astype(np.float32)
    w = CollapseWindow(8, background=True)
    assert w.add(z[:8], 0)["rankme"] is None  # window 0 in flight
    release.set()
    out = w.add(z[8:16], 1, wait=True)  # waits for window 0, then computes window 1 at once
    assert out["rankme_step"] == 1 and out["rankme"] == pytest.approx(rankme(z[8:16]), rel=1e-12)
    assert w.skipped == 0 and w._pending is None


def _monitor_run(monkeypatch, finish):
    """Three updates of 8 rows into windows of 8 rows whose spectra stay blocked until the run's
    end: each update completes a window, the first is in flight, the second skipped; ``finish``
    ends the run. Returns the records written."""
    release = _slow_windows(monkeypatch)
    rng = np.random.default_rng(7)
    h = rng.normal(size=(24, 8)).astype(np.float32)
    hp = h + 0.1 * rng.normal(size=h.shape).astype(np.float32)
    records = []
    mon = ParadigmMonitor(**CFG, rankme_window=8, sink=records.append)
    for step in range(2):
        mon.update(step, h[8 * step:8 * step + 8], hp[8 * step:8 * step + 8])
    release.set()
    finish(mon, h[16:], hp[16:])
    return records, h


@pytest.mark.parametrize("ending", ["last=True", "pending at close"])
def test_the_runs_last_record_carries_every_window(monkeypatch, ending):
    def finish(mon, h, hp):
        if ending == "last=True":
            mon.update(2, h, hp, last=True)
        else:  # a record started with wait=False and finished by close()
            mon.update(2, h, hp, wait=False)
        mon.close()

    records, h = _monitor_run(monkeypatch, finish)
    assert [r["rankme_step"] for r in records] == [None, None, 2]
    assert records[-1]["rankme"] == pytest.approx(rankme(h[16:]), rel=1e-6)


def test_without_last_the_last_window_is_lost(monkeypatch):
    def plain(mon, h, hp):  # what a run's end gave before ``last``: the window in flight is dropped
        mon.update(2, h, hp)
        mon.close()

    records, _ = _monitor_run(monkeypatch, plain)
    assert records[-1]["rankme_step"] in (None, 0)  # window 0 at most; window 2 was skipped


def test_monitor_and_analyze_carry_the_window():
    d, w, n = 16, 48, 8
    h = _rank_k_rows(3, d, w).astype(np.float32)
    hp = h + 0.1 * np.random.default_rng(4).normal(size=h.shape).astype(np.float32)
    expected = _rankme_closed_form(3, m=d)
    tol = _gram_tolerance(3, d, d)
    res = analyze(h, hp, batch_size=n, rankme_window=w, **CFG)
    assert np.all(np.isnan(res["rankme"][:-1])) and list(res["rankme_rows"]) == [-1] * 5 + [w]
    assert abs(math.log(res["rankme"][-1]) - math.log(expected)) <= tol
    assert res["rankme_step"][-1] == 5
    mon = ParadigmMonitor(**CFG, rankme_window=w)
    for step in range(w // n):
        rec = mon.update(step, h[step * n:(step + 1) * n], hp[step * n:(step + 1) * n])
    mon.close()
    rec = mon.update(99, h[:n], hp[:n])
    assert rec["rankme"] == res["rankme"][-1] and rec["rankme_step"] == 5
    assert rec["alpha_req"] is None or math.isfinite(rec["alpha_req"])  # rank 3 of 16: NaN -> None


def test_alpha_req_through_the_monitor_float32():
    z = _power_law_rows(256, 32, 1.3).astype(np.float32)
    res = analyze(z, z + 0.01, batch_size=128, rankme_window=256, **CFG)
    # float32 rows: eigenvalues move by ~ eps32 relative to the largest; the smallest is 32^-1.3 ≈ 0.011 of it
    assert res["alpha_req"][-1] == pytest.approx(1.3, abs=1e-3)


def test_window_validation():
    with pytest.raises(ValueError, match="rankme_window"):
        ParadigmMonitor(**CFG, rankme_window=1)
    with pytest.raises(ValueError, match="rankme_window"):
        CollapseWindow(True)
