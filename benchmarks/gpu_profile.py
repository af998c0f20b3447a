"""Where the time of gradlab's SimCSE step goes on a GPU: the host, the device, kernel by kernel.

    python benchmarks/gpu_profile.py --tokenizer .gpu/tokenizer.json --out results/
    python benchmarks/gpu_profile.py --layers 2 --out /tmp/p      # a quick trial on a CPU

The step is ``benchmarks/gpu.py``'s ``gradlab_bf16`` row (the SimCSE recipe on a BERT-base-shaped
checkpoint of random weights, batch 64, 32 tokens, bf16; ``--batch 512`` for ``gpu.py``'s
``gradlab_bf16_batch512``), built as that row builds it (``gpu.gradlab_loop``). In one process,
after the compiling step:

* the step timed as ``gpu.step_timings`` does: synchronous from a device batch (``step_s``),
  synchronous from NumPy (``sync_numpy_s``), the dispatch alone, and pipelined; then
  ``same_inputs``: synchronous steps that all get the same batch and key buffers;
* ``placements``: held and released steps with the resident step's outputs copied out to the
  device, to the host's pinned memory (the default on a GPU), or to the device with a small array
  kept after each copy: the call's time says whether the copies a caller holds move the
  step's temporaries;
* ``trace``: ``jax.profiler`` over 5 synchronous steps, summarized: device busy time per step
  (the union of the kernels' intervals), kernels per step, the kernels and host events that
  take the most time (``profile.json``; the raw trace is kept beside it, and with ``--dump``
  the step's optimized HLO).

Then the same timings for variants that change one thing (``--variants``): attention dropout
off (not the recipe), the ``rbg`` PRNG for the dropout masks, recomputation in the backward
pass (``remat``), the embedding tables cast to bfloat16 with the rest, the layer loop unrolled,
the step's per-call inputs copied into the program's own buffers first (``stable``), the
optimizer's update behind a barrier (``gradsapart``, ``gpu.grads_apart``), the column sums in one
reduction each instead of the library's two stages on a GPU (``onestage``,
``gradlab.real.bert_ops.COLUMN_SUM_BLOCK`` None), the Q, K and V gradients read as slices of the
fused product's (``qkvsliced``, ``gradlab.real.bert.QKV_GRADIENTS_APART`` False).

``--children`` runs the step again in child processes, each after the in-process rows:

* ``updates:VARIANT``: how often XLA re-records its command buffers (CUDA graphs). A command
  buffer records the device addresses its kernels read and write; when one of them changes
  between calls (a new batch, a new key, a fresh output), XLA updates the recorded commands
  before it submits the graph, on the host, while the device may wait. The child runs
  ``TIMED_UPDATES`` synchronous steps with XLA's ``command_buffer_thunk`` log at level 3
  (``TF_CPP_VMODULE``) and counts, per step, the updates, the microseconds XLA logs for them
  and the graphs submitted. Its timings are not kept (the log slows the host).
* ``xla:FLAGS``: the default step under ``XLA_FLAGS=--FLAGS`` (``+`` joins several; ``xla:``
  none), timed as above; ``env:NAME=VALUE``: under those environment variables (``+`` joins
  several; ``XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async``, say), timed as above, with the losses of ``LOSSES`` further steps to compare with those of
  ``xla:`` (a flag that replays a stale address shows there).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu  # noqa: E402 - the checkpoint, corpus and recipe of gpu.py's rows

TRACED = 5
TIMED_UPDATES, LOSSES = 5, 3
BATCH_ENV = "GRADLAB_GPU_PROFILE_BATCH"  # --batch, for this process and its children
UPDATES_LOG = "command_buffer_thunk=3"  # XLA's log of command-buffer updates (TF_CPP_VMODULE)


def _build(encoder=None, *, key_impl: str | None = None, grads_apart: bool = False,
           column_sum_block: int | str | None = "library", qkv_gradients_apart: bool | str = "library"):
    """gpu.py's gradlab_bf16 run, its loop, parameters and optimizer state (``key_impl``: the root
    key's PRNG; ``grads_apart``, ``column_sum_block``, ``qkv_gradients_apart``: as ``gpu.GradlabRow``'s)."""
    import jax

    gpu.set_bert_choice("COLUMN_SUM_BLOCK", column_sum_block)
    gpu.set_bert_choice("QKV_GRADIENTS_APART", qkv_gradients_apart)
    run, loop, params, opt_state = gpu.gradlab_loop("bf16", _batch(), encoder)
    if grads_apart:
        loop = gpu.rebuilt_step(run, loop, "bf16", apart=True)
    if key_impl is not None:
        loop.root = jax.random.key(0, impl=key_impl)
    return loop, params, opt_state


def _same_inputs(loop, params, opt_state) -> tuple[dict, tuple]:
    """Synchronous steps that all get one batch and one key (the same device buffers every call),
    timed as ``step_s`` and ``dispatch_s`` are: beside the default's, what new input buffers cost
    a step (a command buffer that reads an input records its address)."""
    import statistics

    import jax

    batch, key = loop.batch(2), loop.key(2)
    jax.block_until_ready((batch, key))
    steps, dispatch = [], []
    for _ in range(gpu.TIMED):
        t0 = time.perf_counter()
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch, key)
        dispatch.append(time.perf_counter() - t0)
        float(aux["loss"])
        steps.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(steps), "dispatch_s": statistics.median(dispatch)}, (params, opt_state)


def _placements(loop, params, opt_state) -> tuple[dict, tuple]:
    """Held and released synchronous steps (``gpu.device_steps``, as ``gpu.step_timings`` times
    them) with the resident step's outputs copied out to each placement: the device, the host's
    pinned memory, the device with a small array kept after each copy (so that a freed copy cannot
    rejoin the free memory beyond it). The call's and the step's medians say whether the copies
    that the caller holds move the step's temporaries (a held call re-records its graphs)."""
    import collections
    import statistics

    import jax.numpy as jnp

    from gradlab.real.step import copy_on_device, copy_to_host

    step = loop.step_fn
    if not hasattr(step, "copy_out"):
        return {"skipped": "the loop's step is not a ResidentStep"}, (params, opt_state)
    pins = collections.deque(maxlen=8)

    def spacer(aux):
        out = copy_on_device(aux)
        pins.append(jnp.zeros((64,), jnp.float32))
        return out

    out, state, first = {}, (params, opt_state), 100
    for name, copy_out in {"device": copy_on_device, "pinned_host": copy_to_host, "spacer": spacer}.items():
        step.copy_out = copy_out
        for release in (False, True):
            (steps, _, calls, parts), state = gpu.device_steps(loop, state, first, release, count=gpu.TIMED + 2)
            first += gpu.TIMED + 2
            out[f"{name}_{'released' if release else 'held'}"] = {
                "call_s": statistics.median(calls[2:]), "step_s": statistics.median(steps[2:]), "call_parts_ms": parts}
    step.copy_out = None  # the backend's choice again
    return out, state


