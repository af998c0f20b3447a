"""The SimCSE step: two dropout views of a batch (Gao et al. 2021), the loss, one optax update,
compiled once for all the runs of a process that compute the same step; data parallelism over a
1-D device mesh; mixed precision."""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gradlab import backend
from gradlab.real._deps import require

__all__ = ["compute_dtype", "cast_floats", "views_fn", "train_update", "make_train_step", "step_programs",
           "StepPrograms", "SHARED_STEPS", "TrainStep", "Resident", "ResidentStep", "CallTimes", "resident_programs",
           "data_mesh", "shard", "copy_on_device", "copy_to_host"]


@jax.jit
def copy_on_device(tree: Any) -> Any:
    """A copy of ``tree``'s arrays, made by one compiled program (``jnp.copy`` leaf by leaf
    compiles a small program for each distinct shape)."""
    return jax.tree_util.tree_map(jnp.copy, tree)


def copy_to_host(tree: Any) -> Any:
    """A copy of ``tree``'s arrays in the host's pinned memory (memory kind ``"pinned_host"``), each
    with its sharding otherwise; one transfer, which does not wait for the arrays to be ready."""
    shardings = jax.tree_util.tree_map(lambda a: a.sharding.with_memory_kind("pinned_host"), tree)
    return jax.device_put(tree, shardings)


def compute_dtype(precision: str) -> Any:
    """The dtype the forward and backward pass of ``precision`` run in (``gradlab.real.PRECISIONS``).

    Examples:
      >>> compute_dtype("float32"), compute_dtype("bf16")
      (dtype('float32'), dtype(bfloat16))
    """
    from gradlab.real.config import PRECISIONS

    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return jnp.dtype(PRECISIONS[precision])


def cast_floats(tree: Any, dtype: Any) -> Any:
    """Every floating-point array of ``tree`` cast to ``dtype`` (integer arrays and None kept)."""
    return jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def views_fn(encoder, *, packed: bool, precision: str = "float32") -> Callable:
    """``(params, frozen, batch, key) -> (h, h_prime)``: two dropout views of a batch (Gao et al. 2021).

    With ``precision="bf16"`` the parameters (trained and frozen) are cast to bfloat16 on the
    way in, so the encoder computes in bfloat16, and the views are cast back to float32 on the
    way out; the gradient reaches the float32 parameters through both casts, in float32. An
    encoder with a ``compute_params(params, dtype)`` method casts its trained parameters itself
    (MiniLM keeps its embedding tables in float32: :func:`gradlab.real.bert.compute_params`).
    """
    dtype = compute_dtype(precision)
    mixed = dtype != jnp.float32
    cast = getattr(encoder, "compute_params", None) or cast_floats

    def views(params, frozen, batch, key):
        if mixed:
            params, frozen = cast(params, dtype), cast_floats(frozen, dtype)
        keys = jax.random.split(key)
        if packed:  # both views in one forward, as SimCSE's trainer does (the masks of two forwards)
            h, h_prime = encoder.forward_packed(params, frozen, batch, keys)
        else:
            ids, mask = batch
            h, h_prime = (encoder.forward(params, frozen, ids, mask, k) for k in keys)
        if mixed:
            h, h_prime = h.astype(jnp.float32), h_prime.astype(jnp.float32)
        return h, h_prime

    return views


def train_update(encoder, optimizer, *, packed: bool = False, mesh=None, precision: str = "float32") -> Callable:
    """The SimCSE step as a pure function (not jitted): ``(params, opt_state, frozen, batch, key,
    loss) -> (params, opt_state, aux)``; :func:`make_train_step` documents the arguments. The loss
    is an argument, not a constant: a ``Loss`` is a pytree whose leaves are its parameters."""
    optax = require("optax", purpose="training")
    views = views_fn(encoder, packed=packed, precision=precision)

    def objective(params, frozen, batch, key, loss):
        h, h_prime = views(params, frozen, batch, key)
        if mesh is not None:  # the loss sees the whole batch on every device
            whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            h, h_prime = jax.lax.with_sharding_constraint((h, h_prime), whole)
        return loss(h, h_prime), (h, h_prime)

    def step(params, opt_state, frozen, batch, key, loss):
        (value, (h, h_prime)), grads = jax.value_and_grad(objective, has_aux=True)(params, frozen, batch, key, loss)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        grad_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(grads)))
        aux = {"loss": value, "grad_norm": grad_norm, "h": h, "h_prime": h_prime}
        return params, opt_state, aux

    return step


