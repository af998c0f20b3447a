"""The SimCSE recipe, the engine and the training loop on a GPU, beside the strongest PyTorch.

    python benchmarks/gpu.py --json benchmarks/results/gpu.json       # every row, about 4 minutes on an H200
    python benchmarks/gpu.py --rows gradlab_bf16 torch_compile_cudagraphs
    python benchmarks/gpu.py --after gpu.json --json gpu.json --rows engine train_loop  # a second call, same machine
    python benchmarks/gpu.py --report benchmarks/results/gpu.json  # measure nothing: the table and the goals

Everything large is made here, on the GPU machine: a BERT-base-shaped HF checkpoint with
random weights (seed 0; 12 layers, hidden 768, MiniLM's WordPiece vocabulary, which is
bert-base-uncased's; ``real.write_bert_base``) and a one-sentence-per-line corpus of STS-B
train sentences. Every row runs in its own process (its peak memory is that process's), in
the order of ``ROWS`` (gradlab bf16, then torch.compile with CUDA graphs: the comparison that
matters most comes first), inside one time budget (``--budget``): a row that would start past
it is reported as skipped, and the JSON is written after every row. Each row has a time cap,
multiplied by the host's factor (``host_factor``: how much slower than the reference H200's host
this machine compiled ``gradlab_bf16``'s first step; ``gpu_aot.py`` compiles the same step here
without a GPU, which tells a slow host from slow code).

* ``matmul``: an 8192³ bfloat16 product in JAX, median of 10: the bf16 rate the chip reaches.
* ``gradlab_bf16`` / ``gradlab_float32``: the step of ``gradlab train``'s loop for
  ``simcse_unsup_config`` (MLP over [CLS], 32 tokens, batch 64, τ 0.05, lr 3e-5; Gao et al.
  2021): both dropout views in one forward, median of 20 steps after the compiling one, timed
  as the torch rows are (from a batch on the device to the loss on the host: ``step_s``);
  also from a NumPy batch (``sync_numpy_s``), and pipelined (``pipelined_s``: 20 steps
  dispatched back to back, one wait at the end, as a training loop runs); peak memory from
  JAX's allocator after the timed steps, before the dev evaluation (``peak_bytes``; with it:
  ``peak_bytes_with_eval``), training the loaded weights themselves as the torch rows do; the
  allocator's counts after the compiling step and after the timed ones (``memory_first_step``,
  ``memory_steps``: in use, peak, largest allocation, allocations), which say whether the peak
  is the compilation's or the steps'; JAX's own account of the first step's compilation (``compile_log``).
  ``gradlab_bf16_rolled`` keeps the loop over the 12 layers a ``lax.scan``
  (``MiniLM.unroll=False``; on a GPU the default unrolls it); ``gradlab_bf16_batch512`` is not
  the recipe's batch: how much of the chip a larger one fills. Every gradlab row times the
  step of the loop, a ``ResidentStep`` (its batch, key and outputs in buffers of its own, in
  place from step to step: XLA re-records a CUDA graph whose recorded addresses changed), but
  ``gradlab_bf16_plain``: the plain jitted step, new buffers every call, the A/B of that. The
  resident step's synchronous calls are split on the host (``call_parts_ms``, held, and
  ``call_parts_ms_released``: medians of ``gradlab.real.step.CallTimes``): the batch's signature,
  the copies of batch and key into the step's buffers, the step's dispatch, the outputs' copy
  out, what a synchronous step waits for before its kernels can start.
  The resident step hands its outputs over in the host's pinned memory on a GPU;
  ``gradlab_bf16_device_copies`` copies them on the device instead, the A/B of that placement
  (the same program: its pipelined losses are compared with the default's).
  ``gradlab_bf16_grads_apart``: the optimizer's update reads the gradients behind an optimization
  barrier (``grads_apart``), so that Adam's updates are not fused with the gradient norm's
  reductions; its pipelined losses are compared with the default's too.
  ``gradlab_bf16_one_stage_sums``: the bias and LayerNorm gradients' column sums in one
  reduction each, as before the library's two stages on a GPU (``gradlab.real.bert_ops.COLUMN_SUM_BLOCK``
  None); its losses differ from the default's in the last bits (the sums' order), within
  bfloat16's rounding. ``gradlab_bf16_qkv_sliced``: the optimizer reads the Q, K and V gradients
  as slices of the fused product's, as before ``gradlab.real.bert.QKV_GRADIENTS_APART``; the same
  losses. ``gradlab_bf16_as_before``: both of these and JAX's ``erfc`` GELU in place of
  ``gradlab.real.bert_ops.gelu``, the step's kernels as the run of 2026-11-28 compiled them but
  for the layers' dropout keys, split once since (the same masks): the three changes' A/B in one
  row (its losses differ in the last bits). ``gradlab_bf16_batch512_as_before``: the same at batch
  512 (compiled by the GPU machines' JAX, the three changes move more bytes there).
  ``gradlab_bf16_stable`` copies the step's per-call inputs (the packed batch, the
  dropout keys) into the program's own buffers inside the program (``stable_inputs``), the
  experiment that came before ``ResidentStep``. ``gradlab_bf16_no_graphs`` is ``gradlab_bf16``
  under ``XLA_FLAGS=--xla_gpu_enable_command_buffer=`` (no CUDA graphs: every kernel launched
  from the host); ``gradlab_bf16_never_update`` is
  ``gradlab_bf16`` under ``XLA_FLAGS=--xla_gpu_command_buffer_update_mode=NEVER_UPDATE``
  (``XLA_ROWS``): the graphs recorded once, every buffer at a fixed virtual address, the
  temporaries too; ``gradlab_bf16_separate_temp`` under
  ``--xla_gpu_temp_buffer_use_separate_color=true``: the temporaries alone from an allocator of
  their own, at one address; ``train_loop_separate_temp``: ``train_loop`` under the same flag;
  ``gradlab_bf16_cublas`` under ``--xla_gpu_enable_triton_gemm=false``: every matrix product from
  cuBLAS (XLA's autotuner picks Triton's for most, timing each product alone; in the H200 trace
  the five largest Triton products take 15–24 µs a layer, the four cuBLAS ones 16–18).
  Each compares its 20 pipelined losses with the default's (``losses_pipelined``).
* ``torch_compile`` / ``torch_compile_cudagraphs`` / ``torch_compile_tf32_cudagraphs``: the
  same step as a careful PyTorch user writes it: transformers' ``BertModel`` of the same
  checkpoint with sdpa attention and the MLP, both views in one forward and the InfoNCE loss
  inside one ``torch.compile``d module (as SimCSE's model computes its loss in ``forward``),
  batches padded to 32 tokens (one shape), fused AdamW; bf16 autocast, in ``torch.compile``'s
  default mode and in ``mode="reduce-overhead"`` (CUDA graphs); float32 with TF32 matrix
  products in ``reduce-overhead`` mode; each in a process of its own. Median of 20 steps after
  8 warm-ups, each read on the host (``float(loss)``), then 20 pipelined steps (the losses
  summed on the device, one wait); ``torch.cuda.max_memory_allocated``. Needs torch and
  transformers (skipped without them).
* ``engine``: ``gradlab.simulate.gd_map`` of the full paper map (100 × 100 cells, 1,000
  batches of 128) for InfoNCE, ArcCon, MPT and MET in common mode (median of 20 after two
  warm-up maps; the copy to the host included), and InfoNCE and ArcCon in independent mode
  (median of 5); then 5 common maps of InfoNCE and of ArcCon under ``jax.profiler``
  (``engine.trace``: the device's busy time and span a map, its kernels, the host's events).
* ``train_loop``: ``gradlab train --recipe simcse-unsup --precision bf16 --steps 300`` in a
  process of its own, as a user runs it (STS-B dev at state 0 and every 250 steps, the
  ParadigmMonitor every 10 steps, the JAX cache on): steps per second between the first and
  the last step (from the log's ``elapsed``), the dev evaluations' seconds, the first step's
  seconds; then the same command again: the warm start's first step. The rows share one JAX
  cache (``GRADLAB_CACHE_DIR``), as a user's runs do, so this command finds the step that
  ``gradlab_bf16`` compiled (its configuration is this command's). The cache is a fresh folder
  of the run's unless ``GRADLAB_CACHE_DIR`` is set: set to an empty folder, it keeps the steps
  for ``gpu_profile.py`` run next on the same machine.

One results file may hold several calls on one machine (one call's 10 minutes do not hold
every row): ``--after`` keeps an earlier call's rows and host factor, and the file's ``calls``
records each call's command, seconds, host and rows, beside the checkout's commit
(``GRADLAB_COMMIT`` where the machine's copy is no git checkout) and the date.

FLOPs are the executed matrix products of a step (``gradlab.real.flops.transformer_step_flops``
on the shape each side runs: gradlab packs sentences into rows, torch pads them); "of peak" is
those FLOPs per second over the datasheet dense bf16 peak.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from real import cpu_model  # noqa: E402 - real.py's reading of /proc/cpuinfo (no JAX, no torch)

ROOT = HERE.parent
BATCH, MAX_LEN, TAU, LR, TIMED, TORCH_WARM, PIPELINED = 64, 32, 0.05, 3e-5, 20, 8, 20
LOOP_STEPS = 300
DATASHEET_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense, FLOP/s
ENGINE_LOSSES = ("infonce", "arccon", "mpt", "met")
#: Independent mode: cells side by side in one program, timed against the GPU's default (128).
ENGINE_GROUPS = (64, 256)
TRACED_MAPS = 5  # the engine row's maps under jax.profiler, InfoNCE's and ArcCon's
ENV_DIR = "GRADLAB_GPU_BENCH_DIR"
GRID_ENV = "GRADLAB_GPU_BENCH_GRID"  # the engine rows' grid side (100: the paper's); smaller for a trial
LOOP_ENV = "GRADLAB_GPU_BENCH_LOOP_STEPS"  # the train_loop row's steps (300); fewer for a trial


def setup(folder: str, tokenizer: str | None, layers: int | None = None) -> None:
    """The checkpoint and a 20,000-line corpus in ``folder``."""
    sys.path.insert(0, str(HERE))
    import real

    from gradlab.real.data import load_stsb

    if tokenizer is None:
        import zipfile

        from gradlab.real.hf import model_zip_path

        with zipfile.ZipFile(model_zip_path()) as zf:
            tok = json.loads(zf.read("tokenizer.json"))
    else:
        tok = json.loads(Path(tokenizer).read_text())
    ckpt = Path(folder, "bert-base")
    ckpt.mkdir(parents=True, exist_ok=True)
    real.write_bert_base(str(ckpt), tok, layers)
    p = load_stsb("train")
    sentences = list(dict.fromkeys(p.sentence1 + p.sentence2))
    Path(folder, "corpus.txt").write_text("\n".join(sentences[i % len(sentences)] for i in range(20_000)) + "\n")


def bench_paths() -> tuple[str, str]:
    folder = os.environ[ENV_DIR]
    return os.path.join(folder, "bert-base"), os.path.join(folder, "corpus.txt")


def _mean_tokens(corpus: str, ckpt: str) -> float:
    """Mean tokens per sentence after SimCSE's 32-token truncation ([CLS] and [SEP] counted)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
    lines = Path(corpus).read_text().splitlines()[: 50 * BATCH]
    return statistics.fmean(min(len(e.ids), MAX_LEN) for e in tok.encode_batch(lines))


