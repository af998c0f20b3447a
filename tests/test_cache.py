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
    assert list(cache.glob("*-cache")), "the cold run wrote no compiled program"
    _wait(_heatmap(tmp_path / "warm", cache=str(cache)))
    runs = {}
    for name in ("off", "flag", "cold", "warm"):
        with np.load(tmp_path / name / "heatmap_infonce_gd.npz") as data:
            runs[name] = {k: data[k] for k in data.files}
    for name in ("flag", "cold", "warm"):
        for key, value in runs["off"].items():
            np.testing.assert_array_equal(runs[name][key], value, err_msg=f"{name}: {key}")
