"""gradlab.defaults is the one home of the papers' defaults: consumers use its objects, no copies remain."""

import inspect
import pathlib
import re

import pytest

import gradlab
from gradlab import defaults, lemma1, monitor, norms, simulate
from gradlab.losses import get_spec

ROOT = pathlib.Path(gradlab.__file__).resolve().parent.parent


def _default(fn, name):
    return inspect.signature(fn).parameters[name].default


@pytest.mark.parametrize(
    "fn,param,const",
    [
        (simulate.weight_share, "taus", "TAUS"),
        (simulate.weight_share, "mu_pos", "WEIGHT_MU_POS"),
        (simulate.ratio_map, "gd_threshold", "GD_THRESHOLD"),
        (simulate.lemma1_map, "lam", "LEMMA1_LAM"),
        (simulate.lemma1_map, "ratios", "LEMMA1_RATIOS"),
        (simulate.min_ratio_distribution, "lams", "LEMMA1_LAMS"),
        (simulate.min_ratio_distribution, "mu_pos", "LEMMA1_MU_POS"),
        (simulate.min_ratio_distribution, "mu_neg", "LEMMA1_MU_NEG"),
        (simulate.min_ratio_distribution, "ratios", "LEMMA1_RATIOS"),
        (simulate.min_ratio_distribution, "quantiles", "MIN_RATIO_QUANTILES"),
        (monitor.min_ratio_distribution, "lams", "LEMMA1_LAMS"),
        (monitor.min_ratio_distribution, "ratios", "LEMMA1_RATIOS"),
        (monitor.min_ratio_distribution, "quantiles", "MIN_RATIO_QUANTILES"),
        (lemma1.summarize_min_ratio, "ratios", "LEMMA1_RATIOS"),
        (lemma1.summarize_min_ratio, "quantiles", "MIN_RATIO_QUANTILES"),
    ],
)
def test_consumers_use_the_same_objects(fn, param, const):
    assert _default(fn, param) is getattr(defaults, const)


def test_monitor_names_are_the_defaults():
    assert monitor.DEFAULT_TAUS is defaults.TAUS
    assert monitor.DEFAULT_LOSSES is defaults.MONITOR_LOSSES
    assert monitor.DEFAULT_RATIO_LOSSES is defaults.MONITOR_RATIO_LOSSES
    assert monitor.DEFAULT_LAMBDAS is defaults.MONITOR_LAMS
    assert norms.DEFAULT_NEGATIVES is defaults.NORM_NEGATIVES


def test_values_are_the_papers():
    # Li et al. 2024 Figs. 3/7 (τ), Fig. 3 (μ_pos = π/6), Fig. 8a (λ); Nie et al. 2023 (K = 64)
    assert defaults.TAUS == (0.3, 0.1, 0.05, 0.03, 0.01, 0.005)
    assert defaults.WEIGHT_MU_POS == pytest.approx(3.141592653589793 / 6)
    assert defaults.LEMMA1_LAMS == (0.01, 0.1, 0.5, 1.0)
    assert defaults.NORM_NEGATIVES == 64 and defaults.NORM_INFONCE_NEGATIVES == (64, 512, 4096, 32768)


def test_norm_defaults_are_the_registry_defaults():
    assert set(norms.DEFAULTS) == set(norms.NORM_LOSSES) == set(norms.REGISTRY_NAMES)
    for name, reg in norms.REGISTRY_NAMES.items():
        assert dict(norms.DEFAULTS[name]) == dict(get_spec(reg).defaults), name
    # the functions' keyword defaults are the registry's too
    assert _default(norms.infonce_pos, "tau") == get_spec("infonce").defaults["tau"]
    assert _default(norms.mat_neg, "m") == get_spec("mat").defaults["m"]
    assert _default(norms.uniform_neg, "t") == get_spec("uniformity").defaults["t"]


# the literals that used to be written out in several places: each now appears once, in defaults.py
COPIES = {
    "taus": r"0\.3,\s*0\.1,\s*0\.05,\s*0\.03,\s*0\.01,\s*0\.005",
    "lams": r"0\.01,\s*0\.1,\s*0\.5,\s*1(\.0)?\b",
    "ratios": r"1(\.0)?,\s*1\.25,\s*1\.5,\s*1\.75,\s*2",
    "quantiles": r"0\.05,\s*0\.25,\s*0\.5,\s*0\.75,\s*0\.95",
    "monitor losses": r"\"infonce\",\s*\"arccon\",\s*\"mpt\",\s*\"met\",\s*\"mat\"",
    "infonce K": r"64,\s*512,\s*4096,\s*32768",
    "monitor lams": r"\(0\.1,\s*0\.5,\s*1\.0\)",
}
CONSUMERS = ["gradlab/simulate/_stats.py", "gradlab/monitor/_monitor.py", "gradlab/lemma1.py",
             "gradlab/norms/_closed.py", "gradlab/norms/_maps.py", "cli/app.py"]


@pytest.mark.parametrize("what", sorted(COPIES))
def test_no_copy_of_a_default_remains(what):
    pattern = re.compile(COPIES[what])
    assert pattern.search((ROOT / "gradlab/defaults.py").read_text()), what
    for path in CONSUMERS:
        code = "\n".join(line for line in (ROOT / path).read_text().splitlines() if "help=" not in line)
        assert not pattern.search(code), f"{what} written out again in {path}"
    # the Nie et al. 2023 Table 2 values are the registry's alone: gradlab.norms names no number
    for part in ("_closed.py", "_maps.py"):
        norms_code = (ROOT / "gradlab/norms" / part).read_text().split('"""', 2)[2]  # after the module docstring
        assert not re.search(r"=\s*(0\.05|0\.03|0\.17|0\.23|0\.45|2\.0|6\.0)\b", norms_code), part
        assert "0.15 * math.pi" not in norms_code, part
