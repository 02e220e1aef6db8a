"""Drop-ins for ``tvm.support.popen_pool``: ``PopenWorker`` and ``PopenPoolExecutor``.

Change ``from tvm.support.popen_pool import ...`` to ``from tunebox.popen_pool import ...``.
Same constructor arguments, same methods, same exceptions (``TimeoutError`` at a deadline,
``ChildProcessError`` when the worker dies, the task's own exception type with the worker's
traceback as its message), same ``StatusKind`` and ``MapResult``. Callables and arguments travel
with cloudpickle, as TVM sends them (lambdas and closures work).

What tunebox adds underneath: the worker is killed with its whole process group at the deadline
(helpers it started die too) and reaped; it dies with the parent (``PR_SET_PDEATHSIG``); a crash
is reported with its signal or exit code; the next worker starts at once after a crash, a timeout
or the last of ``maximum_uses``, not at the next call; numpy arrays and other large buffers travel
out of band through shared memory instead of a pipe; functions the parent imports from its own
``sys.path`` (a test module, a script's folder) import in the worker too.

The timeout counts the call itself, as in TVM's worker: unpickling the function and its
arguments (which may import modules) happens before the clock starts, and the worker times the
call (a timer thread ends it at the timeout, as TVM's answers then). A call that runs past it is
``TimeoutError``; one that holds the GIL so the timer cannot run (native code) is killed by the
parent at ``timeout`` plus a slack (``KILL_SLACK_S`` + ``KILL_SLACK_FRACTION`` of the timeout),
whatever the worker does.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from typing import IO, TYPE_CHECKING, Any, NamedTuple, TypeVar, Union

from tunebox import _calls, _native

if TYPE_CHECKING:
    from typing import Literal

    from typing_extensions import Self, TypeAlias

    #: Where a worker's output goes: None (inherit), ``subprocess.DEVNULL``, ``subprocess.PIPE``,
    #: a path, a file descriptor or an open file.
    _Output: TypeAlias = Union[None, int, str, bytes, os.PathLike[str], os.PathLike[bytes], IO[Any]]
    #: One call of a batch: its ``(args, kwargs)``.
    _Call: TypeAlias = tuple[tuple[Any, ...], dict[str, Any]]

_T = TypeVar("_T")

__all__ = ["MapResult", "PopenPoolExecutor", "PopenWorker", "StatusKind"]


class StatusKind(IntEnum):
    """Running and return value status, as TVM's."""

    RUNNING = 0
    COMPLETE = 1
    EXCEPTION = 2
    TIMEOUT = 3


class MapResult(NamedTuple):
    """Result of :meth:`PopenPoolExecutor.map_with_error_catching`.

    ``status`` is a :class:`StatusKind`; ``value`` the function's result (``COMPLETE``) or the
    exception (``EXCEPTION``, ``TIMEOUT``).
    """

    status: StatusKind
    value: Any


def _worker_command() -> tuple[str, list[str]]:
    return sys.executable, ["-m", "tunebox._worker"]


def _output(stream: _Output, name: str) -> tuple[str, str | None]:
    """TVM's ``stdout``/``stderr`` values as tunebox's: None inherits, ``subprocess.DEVNULL``
    discards, ``subprocess.PIPE`` captures the tail (quoted in crash errors), a path or an open
    file (its descriptor) appends."""
    if stream is None:
        return ("inherit", None)
    if stream == subprocess.DEVNULL:
        return ("null", None)
    if stream == subprocess.PIPE:
        return ("capture", None)
    if isinstance(stream, (str, bytes, os.PathLike)):
        return ("file", os.fsdecode(stream))
    fileno: Any = stream if isinstance(stream, int) else getattr(stream, "fileno", None)
    if callable(fileno):
        try:
            fileno = fileno()
        except (OSError, ValueError):
            fileno = None
    if isinstance(fileno, int) and fileno >= 0:
        if hasattr(stream, "flush"):
            stream.flush()
        return ("file", f"/proc/self/fd/{fileno}")
    raise ValueError(
        f"{name}={stream!r}: use None (inherit), subprocess.DEVNULL, subprocess.PIPE, a path, "
        "a file descriptor or an open file"
    )


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        raise TypeError(f"timeout={timeout!r}: use a number of seconds or None")
    return max(float(timeout), 0.0)