# --------------------------------------------------------------------------- gradlab rows


def matmul() -> dict:
    import jax
    import jax.numpy as jnp

    n = 8192
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    f = jax.jit(jnp.matmul)
    f(a, b).block_until_ready()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        f(a, b).block_until_ready()
        times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times), "flops": 2 * n**3, "device": jax.devices()[0].device_kind}


@contextlib.contextmanager
def compile_log():
    """JAX's own account of each compilation inside (``jax.log_compiles``): a list of
    ``[phase, seconds]`` ("tracing + transforming step for pjit", "XLA compilation of
    jit(step)", ...), where a first step's seconds go on a host that compiles slowly."""
    import logging

    import jax

    phases: list[list] = []

    class Phases(logging.Handler):
        def emit(self, record):
            m = re.match(r"Finished (.+?) in ([0-9.]+) sec", record.getMessage())
            if m:
                phases.append([m[1], round(float(m[2]), 3)])

    handler, logger = Phases(), logging.getLogger("jax")
    logger.addHandler(handler)
    logs = getattr(jax, "log_compiles", None)  # a JAX without it leaves the account empty, the row runs
    try:
        with logs(True) if logs is not None else contextlib.nullcontext():
            yield phases
    finally:
        logger.removeHandler(handler)


#: What JAX's allocator reports of the device's memory (``Device.memory_stats``; a CPU reports none).
MEMORY_KEYS = ("bytes_in_use", "peak_bytes_in_use", "largest_alloc_size", "num_allocs", "bytes_limit")


def device_memory() -> dict:
    """:data:`MEMORY_KEYS` of the first device's ``memory_stats`` now (empty on a CPU)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return {k: stats[k] for k in MEMORY_KEYS if k in stats}


def run_batch(loop, k: int):
    """Batch ``k`` of the run, its batches in turn (a trial may plan fewer steps than are timed)."""
    return loop.batch((k - 1) % loop.batches.order.shape[0] + 1)


def device_steps(loop, state: tuple, first: int, release: bool, count: int = TIMED) -> tuple[tuple, tuple]:
    """``count`` synchronous steps of ``loop`` from ``state`` (params, opt_state), batches ``first``
    on, each on the device before its clock starts: ((seconds to the loss, to the call's return
    and the last step's outputs dropped, to the call's return, the call's parts), the state after).
    The call's parts: the medians of a ``ResidentStep``'s ``CallTimes`` in ms (the host's time
    in each part of its call), or None for another step.

    ``release``: nothing of a step is kept past it but the state (as the torch rows keep only
    their model), so the next step's batch, key and outputs can take the same places in memory,
    which a CUDA graph that records addresses need not update; else each step's batch is made,
    and the step dispatched, while the last one's are held."""
    import jax

    params, opt_state = state
    steps_s, dispatch_s, call_s = [], [], []
    clocked = hasattr(loop.step_fn, "clock")
    if clocked:
        loop.step_fn.clock = []
    for k in range(first, first + count):
        batch, key = run_batch(loop, k), loop.key(k)
        jax.block_until_ready((batch, key))
        t0 = time.perf_counter()
        out = loop.step_fn(params, opt_state, loop.frozen, batch, key)
        call_s.append(time.perf_counter() - t0)
        params, opt_state, aux = out  # held: the last step's outputs are dropped here
        del out
        dispatch_s.append(time.perf_counter() - t0)
        float(aux["loss"])
        steps_s.append(time.perf_counter() - t0)
        if release:
            del aux, batch, key
    parts = None
    if clocked:
        clock, loop.step_fn.clock = loop.step_fn.clock, None
        parts = {name: round(1e3 * statistics.median(getattr(c, name) for c in clock), 3) for name in clock[0]._fields}
    return (steps_s, dispatch_s, call_s, parts), (params, opt_state)


def step_timings(loop, params, opt_state) -> tuple[dict, tuple]:
    """A jitted step of ``loop`` timed five ways after the compiling one (median of TIMED each):

    ``step_s``: from a batch already on the device and a key made beforehand to the loss on
    the host (what the torch rows time: their batches are on the GPU before the clock starts);
    ``sync_numpy_s``: the same with the batch handed over as NumPy and the key made inside the
    timer (``gradlab.real.plan``'s protocol); ``dispatch_s``: until the jitted call returns and
    the last step's outputs are dropped, the device still working (``call_s``: until it returns);
    ``step_s_released``: as ``step_s``, each step's batch, key and outputs
    released before the next batch is made; ``pipelined_s``: PIPELINED steps dispatched back to
    back with one wait at the end, per step (a training loop that reads its losses later).
    Returns the numbers and the updated ``(params, opt_state)``.
    """
    import jax

    batch_of = functools.partial(run_batch, loop)
    t0 = time.perf_counter()
    with compile_log() as phases:
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch_of(1), loop.key(1))
        jax.block_until_ready(aux["loss"])
    # the peak so far is the compiling step's (its autotuning included), against the timed steps' after
    out = {"first_s": time.perf_counter() - t0, "compile_log": phases, "memory_first_step": device_memory()}
    sync = []
    for k in range(2, TIMED + 2):
        batch = jax.device_get(batch_of(k))
        t0 = time.perf_counter()
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch, loop.key(k))
        float(aux["loss"])
        sync.append(time.perf_counter() - t0)
    del batch, aux

    (sync_dev, dispatch, call, call_parts), (params, opt_state) = device_steps(loop, (params, opt_state), TIMED + 2,
                                                                                release=False)
    (released, released_dispatch, _, released_parts), (params, opt_state) = device_steps(
        loop, (params, opt_state), 2 * TIMED + 2, release=True)
    staged = [(batch_of(k), loop.key(k)) for k in range(3 * TIMED + 2, 3 * TIMED + 2 + PIPELINED)]
    jax.block_until_ready(staged)
    t0 = time.perf_counter()
    losses = []
    for batch, key in staged:
        params, opt_state, aux = loop.step_fn(params, opt_state, loop.frozen, batch, key)
        losses.append(aux["loss"])
    jax.block_until_ready(losses)
    pipelined_s = (time.perf_counter() - t0) / PIPELINED
    out.update(step_s=statistics.median(sync_dev), sync_numpy_s=statistics.median(sync),
               # the unrolled step has alternated between a fast and a slow synchronous step:
               # the medians of the odd and the even steps say whether it still does
               step_s_odd_even=[statistics.median(sync_dev[0::2]), statistics.median(sync_dev[1::2])],
               step_s_released=statistics.median(released), dispatch_s_released=statistics.median(released_dispatch),
               step_s_released_odd_even=[statistics.median(released[0::2]), statistics.median(released[1::2])],
               dispatch_s=statistics.median(dispatch), pipelined_s=pipelined_s,
               # held: until the call returns, without dropping the last step's outputs (on a CPU,
               # dropping them waits while the step's threads map their temporaries)
               call_s=statistics.median(call),
               # the resident step's call in parts (``CallTimes``, ms): what a synchronous step waits
               # for on the host before the device can start
               call_parts_ms=call_parts, call_parts_ms_released=released_parts,
               times_ms=[round(1e3 * t, 2) for t in sync_dev], dispatch_ms=[round(1e3 * t, 2) for t in dispatch],
               # the same steps from the same state in every row of one recipe: a row that
               # changes how XLA runs the step (``XLA_ROWS``) is compared with the default's
               losses_pipelined=[float(x) for x in losses])
    return out, (params, opt_state)


