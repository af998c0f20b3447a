"""The SimCSE step compiled for an H100 or H200 on a machine without one: its kernels, its memory
and its compilation time, from XLA's deviceless compilation.

    make gpu-aot       # the venv (JAX's CUDA plugin, no GPU needed), .gpu/ (tokenizer, STS-B), every row
    PYTHONPATH=$PWD:$PWD/.gpu/site JAX_PLATFORMS=cpu /work/aot-venv/bin/python benchmarks/gpu_aot.py \\
        --json benchmarks/results/gpu_aot.json
    ... benchmarks/gpu_aot.py --rows gradlab_bf16 --hlo /tmp/step.hlo   # one row, its optimized HLO kept
    ... benchmarks/gpu_aot.py --engine --json benchmarks/results/gpu_aot_engine.json   # the engine's programs

JAX's CUDA plugin compiles for a GPU it describes (``get_topology_desc`` with a target
configuration: the device's compute capability, SMs, shared memory, bandwidth) without one
attached. Each row is one of ``gpu.py``'s gradlab rows (``gpu.GRADLAB_ROWS``), built as that row
builds it, on the same kind of checkpoint and corpus (made here, in a temporary folder), and
compiled as the GPU machine would compile it, except for autotuning, which needs the device
(XLA then takes its default choice of each product's kernel). Per row:

* ``compile_s``: lowering and XLA's compilation of the step on this host;
* ``kernels``: the kernels one step launches, counted in the optimized HLO (each fusion and
  library call of the entry computation, a loop's body times its trip count), by kind:
  ``gemm`` (matrix products), ``triton`` (Triton's block-level fusions: the row-wise
  LayerNorms and softmaxes), ``reduction`` (XLA's input fusions: reductions and what fuses
  into them), ``elementwise`` (loop fusions), ``other`` (copies, library calls, ...); and
  ``bytes``, their operands' and outputs' bytes summed (the traffic with no cache);
* ``kernels.flops``: the FLOPs of the step's compiled matrix products, beside ``flops_formula``,
  those of ``gradlab.real.flops.transformer_step_flops`` by which ``gpu.py`` rates a step
  (forward + backward = 3 x forward, by convention);
* ``largest_kernels``: the ``LARGEST`` kernels that move the most bytes (name, kind, bytes), where
  a step's memory traffic goes;
* ``memory``: XLA's buffer assignment (``memory_analysis``): arguments, outputs, the outputs
  that alias donated arguments, temporaries; ``step_peak_bytes`` is what the step holds at
  most, arguments + outputs not aliased + temporaries (what JAX's allocator's
  ``peak_bytes_in_use`` counts for a step whose inputs are its state, less the batch and the
  allocator's rounding).

The library picks some kernels by the backend it traces for (``gradlab.backend``: the layer
loop unrolled on GPUs, the column sums as products on CPUs and in two stages on GPUs, the Q, K,
V gradients apart on GPUs, the packed rows' width, the engine's chunks); this process runs on a
CPU and compiles for a GPU, so it traces with the GPU's choices
(``gradlab.backend.choices_for("gpu")``).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu  # noqa: E402 - the checkpoint, corpus and rows of the GPU benchmark

#: XLA's description of each target (``stream_executor::GpuTargetConfigProto``, text format):
#: what its GPU compiler reads from an attached device. The datasheets' numbers; the H200's
#: memory and bandwidth differ from the H100's, its SMs and caches do not.
_DEVICE_INFO = """gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {memory}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
runtime_version {{ major: 13 }}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 10 }}
device_description_str: "{name}"
"""
TARGETS = {
    "h100": _DEVICE_INFO.format(name="NVIDIA H100 80GB HBM3", bandwidth=3352320000000, memory=84929347584),
    "h200": _DEVICE_INFO.format(name="NVIDIA H200", bandwidth=4800000000000, memory=150754820096),
}

#: The kinds of kernel counted (``_kind``).
KINDS = ("gemm", "triton", "reduction", "elementwise", "other")
#: How many kernels a row lists by the bytes they move (``largest_kernels``).
LARGEST = 12
#: Bytes per element of the HLO types counted.
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
          "f64": 8, "s64": 8, "u64": 8}
#: HLO operations that launch nothing on the device.
_NO_KERNEL = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all", "partition-id",
              "replica-id", "opt-barrier"}


def cuda_device(target: str):
    """A device of ``target`` (``TARGETS``) to compile for, none attached."""
    from jax.experimental.topologies import get_topology_desc

    return get_topology_desc("gradlab-aot", "cuda", target_config=TARGETS[target], topology="1x1x1").devices[0]


def _computations(hlo: str) -> tuple[dict[str, list[str]], str]:
    """The optimized HLO's computations (name -> instruction lines) and the entry's name."""
    comps: dict[str, list[str]] = {}
    entry, current = "", None
    for line in hlo.splitlines():
        head = re.match(r"^(ENTRY )?%(\S+) \(.*\{$", line)
        if head:
            current = head.group(2)
            comps[current] = []
            entry = current if head.group(1) else entry
        elif line.startswith("}"):
            current = None
        elif current is not None and re.match(r"^\s+(ROOT )?%\S+ = ", line):
            comps[current].append(line)
    return comps, entry


def _kind(line: str) -> str | None:
    """The kind of kernel an instruction of the optimized HLO launches (None: none)."""
    op = re.match(r"^\s+(?:ROOT )?%\S+ = .*? ([a-z][a-z0-9-]*)\(", line)
    if op is None or op.group(1) in _NO_KERNEL:
        return None
    op = op.group(1)
    if op == "fusion":
        backend = re.search(r'"fusion_backend_config":\{"kind":"(\w+)"', line)
        backend = backend.group(1) if backend else ""
        if "gemm" in backend or "cublas" in backend:
            return "gemm"
        if backend.startswith("__triton"):  # Triton's block-level fusions: row-wise normalizations, softmax
            return "triton"
        kind = re.search(r"kind=(\w+)", line).group(1)
        return {"kInput": "reduction", "kLoop": "elementwise"}.get(kind, "other")
    if op == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', line).group(1).lower()
        return "gemm" if "gemm" in target or "cublas" in target else "other"
    return "other"


def _nbytes(shape: str) -> int:
    """The bytes of an HLO shape (a tuple's: its elements')."""
    return sum(_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
               for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape) if dtype in _BYTES)


def _dims(shape: str) -> list[int]:
    """The dimensions of an HLO array shape (a tuple's first element)."""
    found = re.search(r"\[([\d,]*)\]", shape)
    return [int(d) for d in found.group(1).split(",") if d] if found else []


def _dot_flops(out_shape: str, lhs_shape: str, contracting: str) -> int:
    """2 x (output elements) x (contracted elements) of one matrix product."""
    lhs = _dims(lhs_shape)
    return 2 * math.prod(_dims(out_shape)) * math.prod(lhs[int(d)] for d in re.findall(r"\d+", contracting))


def _fusion_flops(comps: dict[str, list[str]], name: str) -> int:
    """The FLOPs of the ``dot``s of computation ``name`` and of the computations it calls."""
    shapes, flops = {}, 0
    for line in comps.get(name, []):
        inst = re.match(r"^\s+(?:ROOT )?%(\S+) = (.*?) ([a-z][a-z0-9-]*)\((.*?)\)(?:,|$)", line)
        shapes[inst.group(1)] = inst.group(2)
        if inst.group(3) == "dot":
            lhs = re.findall(r"%([\w.\-]+)", inst.group(4))[0]
            flops += _dot_flops(inst.group(2), shapes[lhs], re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line).group(1))
        flops += sum(_fusion_flops(comps, c) for c in re.findall(r"calls=%([\w.\-]+)", line))
    return flops