class PopenWorker:
    """One isolated worker process, as TVM's ``PopenWorker``.

    Parameters
    ----------
    initializer : callable or None
        Called (with ``initargs``) in every new worker process before its first task.
    initargs : tuple
        Arguments of ``initializer``.
    maximum_uses : int or None
        Calls a process serves before it is replaced (None: until a timeout or crash).
    stdout, stderr : None, subprocess.DEVNULL, subprocess.PIPE, path, fd or file
        Where the worker's output goes (None: the parent's).
    env : dict or None
        Variables set in the worker on top of the parent's environment (tunebox's addition:
        ``{"CUDA_VISIBLE_DEVICES": "1"}`` pins a worker to a GPU).

    ``send`` starts the call; ``recv`` returns its result or raises ``TimeoutError``,
    ``ChildProcessError`` or the task's exception. A worker that timed out or died is replaced
    before ``recv`` returns.
    """

    def __init__(
        self,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
        maximum_uses: int | None = None,
        stdout: _Output = None,
        stderr: _Output = None,
        env: Mapping[str, object] | None = None,
    ) -> None:
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be callable for PopenWorker")
        if maximum_uses is not None and (not isinstance(maximum_uses, int) or maximum_uses < 0):
            raise ValueError(f"maximum_uses={maximum_uses!r}: use None or a positive integer")
        program, args = _worker_command()
        init = None
        if initializer is not None:
            init = _calls.dumps_inband((initializer, tuple(initargs), {}))
        # ("sent", the call's timeout) or ("error", what send raised), until recv.
        self._pending: tuple[str, Any] | None = None
        self._modules: set[str] = set()
        self._native = _native.Worker(
            program,
            args,
            _output(stdout, "stdout"),
            _output(stderr, "stderr"),
            initializer=init,
            # TVM treats 0 like None: no limit.
            maximum_uses=maximum_uses or None,
            env=[("TUNEBOX_PYTHON_PATH", os.pathsep.join(p for p in sys.path if p))]
            + [(str(k), str(v)) for k, v in (env or {}).items()],
        )

    def __del__(self) -> None:
        native = getattr(self, "_native", None)
        if native is not None:
            native.kill()

    def kill(self) -> None:
        """Kills the worker's process group and reaps it; the next ``send`` starts a new one. A
        ``recv`` another thread is waiting in ends at once, raising ``ChildProcessError``."""
        self._pending = None
        self._native.kill()

    def join(self, timeout: float | None = None) -> None:
        """Waits up to ``timeout`` seconds (None: forever) for the worker process to end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._native.is_alive():
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(0.001)

    def is_alive(self) -> bool:
        """Whether the worker process is running."""
        return self._native.is_alive()

    @property
    def pid(self) -> int | None:
        """The worker's pid, or None when none runs."""
        return self._native.pid

    def start(self) -> None:
        """Starts the worker process now (otherwise the first ``send`` does)."""
        self._native.start()

    def send(
        self,
        fn: Callable[..., Any],
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Starts ``fn(*args, **kwargs)`` in the worker, with ``timeout`` seconds for the call.

        Errors (a dead worker, an initializer that failed) are raised by the ``recv`` that
        follows, as in TVM. Call ``recv`` before the next ``send``.
        """
        timeout = _check_timeout(timeout)
        self._remember_module(fn)
        # A function of the script being run (``__main__``) is pickled by value: cloudpickle.
        fast = getattr(fn, "__module__", None) != "__main__"
        data, views = _calls.dumps_call(fn, tuple(args), dict(kwargs) if kwargs else {}, fast)
        try:
            # The views stay alive (and the GIL held) while tunebox copies them.
            if timeout is None:
                self._native.put(_calls.CALL, data, _calls.addresses(views))
            else:
                self._native.load(data, _calls.addresses(views), LOAD_TIMEOUT_S)
                self._native.put(_calls.RUN, struct.pack("<d", timeout))
            self._pending = ("sent", timeout)
        except Exception as error:  # noqa: BLE001 - raised by recv
            self._pending = ("error", error)

    def _remember_module(self, fn: Callable[..., Any]) -> None:
        """Fresh processes import the module ``fn`` comes from before they are needed."""
        module = getattr(fn, "__module__", None)
        if isinstance(module, str) and module != "__main__" and module not in self._modules:
            self._modules.add(module)
            self._native.preload(module)

    def recv(self) -> Any:
        """The result of the last ``send``.

        Raises
        ------
        TimeoutError
            The call ran past its timeout; the worker's process group was killed.
        ChildProcessError
            The worker died (the message names the signal or exit code).
        Exception
            The task's own exception, its message the worker's traceback.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("PopenWorker.recv() without a send() before it")
        kind, detail = pending
        if kind == "error":
            raise detail
        timeout = detail
        kill_at = None if timeout is None else timeout * (1 + KILL_SLACK_FRACTION) + KILL_SLACK_S
        status, data, buffers = self._native.get(kill_at)
        if status == _calls.TIMEOUT:
            self._native.kill(respawn=True)
            raise TimeoutError(
                f"the call ran past its timeout of {timeout} s; the worker was replaced"
            )
        value = _calls.loads(data, buffers)
        if status == _calls.COMPLETE:
            return value
        raise value

    def _run_batch(
        self, fn: Callable[..., Any], calls: Sequence[_Call], timeout: float | None
    ) -> list[MapResult]:
        """Runs ``fn(*args, **kwargs)`` for each ``(args, kwargs)`` of ``calls`` in this worker
        in one round trip (each call with ``timeout``), as :meth:`send` + :meth:`recv` would
        one by one; returns the :class:`MapResult` of the first calls, in order: all of them,
        or fewer when the batch ended early (a call timed out or killed the worker: it is the
        last one returned; the caller sends the rest again).

        The worker writes each call's outcome into a shared results region as it finishes, so a
        worker that dies part way loses only the call it was running."""
        self._remember_module(fn)
        fast = getattr(fn, "__module__", None) != "__main__"
        try:
            data, views = _calls.dumps_call(fn, list(calls), timeout, fast)
            self._native.put(_calls.BATCH, data, _calls.addresses(views), BATCH_REGION_BYTES)
        except Exception as error:  # noqa: BLE001 - the first call reports it, as recv would
            return [MapResult(StatusKind.EXCEPTION, error)]
        kill_at = None
        if timeout is not None:
            kill_at = len(calls) * (timeout * (1 + KILL_SLACK_FRACTION) + KILL_SLACK_S)
        try:
            status, data, buffers = self._native.get(kill_at)
        except Exception as error:  # noqa: BLE001 - the call it was running gets it
            done = self._finished(self._native.region())
            kind = StatusKind.TIMEOUT if isinstance(error, TimeoutError) else StatusKind.EXCEPTION
            return done + [MapResult(kind, error)]
        value = _calls.loads(data, buffers)
        if status != _calls.COMPLETE:
            # (fn, calls) could not be unpickled: every call fails as its own would.
            return [MapResult(StatusKind.EXCEPTION, value)] * len(calls)
        count, tail = value
        done = self._finished(self._native.region())[:count]
        if tail is not None:
            tail_status, tail_value = tail
            if tail_status == _calls.TIMEOUT:
                self._native.kill(respawn=True)
                tail_value = TimeoutError(
                    f"the call ran past its timeout of {timeout} s; the worker was replaced"
                )
            done.append(MapResult(StatusKind(tail_status), tail_value))
        return done

    @staticmethod
    def _finished(region: bytes) -> list[MapResult]:
        return [
            MapResult(StatusKind(status), value) for status, value in _calls.region_records(region)
        ]


# The results region of a batch: records of the calls' outcomes (a larger result comes in the
# reply, ending the batch there).
BATCH_REGION_BYTES = 256 * 1024

# The most calls of map_with_error_catching in one batch, and the batches per worker it aims for.
BATCH_MAX_CALLS = 64
BATCHES_PER_WORKER = 4

# The worker ends itself at the timeout (its timer thread, as TVM's); the parent kills a call
# that has not answered by timeout * (1 + KILL_SLACK_FRACTION) + KILL_SLACK_S, for a call that
# holds the GIL, leaving room for a death or a reply to reach it on a loaded machine.
KILL_SLACK_S = 1.0
KILL_SLACK_FRACTION = 0.1

# Unpickling a call (imports included) may take this long before the worker is deemed hung.
LOAD_TIMEOUT_S = 300.0

_STOP = object()


class PopenPoolExecutor:
    """A pool of isolated workers, as TVM's ``PopenPoolExecutor``.

    Parameters
    ----------
    max_workers : int or None
        Number of worker processes (None: ``os.cpu_count()``), started as tasks arrive.
    timeout : float or None
        Seconds each call may run.
    initializer, initargs, maximum_process_uses, stdout, stderr
        As :class:`PopenWorker`'s, for every worker.

    Without a ``timeout``, a task submitted while a worker is idle and nothing waits in the
    queue is sent by the calling thread itself, and ``result()`` on that thread receives its
    reply (the GIL released while it waits): one task at a time costs no hand-off between
    threads. The pool's thread for that worker takes the reply instead when something else waits
    for the future (a callback, ``concurrent.futures.wait``, ``as_completed``, ``result`` with a
    timeout) or the next task needs the worker. Such a ``result()`` waits in native code, as
    :meth:`PopenWorker.recv` does: a KeyboardInterrupt reaches Python when the reply comes.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        timeout: float | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: Iterable[Any] = (),
        maximum_process_uses: int | None = None,
        stdout: _Output = None,
        stderr: _Output = None,
    ) -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers={max_workers!r}: use a positive integer or None")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be callable for PopenPoolExecutor")
        self._timeout = _check_timeout(timeout)
        self._max_workers = max_workers
        self._worker_args = (initializer, initargs, maximum_process_uses, stdout, stderr)
        # What the pool's threads and futures share (not the pool: it must stay collectable,
        # so that its finalizer stops the workers of a pool nobody shut down).
        self._dispatch = _Dispatch(self._timeout)
        self._queue = self._dispatch.queue
        # Guards the slots' states, the count of queued jobs and the shutdown flag.
        self._lock = self._dispatch.lock
        self._slots = self._dispatch.slots
        self._threads: list[threading.Thread] = []
        self._workers: list[PopenWorker] = []
        self._shutdown = False
        # Workers die with the pool even if shutdown() is never called.
        self._finalizer = weakref.finalize(self, _stop_all, self._queue, self._workers)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.shutdown(wait=True)
        return False

    def submit(
        self, fn: Callable[..., _T], *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[_T]:
        """Runs ``fn(*args, **kwargs)`` in a worker; returns a ``concurrent.futures.Future``
        whose ``result()`` raises as :meth:`PopenWorker.recv` does."""
        return self._submit(fn, args, kwargs, catch=False)

    def map_with_error_catching(
        self, fn: Callable[[Any], Any], iterator: Iterable[Any]
    ) -> Iterator[MapResult]:
        """``fn(x)`` for each ``x``, in order, each as a :class:`MapResult` (exceptions and
        timeouts caught). Returns an iterator, as TVM's; every call is submitted at once.

        The calls go to the workers in batches (up to ``BATCH_MAX_CALLS``, about
        ``BATCHES_PER_WORKER`` per worker), one round trip each, unless ``maximum_process_uses``
        is set: each call still has the pool's timeout and its own result, exception or
        timeout, and a call that kills its worker or runs past its timeout costs only itself
        (the rest of its batch runs again in a fresh worker)."""
        items = list(iterator)
        maximum_uses = self._worker_args[2]
        if maximum_uses is not None or len(items) < 2:
            futures = [self._submit(fn, (x,), {}, catch=True) for x in items]
        else:
            size = -(-len(items) // (self._max_workers * BATCHES_PER_WORKER))
            size = max(1, min(BATCH_MAX_CALLS, size))
            # One future per batch, whose result is the batch's MapResults.
            batches: list[concurrent.futures.Future[list[MapResult]]] = []
            for start in range(0, len(items), size):
                batch = _Batch(fn, [((x,), {}) for x in items[start : start + size]])
                batches.append(batch.future)
                self._enqueue(batch)

            def batched() -> Iterator[MapResult]:
                for future in batches:
                    yield from future.result()

            return batched()

        def results() -> Iterator[MapResult]:
            for future in futures:
                yield future.result()

        return results()

    def shutdown(self, wait: bool = True) -> None:
        """Stops the workers; with ``wait``, after the tasks already submitted are done."""
        with self._lock:
            self._shutdown = True
        self._queue.put(_STOP)
        if wait:
            for thread in list(self._threads):
                thread.join()
        self._finalizer()

    def _submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        catch: bool,
    ) -> concurrent.futures.Future[Any]:
        direct = self._take_idle_slot(catch)
        if direct is None:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._enqueue((future, fn, args, kwargs, catch))
            return future
        slot = direct._tunebox[1]
        # The slot's `collecting` lock is held (see _take_idle_slot) until the call is sent, so
        # that no thread waits for its reply before that.
        try:
            slot.worker.send(fn, args, kwargs, self._timeout)
        except Exception as error:  # noqa: BLE001 - the future reports it, as _run does
            slot.direct = None
            self._dispatch.set_state(slot, _IDLE, unless=_BUSY)
            _fail(direct, error, catch)
        finally:
            slot.collecting.release()
        return direct

    def _take_idle_slot(self, catch: bool) -> _DirectFuture | None:
        """A :class:`_DirectFuture` on a worker that is idle with no job queued ahead, marked as
        running a call that the calling thread sends now, its ``collecting`` lock held; None
        when there is no such worker."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a PopenPoolExecutor after shutdown")
            # With a timeout a call is two requests, the first a round trip (unpickling, which
            # may import, outside the call's timeout): submit would wait for it.
            if self._dispatch.queued or self._timeout is not None:
                return None
            for slot in self._slots:
                if slot.state == _IDLE and slot.collecting.acquire(blocking=False):
                    slot.state = _DIRECT
                    future = _DirectFuture(self._dispatch, slot, catch)
                    future.set_running_or_notify_cancel()
                    slot.direct = future
                    return future
            return None

    def _enqueue(self, job: Any) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a PopenPoolExecutor after shutdown")
            self._dispatch.queued += 1
            self._queue.put(job)
            idle = sum(slot.state == _IDLE for slot in self._slots)
            if idle < self._dispatch.queued and len(self._slots) < self._max_workers:
                self._add_slot()

    def _add_slot(self) -> None:
        worker = PopenWorker(*self._worker_args)
        slot = _Slot(worker)
        self._workers.append(worker)
        self._slots.append(slot)
        thread = threading.Thread(
            target=_serve,
            args=(self._dispatch, slot),
            name=f"tunebox-popen-{len(self._threads)}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()


class _Dispatch:
    """What a pool's threads and direct futures share: the job queue, the slots (one per
    worker) and their states, the count of queued jobs, under one lock."""

    __slots__ = ("queue", "lock", "slots", "queued", "timeout")

    def __init__(self, timeout: float | None) -> None:
        # Jobs: _STOP, a _Collect, a _Batch, or (future, fn, args, kwargs, catch) of a call.
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.slots: list[_Slot] = []
        self.queued = 0
        self.timeout = timeout

    def set_state(self, slot: _Slot, state: int, unless: int | None = None) -> None:
        with self.lock:
            if slot.state != unless:
                slot.state = state

    def took_job(self, slot: _Slot) -> _DirectFuture | None:
        """Called by ``slot``'s thread when it took a job: the job is no longer queued, the
        slot is busy; returns the call sent to it directly, which is collected first."""
        with self.lock:
            self.queued -= 1
            slot.state = _BUSY
            return slot.direct


# A slot's states: waiting for a job; running a call that the submitting thread sent (a
# _DirectFuture); running a job its thread took from the queue (or starting its worker).
_IDLE = 0
_DIRECT = 1
_BUSY = 2


class _Slot:
    """One worker of a pool, its state (guarded by the pool's lock) and the call sent to it
    directly, whose reply is not yet collected."""

    __slots__ = ("worker", "state", "direct", "collecting")

    def __init__(self, worker: PopenWorker) -> None:
        self.worker = worker
        self.state = _BUSY  # until its thread has started the worker
        self.direct: _DirectFuture | None = None
        # Held by the one thread that receives the direct call's reply.
        self.collecting = threading.Lock()


class _Collect(NamedTuple):
    """A job for any pool thread: receive the reply of a direct call that something other than
    ``result()`` on the submitting thread waits for."""

    future: _DirectFuture


class _DirectFuture(concurrent.futures.Future):
    """The future of a call the submitting thread sent itself (see :class:`PopenPoolExecutor`):
    ``result()`` and ``exception()`` without a timeout receive the reply on the calling thread
    when no other thread does; anything else that waits hands the receiving to a pool
    thread."""

    def __init__(self, dispatch: _Dispatch, slot: _Slot, catch: bool) -> None:
        super().__init__()
        self._tunebox = (dispatch, slot, catch)
        self._tunebox_handed_over = False
        # concurrent.futures.wait and as_completed add their waiters here.
        self._waiters = _Waiters(self)

    def result(self, timeout: float | None = None) -> Any:
        self._wait_for_reply(timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait_for_reply(timeout)
        return super().exception(timeout)

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        super().add_done_callback(fn)
        if not self.done():
            self._hand_over()

    def _wait_for_reply(self, timeout: float | None) -> None:
        if self.done():
            return
        if timeout is None:
            self._collect(block=False)
        else:
            self._hand_over()

    def _hand_over(self) -> None:
        """Has a pool thread receive the reply (once)."""
        if not self._tunebox_handed_over:
            self._tunebox_handed_over = True
            self._tunebox[0].queue.put(_Collect(self))

    def _collect(self, block: bool) -> None:
        """Receives the reply and completes this future, unless another thread is doing it
        (``block``: then wait for that thread) or did."""
        dispatch, slot, catch = self._tunebox
        if not slot.collecting.acquire(blocking=block):
            return
        try:
            if slot.direct is not self:
                return
            try:
                _finish(slot.worker, self, catch)
            finally:
                slot.direct = None
                # The slot's own thread may have taken a job meanwhile: it stays busy then.
                dispatch.set_state(slot, _IDLE, unless=_BUSY)
        finally:
            slot.collecting.release()


class _Waiters(list):
    """A future's waiter list that hands the reply's receiving to a pool thread when
    ``concurrent.futures.wait`` or ``as_completed`` adds a waiter."""

    __slots__ = ("future",)

    def __init__(self, future: _DirectFuture) -> None:
        super().__init__()
        # Not a reference: a cycle would keep the future and its result (an array on shared
        # memory) alive until the garbage collector ran.
        self.future = weakref.ref(future)

    def append(self, waiter: object) -> None:
        super().append(waiter)
        future = self.future()
        if future is not None:
            future._hand_over()


def _serve(dispatch: _Dispatch, slot: _Slot) -> None:
    """One pool thread: starts its worker at once, then runs jobs until the pool stops; first
    receives the reply of a call sent to its worker directly, when one is outstanding."""
    worker = slot.worker
    try:
        worker.start()
    except Exception:  # noqa: BLE001, S110 - the first send reports it
        pass
    dispatch.set_state(slot, _IDLE, unless=_DIRECT)
    jobs = dispatch.queue
    while True:
        job = jobs.get()
        if job is _STOP:
            jobs.put(_STOP)  # for the next thread
            direct = slot.direct
            if direct is not None:
                direct._collect(block=True)
            return
        if isinstance(job, _Collect):
            job.future._collect(block=True)
            continue
        direct = dispatch.took_job(slot)
        if direct is not None:
            direct._collect(block=True)
        if isinstance(job, _Batch):
            _run_batch(worker, job, dispatch.timeout)
        else:
            future, fn, args, kwargs, catch = job
            if future.set_running_or_notify_cancel():
                _run(worker, future, fn, args, kwargs, catch, dispatch.timeout)
            del future, fn, args, kwargs
        del job, direct
        dispatch.set_state(slot, _IDLE)


class _Batch:
    """Calls of one ``map_with_error_catching`` that go to a worker together, and the future
    of their :class:`MapResult` list."""

    __slots__ = ("fn", "calls", "future")

    def __init__(self, fn: Callable[..., Any], calls: list[_Call]) -> None:
        self.fn = fn
        self.calls = calls
        self.future: concurrent.futures.Future[list[MapResult]] = concurrent.futures.Future()


def _run_batch(worker: PopenWorker, batch: _Batch, timeout: float | None) -> None:
    """Runs a batch on ``worker`` until every call has its result, sending again in a fresh
    worker what a call that timed out or killed the worker left unrun."""
    if not batch.future.set_running_or_notify_cancel():
        return
    calls = batch.calls
    results: list[MapResult] = []
    try:
        while len(results) < len(calls):
            done = worker._run_batch(batch.fn, calls[len(results) :], timeout)
            if not done:  # never: a batch returns at least the call that ended it
                done = [
                    MapResult(
                        StatusKind.EXCEPTION, RuntimeError("tunebox: a batch returned nothing")
                    )
                ]
            results.extend(done[: len(calls) - len(results)])
    except BaseException as error:  # noqa: BLE001 - each call left gets it, none is lost
        results.extend([MapResult(StatusKind.EXCEPTION, error)] * (len(calls) - len(results)))
    batch.future.set_result(results)


def _run(
    worker: PopenWorker,
    future: concurrent.futures.Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    catch: bool,
    timeout: float | None,
) -> None:
    try:
        worker.send(fn, args, kwargs, timeout)
    except Exception as error:  # noqa: BLE001 - a call that cannot be pickled
        _fail(future, error, catch)
    else:
        _finish(worker, future, catch)


def _finish(worker: PopenWorker, future: concurrent.futures.Future[Any], catch: bool) -> None:
    """Receives the reply of the call sent to ``worker`` and completes ``future`` with it."""
    try:
        value = worker.recv()
    except Exception as error:  # noqa: BLE001 - every task error goes to its future
        _fail(future, error, catch)
    else:
        future.set_result(MapResult(StatusKind.COMPLETE, value) if catch else value)


def _fail(future: concurrent.futures.Future[Any], error: BaseException, catch: bool) -> None:
    if not catch:
        future.set_exception(error)
    elif isinstance(error, TimeoutError):
        future.set_result(MapResult(StatusKind.TIMEOUT, error))
    else:
        future.set_result(MapResult(StatusKind.EXCEPTION, error))


def _stop_all(jobs: queue.SimpleQueue[Any], workers: list[PopenWorker]) -> None:

    jobs.put(_STOP)
    for worker in workers:
        try:
            worker.kill()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass
