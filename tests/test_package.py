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
