"""The exact GELU's two formulas side by side: JAX's ``jax.nn.gelu(approximate=False)``,
``x erfc(-x/√2) / 2``, against gradlab's ``gradlab.real.bert_ops.gelu``, ``x (1 + erf(x/√2)) / 2`` in
float32 (PyTorch's formula), on the activations of BERT-base's feed-forward in the bfloat16 SimCSE
step (2,304 tokens of 3,072: 64 pairs in 18 packed rows of 64, two views).

Two measurements, by where the script runs:

* on this CPU (the default): the forward and backward passes (the backward as the step's: the
  incoming gradient times the derivative), in float32 and bfloat16, medians of ``--repeat`` calls,
  the formulas alternating; and each formula's largest error in float32 against SciPy's normal
  CDF (``ndtr``) over [-12, 12], the value's and the derivative's;
* compiled for an H100 (``--ptx``, in the venv of ``gpu_aot.py``, no GPU needed): each pass's
  kernels as XLA emits them, from the PTX it dumps: instructions in a thread's body, elements a
  thread computes (the bytes it stores), so instructions an element, and the exponentials
  (``ex2``) and reciprocals among them. An elementwise kernel whose instructions outrun its bytes
  is bound by the chip's arithmetic, not its bandwidth (``benchmarks/README.md``).

* the whole BERT-base SimCSE recipe step on this CPU with each formula (``--step ROUNDS``):
  ``real.py``'s ``bertbase_step_jax`` in fresh processes, the formulas alternating round by round
  (``gradlab.real.bert_ops.gelu`` replaced by JAX's in the ``erfc`` processes, nothing else changed):
  its timed steps and its first call (compilation included).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/gelu.py --json benchmarks/results/gelu_cpu.json
    PYTHONPATH=$PWD .venv/bin/python benchmarks/gelu.py --step 4 --json benchmarks/results/gelu_step_cpu.json
    PYTHONPATH=$PWD JAX_PLATFORMS=cpu /work/aot-venv/bin/python benchmarks/gelu.py --ptx \\
        --json benchmarks/results/gelu_ptx.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHAPE = (2304, 3072)


def formulas() -> dict:
    import gpu

    from gradlab.real import bert_ops

    return {"jax.nn.gelu (erfc)": gpu.erfc_gelu(), "gradlab (erf)": bert_ops.gelu}


def passes(f) -> dict:
    """The forward pass and the backward one (incoming gradient times the derivative), jitted."""
    import jax

    return {"forward": jax.jit(f), "backward": jax.jit(lambda x, g: jax.vjp(f, x)[1](g)[0])}


def inputs(dtype):
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.normal(size=SHAPE), dtype) for _ in range(2))


def cpu_rows(repeat: int) -> dict:
    """Medians (ms) of ``repeat`` calls of each pass, dtype and formula, the formulas alternating."""
    import jax.numpy as jnp

    out: dict = {}
    for dtype in ("float32", "bfloat16"):
        x, g = inputs(getattr(jnp, dtype))
        compiled = {name: passes(f) for name, f in formulas().items()}
        times: dict = collections.defaultdict(list)
        for p in compiled.values():  # compile first
            p["forward"](x).block_until_ready()
            p["backward"](x, g).block_until_ready()
        for _ in range(repeat):
            for name, p in compiled.items():
                for which, args in (("forward", (x,)), ("backward", (x, g))):
                    t = time.perf_counter()
                    p[which](*args).block_until_ready()
                    times[(name, which)].append(time.perf_counter() - t)
        for (name, which), ts in times.items():
            out.setdefault(dtype, {}).setdefault(name, {})[f"{which}_ms"] = round(1e3 * statistics.median(ts), 3)
    return out


def errors() -> dict:
    """Each formula's largest error in float32 over [-12, 12] against SciPy's ``ndtr``: the value's
    (absolute, and in ulps of ``|x|``) and the derivative's (absolute)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from scipy.special import ndtr

    x32 = jnp.asarray(np.linspace(-12.0, 12.0, 48_001), jnp.float32)
    x = np.asarray(x32, np.float64)
    value, slope = x * ndtr(x), ndtr(x) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    ulp = np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)
    out = {}
    for name, f in formulas().items():
        err = np.abs(np.asarray(f(x32), np.float64) - value)
        derr = np.abs(np.asarray(jax.vmap(jax.grad(f))(x32), np.float64) - slope)
        out[name] = {"value_abs": float(err.max()), "value_ulps_of_x": float((err / np.maximum(ulp, 1e-45)).max()),
                     "derivative_abs": float(derr.max())}
    return out


