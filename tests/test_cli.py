"""The gradlab CLI through Typer's CliRunner: the exact library calls, files written,
one-line errors with exit code 2 for every bad input, --debug tracebacks."""

from __future__ import annotations

import json
import math
from unittest import mock

import numpy as np
import pytest

from gradlab import defaults
from gradlab.io import Result
from tests._cli import one_line_error, run


def fake_grid(statistic="gd_map", loss="arccon", mask=False, extra=None, extra_dims=None, coords=None):
    mu_pos = np.linspace(math.pi / 20, math.pi / 2, 3)
    mu_neg = np.linspace(math.pi / 20, math.pi, 4)
    mean = np.linspace(0, 1, 12).reshape(3, 4)
    return Result(dims=("mu_pos", "mu_neg"), coords={"mu_pos": mu_pos, "mu_neg": mu_neg, **(coords or {})},
                  mean=mean, stderr=mean * 0.01, mask=(mean > 0.8) if mask else None, extra=extra or {},
                  extra_dims=extra_dims or {}, meta={"statistic": statistic, "loss": loss, "params": {"tau": 0.05}})


def fake_dist():
    return Result(dims=("lam",), coords={"lam": np.array([0.1])}, mean=np.array([0.9]),
                  extra={"histogram": np.ones((1, 6)) / 6, "bin_edges": np.linspace(-2, 4, 7),
                         "below": np.zeros(1), "feasible": np.ones(1)}, meta={"mu_pos": [0.5], "mu_neg": [1.0]})


def test_version_and_help_everywhere():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.startswith("gradlab ")
    for cmd in ([], ["heatmap"], ["weight"], ["lemma1"], ["norms"], ["losses"], ["figures"]):
        for flag in ("-h", "--help"):
            r = run(*cmd, flag)
            assert r.exit_code == 0, (cmd, r.output)
            assert "Usage" in r.stdout
            if cmd:
                assert "Examples" in r.stdout and f"gradlab {cmd[0]}" in r.stdout


def test_heatmap_defaults_call_gd_map_with_the_paper_protocol(tmp_path):
    from gradlab.losses import get_loss
    from gradlab.simulate import Protocol

    with mock.patch("gradlab.simulate.gd_map", return_value=fake_grid()) as gd:
        r = run("heatmap", "--loss", "arccon", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    gd.assert_called_once_with(get_loss("arccon"), Protocol(), exact=False, progress=None)
    for ext in ("png", "npz", "json"):
        assert (tmp_path / f"heatmap_arccon_gd.{ext}").exists()
    with np.load(tmp_path / "heatmap_arccon_gd.npz") as data:
        assert {"mu_pos", "mu_neg", "mean", "stderr"} <= set(data.files)
        np.testing.assert_array_equal(data["mean"], fake_grid().mean)
    meta = json.loads((tmp_path / "heatmap_arccon_gd.json").read_text())
    assert meta["command"] == "heatmap" and meta["seed"] == 0
    assert meta["parameters"]["params"] == {"tau": 0.05, "u": pytest.approx(math.pi / 18)}
    for key in ("command_line", "gradlab_version", "jax_version", "device", "wall_time_s", "dims"):
        assert key in meta
    assert meta["dims"] == ["mu_pos", "mu_neg"] and meta["format"] == "gradlab.Result"
    from gradlab.io import Result

    assert Result.load(tmp_path / "heatmap_arccon_gd") == fake_grid()  # a notebook reads it back whole
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary files left"


def test_heatmap_options_reach_the_library(tmp_path):
    from gradlab.losses import get_loss
    from gradlab.simulate import Protocol

    with mock.patch("gradlab.simulate.ratio_map", return_value=fake_grid("ratio_map", "met", mask=True)) as rm:
        r = run("heatmap", "--loss", "met", "--component", "ratio", "--grid", 7, "--batches", 9, "--batch-size", 5,
                "--sigma-pos", 0.02, "--sigma-neg", 0.2, "--mu-pos-range", "pi/10", "pi/3", "--mu-neg-range", "0.3", "3",
                "--seed", 4, "--mode", "independent", "--param", "m=0.3", "--gd-threshold", 0.1, "--out", tmp_path,
                "--format", "pdf", "--format", "svg")
    assert r.exit_code == 0, r.output
    want = Protocol(grid=7, batches=9, batch_size=5, sigma_pos=0.02, sigma_neg=0.2, mu_pos_range=(math.pi / 10, math.pi / 3),
                    mu_neg_range=(0.3, 3.0), seed=4, mode="independent")
    rm.assert_called_once_with(get_loss("met", m=0.3), want, gd_threshold=0.1, progress=None)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"heatmap_met_m0.3_ratio.pdf", "heatmap_met_m0.3_ratio.svg", "heatmap_met_m0.3_ratio.npz", "heatmap_met_m0.3_ratio.json"} <= names
    assert "heatmap_met_m0.3_ratio.png" not in names
    with np.load(tmp_path / "heatmap_met_m0.3_ratio.npz") as data:
        assert "mask" in data.files


