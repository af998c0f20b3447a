"""Data flows one way: no import cycle among gradlab's and the CLI's modules, the library never
imports the CLI, and no code reaches into another package's private modules.

The import graph is read from the source with ``ast`` (nothing is imported). An edge
A -> B is an ``import B`` / ``from B import x`` in A; ``from P import m`` with m a
submodule of package P is an edge to P.m. A submodule's implicit import of its own
parent package is not an edge (Python has already begun that package when it loads
the submodule; only an explicit import can close a cycle).

Two graphs are checked. Module-level imports (also inside top-level ``if`` / ``try``
blocks, not under ``if TYPE_CHECKING``) must have no cycle at all: such a cycle makes a
half-initialized module visible. Function-local imports run only when the function is
called, after every module has loaded, so they cannot break an import; they are
allowed as the way to defer heavy dependencies (matplotlib, SciPy) and keep
``import gradlab`` cheap. They still must not hide a cycle of the design (a registry
importing its families, as ``gradlab.losses`` once did): the graph with them counted
may contain only the cycles listed in ``KNOWN_LAZY_CYCLES``.

The CLI (``cli/``, import name ``gradlab_cli``) is in both graphs: it sits on top of the
library, so ``gradlab`` may not import it, not even lazily.

A module whose name starts with ``_`` (``gradlab.losses._ops``, ``gradlab._cache``) is private
to the package that holds it: only modules of that package (``gradlab.losses.*``; ``gradlab.*``)
may import it. Everything else, the CLI, ``examples/`` and ``benchmarks/`` included, uses the
package's public names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gradlab_cli

import gradlab

ROOT = Path(gradlab.__file__).resolve().parent
#: Import name -> package directory: the library and the CLI (``cli/`` is imported as ``gradlab_cli``).
PACKAGES = {"gradlab": ROOT, "gradlab_cli": Path(gradlab_cli.__file__).resolve().parent}
REPO = ROOT.parent
#: Folders of scripts (not packages) that must use the packages' public names too.
SCRIPT_DIRS = ("examples", "benchmarks")


def _modules() -> dict[str, Path]:
    out = {}
    for name, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = [name, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(body):
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _top_level_imports(node.body)
            yield from _top_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _top_level_imports(block)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


#: Cycles through function-local imports still to be removed (none left: the simulate
#: statistics and the quadrature once shared result-building helpers). Keep it empty.
KNOWN_LAZY_CYCLES: list[list[str]] = []


def _all_imports(tree):
    return (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def _targets(mod: str, is_package: bool, node: ast.Import | ast.ImportFrom, mods) -> list[str]:
    """The modules an import statement names (``from P import m``: ``P.m`` when it is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    target = _resolve(mod, is_package, node)
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names]


def import_graph(*, function_local: bool = False) -> dict[str, set[str]]:
    """Module name -> the gradlab / gradlab_cli modules it imports (module level; also in functions if asked)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        nodes = _all_imports(tree) if function_local else _top_level_imports(tree.body)
        for node in nodes:
            targets = _targets(mod, path.name == "__init__.py", node, mods)
            graph[mod].update(t for t in targets if t in mods and t != mod)
    return graph


def private_owner(target: str) -> str | None:
    """The package a module is private to: ``gradlab.losses._ops`` -> ``gradlab.losses``,
    ``gradlab._cache`` -> ``gradlab``; None for a public module."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _source_trees(mods: dict[str, Path]):
    """(name, path, parsed tree) of the library's and the CLI's modules and of the scripts of
    ``examples/`` and ``benchmarks/``."""
    files = dict(mods)
    for folder in SCRIPT_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            files[".".join((folder, *path.relative_to(REPO / folder).with_suffix("").parts))] = path
    for mod, path in files.items():
        yield mod, path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


#: The benchmarks that instrument a private module on purpose, each named here with its reason
#: (importer, private module): none is hidden behind an attribute access.
INSTRUMENTS = {
    ("benchmarks.gpu_aot", "gradlab.simulate._engine"):
        "compiles a map's programs for a GPU that is not attached (compile_engine): the engine's stages "
        "built on that device's mesh, its program store replaced by the compilation",
    ("benchmarks.gpu", "gradlab.simulate._engine"):
        "times the independent mode with one of the GPU's choices changed (its draws whole, as a CPU's; "
        "another number of cells side by side), beside the choice, on one machine",
}


