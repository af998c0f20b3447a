"""The one provenance writer (``gradlab.outputs.Writer``), ``Result.stack`` and the paper-figure
registry (``gradlab.figures.paper_figure``): a notebook gets what ``gradlab figures`` writes."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from gradlab.io import Result
from gradlab.outputs import Writer
from tests._cli import one_line_error, run


def _grid(value: float, *, stderr=True, mask=False, loss="a") -> Result:
    x, y = np.array([0.1, 0.2]), np.array([0.3, 0.4, 0.5])
    mean = np.full((2, 3), value)
    return Result(dims=("x", "y"), coords={"x": x, "y": y}, mean=mean, stderr=mean / 10 if stderr else None,
                  mask=(mean > 1) if mask else None, extra={"count": np.arange(2.0) + value},
                  extra_dims={"count": ("x",)}, meta={"loss": loss})


def test_stack_puts_each_result_on_a_labelled_first_axis():
    a, b = _grid(0.5, loss="a"), _grid(2.0, loss="b", mask=True)
    s = Result.stack([a, b], "loss", ["a", "b"], meta={"what": "two maps"})
    assert s.dims == ("loss", "x", "y") and s.coords["loss"].tolist() == ["a", "b"]
    np.testing.assert_array_equal(s.mean[0], a.mean)
    np.testing.assert_array_equal(s.mean[1], b.mean)
    np.testing.assert_array_equal(s.stderr[1], b.stderr)
    assert s.mask is None  # only one of the two has a mask: none stacked
    np.testing.assert_array_equal(s.extra["count"], [[0.5, 1.5], [2.0, 3.0]])
    assert s.extra_dims == {"count": ("loss", "x")}
    assert s.meta["what"] == "two maps" and [p["loss"] for p in s.meta["panels"]] == ["a", "b"]
    assert Result.stack([a, _grid(1.0, stderr=False)], "k", ["1", "2"]).stderr is None


def test_stack_refuses_mismatched_inputs():
    a = _grid(0.5)
    other = Result(dims=("x",), coords={"x": np.arange(2.0)}, mean=np.zeros(2))
    with pytest.raises(ValueError, match="one shape"):
        Result.stack([a, other], "k", ["a", "b"])
    with pytest.raises(ValueError, match="one label per Result"):
        Result.stack([a, a], "k", ["a"])


def test_writer_writes_figure_data_and_metadata_atomically(tmp_path):
    started = time.perf_counter() - 5.0  # the run began five seconds ago
    w = Writer(tmp_path / "out", formats=["PNG", ".svg", "png"], command_line="gradlab demo --seed 3",
               meta={"command": "demo", "parameters": {"n": 2}, "seed": 3}, started=started)
    assert w.formats == ["png", "svg"] and w.out.is_dir()
    from gradlab.plot import curves

    fig = curves(np.arange(3.0), {"y": np.arange(3.0)})
    paths = w.result("r", _grid(0.5), fig)
    assert [p.name for p in paths] == ["r.png", "r.svg", "r.npz", "r.json"]
    w.data("flat", {"a": np.arange(4), "b": np.ones((2, 2))}, dims={"b": ["i", "j"]}, extra_meta={"note": 1})
    assert [p.name for p in w.written] == ["r.png", "r.svg", "r.npz", "r.json", "flat.npz", "flat.json"]
    assert (tmp_path / "out" / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Result.load(tmp_path / "out" / "r") == _grid(0.5)
    meta = json.loads((tmp_path / "out" / "r.json").read_text())
    assert meta["command_line"] == "gradlab demo --seed 3" and meta["command"] == "demo" and meta["seed"] == 3
    assert meta["parameters"] == {"n": 2} and 5.0 <= meta["wall_time_s"] < 60
    for key in ("gradlab_version", "jax_version", "numpy_version", "matplotlib_version", "python", "device"):
        assert key in meta, key
    flat = json.loads((tmp_path / "out" / "flat.json").read_text())
    assert flat["arrays"] == {"a": [4], "b": [2, 2]} and flat["array_dims"] == {"b": ["i", "j"]}
    assert flat["note"] == 1 and flat["command"] == "demo"
    with np.load(tmp_path / "out" / "flat.npz") as data:
        np.testing.assert_array_equal(data["a"], np.arange(4))
    assert not list((tmp_path / "out").glob(".*tmp"))  # no temporary file left behind


def test_writer_without_plot_writes_no_figure_and_checks_its_inputs_first(tmp_path):
    w = Writer(tmp_path, plot=False)
    assert w.figure("f", object()) == [] and w.written == []
    with pytest.raises(ValueError, match="unknown figure format 'gif'"):
        Writer(tmp_path, formats=["gif"])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="cannot write to output directory"):
        Writer(blocker / "sub")


def test_experiment_context_writes_through_the_writer(tmp_path):
    from gradlab.experiments import Scale
    from gradlab.experiments._build import Context

    sc = Scale.make(quick=True)
    ctx = Context("fig6", {}, sc, tmp_path, command="gradlab experiment fig6 --quick", wall_s=12.0, executed=0)
    ctx.result("fig6", _grid(0.5))
    assert [p.name for p in ctx.files] == ["fig6.npz", "fig6.json"]
    meta = json.loads((tmp_path / "fig6" / "fig6.json").read_text())
    assert meta["study"] == "fig6" and meta["command_line"] == "gradlab experiment fig6 --quick"
    assert meta["scale"] == json.loads(json.dumps(sc.to_dict())) and meta["seeds"] == list(range(sc.seeds))
    assert meta["wall_time_s"] >= 12.0 and "gradlab_version" in meta


def test_paper_figure_is_what_gradlab_figures_writes(tmp_path):
    """A notebook's ``paper_figure(ID)`` and ``gradlab figures --only ID`` give the same data; the
    panels are the engine's own maps (the witness: ``simulate.gd_map`` called directly)."""
    from gradlab import figures, simulate
    from gradlab.simulate import Protocol

    fig, data = figures.paper_figure("li2024_fig2", quick=True, seed=3)
    assert fig is not None and data.meta["figure"] == "li2024_fig2" and data.meta["paper"] == "Li et al. 2024 Fig. 2"
    proto = Protocol(grid=12, batches=32, batch_size=16, seed=3)
    for i, loss in enumerate(("arccon", "met")):
        want = simulate.gd_map(loss, proto)
        assert data.coords["loss"][i] == loss
        np.testing.assert_array_equal(data.mean[i], want.mean)
        np.testing.assert_array_equal(data.stderr[i], want.stderr)
    np.testing.assert_array_equal(data.coords["mu_pos"], want.coords["mu_pos"])

    r = run("figures", "--quick", "--seed", "3", "--only", "li2024_fig2", "--no-plot", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["li2024_fig2.json", "li2024_fig2.npz"]
    written = Result.load(tmp_path / "li2024_fig2")
    assert written.dims == data.dims and written.meta["figure_params"] == data.meta["figure_params"]
    np.testing.assert_array_equal(written.mean, data.mean)
    np.testing.assert_array_equal(written.stderr, data.stderr)
    meta = json.loads((tmp_path / "li2024_fig2.json").read_text())
    assert meta["command"] == "figures" and meta["seed"] == 3


def test_paper_figure_margin_data_are_the_library_grids():
    from gradlab import figures, margins

    _, data = figures.paper_figure("rho2023_fig1", grid=7, plot=False)
    theta, q = np.linspace(0.01, math.pi - 0.01, 7), np.linspace(0.005, 0.995, 7)
    want = margins.free_gradient_grid(theta, q, tau=0.25, beta=1.0, dtype=np.float32)
    assert data.dims == ("theta", "q")
    np.testing.assert_allclose(data.coords["theta"], theta, rtol=1e-6)
    np.testing.assert_array_equal(data.extra["negative"], np.asarray(want["negative"]))
    np.testing.assert_array_equal(data.mean, np.asarray(want["positive"]))
    # a closed-form witness (Rho et al. 2023 Eq. 14): |1 - βq| sin θ / τ, in float64; the float32 grid's
    # 1 - q at q = 0.995 carries a relative error up to eps32 / 0.005 = 1.2e-5
    np.testing.assert_allclose(data.mean, np.abs(1 - q[None, :]) * np.sin(theta[:, None]) / 0.25, rtol=2e-5)


def test_paper_figure_errors_are_one_line():
    from gradlab.figures import paper_figure

    with pytest.raises(ValueError, match="unknown figure id 'fig99'"):
        paper_figure("fig99")
    with pytest.raises(ValueError, match="li2024_fig2 has no parameter 'grid'"):
        paper_figure("li2024_fig2", grid=3)
    assert "unknown figure id 'fig99'" in one_line_error(run("figures", "--only", "li2024_fig2", "--only", "fig99"))


def test_load_views_reads_two_views_and_names_each_problem(tmp_path):
    from gradlab.io import load_views

    h = np.arange(6.0).reshape(3, 2)
    np.savez(tmp_path / "v.npz", h=h, h_prime=h.astype(np.int32) + 1)
    got_h, got_hp = load_views(tmp_path / "v.npz")
    np.testing.assert_array_equal(got_h, h)
    np.testing.assert_array_equal(got_hp, h + 1)
    assert got_hp.dtype == np.float64
    np.save(tmp_path / "one.npy", h)
    with pytest.raises(ValueError, match="must be an .npz holding arrays 'h' and 'h_prime'"):
        load_views(tmp_path / "one.npy")
    np.savez(tmp_path / "wrong.npz", h=h)
    with pytest.raises(ValueError, match=r"^embeddings file .* must hold arrays 'h' and 'h_prime'; found \['h'\]$"):
        load_views(tmp_path / "wrong.npz")
    np.savez(tmp_path / "nan.npz", h=h * np.nan, h_prime=h)
    with pytest.raises(ValueError, match="non-finite"):
        load_views(tmp_path / "nan.npz")


def test_component_figure_calls_the_engine_statistic_of_each_component():
    from unittest import mock

    from gradlab.figures import component_figure
    from gradlab.simulate import Protocol

    proto = Protocol(grid=3, batches=2, batch_size=4)
    fake = Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": np.array([0.2, 0.4]), "mu_neg": np.array([0.5, 1.0])},
                  mean=np.full((2, 2), 0.5), meta={"loss": "infonce"})
    calls = {"gd": ("gradlab.simulate.gd_map", {"exact": True, "progress": None}),
             "ratio": ("gradlab.simulate.ratio_map", {"gd_threshold": 0.2, "progress": None}),
             "weight": ("gradlab.simulate.weight_map", {"gd_gate": 0.2, "progress": None}),
             "norm": ("gradlab.norms.norm_on_mu_grid", {"part": "neg"})}
    for component, (target, kwargs) in calls.items():
        with mock.patch(target, return_value=fake) as stat:
            fig, got = component_figure("infonce", proto, component=component, exact=component == "gd",
                                        gd_threshold=0.2, part="neg", plot=component != "norm")
        stat.assert_called_once_with("infonce", proto, **kwargs)
        assert got is fake and (fig is None) == (component == "norm")
    with pytest.raises(ValueError, match="unknown component 'w'"):
        component_figure("infonce", proto, component="w")
    with pytest.raises(ValueError, match="exact applies to the gd component only"):
        component_figure("infonce", proto, component="ratio", exact=True)


