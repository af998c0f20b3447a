"""Predict a training run before running it: ``gradlab train ... --plan``.

:func:`plan` counts the parameters, computes the step's FLOPs from the model's shapes,
runs a few steps on the current device to measure the step time and peak memory, and
extrapolates to the requested steps. It trains nothing and writes nothing.

The step's FLOPs are :mod:`gradlab.real.flops`'s model of its matrix products.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from gradlab.real.bert import first_only_fits
from gradlab.real.flops import light_step_flops, transformer_step_flops

__all__ = ["plan", "step_flops", "format_plan"]


def step_flops(encoder, batches, rows: int | None = None) -> int:
    """F_step = 3 × 2 × F_view (:mod:`gradlab.real.flops`) for the run's encoder and batch shape;
    ``rows``: a packed batch's rows (default the run's most, ``batches.rows``)."""
    from gradlab.real.light import LightEncoder

    if isinstance(encoder, LightEncoder):
        return light_step_flops(batches.batch_size, *encoder.params["w"].shape)
    view = getattr(encoder, "train_view", encoder)
    first = view.pooling.first_token and first_only_fits(view.config, batches.batch_size)
    return transformer_step_flops(view.config, batches.rows if rows is None else rows, batches.width,
                                  batches.batch_size, pooler=view.pooling.mode == "cls",
                                  packed=view.pooling.mode != "max", first_only=first)


def _peak_memory() -> tuple[int, str]:
    """Peak bytes: the device's allocator statistics where it keeps them, else the process's peak RSS."""
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return int(stats["peak_bytes_in_use"]), f"{jax.devices()[0].platform} peak_bytes_in_use"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024), "peak RSS of this process"


def plan(config, *, encoder: Any = None, sentences: Sequence[str] | None = None,
         token_ids: Sequence[Sequence[int]] | None = None, measure_steps: int = 3,
         keep_encoder_params: bool = True) -> dict[str, Any]:
    """What a :func:`gradlab.real.train` run of ``config`` costs, measured on a few steps.

    Args:
      config: the run's :class:`gradlab.real.TrainConfig`, or its :class:`gradlab.real.run.Run`.
      encoder, sentences, token_ids: as for :func:`gradlab.real.train`.
      measure_steps: steps run to measure (the first, which compiles, is not timed).
      keep_encoder_params: as for :func:`gradlab.real.train`, whose memory it measures (False:
        the steps train the encoder's own arrays, and delete them).

    Returns:
      ``parameters``, ``flops_per_step``, ``packed_shape`` (rows, width) of a packed batch with
      the run's most rows (None for a padded one), ``packed_rows`` (every row count the run
      compiles: :attr:`gradlab.real.batches.Batches.row_counts`), ``step_seconds`` (median of the
      timed steps, all packed in the most rows), ``compile_seconds``, ``eval_seconds`` (one STS-B
      dev evaluation, after one that compiled), ``evaluations``, ``peak_memory_bytes`` and where it
      was read, ``steps``, ``total_seconds`` (the steps, each its FLOPs' share of the measured step
      time, a compilation per further row count, and evaluations × evaluation time; the STS-B test
      scoring is not counted), ``device`` and ``precision`` (``config.precision``, the one the
      steps were measured in).
    """
    from gradlab.real.loop import eval_due, make_loop
    from gradlab.real.run import Run, resolve_run
    from gradlab.real.step import copy_on_device

    run = config if isinstance(config, Run) else resolve_run(config, encoder=encoder, sentences=sentences,
                                                                 token_ids=token_ids)
    config, encoder = run.config, run.encoder
    loop = make_loop(config, encoder, run.loss, run.token_ids)
    leaves = jax.tree_util.tree_leaves((encoder.params, encoder.frozen))
    parameter_counts = {"parameters": int(sum(np.size(x) for x in leaves)),
                        "trainable_parameters": int(sum(np.size(x) for x in jax.tree_util.tree_leaves(encoder.params)))}
    params = copy_on_device(encoder.params) if keep_encoder_params else encoder.params
    opt_state = loop.optimizer_state(params)
    n = max(2, int(measure_steps))
    widest = loop.batches.rows if loop.batches.packed else None  # every measured step in one shape
    times = []
    for k in range(1, n + 1):
        batch = loop.batch(min(k, config.steps), widest)
        t0 = time.perf_counter()
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch, loop.key(k))
        jax.block_until_ready(aux["loss"])
        times.append(time.perf_counter() - t0)
    run.dev(params)  # compiles the evaluation forward
    t0 = time.perf_counter()
    run.dev(params)
    eval_seconds = time.perf_counter() - t0
    evaluations = 1 + sum(1 for s in range(1, config.steps + 1) if eval_due(config, s))  # + state 0
    step_seconds = statistics.median(times[1:])
    flops = step_flops(encoder, loop.batches)
    counts = loop.batches.row_counts if loop.batches.packed else (None,)
    # the steps of fewer rows take their FLOPs' share of the measured (widest) step's time, and
    # each row count but the measured one compiles once more
    step_share = config.steps
    if len(counts) > 1:
        rows = Counter(loop.batches.rows_of(s) for s in range(1, config.steps + 1))
        step_share = sum(k * step_flops(encoder, loop.batches, r) for r, k in rows.items()) / flops
    train_seconds = step_seconds * step_share + (len(counts) - 1) * max(times[0] - step_seconds, 0.0)
    peak, source = _peak_memory()
    return {
        **parameter_counts,
        "flops_per_step": flops,
        "packed_shape": (loop.batches.rows, loop.batches.width) if loop.batches.packed else None,
        "packed_rows": list(counts) if loop.batches.packed else None,
        "batch_size": config.batch_size,
        "steps": config.steps,
        "compile_seconds": times[0],
        "step_seconds": step_seconds,
        "eval_seconds": eval_seconds,
        "evaluations": evaluations,
        "total_seconds": train_seconds + evaluations * eval_seconds,
        "peak_memory_bytes": peak,
        "peak_memory_source": source,
        "device": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
        "precision": config.precision,
    }


def _packed(p: dict[str, Any]) -> str:
    rows, width = p["packed_shape"]
    fewer = [r for r in p.get("packed_rows") or () if r != rows]
    also = f" (or {', '.join(map(str, fewer))} rows where those hold the batch)" if fewer else ""
    return f"{rows} rows x {width} tokens a view{also}"


def format_plan(p: dict[str, Any]) -> str:
    """The plan as aligned lines (what ``gradlab train --plan`` prints)."""
    tflops = p["flops_per_step"] / p["step_seconds"] / 1e12 if p["step_seconds"] > 0 else float("nan")
    rows = [
        ("parameters", f"{p['parameters']:,} ({p['trainable_parameters']:,} trained)"),
        ("FLOPs per step", f"{p['flops_per_step']:.3e}  (3 x 2 views x forward matmul FLOPs)"),
        *([("packed batch", _packed(p))] if p.get("packed_shape") else []),
        ("device", p["device"]),
        ("precision", p["precision"] if p["precision"] == "float32" else
         f"{p['precision']} (forward and backward; float32 master weights, optimizer state and loss)"),
        ("step time", f"{p['step_seconds']:.4f} s  ({tflops:.3g} TFLOP/s; first step with compilation "
                      f"{p['compile_seconds']:.2f} s)"),
        ("peak memory", f"{p['peak_memory_bytes'] / 2**20:,.0f} MiB  ({p['peak_memory_source']})"),
        ("dev evaluation", f"{p['eval_seconds']:.2f} s x {p['evaluations']}"),
        ("total", f"{p['total_seconds']:.0f} s = {p['total_seconds'] / 3600:.2f} h for {p['steps']:,} steps "
                  f"of {p['batch_size']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