def private_imports() -> list[str]:
    """Every import of a private module from outside its package, in the library, the CLI,
    ``examples/`` and ``benchmarks/`` (but :data:`INSTRUMENTS`): ``path:line: importer imports target``."""
    mods = _modules()
    found = []
    for mod, path, tree in _source_trees(mods):
        for node in _all_imports(tree):
            for target in dict.fromkeys(_targets(mod, path.name == "__init__.py", node, mods)):
                owner = private_owner(target)
                if (mod, target) in INSTRUMENTS:
                    continue
                if owner is not None and owner in PACKAGES.keys() | mods.keys() and not (
                        mod == owner or mod.startswith(owner + ".")):
                    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                    found.append(f"{where}:{node.lineno}: {mod} imports {target}")
    return found


def private_name_imports() -> list[str]:
    """Every private *name* (``_x``, not a module) imported from another module, in the library, the
    CLI, ``examples/`` and ``benchmarks/``: ``path:line: importer imports source._x``. A stage used
    elsewhere deserves a public name in its home; a module may take private names only from its own
    package's private modules (``from gradlab.losses._ops import _x`` inside ``gradlab.losses``)."""
    mods = _modules()
    found = []
    for mod, path, tree in _source_trees(mods):
        for node in _all_imports(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _resolve(mod, path.name == "__init__.py", node)
            if source.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__") or f"{source}.{name}" in mods:
                    continue  # public, dunder, or a submodule (private modules: private_imports)
                owner = private_owner(source)
                if owner is not None and (mod == owner or mod.startswith(owner + ".")):
                    continue  # a private module's names, inside its own package
                where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                found.append(f"{where}:{node.lineno}: {mod} imports {source}.{name}")
    return found


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; components of more than one module are the cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_covers_the_whole_package():
    graph = import_graph()
    for expected in ("gradlab", "gradlab.losses", "gradlab.losses._ops", "gradlab.simulate", "gradlab.monitor",
                     "gradlab.norms", "gradlab.plot"):
        assert expected in graph
    assert "gradlab.losses._ops" in graph["gradlab.losses._effective"]
    assert "gradlab.losses._effective" in graph["gradlab.losses"]


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    comps = [c for c in strongly_connected_components(graph) if len(c) > 1]
    assert comps == [["a", "b", "c"]]


def test_the_graph_covers_the_cli():
    graph = import_graph()
    for expected in ("gradlab_cli", "gradlab_cli.app", "gradlab_cli._common", "gradlab_cli._monitor",
                     "gradlab_cli._real", "gradlab_cli._experiments"):
        assert expected in graph
    assert "gradlab_cli._common" in graph["gradlab_cli.app"]
    assert "gradlab_cli._common" in graph["gradlab_cli._real"]


def test_no_import_cycle_inside_gradlab_or_the_cli():
    cycles = [c for c in strongly_connected_components(import_graph()) if len(c) > 1]
    assert not cycles, f"import cycles among gradlab / gradlab_cli modules: {cycles}"


def test_the_library_never_imports_the_cli():
    graph = import_graph(function_local=True)
    bad = {m: sorted(t for t in ts if t.split(".")[0] == "gradlab_cli")
           for m, ts in graph.items() if m.split(".")[0] == "gradlab"}
    assert not {m: t for m, t in bad.items() if t}, f"the library imports the CLI: {bad}"


def test_private_owner():
    assert private_owner("gradlab.losses._ops") == "gradlab.losses"
    assert private_owner("gradlab._cache") == "gradlab"
    assert private_owner("gradlab_cli._common") == "gradlab_cli"
    assert private_owner("gradlab.__init__") is None and private_owner("gradlab.plot") is None


def test_the_private_import_finder_finds_a_planted_one(tmp_path, monkeypatch):
    planted = tmp_path / "gradlab_cli"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    (planted / "_ok.py").write_text("from gradlab_cli import _other\n")  # its own package: allowed
    (planted / "_other.py").write_text("def f():\n    from gradlab.losses._ops import fraction\n")
    (planted / "app.py").write_text("import gradlab.losses._user\nfrom gradlab import _cache, plot\n")
    monkeypatch.setitem(PACKAGES, "gradlab_cli", planted)
    found = private_imports()
    assert any("gradlab_cli._other imports gradlab.losses._ops" in f for f in found), found
    assert any("gradlab_cli.app imports gradlab.losses._user" in f for f in found), found
    assert any("gradlab_cli.app imports gradlab._cache" in f for f in found), found
    assert not any(f.endswith("gradlab_cli.app imports gradlab.plot") for f in found), found
    assert not any("gradlab_cli._ok" in f for f in found), found


def test_no_private_module_is_imported_from_outside_its_package():
    found = private_imports()
    assert not found, "private modules imported from outside their package:\n" + "\n".join(found)


def test_the_private_name_finder_finds_a_planted_one(tmp_path, monkeypatch):
    planted = tmp_path / "gradlab_cli"
    planted.mkdir()
    (planted / "__init__.py").write_text("")
    (planted / "_inner.py").write_text("from gradlab_cli._helpers import _shared\n")  # its own package's
    (planted / "_helpers.py").write_text("_shared = 1\n")
    (planted / "app.py").write_text("def f():\n    from gradlab.real.run import _recipe_encoder\n"
                                    "from gradlab.real import run, load_encoder\n")
    monkeypatch.setitem(PACKAGES, "gradlab_cli", planted)
    found = private_name_imports()
    assert any("gradlab_cli.app imports gradlab.real.run._recipe_encoder" in f for f in found), found
    assert not any("gradlab_cli._inner" in f for f in found), found
    assert not any("load_encoder" in f or f.endswith("gradlab.real.run") for f in found), found


def test_no_private_name_is_imported_from_another_module():
    found = private_name_imports()
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_function_local_imports_hide_no_new_cycle():
    cycles = [c for c in strongly_connected_components(import_graph(function_local=True)) if len(c) > 1]
    assert not [c for c in cycles if c not in KNOWN_LAZY_CYCLES], f"import cycles through lazy imports: {cycles}"


def test_loss_leaves_import_no_family():
    graph = import_graph(function_local=True)
    families = {"gradlab.losses._effective", "gradlab.losses._ineffective", "gradlab.losses._modified",
                "gradlab.losses._margins", "gradlab.losses"}
    for leaf in ("gradlab.losses._ops", "gradlab.losses._registry", "gradlab.losses._loss"):
        assert not graph[leaf] & families, f"{leaf} imports {graph[leaf] & families}"


def test_architecture_page_names_every_public_module_and_only_real_ones():
    """docs/architecture.md's module map cannot go stale: each ``gradlab.*`` it names imports,
    and every public module (no ``_`` part in its dotted name) is named."""
    import importlib
    import pkgutil
    import re
    from pathlib import Path

    import gradlab

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("## The module map"):text.index("## Conventions")]
    named = {m for m in re.findall(r"`(gradlab(?:\.[a-z]\w*)*)`", table)}
    modules = set()
    for name in sorted(named):
        try:
            importlib.import_module(name)
            modules.add(name)
        except ImportError:
            parent, _, attr = name.rpartition(".")  # a public name of a module, e.g. gradlab.io.Result
            assert parent and hasattr(importlib.import_module(parent), attr), f"architecture.md names {name}, which does not exist"
    every = ["gradlab"] + [info.name for info in pkgutil.walk_packages(gradlab.__path__, prefix="gradlab.")]
    public = {n for n in every if not any(part.startswith("_") for part in n.split("."))}
    assert public - modules == set(), f"architecture.md does not name {sorted(public - modules)}"