def gradlab_loop(precision: str = "bf16", batch: int = BATCH, encoder=None):
    """The recipe's run on this folder's checkpoint and corpus (``simcse_unsup_config``, the
    ``train_loop`` row's configuration, so that its command finds these programs compiled),
    its step loop, the loaded parameters and a fresh optimizer state."""
    import gradlab
    from gradlab.real import simcse_unsup_config
    from gradlab.real.loop import make_loop
    from gradlab.real.recipe import simcse_unsup_encoder
    from gradlab.real.run import resolve_run

    gradlab.enable_cache()  # GRADLAB_CACHE_DIR: one cache for every row of this run, as for a user's runs
    ckpt, corpus = bench_paths()
    cfg = simcse_unsup_config(ckpt, corpus, steps=_loop_steps(), precision=precision, eval_test=False,
                              batch_size=batch)
    run = resolve_run(cfg, encoder=encoder or simcse_unsup_encoder(ckpt, seed=0))
    loop = make_loop(cfg, run.encoder, run.loss, run.token_ids)
    # the loaded weights themselves, which the step donates (they are not read again), as the torch
    # rows train their model's own: the peak is the training state's and the step's; gradlab train
    # trains a copy and keeps the loaded weights for its records, one f32 copy of BERT-base more
    params = run.encoder.params
    return run, loop, params, loop.optimizer_state(params)