def test_paper_drawing_pickles_and_draws_the_paper_figure():
    """``paper_drawing``: the data of ``paper_figure`` and a ``Drawing`` that survives pickling (its
    arguments host arrays, so a process without JAX can draw it) and draws the same figure."""
    import io
    import pickle

    import matplotlib.image

    from gradlab.figures import paper_drawing, paper_figure

    for fid in ("rho2023_fig2", "nie2023_fig2b"):
        drawing, data = paper_drawing(fid, grid=9)
        fig, want = paper_figure(fid, grid=9)
        np.testing.assert_array_equal(data.mean, want.mean)
        assert data.meta["figure"] == fid and data.meta["figure_params"] == want.meta["figure_params"]
        again = pickle.loads(pickle.dumps(drawing))
        assert all(type(a).__module__ != "jaxlib" and "jax" not in type(a).__module__ for a in _leaves(again.args))
        pngs = []
        for f in (again(), fig):
            buf = io.BytesIO()
            f.savefig(buf, format="png", dpi=40)
            buf.seek(0)
            pngs.append(matplotlib.image.imread(buf))
        assert pngs[0].shape == pngs[1].shape and np.array_equal(*pngs)


def _leaves(x):
    if isinstance(x, dict):
        return [v for item in x.values() for v in _leaves(item)]
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _leaves(item)]
    return [x]


def test_figure_paths_are_where_figure_would_save(tmp_path):
    from matplotlib.figure import Figure

    from gradlab.outputs import Writer

    w = Writer(tmp_path / "on", formats=["png", "svg"])
    saved = w.figure("f", Figure(figsize=(1, 1)))
    assert [p for p, _ in w.figure_paths("f")] == saved and [f for _, f in w.figure_paths("f")] == ["png", "svg"]
    assert Writer(tmp_path / "off", plot=False).figure_paths("f") == []