# --- the floors of the house (docs/architecture.md) --------------------------------------------
#: Each module's floor: the first floor one of whose prefixes names it (a prefix names itself and
#: its submodules). Data flows up: losses -> paradigm -> simulate / monitor / real -> results ->
#: plots and commands. Imports point down, with one exception that makes the house a diamond:
#: ``plot`` reads results and never imports the floors that compute them.
FLOORS: dict[str, tuple[str, ...]] = {
    "base": ("gradlab.defaults", "gradlab.geometry", "gradlab.progress", "gradlab.errors", "gradlab.threads", "gradlab.backend",
             "gradlab._lazy", "gradlab._version", "gradlab._validation", "gradlab._cache", "gradlab._memory",
             "gradlab._transfer"),
    "results": ("gradlab.io", "gradlab.outputs"),
    "paradigm": ("gradlab.losses", "gradlab.design", "gradlab.paradigm", "gradlab.lemma1", "gradlab.margins",
                 "gradlab.norms", "gradlab.collapse"),
    "compute": ("gradlab.simulate", "gradlab.monitor", "gradlab.real"),
    "plot": ("gradlab.plot",),
    "top": ("gradlab.figures", "gradlab.experiments", "gradlab.explore", "gradlab.compare", "gradlab_cli"),
}
#: The package root is a lazy facade over every floor (``gradlab.plot``, ``gradlab.simulate`` ...):
#: only the top floor imports it.
FACADE = "gradlab"
#: The floors each floor may import (its own included). ``plot`` may also read the loss registry
#: (a loss's title): ``PLOT_READS``.
MAY_IMPORT = {
    "base": {"base"},
    "results": {"base", "results"},
    "paradigm": {"base", "results", "paradigm"},
    "compute": {"base", "results", "paradigm", "compute"},
    "plot": {"base", "results", "plot"},
    "top": set(FLOORS),
}
PLOT_READS = {"gradlab.losses"}
#: Names a lower package still offers, for its users, though an upper floor defines them: the
#: package's ``__getattr__`` imports the upper module when the name is first used, never before.
COMPAT_ALIASES: dict[str, set[str]] = {
    "gradlab.plot": {"gradlab.figures"},  # FIGURES, PaperFigure, paper_figure, figure_ids, COMPONENTS, component_figure
    "gradlab.monitor": {"gradlab.figures"},  # report
}