def ptx_counts(ptx: str, element_bytes: int = 2) -> list[dict]:
    """Per kernel (``.entry``) of a PTX module: its instructions, the elements of ``element_bytes``
    a thread stores (the bytes of its ``st.global``), instructions an element, and its ``ex2`` and
    ``rcp``/``div``."""
    out = []
    for m in re.finditer(r"\.entry (\w+)\((.*?)\n\}", ptx, re.S):
        lines = [ln.strip() for ln in m.group(2).split("\n")]
        ops = [ln.split()[0] for ln in lines if ln and not ln.startswith((".", "//", "{", "}", "$", "(", ")"))
               and not ln.endswith(":")]
        kinds = collections.Counter(op.split(".")[0] for op in ops)
        stores = [op for op in ops if op.startswith("st.global")]
        stored = sum((int(re.search(r"\.v(\d)", op).group(1)) if ".v" in op else 1)
                     * int(re.search(r"\.[bfsu](\d+)$", op).group(1)) // 8 for op in stores)
        elements = stored // element_bytes
        out.append({"kernel": m.group(1), "instructions": len(ops), "elements_per_thread": elements,
                    "instructions_per_element": round(len(ops) / max(elements, 1), 1),
                    "ex2": kinds["ex2"], "rcp_div": kinds["rcp"] + kinds["div"]})
    return out


def ptx_rows(target: str, dump: str) -> dict:
    """Each pass of each formula in bfloat16 compiled for ``target`` (``gpu_aot.TARGETS``): its
    kernels' PTX counts (:func:`ptx_counts`), read from XLA's dump (``--xla_dump_to``) in ``dump``."""
    import gpu_aot
    import jax
    import jax.numpy as jnp

    device = gpu_aot.cuda_device(target)
    sharding = jax.sharding.SingleDeviceSharding(device)
    spec = jax.ShapeDtypeStruct(SHAPE, jnp.bfloat16, sharding=sharding)
    out: dict = {}
    for name, f in formulas().items():
        for which, jitted in passes(f).items():
            args = (spec,) if which == "forward" else (spec, spec)
            before = set(os.listdir(dump))
            jitted.lower(*args).compile()
            ptx = "".join(Path(dump, p).read_text() for p in sorted(set(os.listdir(dump)) - before) if p.endswith(".ptx"))
            out.setdefault(name, {})[which] = ptx_counts(ptx)
    return out


def step_worker(formula: str) -> dict:
    """One ``real.py`` BERT-base recipe step worker with ``formula`` (``"erfc"``: JAX's GELU, set as
    ``gpu.py``'s ``gradlab_bf16_as_before`` row sets it)."""
    import gpu
    import real

    gpu.set_bert_choice("gelu", gpu.erfc_gelu() if formula == "erfc" else "library")
    return real.bertbase_step_jax()


def step_rows(rounds: int) -> dict:
    """``rounds`` rounds of the BERT-base recipe step in fresh processes, one per formula, alternating
    which goes first; per formula its timed steps and first calls, and their medians."""
    import real

    out: dict = {"erfc": [], "erf": []}
    with tempfile.TemporaryDirectory(prefix="bert-base-") as base:
        real.make_bert_base(base)
        env = {**os.environ, real.BASE_DIR_ENV: base}
        for rnd in range(rounds):
            for formula in ("erfc", "erf") if rnd % 2 == 0 else ("erf", "erfc"):
                proc = subprocess.run([sys.executable, __file__, "--step-worker", formula], env=env,
                                      capture_output=True, text=True, check=True)
                out[formula].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"round {rnd + 1}: {formula} {out[formula][-1]['times']}", file=sys.stderr, flush=True)
    return {formula: {"step_s": statistics.median(t for r in runs for t in r["times"]),
                      "first_s": statistics.median(r["first"] for r in runs), "runs": runs}
            for formula, runs in out.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20, help="calls of each pass (CPU)")
    ap.add_argument("--ptx", action="store_true", help="compile for a GPU and count its PTX (gpu_aot.py's venv)")
    ap.add_argument("--target", default="h100", help="the GPU to compile for (with --ptx)")
    ap.add_argument("--step", type=int, metavar="ROUNDS", help="time the BERT-base recipe step with each formula")
    ap.add_argument("--step-worker", choices=("erfc", "erf"), help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.step_worker:
        print(json.dumps(step_worker(args.step_worker)))
        return
    with tempfile.TemporaryDirectory(prefix="gradlab-gelu-") as folder:
        if args.ptx:  # before JAX starts: XLA reads its flags once
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={folder}").strip()
        import jax

        from gradlab import backend

        if args.ptx and jax.default_backend() != "cpu":
            raise SystemExit("gelu.py --ptx: run it where JAX's default backend is the CPU (JAX_PLATFORMS=cpu)")
        with backend.choices_for("gpu" if args.ptx else jax.default_backend()):
            if args.ptx:
                result = {"ptx": ptx_rows(args.target, folder)}
            elif args.step:
                result = {"step": step_rows(args.step)}
            else:
                result = {"cpu": cpu_rows(args.repeat), "errors": errors()}
    import gpu

    result.update(shape=list(SHAPE), jax=jax.__version__, host=gpu.host(), gradlab_commit=gpu.library_commit(),
                  peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  command="python benchmarks/gelu.py " + " ".join(argv or sys.argv[1:]))
    print(json.dumps(result, indent=1))
    if args.json:
        tmp = Path(args.json).with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.json)


if __name__ == "__main__":
    main()
