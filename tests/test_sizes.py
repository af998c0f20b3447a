"""Sizes refused up front: estimates before allocation, one-line errors, the two sizes that once crashed the process
(a 100000-cell grid with 100000 batches, an 80000-cell grid with 10 batches)."""


import jax
import numpy as np
import pytest

# private on purpose: the memory model and the compiled statistic's sizes are the point here
from gradlab import _memory
from gradlab.simulate import Protocol, _engine, gd_map
from gradlab.simulate._sampling import draws_for
from gradlab.simulate._stats import _gd_stat, _params, _path
from tests._cli import one_line_error, run


@pytest.mark.parametrize("args", [("--grid", 100000, "--batches", 100000), ("--grid", 80000, "--batches", 10)])
def test_the_sizes_that_once_crashed_are_refused_at_once(tmp_path, args):
    out = tmp_path / "out"
    result = run("heatmap", "--loss", "arccon", *args, "--no-plot", "--out", out)  # how fast: benchmarks/latency.py
    err = one_line_error(result)
    assert "GiB" in err and "limit" in err and "grid" in err, err
    assert not any(out.iterdir()) if out.exists() else True


def test_the_limit_follows_the_override(monkeypatch):
    monkeypatch.setenv(_memory.ENV_LIMIT, "1M")
    with pytest.raises(ValueError, match=r"more than the 1\.0 MiB limit"):
        gd_map("infonce", Protocol(grid=60, batches=200, batch_size=16))
    monkeypatch.setenv(_memory.ENV_LIMIT, "off")
    assert gd_map("infonce", Protocol(grid=3, batches=4, batch_size=4)).mean.shape == (3, 3)


@pytest.mark.parametrize("mode", ["common", "independent"])
def test_the_estimated_result_is_the_size_of_the_result(mode):
    protocol = Protocol(grid=(3, 5), batches=6, batch_size=5, mode=mode)
    loss_name = "infonce"
    from gradlab.losses import get_loss

    loss = get_loss(loss_name)
    stat = _gd_stat(loss, _path(loss, "auto"), False)
    draws = draws_for(protocol)
    params = _params(loss, protocol.jnp_dtype())
    plan = _engine.estimate(stat, draws, 3, 5, params)
    out = _engine.run(stat, draws, protocol.mu_pos, protocol.mu_neg, params)
    assert plan.result == sum(np.asarray(a).nbytes for a in jax.tree.leaves(out))
    assert plan.working >= 2 * plan.result
    # the chunking uses the same estimate: the budget divided by the per-item bytes
    assert plan.chunk == _engine._choose_chunk(None, plan.per_item, 3 if mode == "common" else 15, len(jax.devices()))


def test_norm_maps_and_the_monitor_refuse_what_cannot_fit(monkeypatch):
    from gradlab import norms
    from gradlab.monitor import ParadigmMonitor, analyze

    monkeypatch.setenv(_memory.ENV_LIMIT, "64K")
    with pytest.raises(ValueError, match="gradient-norm map on a 200 × 200 grid"):
        norms.norm_result("dcl", grid=200)
    h = np.ones((64, 4), np.float32)
    with pytest.raises(ValueError, match=r"batch of N = 64 pairs"):
        analyze(h, h, batch_size=64)
    record = ParadigmMonitor(sink=None).update(0, h, h)
    assert record["valid"] is False and "N = 64" in record["reason"]


def test_parse_bytes_and_messages():
    assert _memory.parse_bytes("512") == 512
    assert _memory.parse_bytes("16G") == 16 * 2**30
    assert _memory.parse_bytes("1.5 MiB") == int(1.5 * 2**20)
    with pytest.raises(ValueError, match="GRADLAB_MEMORY_LIMIT"):
        _memory.parse_bytes("lots")
    assert _memory.physical_memory() is None or _memory.physical_memory() > 2**20


def test_the_quadrature_map_is_checked_too(monkeypatch):
    from gradlab.simulate._quadrature import mean_gd_exact

    monkeypatch.setenv(_memory.ENV_LIMIT, "1M")
    with pytest.raises(ValueError, match="quadrature GD map on a 3 × 400 grid"):
        mean_gd_exact("mpt", 0.2, np.linspace(0.1, 1, 3), np.linspace(0.1, 3, 400), 0.05, 0.1, 127)


# --- memory mappings: a process that compiles without end once crashed at Linux's limit ---------
needs_proc = pytest.mark.skipif(_memory.memory_mappings() is None, reason="the kernel does not say (not Linux)")


@needs_proc
def test_memory_mappings_counts_the_mappings_a_process_makes():
    import mmap

    before, limit = _memory.memory_mappings()
    assert limit > 0
    # anonymous mappings with gaps between them cannot merge: each is one mapping of its own
    held = [mmap.mmap(-1, 2 * mmap.PAGESIZE) for _ in range(40)]
    try:
        for m in held[::2]:
            m.close()
        after, _ = _memory.memory_mappings()
    finally:
        for m in held:
            m.close()
    assert after - before >= 15  # 20 kept; a freed neighbour may let two of them merge


@needs_proc
def test_relieve_mappings_drops_the_compiled_programs_past_the_share_only():
    f = jax.jit(lambda x: x * 2 + 1)
    f(np.arange(3.0))
    assert f._cache_size() == 1
    assert _memory.relieve_mappings(share=1.0) is False  # far from the limit: nothing dropped
    assert f._cache_size() == 1
    assert _memory.relieve_mappings(share=0.0) is True
    assert f._cache_size() == 0
    np.testing.assert_array_equal(f(np.arange(3.0)), [1.0, 3.0, 5.0])  # compiled again when used


def test_a_training_run_starts_by_relieving_a_crowded_process(monkeypatch):
    from tests._real import HF_FIXTURES, TINY_SENTENCES, require_real_extra

    require_real_extra()
    from gradlab.real import TrainConfig, train

    f = jax.jit(lambda x: x - 1)
    f(np.arange(2.0))
    monkeypatch.setattr(_memory, "memory_mappings", lambda: (60_000, 65_530))
    train(TrainConfig(encoder=str(HF_FIXTURES / "bert"), steps=1, batch_size=8, eval_every=0, dev_pairs=20),
          sentences=TINY_SENTENCES)
    assert f._cache_size() == 0  # the run began by dropping the process's programs
