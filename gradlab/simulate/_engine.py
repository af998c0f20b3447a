"""Chunked, sharded execution of a per-batch statistic over the μ_pos × μ_neg grid.

A statistic is a ``Stat``: ``neg(c_neg (B, K), p) -> tables`` reduces the negatives of
one μ_neg column (per batch), and ``pair(c_pos (B,), tables, u (B,), p) -> {name: (value
(B, ...), include (B,) | None)}`` gives per-batch values for one cell. The engine returns,
per name, the mean over the included batches, its standard error (two-pass variance)
and the count of included batches.

* common mode: the tables are computed once per μ_neg (O(B·N·G_neg)), the pair stage once
  per cell (O(B·G²) for factored tables); cos(μ + σz) = cos μ cos σz − sin μ sin σz reuses
  the sines and cosines of the shared draws.
* independent mode: every cell draws its own (B, N) normals from ``fold_in(root, cell)``;
  the per-element work is the draw and one cosine (``_trig.cos_f32`` in float32).

Work is split into fixed-shape chunks (``jax.lax.map(batch_size=chunk)``) inside a
``jax.shard_map`` over all devices (axis ``"cells"``): every chunk runs the same
computation on the same shapes, so the numbers do not depend on the chunk size or the
device count. One compiled program per (statistic, shapes, chunk, devices, and in
independent mode the cosine: ``_trig.cos_for``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from gradlab import backend
from gradlab._cache import stored_program, stored_value
from gradlab.simulate._sampling import (
    CellDraws,
    CommonDraws,
    cell_draw_pieces,
    draws_for,
    normal_bound,
)
from gradlab.simulate._trig import cos_for

#: Working-set target of one chunk, by backend: a CPU's caches; a GPU's memory, where each
#: sequential chunk costs launches and a loop iteration, so one chunk should hold the whole grid.
_BUDGET_BYTES = {"cpu": 48 * 2**20, "gpu": 2**30}
#: Common mode: μ_neg columns per step of the table stage, by backend (fixed per backend, so part
#: of the numerics there): a CPU's caches take a few; on a GPU each step is a loop iteration of
#: launches (the paper's 100 columns in 4s: 25 iterations, 128 kernels, compiled for an H100), so
#: one step holds a whole paper grid.
_NEG_CHUNK = {"cpu": 4, "gpu": 128}
#: Independent mode: cells computed side by side in one vectorized program, by backend (fixed
#: per backend, so part of the numerics there; a CPU takes one cell at a time, a GPU needs
#: many to fill it).
_CELL_GROUP = {"gpu": 128}
#: Independent mode: a cell's normals drawn in pieces (``_sampling.standard_normal_pieces``: two
#: halves of the batches sharing their Threefry blocks, each with its positives and its negatives
#: apart), by backend: the same draws, the maps the same to rounding. Compiled for an H100, the
#: hash then fuses into the reductions: the independent InfoNCE map moves 0.48 GB instead of 24.0
#: (``benchmarks/gpu_aot.py --engine``). A CPU draws whole: its map took 15–20 % longer in pieces
#: (50 × 50 cells, InfoNCE and ArcCon: 1.11–1.16 against 0.95 s; ad hoc, 3 rounds of fresh
#: processes, alternating).
_DRAW_PIECES = {"gpu": True}


def _budget() -> int:
    return _BUDGET_BYTES.get(backend.current(), _BUDGET_BYTES["cpu"])


def neg_chunk() -> int:
    """μ_neg columns one step of the common mode's table stage computes for the backend traced for
    (``gradlab.backend.current``; 4 on a CPU)."""
    return _NEG_CHUNK.get(backend.current(), _NEG_CHUNK["cpu"])


def draws_in_pieces() -> bool:
    """Whether an independent-mode cell draws its normals in pieces for the backend traced for
    (``gradlab.backend.current``; whole on a CPU)."""
    return _DRAW_PIECES.get(backend.current(), False)


def cell_group() -> int:
    """Cells one independent-mode program computes side by side for the backend traced for
    (``gradlab.backend.current``; 1 on a CPU)."""
    return _CELL_GROUP.get(backend.current(), 1)


@dataclasses.dataclass(frozen=True, eq=False)
class Stat:
    """A per-batch statistic. ``key`` identifies it for the compile cache.

    Attributes:
      key: hashable identity (same key = same computation).
      neg: ``(c_neg (B, K), params) -> tables`` (pytree with leading axis B).
      pair: ``(c_pos (B,), tables, u (B,), params) -> {name: (value, include)}``.
      stored: the same identity as plain data that means the same computation in every
        process (a registered loss by name), so that its compiled programs are kept whole in
        the program store (``gradlab._cache.stored_program``); None (a user's loss): compiled
        through ``jax.jit`` and JAX's cache.
    """

    key: tuple
    neg: Callable
    pair: Callable
    stored: tuple | None = None

    def program_key(self, *parts) -> tuple | None:
        """The program store's key of one of this statistic's programs (``stored`` plus ``parts``:
        the stage and what it closes over), or None when the statistic is not stored."""
        return None if self.stored is None else (*parts[:1], self.stored, *parts[1:])

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, Stat) and self.key == other.key


def moments(value, include):
    """Mean over axis 0 of the included rows, its standard error and the count.

    Args:
      value: (B, ...) per-batch values.
      include: (B,) bool or None (all included).

    Returns:
      ``(mean (...), stderr (...), count ())``; mean is NaN where count = 0, stderr is NaN
      where count < 2. Two-pass: Σ (v − mean)², no cancellation.
    """
    b = value.shape[0]
    dt = value.dtype
    if include is None:
        n = jnp.asarray(b, dt)
        mean = jnp.sum(value, axis=0) / n
        m2 = jnp.sum(jnp.square(value - mean), axis=0)
    else:
        w = include.reshape(include.shape + (1,) * (value.ndim - 1))
        n = jnp.sum(include.astype(dt))
        s = jnp.sum(jnp.where(w, value, 0), axis=0)
        mean = jnp.where(n > 0, s / jnp.maximum(n, 1), jnp.nan)
        m2 = jnp.sum(jnp.where(w, jnp.square(value - mean), 0), axis=0)
    se = jnp.sqrt(m2 / jnp.maximum(n - 1, 1) / jnp.maximum(n, 1))
    se = jnp.where(n > 1, se, jnp.nan)
    return mean, se, n


def _reduce(outs: dict):
    return {k: moments(v, inc) for k, (v, inc) in outs.items()}


def _n_devices() -> int:
    return len(jax.devices())


def _sharded_map(fn, chunk: int, nd: int, *, vectorize: bool = True, prep=None):
    """jit(shard_map(lax.map(fn, batch_size=chunk))) over the leading axis of ``xs``.

    ``vectorize=False`` maps one item at a time (``lax.map`` without ``batch_size``): the
    per-item program then has the same shapes whatever the chunk, which keeps XLA's
    fusion, and so the rounding, of reductions inside ``fn`` fixed. ``prep(rep)`` runs once
    per call inside the same program (elementwise set-up that would otherwise be one
    small compiled program per operation).
    """
    mesh = Mesh(np.array(jax.devices()[:nd]), ("cells",))

    def local(xs, rep):
        if prep is not None:
            rep = prep(rep)
        return jax.lax.map(lambda x: fn(x, rep), xs, batch_size=chunk if vectorize else None)

    mapped = jax.shard_map(local, mesh=mesh, in_specs=(P("cells"), P()), out_specs=P("cells"), check_vma=False)
    return jax.jit(mapped)


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _fetch(tree):
    """The sharded outputs as host NumPy arrays. Under ``jax.distributed`` (several processes)
    each process holds only its devices' rows: they are gathered, so that every process
    returns the whole map (process 0 writes it)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))