def make_train_step(encoder, loss: Callable, optimizer, *, packed: bool = False, mesh=None,
                    precision: str = "float32", resident: bool = False) -> Callable:
    """A jitted SimCSE step: ``(params, opt_state, frozen, batch, key) -> (params, opt_state, aux)``.

    ``batch`` is ``(ids, mask)`` (padded (N, L) arrays) or, with ``packed``, the encoder's
    :class:`~gradlab.real.minilm.Packed` batch of N sentences. ``aux`` holds ``loss`` (),
    ``grad_norm`` (), and the two views ``h``, ``h_prime`` (N, D). ``params`` and
    ``opt_state`` are donated (updated in place): keep no other reference to them.

    With a ``mesh`` (a 1-D ``jax.sharding.Mesh`` named ``"batch"``), the batch is split
    over its devices along axis 0 and parameters and optimizer state are replicated; the
    loss is computed on the gathered global batch (negatives from every device).

    ``precision="bf16"`` is mixed precision (as in jmp / optax practice): ``params`` and
    ``opt_state`` stay float32 (the master copy), the encoder's forward and backward pass run
    in bfloat16, and ``h``, ``h_prime``, the loss, its gradient, ``grad_norm`` and the update are
    float32. bfloat16 has float32's exponent range, so no loss scaling is needed.

    ``loss`` is one of the program's arguments, on the device once (a ``Loss`` or a
    ``GradientTransform`` is a pytree whose leaves are its parameters): steps of the same loss
    with another τ, margin or ratio are the same program, which JAX's persistent cache then
    serves without compiling it again (the lowered programs are equal, a test compares them).

    ``resident=True`` returns a :class:`ResidentStep`: the same step, called the same way, whose
    batch, key and outputs stay in buffers of its own from call to call (the training loop's).

    The runs of one process share their compiled step when they compute the same function: an
    encoder with an ``architecture`` (its forward passes without its weights, hashable:
    :class:`gradlab.real.minilm.BertArchitecture`), the same ``optimizer.update`` (one per kind
    from :func:`gradlab.real.loop.make_optimizer`, whose rates are values of its state), the
    same ``packed``, ``mesh`` and ``precision``. The programs of the last :data:`SHARED_STEPS`
    such steps are kept; they hold no weights.
    """
    programs = step_programs(encoder, optimizer, packed=packed, mesh=mesh, precision=precision)
    loss = jax.device_put(loss) if mesh is None else shard(loss, mesh, jax.sharding.PartitionSpec())
    if resident:
        return ResidentStep(programs.resident, loss, mesh=mesh)
    return TrainStep(programs.jitted, loss)


#: How many steps' programs :func:`step_programs` keeps for later runs of this process.
SHARED_STEPS = 4
_SHARED: collections.OrderedDict[tuple, StepPrograms] = collections.OrderedDict()
_SHARED_LOCK = threading.Lock()


class StepPrograms(NamedTuple):
    """A step's pure function (:func:`train_update`) and its jitted forms: ``jitted`` (the plain
    step, ``params`` and ``opt_state`` donated) and ``resident`` (:func:`resident_programs`)."""

    update: Callable
    jitted: Callable
    resident: tuple[Callable, Callable]


def step_programs(encoder, optimizer, *, packed: bool = False, mesh=None, precision: str = "float32") -> StepPrograms:
    """The programs of :func:`make_train_step`'s step, the same objects (so compiled once) for every
    call whose step computes the same function: ``encoder.architecture`` (None or absent: a step of
    its own), ``optimizer.update``, ``packed``, ``mesh`` and ``precision`` equal."""
    architecture = getattr(encoder, "architecture", None)
    key = None if architecture is None else (architecture, optimizer.update, packed, mesh, precision)
    with _SHARED_LOCK:  # runs in threads of one process (a Dask worker's) share the programs too
        if key in _SHARED:
            _SHARED.move_to_end(key)
            return _SHARED[key]
        # built on the architecture where there is one: the programs kept hold no weights (building
        # them traces nothing: the jitted functions compile at their first call)
        update = train_update(encoder if architecture is None else architecture, optimizer, packed=packed,
                              mesh=mesh, precision=precision)
        programs = StepPrograms(update, jax.jit(update, donate_argnums=(0, 1)), resident_programs(update))
        if key is not None:
            _SHARED[key] = programs
            while len(_SHARED) > SHARED_STEPS:
                _SHARED.popitem(last=False)
        return programs