def floor_of(module: str) -> str | None:
    if module == FACADE:
        return "top"
    for name, prefixes in FLOORS.items():
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    return None


def alias_graph() -> dict[str, set[str]]:
    """Module -> the modules named by its module-level ``{name: "module"}`` dicts (the lazy
    re-exports ``gradlab._lazy.attach`` imports on first use): imports the ``ast`` of an import
    statement does not show."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Dict):
                for v in value.values:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value in mods and v.value != mod:
                        graph[mod].add(v.value)
    return graph


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that climbs: ``importer (floor) -> imported (floor)``."""
    bad = []
    for mod, targets in sorted(graph.items()):
        if mod == FACADE:
            continue
        here = floor_of(mod)
        for t in sorted(targets):
            there = floor_of(t)
            if there in MAY_IMPORT[here] or (here == "plot" and t in PLOT_READS):
                continue
            bad.append(f"{mod} ({here}) -> {t} ({there})")
    return bad


def test_every_module_has_a_floor():
    assert not [m for m in _modules() if floor_of(m) is None]


def test_the_floor_checker_finds_a_planted_climb():
    graph = {"gradlab.plot._x": {"gradlab.simulate", "gradlab.io", "gradlab.losses"},
             "gradlab.monitor._y": {"gradlab.plot"}, "gradlab.outputs": {"gradlab.plot._style"},
             "gradlab.figures": {"gradlab.plot", "gradlab.simulate"}}
    assert floor_violations(graph) == ["gradlab.monitor._y (compute) -> gradlab.plot (plot)",
                                       "gradlab.outputs (results) -> gradlab.plot._style (plot)",
                                       "gradlab.plot._x (plot) -> gradlab.simulate (compute)"]


def test_imports_follow_the_floors_even_lazily():
    """Plot reads results: nothing in ``gradlab.plot`` imports the engine, the monitor, the real
    pipeline, the experiments or the figure recipes, not even inside a function; the monitor and the
    writer draw nothing (no ``gradlab.plot``)."""
    bad = floor_violations(import_graph(function_local=True))
    assert not bad, "imports that climb a floor:\n" + "\n".join(bad)


def test_lazy_re_exports_climb_only_where_listed():
    graph = alias_graph()
    climbs = {m: {t for t in ts if floor_violations({m: {t}})} for m, ts in graph.items() if m != FACADE}
    assert {m: ts for m, ts in climbs.items() if ts} == COMPAT_ALIASES


def test_the_explorer_page_draws_without_computing():
    """``gradlab.explore``'s Bokeh drawing reads arrays: no engine, no simulate."""
    graph = import_graph(function_local=True)
    assert not {t for t in graph["gradlab.explore._bokeh"] if floor_of(t) in {"compute", "paradigm", "top"}}


def test_importing_plot_or_the_monitor_loads_no_upper_floor():
    import subprocess
    import sys

    code = ("import sys, gradlab.plot, gradlab.monitor, gradlab.outputs\n"
            "from gradlab.monitor import read_log, log_series, report_data\n"
            "from gradlab.plot import heatmap, monitor_curves, save_figure\n"
            "print(sorted(m for m in sys.modules if m.startswith(('gradlab.simulate', 'gradlab.figures', "
            "'gradlab.real', 'gradlab.experiments', 'gradlab.plot', 'matplotlib', 'jax'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = eval(out.stdout)
    assert not [m for m in loaded if not m.startswith("gradlab.plot")], loaded