def kernels(hlo: str) -> list[dict]:
    """Each kernel a call of the optimized ``hlo`` launches: its instruction's ``name``, ``kind``
    (``_kind``), ``times`` (a loop's body counts its trip count times, once where XLA does not
    know it), ``bytes``: its operands' and outputs' bytes (what it moves through the GPU's memory
    with no cache), and ``flops``: a matrix product's (2 x output x contracted elements of each
    ``dot`` in a product's fusion, or of a library product by its ``dot_dimension_numbers``)."""
    comps, entry = _computations(hlo)
    found: list[dict] = []

    def walk(name: str, times: int) -> None:
        shapes: dict[str, str] = {}
        for line in comps[name]:
            inst = re.match(r"^\s+(?:ROOT )?%(\S+) = (.*?) [a-z][a-z0-9-]*\((.*?)\)(?:,|$)", line)
            shapes[inst.group(1)] = inst.group(2)
            if re.search(r" while\(", line):
                body = re.search(r"body=%([^,\s]+)", line).group(1)
                trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
                walk(body, times * (int(trip.group(1)) if trip else 1))
            elif (kind := _kind(line)) is not None:
                operands = re.findall(r"%([\w.\-]+)", inst.group(3))
                flops = 0
                if kind == "gemm" and " custom-call(" in line:
                    contracting = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', line)
                    flops = _dot_flops(inst.group(2), shapes.get(operands[0], ""),
                                       contracting.group(1) if contracting else "")
                elif kind == "gemm":
                    flops = sum(_fusion_flops(comps, c) for c in re.findall(r"calls=%([\w.\-]+)", line))
                found.append({"name": inst.group(1), "kind": kind, "times": times, "flops": flops,
                              "bytes": _nbytes(inst.group(2)) + sum(_nbytes(shapes.get(o, "")) for o in operands)})

    walk(entry, 1)
    return found


