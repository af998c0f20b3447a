"""The docstring examples of every gradlab module run as doctests (NORMALIZE_WHITESPACE | ELLIPSIS).

A module is collected when one of its docstrings has an example. The ``real`` extra's modules are
skipped when its optional packages are missing.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import gradlab

REAL_DEPS = ("optax", "safetensors", "tokenizers")
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _module_names() -> list[str]:
    names = ["gradlab"]
    for info in pkgutil.walk_packages(gradlab.__path__, prefix="gradlab."):
        names.append(info.name)
    return sorted(names)


def _has_examples(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    source = spec.loader.get_source(name) if spec and spec.loader else None
    return bool(source) and ">>>" in source


# ``gradlab.losses._functional`` holds the docstring template of the per-loss functions (whose
# ``__module__`` is ``gradlab.losses``); their examples are run one function at a time below.
TEMPLATES = {"gradlab.losses._functional"}
MODULES = [name for name in _module_names() if _has_examples(name) and name not in TEMPLATES]


def _run_doctests(tests) -> tuple[int, list[str]]:
    failed, report = 0, []
    for test in tests:
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        lines: list[str] = []
        runner.run(test, out=lines.append)
        if runner.summarize(verbose=False).failed:
            failed += runner.summarize(verbose=False).failed
            report.append("".join(lines))
    return failed, report


def test_the_suite_finds_the_documented_modules():
    # a witness that collection works: these modules carry examples today
    for name in ("gradlab.io", "gradlab.losses._loss", "gradlab.paradigm", "gradlab.simulate._stats"):
        assert name in MODULES, name


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name.startswith("gradlab.real") and not all(importlib.util.find_spec(m) for m in REAL_DEPS):
        pytest.skip("the real extra is not installed")
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, name) if t.examples]
    assert tests, f"{name} has '>>>' in its source but no doctest was found"
    failed, report = _run_doctests(tests)
    assert not failed, f"{failed} doctest example(s) failed in {name}:\n" + "\n".join(report)


def _generated_functions() -> list[str]:
    """The per-loss functions: the public functions whose ``__module__`` is the package itself."""
    from gradlab import losses

    names = sorted(n for n in losses.__all__ if getattr(getattr(losses, n), "__module__", None) == "gradlab.losses")
    assert len(names) == len(losses.list_losses())  # one per registered loss
    return names


@pytest.mark.parametrize("fname", _generated_functions())
def test_generated_loss_function_examples(fname):
    from gradlab import losses

    fn = getattr(losses, fname)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(fn, f"gradlab.losses.{fname}", globs={})
             if t.examples]
    assert tests, f"gradlab.losses.{fname} has no example"
    failed, report = _run_doctests(tests)
    assert not failed, f"{failed} doctest example(s) failed in gradlab.losses.{fname}:\n" + "\n".join(report)
