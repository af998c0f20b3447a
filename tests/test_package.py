"""Package hygiene: cheap import, no torch, lazy public names, version."""

import subprocess
import sys

import gradlab


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_is_cheap_and_does_not_load_jax_or_torch():
    out = _run("import sys, gradlab; print('jax' in sys.modules, 'torch' in sys.modules, 'matplotlib' in sys.modules)")
    assert out == "False False False"


def test_using_the_zoo_never_imports_torch():
    code = (
        "import sys, numpy as np, gradlab\n"
        "h = np.random.default_rng(0).normal(size=(4, 8))\n"
        "for n in gradlab.list_losses(): gradlab.get_loss(n)(h, h + 1)\n"
        "print('torch' in sys.modules)"
    )
    assert _run(code) == "False"


def test_version_and_public_names():
    assert gradlab.__version__.count(".") == 2
    for name in ("get_loss", "list_losses", "decompose", "Components", "lemma1_bounds"):
        assert callable(getattr(gradlab, name)) or isinstance(getattr(gradlab, name), type)


# --- public seams -------------------------------------------------------------------------------
def _public_modules() -> list[str]:
    """Every module of the package whose dotted name has no ``_``-prefixed part."""
    import pkgutil

    names = ["gradlab"] + [info.name for info in pkgutil.walk_packages(gradlab.__path__, prefix="gradlab.")]
    return sorted(n for n in names if not any(part.startswith("_") for part in n.split(".")))


_KNOWN_DRIFT: dict[str, set[str]] = {}


def test_every_all_resolves_and_lists_every_public_definition():
    import importlib
    import inspect
    import pkgutil

    problems = []
    every = ["gradlab"] + [info.name for info in pkgutil.walk_packages(gradlab.__path__, prefix="gradlab.")]
    public = set(_public_modules())
    for name in every:
        module = importlib.import_module(name)
        names = getattr(module, "__all__", None)
        if names is None:
            if name in public:
                problems.append(f"{name}: no __all__")
            continue
        problems += [f"{name}.__all__ names {n!r}, which does not resolve" for n in names if not hasattr(module, n)]
        if name not in public:
            continue
        is_package = hasattr(module, "__path__")
        for attr, value in vars(module).items():
            home = getattr(value, "__module__", None) or ""
            defined_here = home == name or (is_package and home.startswith(name + "._"))
            if (not attr.startswith("_") and defined_here and (inspect.isfunction(value) or inspect.isclass(value))
                    and attr not in names and attr not in _KNOWN_DRIFT.get(name, ())):
                problems.append(f"{name}.{attr} is public but not in __all__")
    assert not problems, "\n".join(problems)


def test_no_private_module_is_imported_across_packages():
    """``from gradlab.x._y import`` only inside ``gradlab/x`` (others use the package's public names)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"^\s*(?:from|import)\s+gradlab\.(\w+)\._\w+", re.M)
    offenders = []
    for folder in ("gradlab", "examples", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root)
            for m in pattern.finditer(path.read_text(encoding="utf-8")):
                if rel.parts[:2] != ("gradlab", m.group(1)):
                    offenders.append(f"{rel}: {m.group(0).strip()}")
    assert not offenders, "\n".join(offenders)


def test_api_reference_shows_public_names_only():
    """docs/api: every ``::: target`` is a public dotted path that resolves, and every name of a
    package's ``__all__`` is on its page (so a new public name cannot be left out)."""
    import importlib
    import re
    from pathlib import Path

    api = Path(__file__).resolve().parents[1] / "docs" / "api"
    problems = []
    for page in sorted(api.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"^::: (\S+)", text, re.M):
            if any(part.startswith("_") for part in target.split(".")):
                problems.append(f"{page.name}: {target} is private")
                continue
            parts = target.split(".")
            for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                try:
                    for attr in parts[i:]:
                        obj = getattr(obj, attr)
                except AttributeError:
                    problems.append(f"{page.name}: {target} does not resolve")
                break
    for package in ("losses", "simulate", "monitor", "plot"):
        text = (api / f"{package}.md").read_text(encoding="utf-8")
        shown = set(re.findall(r"^::: gradlab\.\w+\.(\w+)", text, re.M))
        module = importlib.import_module(f"gradlab.{package}")
        problems += [f"{package}.md misses gradlab.{package}.{n}" for n in module.__all__ if n not in shown]
    assert not problems, "\n".join(problems)