def kernel_counts(hlo: str) -> dict[str, int]:
    """Kernels a call of the optimized ``hlo`` launches (:func:`kernels`), by kind, their total,
    ``bytes`` and ``flops``, each kernel counted as many times as it runs."""
    counts: collections.Counter = collections.Counter()
    for k in kernels(hlo):
        counts[k["kind"]] += k["times"]
        counts["bytes"] += k["times"] * k["bytes"]
        counts["flops"] += k["times"] * k["flops"]
    return {**{k: counts[k] for k in KINDS}, "total": sum(counts[k] for k in KINDS), "bytes": counts["bytes"],
            "flops": counts["flops"]}


def largest_kernels(hlo: str, top: int = LARGEST) -> list[dict]:
    """The ``top`` kernels of :func:`kernels` that move the most bytes a call (name, kind, bytes)."""
    ranked = sorted(kernels(hlo), key=lambda k: -k["times"] * k["bytes"])[:top]
    return [{"name": k["name"], "kind": k["kind"], "bytes": k["times"] * k["bytes"]} for k in ranked]


def compile_row(name: str, device, hlo_path: str | None = None) -> dict:
    """``gpu.py``'s gradlab row ``name`` compiled for ``device``: kernels, memory, seconds, and
    ``flops_formula``, the step's FLOPs by the formula that ``gpu.py``'s TFLOP/s divide
    (``gradlab.real.plan.step_flops``), beside those its compiled products execute."""
    import jax

    from gradlab.real.plan import step_flops

    run, loop, params, opt_state = gpu.gradlab_row_loop(name)
    jax.config.update("jax_enable_compilation_cache", False)  # compiled here for a device not here: nothing to keep
    on_device = jax.sharding.SingleDeviceSharding(device)
    args = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on_device),
                                  (params, opt_state, loop.frozen, loop.batch(1), loop.key(1)))
    t0 = time.perf_counter()
    compiled = loop.step_fn.lower(*args).compile()
    seconds = time.perf_counter() - t0
    hlo = compiled.as_text()
    if hlo_path:
        Path(hlo_path).write_text(hlo)
    mem = compiled.memory_analysis()
    memory = {k: int(getattr(mem, f"{k}_size_in_bytes")) for k in ("argument", "output", "alias", "temp")}
    return {"compile_s": seconds, "kernels": kernel_counts(hlo), "largest_kernels": largest_kernels(hlo),
            "memory": memory,
            "step_peak_bytes": memory["argument"] + memory["output"] - memory["alias"] + memory["temp"],
            "rows_x_width": [loop.batches.rows, loop.batches.width], "flops_formula": step_flops(run.encoder, loop.batches)}