def _run_steps(compiled, items: np.ndarray, rep, step: int, progress, key: tuple | None = None, *,
               on_device: bool = False):
    """Run ``compiled`` on fixed-size slices of ``items`` (padded by repeating the last one).

    ``key`` (the program's identity as plain data, or None) reads the compiled program from the
    program store instead of tracing it (``gradlab._cache.stored_program``). ``on_device``: the
    outputs of a single step stay device arrays (an intermediate the next stage takes), in
    one process, padded to the step (the next stage reads its first n rows); otherwise they are
    fetched to the host, n rows."""
    n = items.shape[0]
    total = _pad(n, step)
    padded = np.concatenate([items, np.repeat(items[-1:], total - n, axis=0)]) if total > n else items
    compiled = stored_program(compiled, (padded[:step], rep), key)
    n_steps = total // step
    if on_device and n_steps == 1 and progress is None and jax.process_count() == 1:
        return compiled(padded, rep)  # padded: the caller reads the first n inside its next program
    outs = []
    for i in range(n_steps):
        outs.append(_fetch(compiled(padded[i * step : (i + 1) * step], rep)))
        if progress is not None:
            progress(min((i + 1) * step, n), n)
    joined = jax.tree.map(lambda *xs: np.concatenate(xs, axis=0)[:n], *outs)
    return joined


