"""The persistent compilation cache: where it lives, how it is switched, and that it changes no number."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradlab import _cache  # private on purpose: the settings the public enable_cache applies

ROOT = Path(__file__).resolve().parents[1]


def test_the_platform_conventions():
    home = {"HOME": "/home/u"}
    assert _cache.user_cache_dir(home, "linux") == Path("/home/u/.cache")
    assert _cache.user_cache_dir({**home, "XDG_CACHE_HOME": "/x/cache"}, "linux") == Path("/x/cache")
    assert _cache.user_cache_dir({**home, "XDG_CACHE_HOME": "relative"}, "linux") == Path("/home/u/.cache")
    assert _cache.user_cache_dir(home, "darwin") == Path("/home/u/Library/Caches")
    assert _cache.user_cache_dir({**home, "LOCALAPPDATA": "C:/Users/u/AppData/Local"}, "win32") == Path(
        "C:/Users/u/AppData/Local")


def test_the_directory_is_moved_or_switched_off_by_the_environment():
    assert _cache.cache_dir(environ={"HOME": "/h", "XDG_CACHE_HOME": "/c"}) == Path("/c/gradlab/jax")
    assert _cache.cache_dir(environ={"GRADLAB_CACHE_DIR": "/tmp/elsewhere"}) == Path("/tmp/elsewhere")
    for off in ("off", "OFF", "0", ""):
        assert _cache.cache_dir(environ={"GRADLAB_CACHE_DIR": off}) is None
    assert _cache.cache_dir("off") is None


def test_bad_size_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(_cache.ENV_MAX, "big")
    with pytest.raises(ValueError, match="GRADLAB_CACHE_MAX_BYTES must be a whole number"):
        _cache.enable_cache("off")
    with pytest.raises(ValueError, match="max_size must be a positive"):
        _cache.enable_cache("off", max_size=0)


def test_the_suite_runs_without_the_cache():
    import jax

    assert os.environ["GRADLAB_CACHE_DIR"] == "off"
    assert not jax.config.jax_enable_compilation_cache


def _heatmap(out: Path, *flags, cache: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADLAB_CACHE_DIR": cache}
    code = "import sys; from gradlab_cli.app import main; main(sys.argv[1:])"
    args = [*flags, "heatmap", "--loss", "infonce", "--grid", 5, "--batches", 30, "--batch-size", 8, "--no-plot",
            "--out", out]
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait(proc):
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]


def test_cached_and_uncached_runs_give_bit_identical_maps(tmp_path):
    cache = tmp_path / "cache"
    first = [_heatmap(tmp_path / "off", cache="off"), _heatmap(tmp_path / "flag", "--no-cache", cache=str(cache)),
             _heatmap(tmp_path / "cold", cache=str(cache))]
    for proc in first:
        _wait(proc)
    # the map's programs are the program store's (JAX's own cache holds whatever else compiled)
    assert list((cache / _cache.PROGRAMS).glob("program-*")), "the cold run wrote no compiled program"
    _wait(_heatmap(tmp_path / "warm", cache=str(cache)))
    runs = {}
    for name in ("off", "flag", "cold", "warm"):
        with np.load(tmp_path / name / "heatmap_infonce_gd.npz") as data:
            runs[name] = {k: data[k] for k in data.files}
    for name in ("flag", "cold", "warm"):
        for key, value in runs["off"].items():
            np.testing.assert_array_equal(runs[name][key], value, err_msg=f"{name}: {key}")


# --- the program store: gradlab's fixed programs kept whole, read back without tracing ----------
PROBE = """
import sys, numpy as np, gradlab
from gradlab.simulate import Protocol, gd_map
gradlab.enable_cache(sys.argv[1], programs=sys.argv[2] == "on")
r = gd_map(sys.argv[3], Protocol(grid=5, batches=30, batch_size=8))
np.savez(sys.argv[4], mean=r.mean, stderr=r.stderr)
"""


def _map(tmp_path, name: str, cache, *, programs: str = "on", loss: str = "infonce") -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(cache), programs, loss, str(tmp_path / f"{name}.npz")],
                          env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(tmp_path / f"{name}.npz") as data:
        return {k: data[k] for k in data.files}


def _same(a: dict, b: dict, what: str) -> None:
    for key, value in a.items():
        np.testing.assert_array_equal(b[key], value, err_msg=f"{what}: {key}")


def test_stored_programs_are_read_back_and_give_the_same_map(tmp_path):
    cache = tmp_path / "cache"
    reference = _map(tmp_path, "off", "off")
    _same(reference, _map(tmp_path, "cold", cache), "cold")
    store = sorted((cache / _cache.PROGRAMS).iterdir())
    kinds = sorted(p.name.split("-")[0] for p in store)
    # the normal map of the draws, the negatives' stage, the pair stage; the memory check's shapes
    assert kinds == ["program", "program", "program", "value"], kinds
    for entry in cache.glob("*-cache"):  # JAX's own cache gone: the warm run can only read the store
        entry.unlink()
    stamps = {p: p.stat().st_mtime_ns for p in store}
    _same(reference, _map(tmp_path, "warm", cache), "warm")
    assert all(p.stat().st_mtime_ns > stamps[p] for p in store), "the warm run did not read the stored programs"
    assert sorted((cache / _cache.PROGRAMS).iterdir()) == store  # nothing compiled again


def test_a_program_read_from_jaxs_cache_is_compiled_afresh_before_it_is_stored(tmp_path):
    # jaxlib 0.10 serializes an executable that JAX read back from its cache without its fused
    # kernels: stored as is, it fails in the next process ("Function ... not found")
    cache = tmp_path / "cache"
    reference = _map(tmp_path, "jax-cache-only", cache, programs="off")
    assert list(cache.glob("*-cache")) and not (cache / _cache.PROGRAMS).exists()
    _same(reference, _map(tmp_path, "stored", cache), "stored while JAX's cache held the programs")
    _same(reference, _map(tmp_path, "read", cache), "read back from the store")


def test_a_damaged_entry_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    reference = _map(tmp_path, "cold", cache)
    for entry in (cache / _cache.PROGRAMS).iterdir():
        entry.write_bytes(b"not a program")
    _same(reference, _map(tmp_path, "damaged", cache), "damaged store")
    assert all(p.read_bytes() != b"not a program" for p in (cache / _cache.PROGRAMS).iterdir())
    _same(reference, _map(tmp_path, "rewritten", cache), "rewritten store")


def test_a_users_loss_is_never_stored(tmp_path):
    (tmp_path / "my_losses.py").write_text(
        "import jax\n"
        "def soft(c_pos, c_neg, *, tau=0.1):\n"
        "    return -c_pos / tau + jax.nn.logsumexp(c_neg / tau, axis=-1)\n",
        encoding="utf-8")
    cache = tmp_path / "cache"
    _map(tmp_path, "user", cache, loss="my_losses.py:soft")
    kinds = sorted(p.name.split("-")[0] for p in (cache / _cache.PROGRAMS).iterdir())
    assert kinds == ["program"], kinds  # only the draws' normal map, which is gradlab's own


def test_the_store_is_off_unless_the_cache_is_switched_on():
    assert _cache._programs_dir() is None  # the suite runs with GRADLAB_CACHE_DIR=off
    sentinel = object()
    assert _cache.stored_program(sentinel, (), ("anything",)) is sentinel
    assert _cache.stored_value(("anything",), lambda: [1, 2]) == [1, 2]


def test_the_source_stamp_follows_every_edit(tmp_path):
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "mod.py"
    module.write_text("x = 1\n", encoding="utf-8")
    before = _cache.source_stamp(tmp_path)
    assert before == [("pkg/mod.py", 6, module.stat().st_mtime_ns)]
    module.write_text("x = 2\n", encoding="utf-8")
    os.utime(module, ns=(before[0][2] + 10**9, before[0][2] + 10**9))
    assert _cache.source_stamp(tmp_path) != before
    assert _cache.source_stamp() == _cache.source_stamp()  # the installed package: stable between calls
    assert any(path == "simulate/_engine.py" for path, _, _ in _cache.source_stamp())


def test_the_store_keeps_the_most_recently_used_entries(tmp_path):
    for i in range(5):
        entry = tmp_path / f"program-{i}"
        entry.write_bytes(b"x")
        os.utime(entry, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    _cache.trim(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["program-2", "program-3", "program-4"]


REGISTERED_USER = """
import dataclasses, sys, jax, gradlab
from gradlab.losses import BUILTIN, register
from gradlab.simulate import Protocol, gd_map
user = gradlab.loss_from_cosines(lambda c_pos, c_neg, *, tau: -c_pos / tau + jax.nn.logsumexp(c_neg / tau, axis=-1),
                                 name="registered_by_a_user", params={"tau": 0.1})
register(dataclasses.replace(user.spec, family="effective"))
assert "registered_by_a_user" not in BUILTIN and "infonce" in BUILTIN
gradlab.enable_cache(sys.argv[1])
gd_map(gradlab.get_loss("registered_by_a_user"), Protocol(grid=3, batches=8, batch_size=4))
"""


def test_a_loss_a_user_registers_is_never_stored(tmp_path):
    # registered under a name, but its code is the user's: the store's key does not cover it
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", REGISTERED_USER, str(cache)], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kinds = sorted(p.name.split("-")[0] for p in (cache / _cache.PROGRAMS).iterdir())
    assert kinds == ["program"], kinds  # only the draws' normal map