def compile_engine(device, mode: str, losses) -> dict:
    """The programs of one full paper map (``gradlab.simulate.gd_map``: 100 × 100 cells, 1,000
    batches of 128) in ``mode`` compiled for ``device``: per loss, each program's kernels
    (:func:`kernel_counts`) and the loops left in it. The map runs on this CPU with the engine's
    stages built on a mesh of ``device`` and each stored program replaced by its compilation for
    it, which then hands back zeros of its outputs' shapes (instruments the engine's internals:
    ``gradlab.simulate._engine``'s ``Mesh`` and ``stored_program``)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from gradlab.simulate import Protocol, _engine, gd_map

    on_device = jax.sharding.SingleDeviceSharding(device)
    programs: list[dict] = []

    def compile_for_device(jitted, args, key):
        sds = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(np.shape(a), jax.numpy.result_type(a), sharding=on_device), args)
        hlo = jitted.lower(*sds).compile().as_text()
        programs.append({"program": key[0], "kernels": kernel_counts(hlo), "loops": hlo.count(" while(")})
        shapes = jitted.eval_shape(*sds)
        return lambda *_: jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)

    saved = _engine.Mesh, _engine.stored_program
    _engine.Mesh = lambda devices, names: Mesh(np.array([device]), names)
    _engine.stored_program = compile_for_device
    out = {}
    try:
        for loss in losses:
            programs = []
            gd_map(loss, Protocol(grid=100, batches=1000, batch_size=128, mode=mode))
            out[loss] = {"programs": programs, "kernels": sum(p["kernels"]["total"] for p in programs),
                         "bytes": sum(p["kernels"]["bytes"] for p in programs),
                         "loops": sum(p["loops"] for p in programs)}
    finally:
        _engine.Mesh, _engine.stored_program = saved
    return out


def _table(rows: dict) -> list[str]:
    out = ["| row | compile s | kernels (gemm / triton / reduction / elementwise / other) | GB moved | step peak GB "
           "| temporaries GB | TFLOP compiled / formula |", "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if "error" in r:
            out.append(f"| {name} | {r['error']} | | | | | |")
            continue
        k = r["kernels"]
        out.append(f"| {name} | {r['compile_s']:.1f} | {k['total']} ({' / '.join(str(k[x]) for x in KINDS)}) | "
                   f"{k['bytes'] / 1e9:.2f} | {r['step_peak_bytes'] / 1e9:.3f} | "
                   f"{r['memory']['temp'] / 1e9:.3f} | {k['flops'] / 1e12:.4f} / {r['flops_formula'] / 1e12:.4f} |")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=str(gpu.ROOT / ".gpu" / "tokenizer.json"),
                    help="a WordPiece tokenizer.json (default: .gpu/'s, from make gpu-carry)")
    ap.add_argument("--target", choices=sorted(TARGETS), default="h100", help="the GPU to compile for")
    ap.add_argument("--rows", nargs="+", choices=list(gpu.GRADLAB_ROWS), default=list(gpu.GRADLAB_ROWS))
    ap.add_argument("--layers", type=int, help="a checkpoint of this many layers instead of 12 (a quick trial)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--hlo", help="write the (last) row's optimized HLO here")
    ap.add_argument("--engine", action="store_true",
                    help="compile the engine's programs of a full paper map instead (gpu.py's engine row's losses)")
    args = ap.parse_args(argv)

    import jax

    from gradlab import backend

    if jax.default_backend() != "cpu":
        raise SystemExit("gpu_aot.py: run it where JAX's default backend is the CPU (JAX_PLATFORMS=cpu)")
    device = cuda_device(args.target)
    with backend.choices_for("gpu"):  # the library's choices for the backend compiled for (module docstring)
        _compile(args, argv, device)


def _compile(args, argv, device) -> None:
    rows: dict[str, dict] = {}
    if args.engine:
        rows = {mode: compile_engine(device, mode, losses) for mode, losses in
                (("common", gpu.ENGINE_LOSSES), ("independent", ("infonce", "arccon")))}
        for mode, found in rows.items():
            for loss, r in found.items():
                print(f"{mode} {loss}: {r['kernels']} kernels, {r['bytes'] / 1e9:.2f} GB moved, {r['loops']} loops, "
                      f"programs {[(p['program'], p['kernels']['total'], p['loops']) for p in r['programs']]}")
        _write_json(args, argv, device, rows)
        return
    with tempfile.TemporaryDirectory(prefix="gradlab-aot-") as folder:
        os.environ[gpu.ENV_DIR] = folder
        os.environ.setdefault("GRADLAB_CACHE_DIR", os.path.join(folder, "jax-cache"))
        gpu.setup(folder, args.tokenizer, args.layers)
        for name in args.rows:
            try:
                rows[name] = compile_row(name, device, args.hlo)
            except Exception as exc:  # a row that XLA cannot compile is reported, the others go on
                rows[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            print(f"{name}: {json.dumps(rows[name])}", flush=True)
    print("\n".join(_table(rows)))
    _write_json(args, argv, device, rows)


def _write_json(args, argv, device, rows: dict) -> None:
    import jax

    if not args.json:
        return
    out = {"target": device.device_kind, "jax": jax.__version__, "host": gpu.host(), "layers": args.layers or 12,
           "gradlab_commit": gpu.library_commit(),
           "command": "python benchmarks/gpu_aot.py " + " ".join(  # no machine's paths
               os.path.basename(a) if os.path.isabs(a) else a for a in (argv or sys.argv[1:])),
           "rows": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.json).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(args.json)


if __name__ == "__main__":
    main()