def _choose_chunk(chunk: int | None, per_item_bytes: int, n_items: int, nd: int) -> int:
    if chunk is not None:
        return chunk
    chunk = max(1, _budget() // max(per_item_bytes, 1))
    return int(min(chunk, max(1, -(-n_items // nd))))


def _nbytes(tree) -> int:
    return int(sum(np.prod(x.shape, dtype=np.float64) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


@functools.lru_cache(maxsize=64)
def _shapes(stat: Stat, batches: int, n_neg: int, dtype_name: str, params_sig):
    """Bytes of one μ_neg column's tables and of one cell's moments (``jax.eval_shape``: no allocation)."""
    params = jax.tree.unflatten(params_sig[0], [jax.ShapeDtypeStruct(s, d) for s, d in params_sig[1]])
    sds = functools.partial(jax.ShapeDtypeStruct, dtype=jnp.dtype(dtype_name))

    def traced():
        tables = jax.eval_shape(stat.neg, sds((batches, n_neg)), params)
        cell = jax.eval_shape(lambda c, t, u, p: _reduce(stat.pair(c, t, u, p)), sds((batches,)), tables,
                              sds((batches,)), params)
        return [_nbytes(tables), _nbytes(cell)]

    table_col, cell = stored_value(stat.program_key("shapes", batches, n_neg, dtype_name), traced, params)
    return int(table_col), int(cell)


def _signature(params):
    leaves, treedef = jax.tree.flatten(params)
    return treedef, tuple((np.shape(x), jnp.result_type(x)) for x in leaves)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The engine's memory plan for one run (bytes), from ``estimate``; the chunking uses it.

    Attributes:
      result: the returned moments (mean, stderr, count per output and cell).
      working: the largest working set beside them: the draws, the tables (host and
        device), one step of compiled work, and the step outputs being joined.
      per_item: bytes of one grid row (common mode) or one cell (independent) in a chunk.
      chunk: rows or cells per chunk.
    """

    result: int
    working: int
    per_item: int
    chunk: int

    def check(self, what: str) -> None:
        """``ValueError`` (one line, naming both sizes) if the run cannot fit in memory."""
        from gradlab._memory import check_fits

        check_fits(what, self.result, self.working)


def estimate(stat: Stat, draws, n_pos: int, n_neg_grid: int, params, *, chunk: int | None = None) -> Estimate:
    """Memory of ``run(stat, draws, mu_pos (P,), mu_neg (Q,), params)`` before it allocates anything.

    ``draws`` may be the draws or the ``Protocol`` they come from (only shapes are read).
    Shapes come from ``jax.eval_shape`` of the statistic (nothing is computed). Common
    mode: tables Q·B·(table floats), a chunk of rows c·Q·B·(table floats + 6); independent
    mode: a chunk of cells c·B·N·6 floats; both add the draws and twice the result (the
    step outputs and their concatenation).
    """
    nd = _n_devices()
    if isinstance(draws, CommonDraws):
        common, dtype, (batches, n_neg) = True, jnp.dtype(draws.dtype), draws.z_neg.shape
    elif isinstance(draws, CellDraws):
        common, dtype, batches, n_neg = False, jnp.dtype(draws.dtype), draws.batches, draws.batch_size - 1
    else:  # a Protocol
        common, dtype, batches, n_neg = draws.mode == "common", draws.jnp_dtype(), draws.batches, draws.n_neg
    n_items = n_pos if common else n_pos * n_neg_grid
    table_col, cell = _shapes(stat, batches, n_neg, dtype.name, _signature(params))
    result = n_pos * n_neg_grid * cell
    if common:
        per_item = n_neg_grid * (table_col + 6 * batches * dtype.itemsize)
        neg_step = neg_chunk() * nd * batches * n_neg * dtype.itemsize * 3
        fixed = batches * (n_neg + 3) * dtype.itemsize + 2 * n_neg_grid * table_col + neg_step
    else:
        per_item = batches * (n_neg + 1) * dtype.itemsize * 6
        fixed = 0
    c = _choose_chunk(chunk, per_item, n_items, nd)
    working = fixed + min(c * nd, n_items) * per_item + 2 * result
    return Estimate(result=int(result), working=int(working), per_item=int(per_item), chunk=int(c))


def _step_size(chunk: int, nd: int, n_items: int, progress) -> int:
    unit = chunk * nd
    if progress is None:
        return _pad(n_items, unit)
    # about 20 progress ticks, each a whole number of chunks on every device
    return max(unit, _pad(-(-n_items // 20), unit))


def _what(stat: Stat, mu_pos, mu_neg, batches: int) -> str:
    return f"the {stat.key[0]} statistic on a {len(mu_pos)} × {len(mu_neg)} grid with {batches} batches per cell"


# --- common mode -----------------------------------------------------------------------------
def _cos_sin(sigma, z):
    """cos(σz), sin(σz) of the shared draws (inside the stage's program)."""
    return jnp.cos(sigma * z), jnp.sin(sigma * z)


@functools.lru_cache(maxsize=64)
def _neg_stage(stat: Stat, chunk: int, nd: int):
    def fn(mu_q, rep):
        a, s, p = rep
        return stat.neg(jnp.cos(mu_q) * a - jnp.sin(mu_q) * s, p)

    def prep(rep):
        sigma, z, p = rep
        return (*_cos_sin(sigma, z), p)

    return _sharded_map(fn, chunk, nd, prep=prep)


@functools.lru_cache(maxsize=64)
def _pair_stage(stat: Stat, chunk: int, nd: int, n_neg: int):
    def row(mu_p, rep):
        cz, sz, u, tables, p = rep
        c_pos = jnp.cos(mu_p) * cz - jnp.sin(mu_p) * sz
        per_q = jax.vmap(lambda t: _reduce(stat.pair(c_pos, t, u, p)))
        return per_q(tables)

    def prep(rep):
        sigma, z, u, tables, p = rep
        tables = jax.tree.map(lambda t: t[:n_neg], tables)  # the table stage's columns, less its padding
        return (*_cos_sin(sigma, z), u, tables, p)

    return _sharded_map(row, chunk, nd, prep=prep)


def neg_tables(stat: Stat, draws: CommonDraws, mu_neg: np.ndarray, params):
    """Common-mode tables of every μ_neg column, on the device: pytree with leading axes (Q', B),
    the Q columns padded to Q' ≥ Q by repeating the last (the pair stage reads the first Q inside
    its program: a slice here would be one more dispatch per map)."""
    dtype = draws.dtype
    rep = (np.asarray(draws.sigma_neg, dtype), draws.z_neg, params)
    nd = _n_devices()
    chunk = neg_chunk()
    return _run_steps(_neg_stage(stat, chunk, nd), np.asarray(mu_neg, dtype), rep, _pad(len(mu_neg), chunk * nd), None,
                      stat.program_key("neg", chunk, nd), on_device=True)


def run_common(stat: Stat, draws: CommonDraws, mu_pos, mu_neg, params, *, chunk=None, progress=None):
    """Common-mode moments on the grid: {name: (mean (P, Q, ...), stderr, count (P, Q))}."""
    dtype = draws.dtype
    mu_pos = np.asarray(mu_pos, dtype)
    mu_neg = np.asarray(mu_neg, dtype)
    plan = estimate(stat, draws, len(mu_pos), len(mu_neg), params, chunk=chunk)
    plan.check(_what(stat, mu_pos, mu_neg, draws.z_neg.shape[0]))
    tables = neg_tables(stat, draws, mu_neg, params)
    rep = (np.asarray(draws.sigma_pos, dtype), draws.z_pos, draws.u, tables, params)
    nd = _n_devices()
    chunk = plan.chunk
    step = _step_size(chunk, nd, len(mu_pos), progress)
    q = len(mu_neg)
    return _run_steps(_pair_stage(stat, chunk, nd, q), mu_pos, rep, step, progress,
                      stat.program_key("pair", chunk, nd, ("columns", q)))


# --- independent mode ------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _cell_stage(stat: Stat, chunk: int, nd: int, batches: int, n: int, dtype_name: str, cos: Callable,
                group: int = 1, in_pieces: bool = False):
    dtype = jnp.dtype(dtype_name)

    def cell(c, rep):
        root, mu_pos, mu_neg, sp, sn, p = rep
        q = mu_neg.shape[0]
        pieces, u = cell_draw_pieces(root, c, batches, n, dtype, pieces=in_pieces)
        # each part's tables apart (a statistic's tables are per batch), so that nothing of the
        # draws' size is concatenated or read twice (cell_draw_pieces). The sampling law does not
        # enter: cos of a reflected angle is cos of the raw one
        c_pos = jnp.concatenate([cos(mu_pos[c // q] + sp * z_pos[:, 0]) for z_pos, _ in pieces])
        tables = [stat.neg(cos(mu_neg[c % q] + sn * z_neg), p) for _, z_neg in pieces]
        tables = jax.tree.map(lambda *t: jnp.concatenate(t), *tables)
        return _reduce(stat.pair(c_pos, tables, u, p))

    if group > 1:  # ``group`` cells side by side in one program, the same program for every group
        one = cell
        cell = lambda cs, rep: jax.vmap(lambda c: one(c, rep))(cs)  # noqa: E731
    return _sharded_map(cell, chunk, nd, vectorize=False)


def run_independent(stat: Stat, draws: CellDraws, mu_pos, mu_neg, params, *, chunk=None, progress=None,
                    group: int | None = None):
    """Independent-mode moments: draws per cell from ``fold_in(key(seed), i_pos·Q + i_neg)``.

    ``group``: cells per vectorized program (default :func:`cell_group`); the numbers depend on it,
    not on ``chunk`` or the device count."""
    dtype = jnp.dtype(draws.dtype)
    p_, q_ = len(mu_pos), len(mu_neg)
    n_cells = p_ * q_
    nd = _n_devices()
    group = cell_group() if group is None else int(group)
    plan = estimate(stat, draws, p_, q_, params, chunk=chunk)
    plan.check(_what(stat, mu_pos, mu_neg, draws.batches))
    chunk = max(1, plan.chunk // group)  # groups per chunk
    n_groups = -(-n_cells // group)
    step = _step_size(chunk, nd, n_groups, progress)
    rep = (  # host arrays: the program takes them as arguments, without a dispatch each
        jax.random.key(draws.seed),
        np.asarray(mu_pos, dtype),
        np.asarray(mu_neg, dtype),
        np.asarray(draws.sigma_pos, dtype),
        np.asarray(draws.sigma_neg, dtype),
        params,
    )
    z = normal_bound(dtype.name)
    bound = max(np.max(np.abs(mu_pos)) + draws.sigma_pos * z, np.max(np.abs(mu_neg)) + draws.sigma_neg * z)
    cos = cos_for(dtype, float(bound))
    in_pieces = draws_in_pieces()
    compiled = _cell_stage(stat, chunk, nd, draws.batches, draws.batch_size, dtype.name, cos, group, in_pieces)
    key = stat.program_key("cell", chunk, nd, f"{cos.__module__}.{cos.__qualname__}", *(("group", group),) * (group > 1),
                           *("pieces",) * in_pieces)
    cells = np.arange(n_groups * group, dtype=np.uint32)
    cells = np.minimum(cells, n_cells - 1)  # the last group padded with the last cell
    items = cells if group == 1 else cells.reshape(n_groups, group)
    flat = _run_steps(compiled, items, rep, step, progress, key)
    if group > 1:
        flat = jax.tree.map(lambda a: a.reshape((n_groups * group,) + a.shape[2:])[:n_cells], flat)
    return jax.tree.map(lambda a: a.reshape((p_, q_) + a.shape[1:]), flat)


def run(stat: Stat, draws: CommonDraws | CellDraws, mu_pos, mu_neg, params, *, chunk: int | None = None,
        progress=None):
    """Moments of ``stat`` on the grid ``mu_pos`` × ``mu_neg``: {name: (mean, stderr, count)} NumPy arrays.

    Args:
      stat: the per-batch statistic.
      draws: ``CommonDraws`` (common mode: the shared standard draws) or ``CellDraws``
        (independent mode: seed and sizes; each cell draws its own), from
        ``_sampling.draws_for(protocol)``; or the ``Protocol`` itself, so that the memory
        check (``estimate``) comes before the draws are made.
      mu_pos: (P,) and mu_neg: (Q,) the grid axes (radians).
      params: pytree of the statistic's parameters.
      chunk: grid rows (common) or cells (independent) per compiled step; None = from the
        memory budget.
      progress: optional ``callable(done, total)``.
    """
    if not isinstance(draws, (CommonDraws, CellDraws)) and hasattr(draws, "mode"):  # a Protocol: check, then draw
        estimate(stat, draws, len(mu_pos), len(mu_neg), params, chunk=chunk).check(
            _what(stat, mu_pos, mu_neg, draws.batches))
        draws = draws_for(draws)
    if isinstance(draws, CommonDraws):
        return run_common(stat, draws, mu_pos, mu_neg, params, chunk=chunk, progress=progress)
    if isinstance(draws, CellDraws):
        return run_independent(stat, draws, mu_pos, mu_neg, params, chunk=chunk, progress=progress)
    raise TypeError(f"draws must be CommonDraws or CellDraws; got {type(draws).__name__}")