def _batch() -> int:
    return int(os.environ.get(BATCH_ENV, gpu.BATCH))


def _trace(loop, params, opt_state, folder: Path) -> tuple[dict, Path | None]:
    """``jax.profiler`` over TRACED synchronous steps (device batches); the summary and the raw trace."""
    import jax

    staged = [(loop.batch(k), loop.key(k)) for k in range(2, 2 + TRACED)]
    jax.block_until_ready(staged)
    t0 = time.perf_counter()
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        for batch, key in staged:
            params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch, key)
            float(aux["loss"])
    wall = time.perf_counter() - t0
    found = sorted(folder.rglob("perfetto_trace.json.gz"))
    if not found:
        return {"error": "no perfetto_trace.json.gz written", "wall_s": wall}, None
    return summarize(json.loads(gzip.open(found[-1]).read()), TRACED) | {"traced_wall_s": wall}, found[-1]


def summarize(trace: dict, steps: int, top: int = 40) -> dict:
    """Per step: the device's busy time (union of its events' intervals), its events, and the
    kernels and host events that take the most time (Chrome trace events of jax.profiler)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device_pids = {p for p, n in procs.items() if "GPU" in n or "/device:" in n}
    dev_total, dev_count, host_total, host_count = (collections.Counter() for _ in range(4))
    intervals, per_thread = [], collections.Counter()
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        name, dur = str(e.get("name", ""))[:160], float(e["dur"])
        if e["pid"] in device_pids:
            dev_total[name] += dur
            dev_count[name] += 1
            intervals.append((float(e["ts"]), float(e["ts"]) + dur))
            per_thread[f"{procs.get(e['pid'])} / {threads.get((e['pid'], e['tid']), e['tid'])}"] += dur
        else:
            host_total[name] += dur
            host_count[name] += 1
    busy, end = 0.0, -1.0
    for a, b in sorted(intervals):
        if b <= end:
            continue
        busy += b - max(a, end)
        end = b
    span = (max(b for _, b in intervals) - min(a for a, _ in intervals)) if intervals else 0.0

    def table(total, count):
        return [{"name": n, "us_per_step": round(t / steps, 1), "calls_per_step": count[n] / steps}
                for n, t in total.most_common(top)]

    return {"steps": steps, "device_processes": sorted(procs[p] for p in device_pids),
            "device_busy_ms_per_step": busy / steps / 1e3, "device_span_ms_per_step": span / steps / 1e3,
            "device_events_per_step": sum(dev_count.values()) / steps,
            "device_streams_ms_per_step": {k: round(v / steps / 1e3, 3) for k, v in per_thread.most_common(8)},
            "kernels": table(dev_total, dev_count), "host": table(host_total, host_count)}


def _variant(name: str) -> dict:
    """``_build``'s arguments for a variant of the recipe's step: parts joined by '+', each changing one thing."""
    from gradlab.real.recipe import simcse_unsup_encoder

    parts = set(name.split("+"))
    enc = simcse_unsup_encoder(gpu.bench_paths()[0], seed=0)
    view = enc.train_view
    if "noattn" in parts:  # not the recipe: the cost of dropping attention probabilities
        view = dataclasses.replace(view, config=dataclasses.replace(view.config, attention_probs_dropout_prob=0.0))
    if "remat" in parts:
        view = dataclasses.replace(view, remat=True)
    if "unroll" in parts:
        view = dataclasses.replace(view, unroll=True)
    if "stable" in parts:
        view = gpu.stable_inputs(view)
    if "bf16tables" in parts:  # every parameter cast to bfloat16, the embedding tables too
        from gradlab.real.step import cast_floats

        class Whole(type(view)):
            def compute_params(self, params, dtype):
                return cast_floats(params, dtype)

        view = Whole(**{f.name: getattr(view, f.name) for f in dataclasses.fields(view)})
    return {"encoder": dataclasses.replace(enc, train_view=view), "key_impl": "rbg" if "rbg" in parts else None,
            "grads_apart": "gradsapart" in parts, "column_sum_block": None if "onestage" in parts else "library",
            "qkv_gradients_apart": False if "qkvsliced" in parts else "library"}


VARIANTS = ("noattn", "rbg", "remat", "bf16tables", "unroll", "stable", "gradsapart", "onestage", "qkvsliced")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", help="a WordPiece tokenizer.json (default: MiniLM's, from the real extra)")
    ap.add_argument("--out", required=True, help="folder for profile.json and the raw trace")
    ap.add_argument("--layers", type=int, help="a checkpoint of this many layers instead of 12 (a trial on a CPU)")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), help=f"variants ({', '.join(VARIANTS)}, ...)")
    ap.add_argument("--batch", type=int, default=gpu.BATCH, help=f"sentences a batch (default {gpu.BATCH}, the recipe's)")
    ap.add_argument("--trace-variant", help="also trace this variant (trace_variant.json.gz)")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds; a variant starting later is skipped")
    ap.add_argument("--dump", action="store_true", help="keep the step's optimized HLO (xla_dump.tar.gz)")
    ap.add_argument("--torch", action="store_true", help="also torch.compile with CUDA graphs, synchronous and pipelined")
    ap.add_argument("--children", nargs="*", default=[],
                    help="child runs after the rest: updates:VARIANT (command-buffer updates a step; VARIANT "
                         "'default' or a variant's name), xla:FLAG[+FLAG] (the default step under XLA_FLAGS), "
                         "env:NAME=VALUE[+NAME=VALUE] (under those environment variables)")
    args = ap.parse_args(argv)
    os.environ[BATCH_ENV] = str(args.batch)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump = Path(tempfile.mkdtemp(prefix="gradlab-xla-dump-"))
    if args.dump:  # the step's HLO before and after XLA's optimizations (read off the device)
        os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} "
                                   "--xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_step").strip()
    import jax

    t_start = time.perf_counter()
    result: dict = {"device": jax.devices()[0].device_kind, "jax": jax.__version__}

    def write():
        result["run_seconds"] = time.perf_counter() - t_start
        (out_dir / "profile.json").write_text(json.dumps(result, indent=1))

    with tempfile.TemporaryDirectory(prefix="gradlab-profile-") as folder:
        os.environ[gpu.ENV_DIR] = folder
        gpu.setup(folder, args.tokenizer, args.layers)
        if args.torch and not gpu.torch_missing():  # first, in its own process: JAX holds most of the GPU after
            result["torch"] = _torch_cudagraphs()
            print("torch", json.dumps(result["torch"])[:400], flush=True)
        loop, params, opt_state = _build()
        result["shape"] = {"rows": loop.batches.rows, "width": loop.batches.width, "sentences": _batch()}
        result["default"], (params, opt_state) = gpu.step_timings(loop, params, opt_state)
        print("default", json.dumps(result["default"]), flush=True)
        result["same_inputs"], (params, opt_state) = _same_inputs(loop, params, opt_state)
        print("same_inputs", json.dumps(result["same_inputs"]), flush=True)
        result["placements"], (params, opt_state) = _placements(loop, params, opt_state)
        print("placements", json.dumps(result["placements"]), flush=True)
        write()
        summary, raw = _trace(loop, params, opt_state, Path(folder, "trace"))
        result["trace"] = summary
        if raw is not None:
            shutil.copy(raw, out_dir / "trace.json.gz")
        print("trace", json.dumps({k: v for k, v in summary.items() if k not in ("kernels", "host")}), flush=True)
        write()
        del loop, params, opt_state
        for name in args.variants:
            if time.perf_counter() - t_start > args.budget:
                result[name] = {"skipped": f"the {args.budget:.0f} s budget was spent"}
                continue
            try:
                loop, params, opt_state = _build(**_variant(name))
                result[name], (params, opt_state) = gpu.step_timings(loop, params, opt_state)
                if name == args.trace_variant:
                    summary, raw = _trace(loop, params, opt_state, Path(folder, "trace-" + name))
                    result[name]["trace"] = {k: v for k, v in summary.items()}
                    if raw is not None:
                        shutil.copy(raw, out_dir / "trace_variant.json.gz")
                del loop, params, opt_state
            except Exception as exc:  # noqa: BLE001 - one failed variant keeps the others
                result[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(name, json.dumps({k: v for k, v in result[name].items() if k != "trace"}), flush=True)
            write()
        for spec in args.children:
            left = args.budget - (time.perf_counter() - t_start)
            result.setdefault("children", {})[spec] = (
                _child(spec, min(left, 180.0)) if left > 20 else {"skipped": f"the {args.budget:.0f} s budget was spent"})
            print(spec, json.dumps(result["children"][spec])[:600], flush=True)
            write()
        if args.dump and any(dump.iterdir()):
            shutil.make_archive(str(out_dir / "xla_dump"), "gztar", dump)
    write()
    print(f"whole run: {time.perf_counter() - t_start:.0f} s")


def child(spec: str) -> dict:
    """What ``--children``' run ``spec`` measures, in this (child) process; see the module's doc."""
    import jax

    kind, _, arg = spec.partition(":")
    if kind == "updates":
        loop, params, opt_state = _build(**(_variant(arg) if arg != "default" else {}))
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, loop.batch(1), loop.key(1))
        float(aux["loss"])
        for k in range(2, 2 + TIMED_UPDATES):
            batch, key = loop.batch(k), loop.key(k)
            jax.block_until_ready((batch, key))
            print(f"@@step {k}", file=sys.stderr, flush=True)
            params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch, key)
            float(aux["loss"])
        print("@@end", file=sys.stderr, flush=True)
        return {}
    if kind not in ("xla", "env"):
        raise ValueError(f"unknown child run {spec!r} (updates:VARIANT, xla:FLAGS or env:NAME=VALUE)")
    loop, params, opt_state = _build()
    out, (params, opt_state) = gpu.step_timings(loop, params, opt_state)
    losses = []
    for k in range(1, 1 + LOSSES):  # the same steps after the same timed ones in every child: comparable losses
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, loop.batch(k), loop.key(k))
        losses.append(float(aux["loss"]))
    return out | {"losses": losses}


def count_updates(log: str) -> dict:
    """Per step of an ``updates`` child's stderr (between its ``@@step`` marks): XLA's command-buffer
    updates, the microseconds it logged for them, the allocations that changed, the graphs submitted."""
    steps = re.split(r"@@step \d+\n", log.split("@@end")[0])[1:]
    per_step = [{"updates": len(re.findall(r"Update command buffer", text)),
                 "update_us": sum(int(x) for x in re.findall(r"Updated command buffer in (\d+)", text)),
                 "updated_allocs": sum(int(x) for x in re.findall(r"updated_allocs=(\d+)", text)),
                 "submitted": len(re.findall(r"Execute command buffer", text))} for text in steps]
    logged = [line for line in log.splitlines() if "command buffer" in line]
    return {"per_step": per_step, "log_lines": len(logged), "sample": [line[-200:] for line in logged[:4]]}


def _child(spec: str, timeout: float) -> dict:
    """Run :func:`child` for ``spec`` in a fresh process (its own XLA flags and log level)."""
    kind, _, arg = spec.partition(":")
    env = gpu.cli_env()
    if kind == "updates":
        env.update(TF_CPP_VMODULE=UPDATES_LOG, TF_CPP_MIN_LOG_LEVEL="0")
    elif kind == "xla":
        env["XLA_FLAGS"] = " ".join([*filter(None, [env.get("XLA_FLAGS")]), *("--" + f for f in arg.split("+") if f)])
    elif kind == "env":
        env.update(dict(pair.split("=", 1) for pair in arg.split("+")))
    out, log = gpu.run_python(f"gpu_profile.child({spec!r})", timeout, env)
    return out | count_updates(log) if kind == "updates" and "error" not in out else out


def _torch_cudagraphs() -> dict:
    """gpu.py's torch.compile + CUDA graphs row in a child process (synchronous and pipelined)."""
    return gpu.run_python("gpu.torch_rows([('torch_compile_cudagraphs', 'reduce-overhead', True)])", 240)[0]


if __name__ == "__main__":
    main()
