"""Where runs execute: a local process pool, SLURM (or local processes) through submitit, or Dask.

gradlab schedules nothing itself: every executor hands ``RemoteRun()(spec_dict, out, probe,
cache, threads)`` calls to an existing engine and yields ``(run id, record or exception)`` as
they finish; the launcher names each run once (:class:`Call`'s ``id``) and no executor rebuilds
a spec to learn it. Only the run's spec dict and a few strings travel; a worker builds everything
else (data, encoder, jitted functions) itself. Leases in the store (``_store``) make a
double execution impossible whatever an engine retries.

``submitit`` and ``distributed`` come with the optional ``cluster`` extra
(``pip install "gradlab[cluster]"``); ``import gradlab`` never imports them.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["EXECUTORS", "DASK_CONNECT_TIMEOUT_S", "make_executor", "parse_executor_option", "default_jobs", "LocalExecutor", "SubmititExecutor",
           "DaskExecutor"]

EXECUTORS = ("local", "submitit", "dask")
#: Seconds a Dask client tries to reach its scheduler before the launch fails (Dask's own default is 30).
DASK_CONNECT_TIMEOUT_S = 5.0
class Call(NamedTuple):
    """One run to execute: its id (computed once, by the launcher), its spec dict, the store, the
    store's probe token, the compilation cache directory; ``args`` is what a worker is called with."""

    id: str
    spec: dict[str, Any]
    out: str
    probe: str | None
    cache: str | None

    def args(self, threads: int | None = None) -> tuple:
        return (self.spec, self.out, self.probe, self.cache) if threads is None else (
            self.spec, self.out, self.probe, self.cache, threads)


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _init_worker(threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it terminates us on Ctrl-C
    from gradlab.threads import limit_threads

    limit_threads(threads)


def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"this executor needs {module!r}: pip install \"gradlab[cluster]\"") from None