def stable_inputs(view):
    """``view`` whose packed forward first copies its per-call inputs (the packed batch, the
    dropout keys) into buffers of the program's own, behind an optimization barrier: the layers
    then read buffers that XLA allocates at the same place every call, not the call's arguments,
    so a command buffer (CUDA graph) of the layers' kernels records no address that changes from
    step to step. The same numbers (a copy)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    class Stable(type(view)):
        def forward_packed(self, params, frozen, packed, key=None):
            zero = jax.lax.optimization_barrier(jnp.zeros((), jnp.int32))  # a zero XLA cannot fold away
            packed = type(packed)(*(a + zero.astype(a.dtype) for a in packed))
            if key is None:
                return super().forward_packed(params, frozen, jax.lax.optimization_barrier(packed), key)
            impl = jax.random.key_impl(key)
            packed, data = jax.lax.optimization_barrier((packed, jax.random.key_data(key) + zero.astype(jnp.uint32)))
            return super().forward_packed(params, frozen, packed, jax.random.wrap_key_data(data, impl=impl))

    return Stable(**{f.name: getattr(view, f.name) for f in dataclasses.fields(view)})


class GradlabRow(NamedTuple):
    """A gradlab row's step (``GRADLAB_ROWS``; ``gpu_aot.py`` compiles the same).

    Attributes:
      precision, batch: the run's.
      unroll: the layer loop unrolled (None: the backend's default).
      stable: the per-call inputs copied first (``stable_inputs``).
      plain: the plain jitted step instead of the loop's ``ResidentStep``.
      device_copies: the resident step's outputs copied on the device, not to the host's pinned memory.
      grads_apart: the optimizer's update reads the gradients behind an optimization barrier
        (``grads_apart``), so that Adam's fused updates no longer carry the gradient norm's
        reductions; the same numbers.
      column_sum_block: ``gradlab.real.bert_ops.COLUMN_SUM_BLOCK``, the bias and LayerNorm gradients'
        column sums in two stages over blocks of this many rows (None: one reduction; ``"library"``:
        the library's default).
      qkv_gradients_apart: ``gradlab.real.bert.QKV_GRADIENTS_APART`` (``"library"``: its default).
      gelu: ``"erfc"``: the GELU as ``jax.nn.gelu(approximate=False)`` writes it, in place of
        ``gradlab.real.bert_ops.gelu`` (``"library"``).
    """

    precision: str
    batch: int
    unroll: bool | None = None
    stable: bool = False
    plain: bool = False
    device_copies: bool = False
    grads_apart: bool = False
    column_sum_block: int | str | None = "library"
    qkv_gradients_apart: bool | str = "library"
    gelu: str = "library"


GRADLAB_ROWS = {
    "gradlab_bf16": GradlabRow("bf16", BATCH),
    "gradlab_bf16_plain": GradlabRow("bf16", BATCH, plain=True),
    "gradlab_bf16_device_copies": GradlabRow("bf16", BATCH, device_copies=True),
    "gradlab_bf16_grads_apart": GradlabRow("bf16", BATCH, grads_apart=True),
    "gradlab_bf16_one_stage_sums": GradlabRow("bf16", BATCH, column_sum_block=None),
    "gradlab_bf16_qkv_sliced": GradlabRow("bf16", BATCH, qkv_gradients_apart=False),
    "gradlab_bf16_as_before": GradlabRow("bf16", BATCH, column_sum_block=None, qkv_gradients_apart=False,
                                         gelu="erfc"),
    "gradlab_bf16_stable": GradlabRow("bf16", BATCH, stable=True),
    "gradlab_float32": GradlabRow("float32", BATCH),
    "gradlab_bf16_batch512": GradlabRow("bf16", 512),
    "gradlab_bf16_batch512_as_before": GradlabRow("bf16", 512, column_sum_block=None, qkv_gradients_apart=False,
                                                  gelu="erfc"),
    "gradlab_bf16_rolled": GradlabRow("bf16", BATCH, unroll=False),
}


def grads_apart(optimizer):
    """``optimizer`` whose ``update`` takes the gradients through ``jax.lax.optimization_barrier``.

    Compiled for an H100 (``gpu_aot.py``), the step fuses each parameter stack's Adam update with
    the gradient norm's partial sums over it into one reduction kernel; the one over the Q, K and V
    stacks (their 12 layers' gradients sliced out of the fused QKV product's) ran at about a
    quarter of the memory bandwidth the other updates reach on an H200 (520 µs,
    ``results/gpu_profile_placements.json``). Behind the barrier the updates are loop fusions of
    their own and the norm's sums read the gradients apart (0.74 GB more traffic a step)."""
    import jax
    import optax

    def update(grads, state, params=None, **extra):
        return optimizer.update(jax.lax.optimization_barrier(grads), state, params, **extra)

    return optax.GradientTransformationExtraArgs(optimizer.init, update)


_LIBRARY: dict = {}


@functools.cache
def erfc_gelu():
    """The exact GELU as ``jax.nn.gelu(approximate=False)`` writes it (with ``erfc``): one object,
    so that setting it twice changes nothing."""
    import jax

    return functools.partial(jax.nn.gelu, approximate=False)


def bert_choice_module(name: str):
    """The module that holds the BERT choice ``name``: ``gradlab.real.bert_ops`` (``COLUMN_SUM_BLOCK``,
    ``gelu``) or ``gradlab.real.bert`` (``QKV_GRADIENTS_APART``)."""
    from gradlab.real import bert, bert_ops

    return bert if name == "QKV_GRADIENTS_APART" else bert_ops


def set_bert_choice(name: str, value) -> None:
    """The BERT choice ``name`` (``COLUMN_SUM_BLOCK``, ``QKV_GRADIENTS_APART``, ``gelu``) = ``value``
    in its module (:func:`bert_choice_module`; ``"library"``: the value it had when first set
    here), JAX's caches cleared if it changes (it is read when a forward is traced: no trace made
    with the other value may serve)."""
    import jax

    module = bert_choice_module(name)
    library = _LIBRARY.setdefault(name, getattr(module, name))
    value = library if value == "library" else value
    if getattr(module, name) != value:
        setattr(module, name, value)
        jax.clear_caches()


def rebuilt_step(run, loop, precision: str, *, plain: bool = False, apart: bool = False):
    """``loop`` with its step made again: the plain jitted step (``plain``: as the loop ran it before
    ``ResidentStep``, new buffers every call) and/or the optimizer's update behind a barrier
    (``apart``: :func:`grads_apart`)."""
    import dataclasses

    from gradlab.real.step import make_train_step

    optimizer = grads_apart(loop.optimizer) if apart else loop.optimizer
    step = make_train_step(run.encoder, run.loss, optimizer, packed=loop.batches.packed, precision=precision,
                           resident=not plain)
    return dataclasses.replace(loop, step_fn=step)


def gradlab_row_loop(name: str):
    """``gradlab_loop`` of the gradlab row ``name`` (``GRADLAB_ROWS``)."""
    import dataclasses

    from gradlab.real.recipe import simcse_unsup_encoder
    from gradlab.real.step import copy_on_device

    row = GRADLAB_ROWS[name]
    set_bert_choice("COLUMN_SUM_BLOCK", row.column_sum_block)
    set_bert_choice("QKV_GRADIENTS_APART", row.qkv_gradients_apart)
    set_bert_choice("gelu", erfc_gelu() if row.gelu == "erfc" else "library")
    enc = simcse_unsup_encoder(bench_paths()[0], seed=0)
    if row.unroll is not None:
        enc = dataclasses.replace(enc, train_view=dataclasses.replace(enc.train_view, unroll=row.unroll))
    if row.stable:
        enc = dataclasses.replace(enc, train_view=stable_inputs(enc.train_view))
    run, loop, params, opt_state = gradlab_loop(row.precision, row.batch, enc)
    if row.plain or row.grads_apart:
        loop = rebuilt_step(run, loop, row.precision, plain=row.plain, apart=row.grads_apart)
    if row.device_copies:  # the outputs handed over as before: device copies, which a held step's temporaries move around
        loop.step_fn.copy_out = copy_on_device
    return run, loop, params, opt_state


def _gradlab(name: str) -> dict:
    import jax

    from gradlab.real.plan import step_flops

    run, loop, params, opt_state = gradlab_row_loop(name)
    out, (params, opt_state) = step_timings(loop, params, opt_state)
    memory = device_memory()
    step_peak = memory.get("peak_bytes_in_use")  # the steps' alone, as torch's
    run.dev(params)  # compiles the evaluation forward
    t0 = time.perf_counter()
    run.dev(params)
    dev_eval = time.perf_counter() - t0
    stats = jax.devices()[0].memory_stats() or {}
    return {**out, "flops": step_flops(run.encoder, loop.batches), "peak_bytes": step_peak, "memory_steps": memory,
            "peak_bytes_with_eval": stats.get("peak_bytes_in_use"),
            "device": f"{jax.device_count()} x {jax.devices()[0].device_kind}", "sentences": 2 * GRADLAB_ROWS[name].batch,
            "dev_eval_s": dev_eval, "rows_x_width": [loop.batches.rows, loop.batches.width]}


def _loop_steps() -> int:
    return int(os.environ.get(LOOP_ENV, LOOP_STEPS))


def gradlab_bf16() -> dict:
    return _gradlab("gradlab_bf16")


def gradlab_float32() -> dict:
    return _gradlab("gradlab_float32")


def gradlab_bf16_rolled() -> dict:
    """The loop over the 12 layers a ``lax.scan`` (on a GPU the default unrolls it)."""
    return _gradlab("gradlab_bf16_rolled")


def gradlab_bf16_plain() -> dict:
    """``gradlab_bf16`` with the plain jitted step (``make_train_step(resident=False)``) instead of
    the loop's ``ResidentStep``: what keeping the step's buffers in place changes."""
    return _gradlab("gradlab_bf16_plain")


def gradlab_bf16_device_copies() -> dict:
    """``gradlab_bf16`` with the resident step's outputs copied on the device, not to the host's
    pinned memory: the A/B of that placement."""
    return _gradlab("gradlab_bf16_device_copies")


def gradlab_bf16_grads_apart() -> dict:
    """``gradlab_bf16`` with the optimizer's update behind a barrier (``grads_apart``): whether the
    Q, K, V stacks' update, fused with the gradient norm's sums, is where the step's device time goes."""
    return _gradlab("gradlab_bf16_grads_apart")


def gradlab_bf16_one_stage_sums() -> dict:
    """``gradlab_bf16`` with the bias and LayerNorm gradients' column sums in one reduction each
    (``gradlab.real.bert_ops.COLUMN_SUM_BLOCK`` None, the dense biases' autodiff's): the A/B of the
    library's two stages on a GPU, whose 88 one-kernel sums over the batch's tokens had too few
    blocks for their 768 to 3,072 outputs."""
    return _gradlab("gradlab_bf16_one_stage_sums")


def gradlab_bf16_qkv_sliced() -> dict:
    """``gradlab_bf16`` with the Q, K and V weights' gradients read by the optimizer as slices of
    the fused product's (``gradlab.real.bert.QKV_GRADIENTS_APART`` False): the A/B of the
    library's copy of them, made for one update kernel that ran at a quarter of the bandwidth."""
    return _gradlab("gradlab_bf16_qkv_sliced")


def gradlab_bf16_as_before() -> dict:
    """``gradlab_bf16`` with the three kernel changes made for the stretch undone at once: JAX's
    ``erfc`` GELU, the column sums in one reduction each, the Q, K, V gradients sliced in place
    (the step's kernels as ``results/gpu.json``'s run of 2026-11-28 compiled them, but for the
    layers' dropout keys, split once since)."""
    return _gradlab("gradlab_bf16_as_before")


def gradlab_bf16_stable() -> dict:
    """``gradlab_bf16`` with the step's per-call inputs copied into the program's own buffers
    (``stable_inputs``): whether new input addresses make XLA re-record its CUDA graphs every step."""
    return _gradlab("gradlab_bf16_stable")


def gradlab_bf16_batch512() -> dict:
    """Not the recipe's batch: how much of the chip a larger batch fills."""
    return _gradlab("gradlab_bf16_batch512")


def gradlab_bf16_batch512_as_before() -> dict:
    """``gradlab_bf16_batch512`` with the three kernel changes undone (``gradlab_bf16_as_before``'s
    knobs): compiled for an H100 by the GPU machines' JAX they take 79 kernels off that step and
    add 0.49 GB (``results/gpu_aot_jax0112.json``); whether they pay at that batch too."""
    return _gradlab("gradlab_bf16_batch512_as_before")


def _map_ms(loss: str, protocol, repeats: int) -> dict:
    """``gd_map(loss, protocol)``: the first call's seconds, then the median of ``repeats`` after one more."""
    from gradlab.simulate import gd_map

    t0 = time.perf_counter()
    gd_map(loss, protocol)
    first = time.perf_counter() - t0
    gd_map(loss, protocol)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gd_map(loss, protocol)
        times.append(time.perf_counter() - t0)
    return {"ms": 1e3 * statistics.median(times), "ms_all": [round(1e3 * t, 3) for t in times], "first_s": first}


def engine() -> dict:
    """Full paper maps (100 × 100 cells, 1,000 batches of 128): ms per map, host copy included.
    ``infonce_independent_whole_draws``: the independent map with each cell's normals drawn whole,
    as a CPU draws them, against the GPU's pieces (``infonce_independent``); and
    ``infonce_independent_group<G>``: G cells side by side in a program instead of the GPU's
    default. The A/Bs of those choices on one machine (they instrument
    ``gradlab.simulate._engine``'s tables of choices)."""
    import jax

    from gradlab.simulate import Protocol, _engine

    grid = int(os.environ.get(GRID_ENV, "100"))
    out = {"device": jax.devices()[0].device_kind, "grid": grid}
    common, independent = (Protocol(grid=grid, batches=1000, batch_size=128, mode=m) for m in ("common", "independent"))
    for loss in ENGINE_LOSSES:
        out[loss] = _map_ms(loss, common, 20)
    for loss in ("infonce", "arccon"):
        out[f"{loss}_independent"] = _map_ms(loss, independent, 5)
    for name, table, choice in [("whole_draws", _engine._DRAW_PIECES, {})] + [
            (f"group{g}", _engine._CELL_GROUP, {"gpu": g}) for g in ENGINE_GROUPS]:
        saved = dict(table)
        table.clear()
        table.update(choice)
        try:
            out[f"infonce_independent_{name}"] = _map_ms("infonce", independent, 5)
        finally:
            table.clear()
            table.update(saved)
    out["trace"] = {loss: _map_trace(loss, common, TRACED_MAPS) for loss in ("infonce", "arccon")}
    return out


def _map_trace(loss: str, protocol, maps: int) -> dict:
    """``jax.profiler`` over ``maps`` compiled maps: per map, the device's busy time and span, its
    kernels and the host's events (``gpu_profile.summarize``): whether a map's milliseconds are
    the device's work or the host's."""
    import gzip

    import gpu_profile  # imports this module: imported here, when both are loaded
    import jax

    from gradlab.simulate import gd_map

    gd_map(loss, protocol)
    folder = Path(os.environ.get(ENV_DIR) or tempfile.mkdtemp(prefix="gradlab-gpu-")) / f"trace-{loss}"
    t0 = time.perf_counter()
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        for _ in range(maps):
            gd_map(loss, protocol)
    wall = time.perf_counter() - t0
    found = sorted(folder.rglob("perfetto_trace.json.gz"))
    if not found:
        return {"error": "no perfetto_trace.json.gz written"}
    summary = gpu_profile.summarize(json.loads(gzip.open(found[-1]).read()), maps, top=12)
    return summary | {"traced_wall_ms_per_map": 1e3 * wall / maps}


def _log_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def train_loop() -> dict:
    """``gradlab train`` end to end, as a user runs it, then a warm start of the same command."""
    ckpt, corpus = bench_paths()
    base = ["train", "--encoder", ckpt, "--recipe", "simcse-unsup", "--corpus", corpus, "--precision", "bf16",
            "--no-plot", "--no-test"]
    folder = os.environ[ENV_DIR]
    out = {}
    for name in ("cold", "warm"):  # the same command twice: the second finds its programs in the cache
        steps = _loop_steps()
        run = os.path.join(folder, f"train-{name}")
        t0 = time.perf_counter()
        _gradlab_cli(*base, "--steps", str(steps), "--out", run)
        wall = time.perf_counter() - t0
        recs = _log_records(Path(run, "train_log.jsonl"))
        steps_ = [r for r in recs if r["event"] == "step"]
        evals = [r for r in recs if r["event"] == "eval"]
        out[name] = {"wall_s": wall, "first_step_s": steps_[0]["seconds"], "steps": len(steps_),
                     "dev_eval_s": [round(r.get("seconds", float("nan")), 4) for r in evals]}
        if name == "cold":
            span = steps_[-1]["elapsed"] - steps_[0]["elapsed"]
            out["steps_per_s"] = (len(steps_) - 1) / span
            out["dev_eval_s"] = statistics.median(r["seconds"] for r in evals[1:]) if len(evals) > 1 else None
            summary = json.loads(Path(run, "train.json").read_text())
            out["monitor"] = summary.get("monitor")
            out["evaluations_in_span"] = sum(1 for r in evals if 1 < r["step"] <= steps_[-1]["step"])
    out["warm_compile_s"] = out["warm"]["first_step_s"]
    return out


# --------------------------------------------------------------------------- torch.compile rows


def torch_rows(specs: list[tuple[str, str | None, bool]]) -> dict:
    """One process, several compiled variants (name, torch.compile mode, bf16): each row's numbers."""
    import torch
    import torch.nn.functional as F
    from transformers import BertModel, PreTrainedTokenizerFast

    from gradlab.real.flops import transformer_step_flops

    ckpt, corpus = bench_paths()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(ckpt, "tokenizer.json"), pad_token="[PAD]")
    lines = Path(corpus).read_text().splitlines()
    n_batches = TIMED + TORCH_WARM
    batches = []
    for i in range(n_batches):
        f = tok(lines[i * BATCH:(i + 1) * BATCH], padding="max_length", truncation=True, max_length=MAX_LEN,
                return_tensors="pt")
        batches.append((f["input_ids"].to(dev), f["attention_mask"].to(dev)))
    labels = torch.arange(BATCH, device=dev)

    class SimCSE(torch.nn.Module):
        """BERT, the MLP over [CLS] and InfoNCE of the two views, one forward (SimCSE's cl_forward)."""

        def __init__(self):
            super().__init__()
            self.bert = BertModel.from_pretrained(ckpt, add_pooling_layer=False, attn_implementation="sdpa")
            self.mlp = torch.nn.Sequential(torch.nn.Linear(768, 768), torch.nn.Tanh())

        def forward(self, ids, mask, bf16: bool):
            ids, mask = ids.repeat(2, 1), mask.repeat(2, 1)  # both dropout views in one forward
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                h = self.mlp(self.bert(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
            z1, z2 = F.normalize(h[:BATCH].float(), dim=-1), F.normalize(h[BATCH:].float(), dim=-1)
            return F.cross_entropy(z1 @ z2.T / TAU, labels)

    out = {}
    for name, mode, bf16 in specs:
        try:
            torch.manual_seed(0)
            tf32 = not bf16
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
            model = SimCSE().to(dev).train()
            opt = torch.optim.AdamW(model.parameters(), lr=LR, fused=dev.type == "cuda")
            compiled = torch.compile(model, mode=mode)
            graphs = mode == "reduce-overhead"
            step = functools.partial(_torch_step, compiled, opt, bf16=bf16, graphs=graphs)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times = []
            t_first = time.perf_counter()
            for i, (ids, mask) in enumerate(batches):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                float(step(ids, mask))
                if i == 0:
                    first = time.perf_counter() - t_first
                if i >= TORCH_WARM:
                    times.append(time.perf_counter() - t0)
            # then PIPELINED steps with one wait at the end (a loop that reads its losses later)
            total = torch.zeros((), device=dev)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(PIPELINED):
                total += step(*batches[i % len(batches)]).detach()
            float(total)
            pipelined = (time.perf_counter() - t0) / PIPELINED
            cfg = model.bert.config
            out[name] = {"step_s": statistics.median(times), "times_ms": [round(1e3 * t, 2) for t in times],
                         "pipelined_s": pipelined,
                         "first_s": first, "flops": transformer_step_flops(cfg, BATCH, MAX_LEN, BATCH, pooler=True),
                         "peak_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
                         "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
                         "sentences": 2 * BATCH, "torch": torch.__version__}
            del model, opt, compiled
            torch._dynamo.reset()
        except Exception as exc:  # noqa: BLE001 - one failed variant keeps the others
            out[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    return out


def _torch_step(compiled, opt, ids, mask, *, bf16: bool, graphs: bool):
    """One training step of the compiled SimCSE module: forward with the loss, backward, AdamW."""
    import torch

    if graphs:
        torch.compiler.cudagraph_mark_step_begin()
    loss = compiled(ids, mask, bf16)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def torch_compile_cudagraphs() -> dict:
    """``mode="reduce-overhead"`` (CUDA graphs), bf16 autocast: the strongest PyTorch step."""
    return torch_rows([("torch_compile_cudagraphs", "reduce-overhead", True)])["torch_compile_cudagraphs"]


def torch_compile() -> dict:
    """torch.compile's default mode, bf16 autocast."""
    return torch_rows([("torch_compile", None, True)])["torch_compile"]


def torch_compile_tf32_cudagraphs() -> dict:
    """float32 with TF32 matrix products (what XLA's default precision does for gradlab's float32)."""
    return torch_rows([("torch_compile_tf32_cudagraphs", "reduce-overhead", False)])["torch_compile_tf32_cudagraphs"]


# --------------------------------------------------------------------------- the driver


def _gradlab_cli(*args: str) -> subprocess.CompletedProcess:
    """``gradlab ARGS`` in a child process (this checkout's CLI, installed or not); its last error line raised."""
    code = "import sys; from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=cli_env())
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return proc


def cli_env() -> dict:
    """The environment a child needs to import ``gradlab_cli`` from this checkout, installed or not."""
    env = dict(os.environ)
    try:
        import gradlab_cli  # noqa: F401
    except ImportError:
        link_dir = Path(tempfile.mkdtemp(prefix="gradlab-cli-"))
        (link_dir / "gradlab_cli").symlink_to(ROOT / "cli")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(link_dir), str(ROOT), env.get("PYTHONPATH")]))
    return env


#: name -> (worker, whether it needs torch, the most seconds it may take on a host that compiles as
#: fast as the reference H200's; later rows' caps are scaled by the host's factor, ``host_factor``).
#: Run in this order: the comparison the issue turns on first, each torch row in a process of its own.
ROWS = {
    "gradlab_bf16": (gradlab_bf16, False, 240),
    "torch_compile_cudagraphs": (torch_compile_cudagraphs, True, 120),
    "gradlab_bf16_plain": (gradlab_bf16_plain, False, 120),
    "gradlab_bf16_device_copies": (gradlab_bf16_device_copies, False, 120),
    "gradlab_bf16_grads_apart": (gradlab_bf16_grads_apart, False, 120),
    "gradlab_bf16_one_stage_sums": (gradlab_bf16_one_stage_sums, False, 120),
    "gradlab_bf16_qkv_sliced": (gradlab_bf16_qkv_sliced, False, 120),
    "gradlab_bf16_as_before": (gradlab_bf16_as_before, False, 120),
    "torch_compile": (torch_compile, True, 120),
    "gradlab_float32": (gradlab_float32, False, 120),
    "torch_compile_tf32_cudagraphs": (torch_compile_tf32_cudagraphs, True, 120),
    "train_loop": (train_loop, False, 150),
    "engine": (engine, False, 120),
    "gradlab_bf16_batch512": (gradlab_bf16_batch512, False, 120),
    "gradlab_bf16_batch512_as_before": (gradlab_bf16_batch512_as_before, False, 120),
    "matmul": (matmul, False, 30),
    "gradlab_bf16_rolled": (gradlab_bf16_rolled, False, 120),
    "gradlab_bf16_stable": (gradlab_bf16_stable, False, 120),
    "gradlab_bf16_no_graphs": (gradlab_bf16, False, 120),
    "gradlab_bf16_never_update": (gradlab_bf16, False, 120),
    "gradlab_bf16_separate_temp": (gradlab_bf16, False, 120),
    "train_loop_separate_temp": (train_loop, False, 150),
    "gradlab_bf16_cublas": (gradlab_bf16, False, 120),
}

#: Rows that run another row's worker (a process of their own) under XLA flags added to
#: ``XLA_FLAGS``, each compiling its own step: the remedies XLA offers if a held step's host time
#: is its command buffers' (CUDA graphs') updates for buffers that moved, the temporaries among
#: them, which ``ResidentStep`` cannot hold in place. No command buffers at all: every kernel
#: launched from the host (a profile measured 9.28 ms held, 7.58 pipelined on an H200,
#: ``results/gpu_profile_placements.json``). ``NEVER_UPDATE``: graphs recorded once,
#: every buffer at a fixed virtual address (XLA's VMM allocator). The separate color: the
#: temporaries alone from an allocator of their own, at one address (a flag JAX 0.10.2's CUDA
#: plugin knows, read from its strings); ``train_loop`` inherits it in its command.
SEPARATE_TEMP = "--xla_gpu_temp_buffer_use_separate_color=true"
XLA_ROWS = {"gradlab_bf16_no_graphs": ("gradlab_bf16", "--xla_gpu_enable_command_buffer="),
            "gradlab_bf16_never_update": ("gradlab_bf16", "--xla_gpu_command_buffer_update_mode=NEVER_UPDATE"),
            "gradlab_bf16_separate_temp": ("gradlab_bf16", SEPARATE_TEMP),
            "train_loop_separate_temp": ("train_loop", SEPARATE_TEMP),
            "gradlab_bf16_cublas": ("gradlab_bf16", "--xla_gpu_enable_triton_gemm=false")}

#: ``gradlab_bf16``'s first step (compiling included) on the H200 of ``results/gpu_unrolled.json``;
#: ``gpu_aot.py`` compiles that commit's step and today's in about the same time on one CPU.
REFERENCE_FIRST_S = 38.0


def host_factor(first_row: dict, cap: float) -> float:
    """How many times slower than the reference this machine compiles, from the first row: its
    first step over ``REFERENCE_FIRST_S`` (at least 1); a first row that ran out of time gives
    its cap over the reference, a lower bound. A second H200 took 162 s, over code that
    compiled 4.3 times longer there and 4.1 times longer on one CPU (``results/gpu_2026-11-27.json``,
    ``gpu_aot.py``): the factor scales the caps for a slower host and for slower code alike."""
    if "first_s" in first_row:
        return max(1.0, first_row["first_s"] / REFERENCE_FIRST_S)
    return max(1.0, cap / REFERENCE_FIRST_S) if "timed out" in str(first_row.get("error", "")) else 1.0


def run_python(call: str, timeout: float, env: dict | None = None) -> tuple[dict, str]:
    """``call`` (an expression over this folder's modules, say ``gpu.matmul()``) in a fresh process:
    its JSON-printed result and its stderr. A failure is ``{"error": line}``: XLA's fatal log line
    if it wrote one (a flag it rejects), else the last line of stderr."""
    module = call.split(".")[0]
    code = f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import {module}; print(json.dumps({call}))"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=cli_env() if env is None else env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}, ""
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        fatal = [line for line in lines if re.match(r"F\d{4} ", line)]
        return {"error": ((fatal or lines or [f"exit {proc.returncode}"])[-1])[-300:]}, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _run_worker(name: str, timeout: float) -> dict:
    env, (worker, flags) = None, XLA_ROWS.get(name, (name, None))
    if flags:
        env = cli_env()
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), flags]))
    return run_python(f"gpu.{worker}()", timeout, env)[0]