class TrainStep:
    """A jitted step ``(params, opt_state, frozen, batch, key, loss)`` called without its last
    argument, the loss given once (on the device, the same buffers every call)."""

    def __init__(self, jitted: Callable, loss: Any):
        self.jitted, self.loss = jitted, loss

    def __call__(self, params, opt_state, frozen, batch, key):
        return self.jitted(params, opt_state, frozen, batch, key, self.loss)

    def lower(self, params, opt_state, frozen, batch, key):
        """The step's program lowered for these arguments (arrays or ``jax.ShapeDtypeStruct``), the
        loss placed as the batch is (a device not attached: ``benchmarks/gpu_aot.py``)."""
        sharding = getattr(jax.tree_util.tree_leaves(batch)[0], "sharding", None)
        return self.jitted.lower(params, opt_state, frozen, batch, key, _abstract(self.loss, sharding))


def _abstract(tree: Any, sharding=None) -> Any:
    """``tree``'s arrays as ``jax.ShapeDtypeStruct`` (shape, dtype, weak type) with ``sharding``."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), a.dtype, sharding=sharding,
                                                                 weak_type=getattr(a, "weak_type", False)), tree)


class CallTimes(NamedTuple):
    """The host's seconds in each part of a :class:`ResidentStep` call, in their order: the batch's
    ``signature`` (which buffers), the ``load`` of batch and key into them (a program of copies),
    the ``step``'s dispatch, the outputs' ``copy_out``. On a GPU the step's kernels start once
    the first two parts are done and the step's dispatch has launched them: what a synchronous
    step waits for on the host."""

    signature: float
    load: float
    step: float
    copy_out: float


class Resident(NamedTuple):
    """The buffers a :class:`ResidentStep` keeps: the batch and key of the call, and its ``aux``."""

    batch: Any
    key: Any
    aux: Any


@functools.partial(jax.jit, donate_argnums=0, keep_unused=True)
def _load(slots: Resident, batch, key) -> Resident:
    """``slots`` with copies of ``batch`` and ``key`` in its buffers (a returned argument would be
    the caller's own buffer). One function for every step, so that runs in one process share
    its programs."""
    return Resident(*copy_on_device((batch, key)), slots.aux)


def resident_programs(update: Callable) -> tuple[Callable, Callable]:
    """:class:`ResidentStep`'s two programs for ``update``: ``plain`` (``update`` jitted; its trace
    gives the outputs' shapes and the step's body) and ``step``, ``(params, opt_state, frozen,
    slots, loss) -> (params, opt_state, slots)`` with the outputs written into ``slots.aux``
    (``params``, ``opt_state`` and ``slots`` donated)."""
    plain = jax.jit(update)

    def step(params, opt_state, frozen, slots, loss):  # (named as the plain step: JAX's logs say "jit(step)")
        params, opt_state, aux = plain(params, opt_state, frozen, slots.batch, slots.key, loss)
        return params, opt_state, slots._replace(aux=aux)

    return plain, jax.jit(step, donate_argnums=(0, 1, 3), keep_unused=True)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _zeros(tree, shapes: tuple, sharding) -> Any:
    """Zero arrays of ``shapes`` ((shape, dtype) pairs) in ``tree``'s structure, placed by ``sharding``
    (None: JAX's default); one program per layout, shared by every step."""
    zeros = [jnp.zeros(shape, dtype) for shape, dtype in shapes]
    if sharding is not None:
        zeros = jax.lax.with_sharding_constraint(zeros, sharding)
    return jax.tree_util.tree_unflatten(tree, zeros)


class ResidentStep:
    """A jitted step whose per-call inputs and outputs keep their device buffers from call to call.

    On a GPU, XLA runs a program as CUDA graphs (command buffers), which record the addresses of
    the buffers their kernels read and write; before it runs a graph whose buffers moved, the
    host updates the recorded commands. A plain jitted step gets a new batch, a new key and new
    outputs every call, and they move whenever the caller still holds the previous step's, as a
    loop that keeps a step in flight always does. Here a small program copies the call's batch
    and key into buffers of the step's own, the step writes its outputs into buffers it is given
    back (all donated, so every one stays in place), and the outputs are copied out for the
    caller. The same numbers as the plain step (the same function; only copies added).

    On a GPU (``gradlab.backend.current()``, read at each call) the outputs are copied to the
    host's pinned memory (:func:`copy_to_host`), elsewhere on the device (:func:`copy_on_device`).
    What XLA cannot keep in place is the program's temporaries, allocated at each call from the
    memory the last call freed: a copy the caller still holds, carved out of that memory, moves
    them, and the graphs that read them are updated (on an H200, 3–4 ms of host time a step,
    ``benchmarks/results/gpu_profile_placements.json``). Copies in host memory never sit there.

    Called as the plain step: ``(params, opt_state, frozen, batch, key) -> (params, opt_state,
    aux)``, ``params`` and ``opt_state`` donated. One set of buffers per batch shape. ``clock``:
    None, or a list to which each call appends its :class:`CallTimes` (a benchmark's split of
    the host's time in a call).

    Args:
      programs: :func:`resident_programs` of the step's pure function (:func:`train_update`),
        shared by the runs of a process (:func:`step_programs`).
      loss: the step's last argument, the same at every call (on the device: :func:`make_train_step`).
      mesh: the run's data mesh (the outputs' buffers are then replicated over it), or None.
      copy_out: what copies the step's outputs out of its buffers for the caller, in place of the
        backend's choice above (a benchmark's A/B of the placements).
    """

    def __init__(self, programs: tuple[Callable, Callable], loss: Any, *, mesh=None,
                 copy_out: Callable | None = None):
        self.plain, self.step = programs
        self.loss = loss
        self.mesh = mesh
        self.copy_out = copy_out
        self.clock: list[CallTimes] | None = None
        self._slots: dict[Any, Resident] = {}

    @property
    def buffers(self) -> dict[Any, Resident]:
        """The buffers kept, one :class:`Resident` per batch shape (keys: the batch's and key's types)."""
        return dict(self._slots)

    def __call__(self, params, opt_state, frozen, batch, key):
        t0 = time.perf_counter()
        signature = (jax.tree_util.tree_structure(batch), tuple(map(jax.typeof, jax.tree_util.tree_leaves((batch, key)))))
        slots = self._slots.pop(signature, None)
        t1 = time.perf_counter()
        if slots is None:
            slots = self._fresh(params, opt_state, frozen, batch, key)
        else:
            slots = _load(slots, batch, key)
        t2 = time.perf_counter()
        params, opt_state, slots = self.step(params, opt_state, frozen, slots, self.loss)
        self._slots[signature] = slots
        t3 = time.perf_counter()
        copy_out = self.copy_out or (copy_to_host if backend.current() == "gpu" else copy_on_device)
        aux = copy_out(slots.aux)
        if self.clock is not None:
            self.clock.append(CallTimes(t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - t3))
        return params, opt_state, aux

    def _fresh(self, params, opt_state, frozen, batch, key) -> Resident:
        """The first call's buffers for ``batch``'s shape: copies of batch and key, zero outputs."""
        info = self.plain.eval_shape(params, opt_state, frozen, batch, key, self.loss)[2]
        leaves, tree = jax.tree_util.tree_flatten(info)
        aux = _zeros(tree, tuple((s.shape, s.dtype) for s in leaves), self._aux_sharding())
        return Resident(*copy_on_device((batch, key)), aux)

    def _aux_sharding(self):
        """The outputs' buffers: replicated over the mesh, else JAX's default (None: placed as the
        plain step's outputs are, uncommitted, so that the step compiles once)."""
        if self.mesh is None:
            return None
        return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

    def lower(self, params, opt_state, frozen, batch, key):
        """The step's program lowered for these arguments (arrays or ``jax.ShapeDtypeStruct``)."""
        info = self.plain.eval_shape(params, opt_state, frozen, batch, key, self.loss)[2]
        sharding = self._aux_sharding() or getattr(jax.tree_util.tree_leaves(batch)[0], "sharding", None)
        aux = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), info)
        return self.step.lower(params, opt_state, frozen, Resident(batch, key, aux), _abstract(self.loss, sharding))


def data_mesh(devices: Sequence[Any] | None = None):
    """A 1-D mesh named ``"batch"`` over ``devices`` (default: every visible device, all hosts)."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.sharding.Mesh(np.asarray(devices), ("batch",))


def shard(tree: Any, mesh, spec) -> Any:
    """``jax.device_put`` every array of ``tree`` with ``NamedSharding(mesh, spec)`` (global arrays)."""
    sharding = jax.sharding.NamedSharding(mesh, spec)
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    # multi-host: every process holds the same host batch; each device takes its slice
    return jax.tree_util.tree_map(
        lambda a: jax.make_array_from_callback(np.shape(a), sharding, lambda idx: np.asarray(a)[idx]), tree
    )