def test_heatmap_exact_and_no_plot(tmp_path):
    with mock.patch("gradlab.simulate.gd_map", return_value=fake_grid(loss="mpt")) as gd:
        r = run("heatmap", "--loss", "mpt", "--exact", "--no-plot", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert gd.call_args.kwargs["exact"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heatmap_mpt_gd_exact.json", "heatmap_mpt_gd_exact.npz"]


def test_heatmap_norm_component_runs_for_real(tmp_path):
    r = run("heatmap", "--loss", "dcl", "--component", "norm", "--grid", 5, "--batch-size", 9, "--out", tmp_path, "--no-plot")
    assert r.exit_code == 0, r.output
    from gradlab.norms import dcl_pos

    with np.load(tmp_path / "heatmap_dcl_norm.npz") as data:
        np.testing.assert_allclose(data["mean"], np.asarray(dcl_pos(data["mu_pos"][:, None] + 0 * data["mu_neg"][None, :],
                                                                    tau=0.03)), rtol=1e-6)


def test_weight_calls_weight_share(tmp_path):
    from gradlab.losses import get_loss
    from gradlab.simulate import Protocol

    res = Result(dims=("tau", "mu_neg"), coords={"tau": np.array([0.05, 0.01]), "mu_neg": np.linspace(0.2, 3, 5)},
                 mean=np.full((2, 5), 0.5), stderr=np.zeros((2, 5)), mask=np.zeros((2, 5), bool),
                 meta={"mu_pos": math.pi / 4})
    with mock.patch("gradlab.simulate.weight_share", return_value=res) as ws:
        r = run("weight", "--tau", 0.05, "--tau", 0.01, "--mu-pos", "pi/4", "--grid", 5, "--batches", 10, "--out", tmp_path)
    assert r.exit_code == 0, r.output
    ws.assert_called_once_with(Protocol(grid=5, batches=10), taus=[0.05, 0.01], mu_pos=pytest.approx(math.pi / 4),
                               loss=get_loss("infonce"), gd_gate=None, progress=None)
    assert (tmp_path / "weight_infonce.png").exists()


def test_lemma1_calls_the_map_and_the_distribution(tmp_path):
    from gradlab.simulate import Protocol

    lmap = fake_grid("lemma1_map", mask=True, coords={"r": np.array([1.0, 1.5])},
                     extra={"satisfied": np.full((2, 3, 4), 0.25)},
                     extra_dims={"satisfied": ("r", "mu_pos", "mu_neg")})
    with mock.patch("gradlab.simulate.lemma1_map", return_value=lmap) as lm, \
            mock.patch("gradlab.simulate.min_ratio_distribution", return_value=fake_dist()) as md:
        r = run("lemma1", "--lambda", 0.1, "--ratio", 1, "--ratio", 1.5, "--alpha-law", "pi/4", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    lm.assert_called_once_with(Protocol(), lam=0.1, ratios=[1.0, 1.5], alpha_law=pytest.approx(math.pi / 4), progress=None)
    md.assert_called_once_with(Protocol(), lams=[0.1], mu_pos=pytest.approx(math.pi / 6), mu_neg=pytest.approx(math.pi / 3),
                               alpha_law=pytest.approx(math.pi / 4), ratios=[1.0, 1.5])
    assert "r = 1: satisfies Lemma 1 (λ = 0.1) in 25.0% of batches" in r.stdout
    for stem in ("lemma1_map", "lemma1_distribution"):
        for ext in ("png", "npz", "json"):
            assert (tmp_path / f"{stem}.{ext}").exists()
    with np.load(tmp_path / "lemma1_map.npz") as data:
        assert data["satisfied"].shape == (2, 3, 4) and "r" in data.files


def test_lemma1_from_embeddings_uses_the_file(tmp_path):
    rng = np.random.default_rng(0)
    h = rng.normal(size=(40, 16))
    hp = h + 0.3 * rng.normal(size=(40, 16))
    path = tmp_path / "views.npz"
    np.savez(path, h=h, h_prime=hp)
    lmap = fake_grid("lemma1_map", coords={"r": np.array([1.0])}, extra={"satisfied": np.ones((1, 3, 4))},
                     extra_dims={"satisfied": ("r", "mu_pos", "mu_neg")})
    with mock.patch("gradlab.simulate.lemma1_map", return_value=lmap), \
            mock.patch("gradlab.simulate.min_ratio_distribution") as md:
        r = run("lemma1", "--lambda", 0.1, "--embeddings", path, "--out", tmp_path / "o", "--no-plot")
    assert r.exit_code == 0, r.output
    md.assert_not_called()
    meta = json.loads((tmp_path / "o" / "lemma1_distribution.json").read_text())
    assert meta["meta"]["source"] == "embeddings" and meta["meta"]["n_anchors"] == 40
    # the witness: r_low from lemma1_bounds on each anchor's hardest negative, by a plain loop
    from gradlab.lemma1 import lemma1_bounds

    hn, hpn = h / np.linalg.norm(h, axis=1, keepdims=True), hp / np.linalg.norm(hp, axis=1, keepdims=True)
    lows = []
    for i in range(40):
        c = [hn[i] @ hpn[j] if j != i else -np.inf for j in range(40)]
        j = int(np.argmax(c))
        u = hpn[i] - (hn[i] @ hpn[i]) * hn[i]
        v = hpn[j] - (hn[i] @ hpn[j]) * hn[i]
        alpha = math.acos(np.clip(u @ v / np.linalg.norm(u) / np.linalg.norm(v), -1, 1))
        low, _, ok = lemma1_bounds(math.acos(hn[i] @ hpn[i]), math.acos(c[j]), alpha, 0.1)
        if bool(ok):
            lows.append(float(low))
    with np.load(tmp_path / "o" / "lemma1_distribution.npz") as data:
        # the monitor measures in float32 (its default); the witness loop runs in float64
        np.testing.assert_allclose(data["mean"][0], np.mean(lows), rtol=5e-5)


def test_norms_writes_stacked_panels(tmp_path):
    r = run("norms", "--loss", "infonce", "--loss", "mat", "--negatives", 8, "--negatives", 32, "--part", "pos",
            "--grid", 6, "--out", tmp_path)
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "norms_pos.npz") as data:
        assert list(data["panel"]) == ["infonce:pos:K=8", "infonce:pos:K=32", "mat:pos:K=8"]
        assert data["mean"].shape == (3, 6, 6)
        from gradlab.norms import infonce_pos

        want = infonce_pos(data["theta_pos"][:, None], data["theta_neg"][None, :], negatives=32)
        np.testing.assert_allclose(data["mean"][1], np.asarray(want), rtol=1e-5, atol=1e-7)
    assert (tmp_path / "norms_pos.png").exists() and not (tmp_path / "norms_neg.png").exists()


def test_losses_table_and_json():
    r = run("losses")
    assert r.exit_code == 0 and "arccon" in r.stdout and "sin(θ_p + u) / sin θ_p" in r.stdout
    r = run("losses", "--family", "effective", "--json")
    rows = json.loads(r.stdout)
    assert {row["name"] for row in rows} >= {"infonce", "arccon", "mpt", "met", "mat", "dcl", "dcl+"}


def test_figures_quick_one_id(tmp_path):
    r = run("figures", "--quick", "--only", "nie2023_fig2b", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nie2023_fig2b.json", "nie2023_fig2b.npz", "nie2023_fig2b.png"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["heatmap", "--loss", "nope"], "unknown loss 'nope'"),
        (["heatmap", "--loss", "arccon", "--batches", "-5"], "batches must be an int in [1, 2**31 - 1]; got -5"),
        (["heatmap", "--loss", "arccon", "--mu-pos-range", "1", "0.5"], "mu_pos_range is empty"),
        (["heatmap", "--loss", "arccon", "--mu-neg-range", "1", "1"], "mu_neg_range is empty"),
        (["heatmap", "--loss", "arccon", "--sigma-pos", "-0.1"], "sigma_pos must be a finite number >= 0"),
        (["heatmap", "--loss", "arccon", "--sigma-neg", "-1"], "sigma_neg must be a finite number >= 0"),
        (["heatmap", "--loss", "arccon", "--batch-size", "1"], "batch_size must be an int in [2, 2**31 - 1]"),
        (["heatmap", "--loss", "arccon", "--param", "zeta=1"], "unknown parameter(s) zeta"),
        (["heatmap", "--loss", "arccon", "--param", "tau"], "KEY=VALUE"),
        (["heatmap", "--loss", "arccon", "--param", "tau=-1"], "must be > 0"),
        (["heatmap", "--loss", "arccon", "--format", "gif"], "unknown figure format 'gif'"),
        (["heatmap", "--loss", "arccon", "--component", "bogus"], "bogus"),
        (["heatmap"], "give exactly one of --loss and --compose"),
        (["weight", "--tau", "0"], "--tau must be > 0"),
        (["lemma1", "--lambda", "-0.1"], "--lambda must be > 0"),
        (["lemma1", "--embeddings", "/nonexistent/views.npz"], "cannot read embeddings file"),
        (["norms", "--negatives", "0"], "--negatives must be >= 1"),
        (["norms", "--loss", "nope"], "no gradient-norm map"),
        (["figures", "--only", "fig99"], "unknown figure id 'fig99'"),
        (["nosuchcommand"], "No such command"),
        (["heatmap", "--loss", "arccon", "--param", "tau=9**9**9"], "not a number"),  # no eval: cannot hang
        (["heatmap", "--loss", "arccon", "--param", "tau=__import__('os')"], "not a number"),
        (["heatmap", "--loss", "arccon", "--param", "tau=nan"], "not a number"),
        (["heatmap", "--loss", "arccon", "--mu-pos-range", "-5", "10"], "mu_pos_range must lie within [0, pi]"),
        (["heatmap", "--loss", "arccon", "--mu-neg-range", "0.1", "pi+0.01"], "mu_neg_range must lie within [0, pi]"),
        (["heatmap", "--loss", "arccon", "--mu-neg-range", "0.1", "x"], "Invalid value for '--mu-neg-range': not a number: 'x'"),
        (["heatmap", "--loss", "arccon", "--seed", "-1"], "seed must be an int in [0, 2**31 - 1]"),
        (["weight", "--mu-pos", "-3"], "Invalid value for '--mu-pos': must lie within [0, pi]; got -3"),
        (["weight", "--mu-pos", "inf"], "Invalid value for '--mu-pos': not a number: 'inf'"),
        (["lemma1", "--alpha-law", "7"], "Invalid value for '--alpha-law': 'uniform' or an angle: must lie within [0, pi]"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    with mock.patch("gradlab.simulate.gd_map") as gd:
        r = run(*args, "--out", tmp_path) if args[0] not in ("nosuchcommand",) and "--out" not in args and args != ["heatmap"] \
            else run(*args)
    err = one_line_error(r)
    assert needle in err, err
    gd.assert_not_called()


def test_bad_embeddings_content_and_unwritable_out(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    assert "cannot read embeddings file" in one_line_error(run("lemma1", "--embeddings", junk, "--out", tmp_path))
    cplx = tmp_path / "complex.npz"
    np.savez(cplx, h=np.ones((4, 3)) * 1j, h_prime=np.ones((4, 3)))
    assert "must be a real numeric array" in one_line_error(run("lemma1", "--embeddings", cplx, "--out", tmp_path))
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, a=np.zeros((3, 2)))
    assert "must hold arrays 'h' and 'h_prime'" in one_line_error(run("lemma1", "--embeddings", wrong, "--out", tmp_path))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with mock.patch("gradlab.simulate.gd_map") as gd:
        err = one_line_error(run("heatmap", "--loss", "arccon", "--out", blocker / "sub"))
    assert "cannot write to output directory" in err
    gd.assert_not_called()


def test_debug_shows_the_traceback():
    r = run("--debug", "heatmap", "--loss", "nope")
    assert isinstance(r.exception, ValueError) and "unknown loss" in str(r.exception)
    r = run("heatmap", "--loss", "nope", "--debug")
    assert isinstance(r.exception, ValueError)
    r = run("heatmap", "--loss", "nope")  # the flag does not stick
    one_line_error(r)


def test_internal_errors_are_one_line_exit_1(tmp_path):
    with mock.patch("gradlab.simulate.gd_map", side_effect=RuntimeError("boom")):
        r = run("heatmap", "--loss", "arccon", "--out", tmp_path)
    err = one_line_error(r, code=1)
    assert "boom" in err and "--debug" in err
    assert not list(tmp_path.glob("heatmap_*")), "a failed run must leave no file"


def test_plugins_register_through_their_register_function():
    import typer
    from gradlab_cli import app as app_module

    target = typer.Typer()
    fakes = (mock.Mock(__name__="one"), mock.Mock(__name__="two"))
    assert app_module._register_plugins(target, fakes) == ["one", "two"]
    for fake in fakes:
        fake.register.assert_called_once_with(target)


def test_plugin_commands_always_appear_in_the_help():
    r = run("--help")
    assert r.exit_code == 0
    for cmd in ("track", "report", "stsb", "sts", "train"):
        assert f"  {cmd} " in r.stdout, (cmd, r.stdout)


@pytest.mark.parametrize("args", [("stsb", "--encoder", "minilm"), ("sts", "--encoder", "minilm"),
                                  ("train", "--loss", "infonce", "--steps", "1")])
def test_a_missing_extra_names_the_extra_to_install(args, tmp_path, monkeypatch):
    """The real-data extra's packages made unimportable in-process: the command is still listed,
    its help works, and running it is one line naming the extra (exit 2), writing nothing."""
    import sys

    for module in ("tokenizers", "safetensors", "safetensors.numpy"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    assert run(args[0], "-h").exit_code == 0
    err = one_line_error(run(*args, "--out", tmp_path / "o"))
    assert '.[real]' in err and "install_real.sh" in err, err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_heatmap_weight_component_stacks_the_engine_rows(tmp_path):
    """--component weight: row i is weight_share at μ_pos = mu_pos[i] (gated by --gd-threshold)."""
    from gradlab import simulate
    from gradlab.losses import get_loss

    r = run("heatmap", "--loss", "infonce", "--component", "weight", "--grid", 3, "--batches", 20, "--batch-size", 8,
            "--gd-threshold", 0.01, "--out", tmp_path, "--no-plot")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "heatmap_infonce_weight.npz") as data:
        mean, mu_pos = data["mean"], data["mu_pos"]
    p = simulate.Protocol(grid=3, batches=20, batch_size=8)
    for i in range(3):
        row = simulate.weight_share(p, taus=(0.05,), mu_pos=float(mu_pos[i]), loss=get_loss("infonce"), gd_gate=0.01)
        np.testing.assert_array_equal(mean[i], row.mean[0])
    bad = run("heatmap", "--loss", "mpt", "--component", "weight", "--grid", 3, "--out", tmp_path, "--no-plot")
    assert bad.exit_code == 2 and "tau" in bad.output


@pytest.mark.parametrize("text,value", [("0.05", 0.05), ("pi/18", math.pi / 18), ("0.15pi", 0.15 * math.pi),
                                        ("3*pi/4", 0.75 * math.pi), ("-pi/2", -math.pi / 2), ("π/20", math.pi / 20)])
def test_numbers_may_be_written_with_pi(text, value):
    from gradlab_cli._common import number

    assert number(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("value,text", [(defaults.MU_POS_RANGE[0], "pi/20"), (defaults.MU_POS_RANGE[1], "pi/2"),
                                        (defaults.MU_NEG_RANGE[0], "pi/20"), (defaults.MU_NEG_RANGE[1], "pi"),
                                        (defaults.WEIGHT_MU_POS, "pi/6"), (defaults.LEMMA1_MU_POS, "pi/6"),
                                        (defaults.LEMMA1_MU_NEG, "pi/3"), (3 * math.pi / 4, "3*pi/4"),
                                        (-math.pi / 2, "-pi/2"), (0.5, "0.5"), (0.0, "0.0")])
def test_angle_defaults_are_written_as_pi_text_that_parses_back_exactly(value, text):
    from gradlab_cli._common import number, pi_text

    assert pi_text(value) == text
    assert number(pi_text(value)) == value


def test_help_shows_the_paper_angles_as_pi_text():
    heatmap = " ".join(run("heatmap", "--help").stdout.split())
    assert "(pi/20 pi/2)" in heatmap and "[default: pi/20, pi/2]" in heatmap
    assert "(pi/20 pi)" in heatmap and "[default: pi/20, pi]" in heatmap
    lemma1 = " ".join(run("lemma1", "--help").stdout.split())
    assert "[default: pi/6]" in lemma1 and "[default: pi/3]" in lemma1


def test_norms_accepts_a_parameter_of_any_requested_part(tmp_path):
    r = run("norms", "--loss", "uniform", "--param", "t=3", "--grid", 8, "--no-plot", "--out", tmp_path)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, message", [
    (("heatmap", "--loss", "infonce", "--seed", 2**31), "seed must be an int in [0, 2**31 - 1]"),
    (("heatmap", "--loss", "infonce", "-N", 2**16, "--batches", 2**15), "below 2**31"),
    (("heatmap", "--loss", "infonce", "-N", 10**11, "--batches", 5), "batch_size must be an int in [2, 2**31 - 1]"),
    (("heatmap", "--loss", "met", "--exact", "--component", "ratio"), "--exact applies to --component gd only"),
    (("heatmap", "--loss", "met", "--exact", "--mode", "independent"), "--mode does not apply"),
    (("weight", "--param", "tau=0.1", "--tau", "0.05"), "do not also give --param tau"),
    (("lemma1", "--alpha-law", "bogus"), "'uniform' or an angle"),
])
def test_misuse_found_by_the_audit_gives_one_line_and_exit_2(args, message, tmp_path):
    r = run(*args, "--out", tmp_path, "--no-plot")
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert not list(tmp_path.iterdir())  # nothing written


def test_embeddings_given_as_npy_is_a_one_line_error(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((4, 3)))
    r = run("lemma1", "--embeddings", tmp_path / "x.npy", "--out", tmp_path / "o", "--no-plot")
    assert r.exit_code == 2 and "must be an .npz holding arrays 'h' and 'h_prime'" in r.output


def test_out_of_memory_is_a_one_line_error(tmp_path):
    with mock.patch("gradlab.simulate.gd_map", side_effect=MemoryError()):
        r = run("heatmap", "--loss", "infonce", "--out", tmp_path, "--no-plot")
    assert r.exit_code == 2 and "out of memory for these sizes" in r.output


def test_variants_get_their_own_files(tmp_path):
    # the exact map, a parameter sweep and the uniformity part never overwrite the defaults
    with mock.patch("gradlab.simulate.gd_map", return_value=fake_grid()):
        for extra in ((), ("--exact",), ("--param", "m=0.3"), ("--param", "m=0.3", "--exact")):
            assert run("heatmap", "--loss", "met", *extra, "--out", tmp_path, "--no-plot").exit_code == 0
    with mock.patch("gradlab.norms.norm_on_mu_grid", return_value=fake_grid()):
        for part in ("pos", "neg"):
            assert run("heatmap", "--loss", "dcl", "-c", "norm", "--part", part, "--out", tmp_path, "--no-plot").exit_code == 0
        # %g would give both of these "u0.174533"
        for u in ("pi/18", "0.1745329"):
            assert run("heatmap", "--loss", "arccon", "--param", f"u={u}", "--out", tmp_path, "--no-plot").exit_code == 0
    assert {p.stem for p in tmp_path.glob("heatmap_arccon_*.npz")} == {
        "heatmap_arccon_u0.17453292519943295_gd", "heatmap_arccon_u0.1745329_gd"}
    for p in tmp_path.glob("heatmap_arccon_*"):
        p.unlink()
    stems = sorted(p.stem for p in tmp_path.glob("*.npz"))
    assert stems == ["heatmap_dcl_norm", "heatmap_dcl_norm_neg", "heatmap_met_gd", "heatmap_met_gd_exact",
                     "heatmap_met_m0.3_gd", "heatmap_met_m0.3_gd_exact"]


def test_bare_gradlab_prints_the_help():
    r = run()
    assert r.exit_code == 0 and r.stdout.startswith("Usage: gradlab") and "heatmap" in r.stdout


@pytest.mark.parametrize("value, raises", [("1", True), ("0", False), ("", False)])
def test_gradlab_debug_environment_variable(value, raises, monkeypatch):
    monkeypatch.setenv("GRADLAB_DEBUG", value)
    r = run("heatmap", "--loss", "nope")
    if raises:
        assert isinstance(r.exception, ValueError) and "unknown loss" in str(r.exception)
    else:
        one_line_error(r)


def test_usage_errors_stay_one_line_under_debug():
    # --debug shows tracebacks of library errors; a typo in an option is still one line
    err = one_line_error(run("--debug", "heatmap", "--loss", "infonce", "--grid", "many"))
    # click words the type "int" (Typer < 0.29, which gradlab asks for) or "integer" (Typer 0.29)
    assert "Invalid value for '--grid'" in err and "'many' is not a valid int" in err


# --- the documentation pages generated from the code (scripts/mkdocs_hooks.py) -----------------
def _hooks():
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "mkdocs_hooks.py"
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_has_every_command_and_option():
    import typer
    from gradlab_cli.app import app

    page = _hooks()._cli_reference()
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        assert f"## gradlab {name}\n" in page, name
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--"):
                    assert opt in page, (name, opt)


def test_the_gallery_shows_every_figure_with_its_command():
    from pathlib import Path

    page = _hooks()._gallery()
    pngs = sorted((Path(__file__).resolve().parents[1] / "figures").glob("*.png"))
    assert pngs
    for png in pngs:
        fid = png.stem
        assert f"![{fid}](figures/{png.name})" in page and f"gradlab figures --only {fid} " in page, fid