def parse_executor_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(key, value)``: an int, a float, true/false, ``resources=GPU:1,MEM:4e9``
    (a dict), else the text.

    Examples:
      >>> parse_executor_option("timeout_min=60"), parse_executor_option("slurm_partition=gpu")
      (('timeout_min', 60), ('slurm_partition', 'gpu'))
      >>> parse_executor_option("resources=GPU:1")
      ('resources', {'GPU': 1})
    """
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise ValueError(f"--executor-opt expects KEY=VALUE; got {text!r}")
    if key == "resources":
        out = {}
        for item in raw.split(","):
            name, colon, amount = item.partition(":")
            value = _scalar(amount.strip())
            if not colon or not name.strip() or isinstance(value, (str, bool)):
                raise ValueError(f"resources expects NAME:AMOUNT[,NAME:AMOUNT...]; got {raw!r}")
            out[name.strip()] = value
        return key, out
    return key, _scalar(raw)


def _scalar(raw: str) -> Any:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _threads(options: dict[str, Any], default: int | None) -> int | None:
    threads = options.pop("threads", default)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"executor option threads must be an integer >= 1; got {threads!r}")
    return threads


class LocalExecutor:
    """Runs in this process (``jobs=1``) or in ``jobs`` spawned processes of one thread each."""

    name = "local"

    def __init__(self, jobs: int | None = None, **options: Any):
        if options:
            raise ValueError(f"the local executor takes no options; got {', '.join(sorted(options))}")
        self.jobs = default_jobs() if jobs is None else int(jobs)
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1; got {self.jobs}")
        self._pool = None

    def run(self, calls: Sequence[Call]) -> Iterator[tuple[str, Any]]:
        from gradlab.experiments._worker import run_one

        if self.jobs == 1:
            for call in calls:
                try:
                    rec = run_one(*call.args())
                except Exception as exc:  # noqa: BLE001 - reported as not done, retried
                    rec = exc
                yield call.id, rec
            return
        yield from self._run_pool(calls)

    def _run_pool(self, calls: Sequence[Call]) -> Iterator[tuple[str, Any]]:
        import multiprocessing as mp
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        from gradlab.experiments._worker import run_one

        self._pool = ProcessPoolExecutor(max_workers=min(self.jobs, len(calls)), mp_context=mp.get_context("spawn"),
                                         initializer=_init_worker, initargs=(1,))
        ids = {}
        for call in calls:
            ids[self._pool.submit(run_one, *call.args())] = call.id
        pending = set(ids)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                try:
                    yield ids[f], f.result()
                except Exception as exc:  # noqa: BLE001 - BrokenProcessPool: a worker was killed
                    yield ids[f], exc
        self._pool.shutdown(wait=True)
        self._pool = None

    def cancel(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.cancel()


class SubmititExecutor:
    """submitit's ``AutoExecutor(folder=OUT/.submitit)``: a SLURM job array where ``sbatch``
    exists (``slurm_array_parallelism`` bounds it), else local processes (at most ``jobs``
    at a time); ``slurm_*`` options without ``sbatch`` are an error unless ``cluster=local``
    says to run locally. Options are ``update_parameters`` keywords (``timeout_min``,
    ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``, ``slurm_partition``, ...) plus
    ``threads`` (XLA / BLAS threads per run), ``cluster`` (``slurm``, ``local``, ``debug``),
    ``poll_s`` (seconds between status checks) and ``runs_per_task``: how many runs one job
    (one array task, one fresh Python process) executes in turn. A fresh process pays its
    start-up and imports once per task, so locally the runs are split evenly over the ``jobs``
    tasks (the default); on SLURM the default is one run per task (the finest requeueing).
    """

    name = "submitit"

    def __init__(self, folder: str | os.PathLike, jobs: int | None = None, **options: Any):
        submitit = _need("submitit")
        options = dict(options)
        cluster = options.pop("cluster", None)
        if cluster is None:
            cluster = "slurm" if shutil.which("sbatch") else "local"
            slurm_only = sorted(k for k in options if k.startswith("slurm_"))
            if cluster == "local" and slurm_only:
                raise ValueError(f"submitit: {', '.join(slurm_only)} given, but sbatch is not on PATH, so the runs "
                                 "would execute here, not on SLURM; load SLURM (or run from a login node), or add "
                                 "--executor-opt cluster=local to run them locally")
        self.poll_s = float(options.pop("poll_s", 2.0 if cluster == "slurm" else 0.2))
        per_task = options.pop("runs_per_task", None if cluster != "slurm" else 1)
        if per_task is not None and (isinstance(per_task, bool) or int(per_task) != per_task or int(per_task) < 1):
            raise ValueError(f"submitit: runs_per_task must be an integer >= 1; got {per_task!r}")
        self.runs_per_task = None if per_task is None else int(per_task)
        self.threads = _threads(options, None if cluster == "slurm" else 1)
        self.window = None if cluster == "slurm" else (default_jobs() if jobs is None else int(jobs))
        self.cluster = cluster
        self.executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
        self.fn = _remote()
        if cluster == "slurm" and jobs is not None:
            options.setdefault("slurm_array_parallelism", int(jobs))
        if cluster != "slurm":
            options = {k: v for k, v in options.items() if not k.startswith("slurm_")}
        try:
            self.executor.update_parameters(**options)
        except (NameError, AssertionError) as exc:
            raise ValueError(" ".join(f"submitit: {exc}".split())) from None
        self._jobs: list[Any] = []

    def run(self, calls: Sequence[Call]) -> Iterator[tuple[str, Any]]:
        from gradlab.experiments._worker import RemoteRuns

        fn = RemoteRuns(self.fn)
        calls = [(c.id, c.args(self.threads)) for c in calls]
        per_task = self.runs_per_task or max(1, -(-len(calls) // (self.window or 1)))
        queue = [calls[i:i + per_task] for i in range(0, len(calls), per_task)]  # one task each
        running: dict[Any, list[str]] = {}
        while queue or running:
            room = len(queue) if self.window is None else self.window - len(running)
            if room > 0 and queue:
                batch, queue = queue[:room], queue[room:]
                jobs = self.executor.map_array(fn, [[args for _, args in task] for task in batch])
                for job, task in zip(jobs, batch, strict=True):
                    running[job] = [rid for rid, _ in task]
                self._jobs.extend(jobs)
            finished = [j for j in running if j.done()]
            for job in finished:
                rids = running.pop(job)
                try:
                    results = job.result()
                except Exception as exc:  # noqa: BLE001 - killed, timed out, preempted beyond requeue
                    results = [exc] * len(rids)
                yield from zip(rids, results, strict=True)
            if not finished:
                time.sleep(self.poll_s)

    def cancel(self) -> None:
        for job in self._jobs:
            if not job.done():
                try:
                    job.cancel(check=False)
                except Exception:  # noqa: BLE001 - best effort, the job may have ended
                    pass
        self._jobs = []

    def close(self) -> None:
        self._jobs = []


class DaskExecutor:
    """``dask.distributed``: a running scheduler (``address`` or ``scheduler_file``), or a
    ``LocalCluster`` of ``jobs`` one-thread processes when neither is given. Options:
    ``resources`` (``{"GPU": 1}``: Dask worker resources each run needs), ``threads``,
    ``scheduler_file``, ``client`` (an existing ``Client``), ``connect_timeout_s`` (how long to
    try to reach the scheduler, default ``DASK_CONNECT_TIMEOUT_S``; an unreachable one is an
    ``OSError`` naming it).
    """

    name = "dask"

    def __init__(self, address: str | None = None, jobs: int | None = None, **options: Any):
        distributed = _need("distributed")
        options = dict(options)
        self.resources = options.pop("resources", None)
        if self.resources is not None and not isinstance(self.resources, Mapping):
            raise ValueError(f"resources must be NAME:AMOUNT pairs; got {self.resources!r}")
        scheduler_file = options.pop("scheduler_file", None)
        client = options.pop("client", None)
        timeout = options.pop("connect_timeout_s", DASK_CONNECT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"executor option connect_timeout_s must be a number of seconds > 0; got {timeout!r}")
        self.threads = _threads(options, None)
        if options:
            raise ValueError(f"unknown dask executor option(s) {', '.join(sorted(options))}; valid: resources, "
                             "threads, scheduler_file, connect_timeout_s")
        self._own, self._cluster = client is None, None
        if client is not None:
            self.client = client
        elif address or scheduler_file:
            where = f"scheduler file {str(scheduler_file)!r}" if scheduler_file else f"{address}"
            try:
                self.client = (distributed.Client(scheduler_file=str(scheduler_file), timeout=timeout)
                               if scheduler_file else distributed.Client(address, timeout=timeout))
            except (OSError, TimeoutError, ValueError) as exc:
                why = " ".join(str(exc).split())
                why = "" if not why or "timed out" in why.lower() else f" ({why})"
                raise OSError(f"cannot reach the Dask scheduler at {where} within {timeout:g} s{why}; is it "
                              "running? (executor option connect_timeout_s=S waits longer)") from None
        else:
            n = default_jobs() if jobs is None else int(jobs)
            self._cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True)
            self.client = distributed.Client(self._cluster)
            self.threads = self.threads or 1
        self._futures: list[Any] = []
        self.fn = _remote()

    def run(self, calls: Sequence[Call]) -> Iterator[tuple[str, Any]]:
        import uuid

        from distributed import as_completed

        fn = self.fn
        ids = {}
        for call in calls:
            fut = self.client.submit(fn, *call.args(self.threads), pure=False, resources=self.resources,
                                     key=f"gradlab-run-{call.id}-{uuid.uuid4().hex[:8]}")
            ids[fut.key] = call.id
            self._futures.append(fut)
        for fut in as_completed(list(self._futures)):
            try:
                yield ids[fut.key], fut.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker and friends: not done, retried
                yield ids[fut.key], exc
        self._futures = []

    def cancel(self) -> None:
        if self._futures:
            self.client.cancel(self._futures)
        self._futures = []

    def close(self) -> None:
        self.cancel()
        if self._own:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def _remote():
    """The callable a cluster worker runs (an attribute ``fn`` of each cluster executor)."""
    from gradlab.experiments._worker import RemoteRun

    return RemoteRun()


def make_executor(executor: Any, out: str | os.PathLike, *, jobs: int | None = None,
                  options: Mapping[str, Any] | None = None):
    """An executor from its name (``local``, ``submitit``, ``dask``) and options, or ``executor`` itself
    when it is already an object with ``run`` / ``cancel`` / ``close``."""
    options = dict(options or {})
    if not isinstance(executor, str):
        if options:
            raise ValueError("executor options go with an executor name, not an executor object")
        for method in ("run", "cancel", "close"):
            if not callable(getattr(executor, method, None)):
                raise TypeError(f"an executor object needs run, cancel and close methods; {executor!r} lacks {method}")
        return executor
    if executor == "local":
        return LocalExecutor(jobs, **options)
    if executor == "submitit":
        return SubmititExecutor(Path(out) / ".submitit", jobs, **options)
    if executor == "dask":
        return DaskExecutor(options.pop("address", None), jobs, **options)
    raise ValueError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
