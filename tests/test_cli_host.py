"""``gradlab train`` and ``gradlab experiment`` start again with glibc's huge pages on a CPU
(``gradlab_cli._host``): when they do, what the environment becomes, and that the console command
really starts once more, with the tunable, and only once."""

from __future__ import annotations

import doctest
import os
import platform
import subprocess
import sys

import pytest
from gradlab_cli import _host
from gradlab_cli._host import HUGE_PAGES, cpu_only, glibc_version, huge_pages_env, thp_mode

YES = {"glibc": (2, 36), "thp": "madvise", "on_cpu": True}


def test_training_commands_on_a_cpu_get_huge_pages_added_to_the_tunables():
    env = huge_pages_env(["train", "--steps", "3"], {"HOME": "/h"}, **YES)
    assert env == {"HOME": "/h", "GLIBC_TUNABLES": HUGE_PAGES}
    given = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    env = huge_pages_env(["--no-cache", "experiment", "seeds"], given, **YES)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert given == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}  # the caller's mapping untouched


@pytest.mark.parametrize("argv, environ, facts", [
    (["heatmap", "--loss", "arccon"], {}, {}),            # not a training command
    ([], {}, {}),                                         # no command at all
    (["--version"], {}, {}),
    (["train"], {"GRADLAB_HUGE_PAGES": "0"}, {}),         # opted out
    (["train"], {"GRADLAB_HUGE_PAGES": " Off "}, {}),
    (["train"], {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, {}),  # the user's own choice kept
    (["train"], {"GLIBC_TUNABLES": HUGE_PAGES}, {}),     # already started again: no loop
    (["train"], {}, {"glibc": None}),                     # musl, macOS, Windows
    (["train"], {}, {"glibc": (2, 34)}),                  # before the tunable
    (["train"], {}, {"thp": "always"}),                   # the kernel gives them already
    (["train"], {}, {"thp": "never"}),
    (["train"], {}, {"thp": None}),
    (["train"], {}, {"on_cpu": False}),                   # a GPU's run: its host has no such temporaries
])
def test_everything_else_runs_as_it_is(argv, environ, facts):
    assert huge_pages_env(argv, environ, **{**YES, **facts}) is None


def test_the_kernels_mode_is_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert thp_mode(str(f)) == "madvise"
    f.write_text("[always] madvise never\n")
    assert thp_mode(str(f)) == "always"
    f.write_text("garbled\n")
    assert thp_mode(str(f)) is None
    assert thp_mode(str(tmp_path / "missing")) is None


def test_glibc_version_agrees_with_the_standard_library():
    lib, version = platform.libc_ver()
    expected = tuple(int(x) for x in version.split(".")[:2]) if lib == "glibc" else None
    assert glibc_version() == expected


def test_jax_platforms_decides_where_jax_runs():
    assert cpu_only({"JAX_PLATFORMS": "cpu"}) and cpu_only({"JAX_PLATFORMS": " CPU,cuda"})
    assert not cpu_only({"JAX_PLATFORMS": "cuda"}) and not cpu_only({"JAX_PLATFORMS": "tpu,cpu"})


def test_the_docstring_examples():
    failed, attempted = doctest.testmod(_host, optionflags=doctest.ELLIPSIS)
    assert attempted >= 2 and failed == 0


def _console(*args: str, **env: str) -> list[str]:
    """``gradlab ARGS`` started as the console script starts it (``main()`` without arguments),
    after a line with the process's ``GLIBC_TUNABLES``: one line a start."""
    code = ("import os, sys; print('TUNABLES', os.environ.get('GLIBC_TUNABLES'), flush=True); "
            "from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()")
    environ = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "GRADLAB_HUGE_PAGES")}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if line.startswith("TUNABLES")]


def test_the_console_command_starts_again_once_with_the_tunable():
    qualifies = huge_pages_env(["train"], {}, glibc=glibc_version(), thp=thp_mode(),
                               on_cpu=cpu_only({k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}))
    starts = _console("train", "--help")
    if qualifies is None:
        assert starts == ["TUNABLES None"]
    else:
        assert starts == ["TUNABLES None", f"TUNABLES {HUGE_PAGES}"]
    assert _console("train", "--help", GRADLAB_HUGE_PAGES="0") == ["TUNABLES None"]
    assert _console("losses") == ["TUNABLES None"]


def test_the_runs_metadata_records_the_tunables(monkeypatch):
    from gradlab.io import runtime_meta

    monkeypatch.setenv("GLIBC_TUNABLES", HUGE_PAGES)
    assert runtime_meta()["glibc_tunables"] == HUGE_PAGES
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert "glibc_tunables" not in runtime_meta()


def _qualify(monkeypatch):
    monkeypatch.setattr(_host, "glibc_version", lambda: (2, 36))
    monkeypatch.setattr(_host, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(_host, "cpu_only", lambda environ: True)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("GRADLAB_HUGE_PAGES", raising=False)


def test_the_command_starts_again_as_it_was_started(monkeypatch):
    _qualify(monkeypatch)
    calls = []
    monkeypatch.setattr(_host.os, "execve", lambda path, args, env: calls.append((path, args, env)))
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "x", "train", "--steps", "2"])
    _host.start_with_huge_pages(["train", "--steps", "2"])
    [(path, args, env)] = calls
    assert path == sys.executable and args == ["python", "-m", "x", "train", "--steps", "2"]
    assert env["GLIBC_TUNABLES"] == HUGE_PAGES


def test_without_a_way_to_start_again_the_command_runs_as_it_is(monkeypatch):
    _qualify(monkeypatch)

    def refuse(*args):
        raise PermissionError("no exec here")

    monkeypatch.setattr(_host.os, "execve", refuse)
    monkeypatch.setattr(sys, "orig_argv", ["python", "gradlab", "train"])
    assert _host.start_with_huge_pages(["train"]) is None  # returned: the command goes on
    monkeypatch.setattr(sys, "orig_argv", [])  # an embedded interpreter
    monkeypatch.setattr(_host.os, "execve", lambda *a: pytest.fail("started again without an argv"))
    assert _host.start_with_huge_pages(["train"]) is None
