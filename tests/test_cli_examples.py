"""Every example command runs as written: the ``Examples:`` of each command's help text and every
line starting with ``gradlab `` in a command block of README.md and docs/*.md.

Each example runs in-process in a folder prepared with the files examples name (``views.npz``,
``my_losses.py``, ``run/monitor.jsonl``, a SentEval layout, run folders, ...). Sizes shrink where
they would cost minutes (a smaller grid, 2 training steps, the tiny BERT of tests/fixtures in place
of MiniLM or a BERT-base path): the command form, every option of the example, still runs. An
example that needs a GPU, a cluster or the network is skipped with its reason; the training studies
(``gradlab experiment`` runs) and all training examples but one are marked ``slow`` (each costs
5-20 s even at 2 steps).
"""

from __future__ import annotations

import inspect
import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests._cli import run

REPO = Path(__file__).resolve().parents[1]
HF = Path(__file__).parent / "fixtures" / "hf"


# --------------------------------------------------------------------------- collecting the examples
def _clean(line: str) -> str:
    line = line.strip()
    line = re.sub(r"\s{2,}\(.*\)\s*$", "", line)  # "...  (then add --resume)": prose after the command
    return line


def help_examples() -> list[tuple[str, str]]:
    """(where, command) for every ``gradlab ...`` line of the help texts (the root's and each command's)."""
    from gradlab_cli.app import app

    out = []
    texts = [("gradlab --help", app.info.help or "")]
    texts += [(f"gradlab {c.name or c.callback.__name__} --help", inspect.getdoc(c.callback) or "")
              for c in app.registered_commands]
    for where, text in texts:
        _, _, examples = text.partition("Examples:")
        out += [(where, _clean(line)) for line in examples.splitlines() if line.strip().startswith("gradlab ")]
    return out


def doc_examples() -> list[tuple[str, str]]:
    """(where, command) for every line starting with ``gradlab `` in a fenced or indented code block
    of README.md and docs/*.md (backslash continuations joined)."""
    out = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines = md.read_text(encoding="utf-8").splitlines()
        fenced, i = False, 0
        while i < len(lines):
            raw = lines[i]
            if raw.lstrip().startswith("```"):
                fenced = not fenced
                i += 1
                continue
            indented = raw.startswith("    ") and (i == 0 or not lines[i - 1].strip() or lines[i - 1].startswith("    "))
            text = raw.strip()
            if (fenced or indented) and text.startswith("gradlab "):
                while text.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text[:-1] + " " + lines[i].strip()
                out.append((f"{md.relative_to(REPO)}:{i + 1}", _clean(text)))
            i += 1
    return out


def all_examples() -> list[tuple[str, list[str]]]:
    """(where, argv) for every distinct example."""
    seen, out = set(), []
    for where, text in help_examples() + doc_examples():
        argv = shlex.split(text, comments=True)[1:]
        key = tuple(argv)
        if key not in seen:
            seen.add(key)
            out.append((where, argv))
    return out


# --------------------------------------------------------------------------- making them cheap
GPU = "needs a GPU: bf16 mixed precision is for accelerators"
SLURM = "needs a SLURM cluster (sbatch) to submit to"
DASK = "needs a running Dask scheduler on the network"
TRACKER_NET = "needs an experiment tracker's package and server (wandb, mlflow)"

#: Placeholders in the examples and what stands in for them in the prepared folder.
PATHS = {
    "path/to/bert-base-uncased": str(HF / "bert"), "/path/to/bert-base-uncased": str(HF / "bert"),
    "path/to/roberta-base": str(HF / "roberta"), "SentEval/data/downstream": "senteval",
    "/shared/exp": "exp", "exp/runs/<id>": "exp/runs/RUN_ID", "/tmp/figs": "figs",
    "runs/mb/best_params.npz": "light/best_params.npz", "run/best_params.npz": "light/best_params.npz", "exp/runs/0123abcd4567ef89": "exp/runs/RUN_ID",
}
#: Options appended (the last value of an option wins) to shrink a command's work.
SMALL = {
    "heatmap": ["--grid", "6", "--batches", "4", "--batch-size", "16"],
    "weight": ["--grid", "6", "--batches", "4", "--batch-size", "16"],
    "lemma1": ["--grid", "6", "--batches", "4", "--batch-size", "16"],
    "norms": ["--grid", "8"],
    "train": ["--steps", "2", "--batch-size", "8", "--dev-pairs", "20", "--no-test", "--eval-every", "1",
              "--monitor-every", "1", "--max-sentences", "32", "--no-plot"],
    "experiment": ["--quick", "--seeds", "1", "--steps", "2", "--batch-size", "8", "--jobs", "1"],
}

#: ``gradlab explore`` serves a page until stopped: tests/test_explore.py serves its --help
#: example, fetches the page and stops the server.
SERVES = "serves a page until stopped (served, fetched and stopped by tests/test_explore.py)"

#: The training examples run by default (the others are ``slow``).
DEFAULT_TRAIN = {("train", "--loss", "infonce", "--tracker", "tb:runs/tb", "--out", "run")}