def torch_missing() -> str | None:
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    return f"needs {' and '.join(missing)} (not installed)" if missing else None


def _peak_of(device: str) -> float | None:
    return next((v for k, v in DATASHEET_BF16.items() if k in device), None)


def _losses_against(row: dict, base: dict) -> str:
    """``row``'s 20 pipelined losses against ``base``'s (the default's): their largest relative
    difference (0 for the same numbers), or nothing if either has none."""
    a, b = row.get("losses_pipelined") or [], base.get("losses_pipelined") or []
    if not a or len(a) != len(b):
        return ""
    return f"; its losses against the default's: {max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True)):.1e} (relative)"


def _table(results: dict, peak: float | None, tokens_per_sentence: float) -> list[str]:
    rows = {k: v for k, v in results["rows"].items()}
    lines = [f"{'row':<30}{'ms/step':>9}{'pipelined':>10}{'tokens/s':>11}{'TFLOP/s':>9}{'peak GiB':>10}{'of peak':>9}"]
    for name, r in rows.items():
        if "step_s" not in r:
            if "steps_per_s" not in r:  # a loop's row is read below
                lines.append(f"{name:<30}{'':>9} {r.get('skipped') or r.get('error')}")
            continue
        rate = r["flops"] / r["step_s"] if r.get("flops") else None
        tokens = f"{r['sentences'] * tokens_per_sentence / r['step_s']:,.0f}" if "sentences" in r else ""
        mem = f"{r['peak_bytes'] / 2**30:.2f}" if r.get("peak_bytes") else ""
        piped = f"{1e3 * r['pipelined_s']:.2f}" if r.get("pipelined_s") else ""
        lines.append(f"{name:<30}{1e3 * r['step_s']:>9.2f}{piped:>10}{tokens:>11}{(rate or 0) / 1e12:>9.1f}{mem:>10}"
                     f"{(f'{rate / peak:.1%}' if rate and peak else ''):>9}")
    rows_ = results["rows"]

    def ratio(a: str, b: str, key: str = "step_s") -> str:
        ra, rb = rows_.get(a, {}), rows_.get(b, {})
        return f"{rb[key] / ra[key]:.2f}x" if ra.get(key) and rb.get(key) else "n/a"

    lines.append("")  # the comparisons with torch, protocol by protocol, are the goals' table (``goals``)
    for name in ("gradlab_bf16", "gradlab_bf16_plain", "gradlab_bf16_device_copies", "gradlab_float32"):
        r = rows_.get(name, {})
        if r.get("step_s_released"):
            odd, even = (1e3 * t for t in r["step_s_odd_even"])
            r_odd, r_even = (1e3 * t for t in r["step_s_released_odd_even"])
            call = f", the call {1e3 * r['call_s']:.2f}" if r.get("call_s") else ""
            if r.get("call_parts_ms"):
                call += " (" + ", ".join(f"{k} {v:.2f}" for k, v in r["call_parts_ms"].items()) + ")"
            lines.append(f"{name} synchronous: {1e3 * r['step_s']:.2f} ms (odd/even steps {odd:.2f}/{even:.2f}; "
                         f"dispatch {1e3 * r['dispatch_s']:.2f} ms{call}); "
                         f"each step's batch, key and outputs released first: {1e3 * r['step_s_released']:.2f} ms "
                         f"({r_odd:.2f}/{r_even:.2f}; dispatch {1e3 * r['dispatch_s_released']:.2f} ms)")
    if rows_.get("gradlab_bf16_plain", {}).get("step_s"):
        lines.append(f"gradlab bf16, the loop's resident step against the plain jitted step: "
                     f"{ratio('gradlab_bf16', 'gradlab_bf16_plain')} (synchronous, the step before held); pipelined: "
                     f"{ratio('gradlab_bf16', 'gradlab_bf16_plain', 'pipelined_s')}")
    for base, other, what in (
            ("gradlab_bf16", "gradlab_bf16_device_copies", "its outputs copied to the host's pinned memory against on "
                                                           "the device"),
            ("gradlab_bf16", "gradlab_bf16_grads_apart", "Adam fused with the gradient norm's sums against apart"),
            ("gradlab_bf16", "gradlab_bf16_one_stage_sums", "the column sums in two stages against one reduction"),
            ("gradlab_bf16", "gradlab_bf16_qkv_sliced", "the Q, K, V gradients apart against sliced"),
            ("gradlab_bf16", "gradlab_bf16_as_before", "the three kernel changes against none of them"),
            ("gradlab_bf16_batch512", "gradlab_bf16_batch512_as_before", "the three kernel changes against none of them")):
        if rows_.get(other, {}).get("step_s"):
            agree = _losses_against(rows_[other], rows_.get(base, {}))
            label = "gradlab bf16" if base == "gradlab_bf16" else "gradlab bf16 at batch 512"
            lines.append(f"{label}, {what}: {ratio(base, other)} held, {ratio(base, other, 'step_s_released')} "
                         f"released, {ratio(base, other, 'pipelined_s')} pipelined{agree}")
    loop = results["train_loop"]
    for name, (_, flags) in XLA_ROWS.items():
        r, base = rows_.get(name, {}), rows_.get("gradlab_bf16", {})
        if r.get("steps_per_s"):
            against = f" against the default's {loop['steps_per_s']:.1f}" if loop.get("steps_per_s") else ""
            lines.append(f"{name} ({flags}): gradlab train {r['steps_per_s']:.1f} steps/s{against}; "
                         f"warm start's first step {r['warm_compile_s']:.2f} s")
        if r.get("step_s") and base.get("step_s"):
            agree = _losses_against(r, base)
            lines.append(f"{name} ({flags}): held {1e3 * r['step_s']:.2f} ms (dispatch {1e3 * r['dispatch_s']:.2f}), "
                         f"released {1e3 * r['step_s_released']:.2f} ms, pipelined {1e3 * r['pipelined_s']:.2f} ms, "
                         f"against the default's {1e3 * base['step_s']:.2f} ({1e3 * base['dispatch_s']:.2f}), "
                         f"{1e3 * base['step_s_released']:.2f} and {1e3 * base['pipelined_s']:.2f} ms{agree}")
    if rows_.get("gradlab_bf16_stable", {}).get("step_s"):
        lines.append(f"gradlab bf16 with its inputs copied into the program's buffers against the default: "
                     f"{ratio('gradlab_bf16_stable', 'gradlab_bf16')}; pipelined: "
                     f"{ratio('gradlab_bf16_stable', 'gradlab_bf16', 'pipelined_s')}")
    if results["engine_ms"]:
        lines.append("engine, full paper map (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in results["engine_ms"].items()))
    for loss, t in results.get("engine", {}).get("trace", {}).items():
        if "device_busy_ms_per_step" in t:
            lines.append(f"engine, {loss} traced: the device busy {t['device_busy_ms_per_step']:.3f} ms a map "
                         f"(span {t['device_span_ms_per_step']:.3f} ms, {t['device_events_per_step']:.0f} events) "
                         f"of {t['traced_wall_ms_per_map']:.3f} ms under the profiler")
    if "steps_per_s" in loop:
        lines.append(f"gradlab train: {loop['steps_per_s']:.1f} steps/s between its first and last step (against "
                     f"the step's rates: the goals' table); "
                     f"dev evaluation {loop['dev_eval_s']:.3f} s; warm start's first step {loop['warm_compile_s']:.2f} s "
                     f"(cold {loop['cold']['first_step_s']:.2f} s)")
    elif loop:
        lines.append(f"gradlab train: {loop.get('error') or loop.get('skipped')}")
    return lines


#: The targets a results file is read against (``goals``): the SimCSE step against
#: torch.compile, the engine, the training loop and batch 512's share of the chip.
GOALS = {"cudagraphs": 1.0, "cudagraphs_stretch": 1.5, "default_mode": 1.3, "tf32": 1.0, "engine_ms": 3.0,
         "independent_ms": 20.0, "loop": 0.8, "dev_eval_s": 0.25, "warm_compile_s": 10.0, "batch512": 0.30}
#: The step's protocols (keys of a gradlab row), each against the torch row's protocol that matches it:
#: held and released against torch's synchronous step (which keeps nothing of a step), pipelined
#: against pipelined.
PROTOCOLS = {"held": ("step_s", "step_s"), "released": ("step_s_released", "step_s"),
             "pipelined": ("pipelined_s", "pipelined_s")}


def goals(results: dict, peak: float | None = None) -> list[dict]:
    """Each target of ``GOALS`` read off a results file: ``{"goal", "measured", "met"}``, ``met``
    None where a row it needs is missing. A step's goal against torch is met only in every
    protocol (``PROTOCOLS``); the loop is read against the released synchronous step (the faster
    synchronous protocol), batch 512 pipelined (steps in flight, as training runs them); every
    protocol measured is shown."""
    rows, engine, loop = results.get("rows", {}), results.get("engine", {}), results.get("train_loop", {})
    peak = peak or results.get("peak_flops")
    out = []

    def add(goal: str, measured: str, met: bool | None) -> None:
        out.append({"goal": goal, "measured": measured, "met": met})

    def speedups(ours: str, theirs: str) -> dict[str, float]:
        a, b = rows.get(ours, {}), rows.get(theirs, {})
        return {p: b[tk] / a[ok] for p, (ok, tk) in PROTOCOLS.items() if a.get(ok) and b.get(tk)}

    def against(ours: str, theirs: str, target: float, what: str) -> None:
        x = speedups(ours, theirs)
        add(f"{what} >= {target:g}x", ", ".join(f"{p} {v:.2f}x" for p, v in x.items()) or "not measured",
            (len(x) == len(PROTOCOLS) and min(x.values()) >= target) if x else None)

    against("gradlab_bf16", "torch_compile_cudagraphs", GOALS["cudagraphs"], "bf16 against torch.compile + CUDA graphs")
    against("gradlab_bf16", "torch_compile_cudagraphs", GOALS["cudagraphs_stretch"], "bf16 against torch.compile + CUDA graphs (stretch)")
    against("gradlab_bf16", "torch_compile", GOALS["default_mode"], "bf16 against torch.compile's default mode")
    against("gradlab_float32", "torch_compile_tf32_cudagraphs", GOALS["tf32"], "float32 against torch.compile TF32 + CUDA graphs")
    for ours, theirs in (("gradlab_bf16", "torch_compile_cudagraphs"), ("gradlab_float32", "torch_compile_tf32_cudagraphs")):
        a, b = rows.get(ours, {}).get("peak_bytes"), rows.get(theirs, {}).get("peak_bytes")
        add(f"{ours} peak memory <= {theirs}'s", f"{a / 1e6:,.0f} against {b / 1e6:,.0f} MB" if a and b else "not measured",
            (a <= b) if a and b else None)
    for mode, names, target in (("common", ENGINE_LOSSES, GOALS["engine_ms"]),
                                ("independent", ("infonce_independent", "arccon_independent"), GOALS["independent_ms"])):
        ms = {n: engine[n]["ms"] for n in names if isinstance(engine.get(n), dict) and "ms" in engine[n]}
        add(f"engine, {mode} mode, <= {target:g} ms a paper map", ", ".join(f"{n} {v:.2f}" for n, v in ms.items())
            or "not measured", (len(ms) == len(names) and max(ms.values()) <= target) if ms else None)
    rates = {p: loop["steps_per_s"] * rows["gradlab_bf16"][k] for p, (k, _) in PROTOCOLS.items()
             if loop.get("steps_per_s") and rows.get("gradlab_bf16", {}).get(k)}
    add(f"gradlab train >= {GOALS['loop']:g} of the pure step rate (the released synchronous step's)",
        ", ".join(f"{v:.2f} of the {p} step's" for p, v in rates.items()) or "not measured",
        rates["released"] >= GOALS["loop"] if "released" in rates else None)
    for key, what in (("dev_eval_s", "one STS-B dev evaluation"), ("warm_compile_s", "a warm start's first step")):
        v = loop.get(key)
        add(f"{what} <= {GOALS[key]:g} s", f"{v:.3f} s" if v is not None else "not measured",
            (v <= GOALS[key]) if v is not None else None)
    r = rows.get("gradlab_bf16_batch512", {})
    shares = {p: r["flops"] / r[k] / peak for p, (k, _) in PROTOCOLS.items() if r.get(k) and r.get("flops") and peak}
    add(f"batch 512 >= {GOALS['batch512']:.0%} of the dense bf16 peak (pipelined, as training runs)",
        ", ".join(f"{p} {v:.1%}" for p, v in shares.items()) or "not measured",
        shares["pipelined"] >= GOALS["batch512"] if "pipelined" in shares else None)
    return out


def goals_markdown(rows: list[dict]) -> list[str]:
    """``goals``' rows as a Markdown table."""
    mark = {True: "met", False: "**missed**", None: "not measured"}
    return ["| goal | measured | |", "|---|---|---|"] + [f"| {g['goal']} | {g['measured']} | {mark[g['met']]} |"
                                                       for g in rows]


def _collect(rows: dict) -> dict:
    """The results file: ``device``, ``rows.<name>``, ``engine_ms.<loss>``, ``train_loop``."""
    flat, engine_ms, loop = {}, {}, {}
    for name, r in rows.items():
        if name == "engine":
            engine_ms = {k: v["ms"] for k, v in r.items() if isinstance(v, dict) and "ms" in v}
            flat[name] = r
        elif name == "train_loop":
            loop = r
        else:
            flat[name] = r
    device = next((r["device"] for r in flat.values() if isinstance(r, dict) and "device" in r), "")
    return {"device": device, "rows": {k: v for k, v in flat.items() if k != "engine"},
            "engine": flat.get("engine", {}), "engine_ms": engine_ms, "train_loop": loop}


def rows_of(results: dict) -> dict:
    """The rows of a results file, as ``main`` measures them (the inverse of ``_collect``)."""
    rows = dict(results.get("rows", {}))
    if results.get("engine"):
        rows["engine"] = results["engine"]
    if results.get("train_loop"):
        rows["train_loop"] = results["train_loop"]
    return rows


def calls_of(results: dict) -> list[dict]:
    """The calls behind a results file: its ``calls``, or the one call a single run's file describes."""
    if "calls" in results:
        return list(results["calls"])
    keys = ("command", "run_seconds", "host_factor", "host")
    return [{**{k: results.get(k) for k in keys}, "rows": list(rows_of(results))}]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", help="a WordPiece tokenizer.json (default: MiniLM's, from the real extra)")
    ap.add_argument("--json", help="write every row's numbers here (after every row)")
    ap.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="the rows to measure (default: all)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run; a row starting later is skipped")
    ap.add_argument("--layers", type=int, help="a checkpoint of this many layers instead of 12 (a quick trial on a CPU)")
    ap.add_argument("--engine-grid", type=int, default=100, help="the engine rows' grid side (default: the paper's 100)")
    ap.add_argument("--cap-scale", type=float, default=1.0,
                    help="multiply each row's time cap, on top of the host's measured factor (a trial on a CPU)")
    ap.add_argument("--loop-steps", type=int, default=LOOP_STEPS, help=f"the train_loop row's steps (default {LOOP_STEPS})")
    ap.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak (default: its datasheet, H100/H200/A100)")
    ap.add_argument("--after", metavar="JSON",
                    help="an earlier call's results on this machine: its rows are kept (a row measured again is "
                         "replaced), its host factor scales the caps, and --json gets both calls (``calls``)")
    ap.add_argument("--report", metavar="JSON", help="measure nothing: print a results file's table and its goals")
    args = ap.parse_args(argv)
    if args.report:
        results = json.loads(Path(args.report).read_text())
        print("\n".join(_table(results, results.get("peak_flops"), results.get("tokens_per_sentence") or 0.0)))
        print("\n" + "\n".join(goals_markdown(goals(results))))
        return
    t_start = time.perf_counter()
    earlier = json.loads(Path(args.after).read_text()) if args.after else None
    rows: dict[str, dict] = rows_of(earlier) if earlier else {}
    with tempfile.TemporaryDirectory(prefix="gradlab-gpu-") as folder:
        os.environ[ENV_DIR] = folder
        os.environ[GRID_ENV] = str(args.engine_grid)
        os.environ[LOOP_ENV] = str(args.loop_steps)
        # a fresh cache for this run's rows, unless one is given: gpu_profile.py, run next on the
        # same machine with the same GRADLAB_CACHE_DIR, then finds the steps compiled
        os.environ.setdefault("GRADLAB_CACHE_DIR", os.path.join(folder, "jax-cache"))
        setup(folder, args.tokenizer, args.layers)
        print(f"checkpoint and corpus written in {time.perf_counter() - t_start:.1f} s", flush=True)
        ckpt, corpus = bench_paths()
        tokens_per_sentence = _mean_tokens(corpus, ckpt)
        skip_torch = torch_missing()
        factor = (calls_of(earlier)[-1].get("host_factor") or 1.0) if earlier else 1.0  # the host's (gradlab_bf16's row)
        for name in args.rows:
            worker, needs_torch, cap = ROWS[name]
            left = args.budget - (time.perf_counter() - t_start)
            t0 = time.perf_counter()
            if needs_torch and skip_torch:
                rows[name] = {"skipped": skip_torch}
            elif left < 20:
                rows[name] = {"skipped": f"the {args.budget:.0f} s budget was spent"}
            else:
                rows[name] = _run_worker(name, min(left, cap * factor * args.cap_scale))
            if name == "gradlab_bf16":
                factor = host_factor(rows[name], cap * args.cap_scale)
                print(f"host factor (compiling, against the reference H200): {factor:.2f}", flush=True)
            print(f"{name} ({time.perf_counter() - t0:.0f} s): {json.dumps(rows[name])[:600]}", flush=True)
            if args.json:
                _write(args.json, rows, tokens_per_sentence, args.peak_tflops, time.perf_counter() - t_start, factor,
                       args.rows, earlier)
    results = _collect(rows)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else _peak_of(results["device"])
    print(f"\n{results['device']}; datasheet dense bf16 peak: {peak / 1e12:.0f} TFLOP/s" if peak else
          f"\n{results['device']}")
    print("\n".join(_table(results, peak, tokens_per_sentence)))
    print("\n" + "\n".join(goals_markdown(goals(results, peak))))
    print(f"whole run: {time.perf_counter() - t_start:.0f} s")


def library_commit() -> str | None:
    """``GRADLAB_COMMIT`` if set (the device machine's copy of the tree is no git checkout), else the
    commit of the checkout whose ``gradlab`` this process imports (``+`` if changed), else None."""
    import gradlab

    if os.environ.get("GRADLAB_COMMIT"):
        return os.environ["GRADLAB_COMMIT"]
    folder = Path(gradlab.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=folder, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def host() -> dict:
    """The host's processor, cores, load and kernel (the lent machines run under gVisor, whose
    kernel says 4.4.0, or Firecracker)."""
    import platform

    return {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
            "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def _write(path: str, rows: dict, tokens_per_sentence: float, peak_tflops: float | None, seconds: float,
           factor: float, names: list[str], earlier: dict | None = None) -> None:
    """The results so far, with this call (its command, seconds, host and rows) after ``earlier``'s
    calls, and the targets read off them (``goals``)."""
    import jax

    results = _collect(rows)
    peak = peak_tflops * 1e12 if peak_tflops else _peak_of(results["device"])
    call = {"command": "python benchmarks/gpu.py " + " ".join(
                os.path.basename(a) if os.path.isabs(a) else a for a in sys.argv[1:]),  # no machine's paths
            "run_seconds": seconds, "host_factor": factor, "host": host(), "rows": names}
    results.update({"peak_flops": peak, "tokens_per_sentence": tokens_per_sentence, "jax": jax.__version__,
                    "gradlab_commit": library_commit(), "date": time.strftime("%Y-%m-%d"),
                    "calls": (calls_of(earlier) if earlier else []) + [call]})
    results["goals"] = goals(results, peak)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)


if __name__ == "__main__":
    main()