def prepare(argv: list[str]) -> tuple[list[str] | None, str | None, bool]:
    """(argv to run, skip reason, slow) for one example."""
    if "--precision" in argv and "bf16" in argv:
        return None, GPU, False
    if any(a.startswith("slurm_") or a == "gpus_per_node=1" for a in argv) or "submitit" in argv:
        return None, SLURM, False
    if "dask" in argv and "--scheduler" in argv:
        return None, DASK, False
    if argv[:1] == ["explore"]:
        return None, SERVES, False
    if any(a.split(":")[0] in ("wandb", "mlflow") for a in argv[argv.index("--tracker") + 1:][:1]) if "--tracker" in argv else False:
        return None, TRACKER_NET, False
    argv = [PATHS.get(a, a) for a in argv]
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in ("stsb", "sts", "train") and "minilm" in argv:
        argv = [str(HF / "bert") if a == "minilm" else a for a in argv]  # the tiny BERT in MiniLM's place
    if command in ("stsb", "sts") and "--encoder" not in argv and "-e" not in argv:
        argv += ["--encoder", str(HF / "bert")]
    extra = list(SMALL.get(command, []))
    if command == "train":
        if "--corpus" not in argv:
            extra += ["--corpus", "News100"]
        if "--recipe" in argv:
            extra = [a for a in extra if a not in ("--max-sentences", "32")]
        if "--encoder" not in argv or "light" in argv:
            extra += ["--dim", "16"]
    if command == "figures" and "--only" not in argv:
        extra += ["--only", "li2024_fig3"]
    if command == "figures":
        extra += ["--quick"]
    if command == "experiment" and "--status" not in argv:
        if "--encoder" in argv:
            argv = [str(HF / "bert") if a in ("minilm",) else a for a in argv]
        return argv + extra, None, True
    if command == "experiment":
        extra = []
    # a training run costs 5-20 s even this small: one light-encoder run by default, the others slow
    return argv + extra, None, command == "train" and tuple(argv) not in DEFAULT_TRAIN


# --------------------------------------------------------------------------- the folder the examples run in
FOCAL = '''import jax, jax.numpy as jnp


def focal(c_pos, c_neg, *, tau=0.05, gamma=2.0):
    logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
    log_p = c_pos / tau - jax.nn.logsumexp(logits, axis=-1)
    return -((1 - jnp.exp(log_p)) ** gamma) * log_p
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding every file the examples name."""
    from tests._real import TINY_SENTENCES
    from tests.test_compare import _experiment, _jsonl, _monitor_records, write_train_run
    from tests.test_real_sts import write_senteval

    root = tmp_path_factory.mktemp("examples")
    rng = np.random.default_rng(0)
    h = rng.normal(size=(256, 16))
    np.savez(root / "views.npz", h=h, h_prime=h + 0.3 * rng.normal(size=h.shape))
    (root / "my_losses.py").write_text(FOCAL)
    (root / "run").mkdir()
    _jsonl(root / "run" / "monitor.jsonl", _monitor_records(0))
    from gradlab.monitor import CSVSink, read_log

    sink = CSVSink(root / "run" / "monitor.csv")
    for record in read_log(root / "run" / "monitor.jsonl"):
        sink(record)
    sink.close()
    (root / "light").mkdir()  # a light encoder's parameters file, where no example writes
    np.savez(root / "light" / "best_params.npz", w=rng.normal(size=(384, 16)) / 20, b=np.zeros(16))
    write_senteval(root / "senteval")
    (root / "wiki1m_for_simcse.txt").write_text("\n".join(TINY_SENTENCES * 4) + "\n")
    write_train_run(root / "runs" / "infonce", params={"tau": 0.05})
    write_train_run(root / "runs" / "arccon", loss="arccon", best_dev=71.0)
    for name in ("a", "b"):
        (root / "runs" / name).mkdir()
        _jsonl(root / "runs" / name / "paradigm_monitor.jsonl", _monitor_records(1))
    run_id = _experiment(root / "exp", "infonce", 0, best_dev=60.0, test=58.0)
    _experiment(root / "exp", "infonce", 1, best_dev=61.0, test=57.0)
    shutil.copytree(root / "exp" / "runs" / run_id, root / "exp" / "runs" / "RUN_ID")
    cfg = json.loads((root / "exp" / "runs" / "RUN_ID" / "config.json").read_text())
    assert cfg["loss"]["loss"] == "infonce"
    shutil.copytree(HF / "bert", root / "OUT" / "model")
    return root


EXAMPLES = all_examples()


def _params():
    out = []
    for where, argv in EXAMPLES:
        prepared, reason, slow = prepare(argv)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        if slow:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(argv, prepared, id=f"{where}: gradlab {' '.join(argv)}"[:150], marks=marks))
    return out


def test_the_examples_were_found():
    wheres = {w.split(":")[0].split(" --help")[0] for w, _ in EXAMPLES}
    assert {"README.md", "docs/real.md", "docs/cluster.md", "gradlab train", "gradlab compare",
            "gradlab heatmap", "gradlab experiment"} <= wheres
    argvs = [a for _, a in EXAMPLES]
    assert ["train", "--loss", "infonce", "--encoder", "path/to/bert-base-uncased", "--save-state-every", "500",
            "--out", "run"] in argvs  # the help's example names its loss


@pytest.mark.parametrize("argv, prepared", _params())
def test_example_runs(argv, prepared, workdir, monkeypatch, tmp_path):
    if argv[0] in ("train", "stsb", "sts", "experiment"):
        from tests._real import require_real_extra

        require_real_extra()
    if "tb:" in " ".join(argv) or "--tensorboard" in argv:
        pytest.importorskip("tensorboardX")
    monkeypatch.chdir(workdir)
    r = run(*prepared)
    assert r.exit_code == 0, f"gradlab {' '.join(prepared)}\n{r.output}"
