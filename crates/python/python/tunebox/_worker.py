"""The worker process: ``python -m tunebox._worker``, started by tunebox, never by hand.

It serves requests through tunebox's worker loop (``tunebox._native.serve_worker``): the
handshake, the parent-death signal and the request loop are tunebox-worker's; :func:`handle` runs
each pickled call.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, Union

from tunebox import _calls

if TYPE_CHECKING:
    import threading

    from typing_extensions import TypeAlias

    from tunebox._native import SharedView

#: A reply: (status, pickle, the addresses of its out-of-band buffers, the objects that own them).
_Reply: TypeAlias = tuple[int, bytes, list[tuple[int, int]], Any]
#: A request's buffers, as ``tunebox._native.serve_worker`` hands them over.
_Buffers: TypeAlias = list[Union[bytearray, "SharedView"]]
#: What unpickling a request gave: ("ok", the request) or ("error", the exception).
_Loaded: TypeAlias = tuple[str, Any]

# The reply to a LOAD or WARM.
_NOTHING: _Reply = (_calls.COMPLETE, b"", [], None)

# What the last LOAD kept for the next RUN: ("ok", (fn, args, kwargs)) or ("error", exception).
_loaded: _Loaded | None = None


def handle(op: int, data: bytes, buffers: _Buffers) -> _Reply:
    """Runs one request; returns ``(status, pickle, buffers)`` (see ``tunebox._calls``)."""
    global _loaded
    if op == _calls.LOAD:
        _loaded = _load(data, buffers)
        return _NOTHING
    if op == _calls.WARM:
        _import_all(data.decode().split("\n"))
        return _NOTHING
    if op == _calls.BATCH:
        return _batch(data, buffers)
    timeout: float | None = None
    loaded: _Loaded | None
    if op == _calls.RUN:
        (timeout,) = struct.unpack("<d", data)
        loaded, _loaded = _loaded, None
        if loaded is None:
            missing: _Loaded = ("error", RuntimeError("tunebox: RUN without a LOAD before it"))
            loaded = missing
    else:
        loaded = _load(data, buffers)
    if loaded[0] == "error":
        # Unpickling failed: the exception already carries the worker's traceback.
        if op == _calls.INIT:
            raise RuntimeError(str(loaded[1]))
        return _reply(loaded[1])
    try:
        fn, args, kwargs = loaded[1]
        timer = _arm(timeout)
        started = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
        finally:
            if timer is not None:
                timer.cancel()
        if timeout is not None and time.perf_counter() - started > timeout:
            # Too late, as TVM's worker reports it; the parent replaces this worker.
            return _calls.TIMEOUT, b"", [], None
    except SystemExit as stop:
        _exit_now(stop.code)
    except BaseException as exception:  # noqa: BLE001 - every task error goes back as a value
        if op == _calls.INIT:
            raise RuntimeError(traceback.format_exc()) from None
        return _exception_reply(exception)
    finally:
        _flush()
    try:
        data, views = _calls.dumps_result(value)
    except Exception as exception:  # noqa: BLE001
        return _exception_reply(
            TypeError(f"tunebox: could not pickle the result of {fn!r}: {exception}")
        )
    return _calls.COMPLETE, data, _calls.addresses(views), views


def _batch(data: bytes, buffers: _Buffers) -> _Reply:
    """Runs ``fn(*args, **kwargs)`` for each call of a batch in turn, each with the batch's
    timeout, writing each outcome into the results region (the last buffer) as it finishes.

    Replies ``(count, None)`` when every call's outcome is in the region, or ``(count,
    (status, value))`` when call ``count`` ended the batch early: its result did not fit in the
    region (it travels in the reply, large buffers out of band) or it ran past the timeout (the
    parent replaces this worker and sends the rest again)."""
    region = _calls.writable(buffers[-1])
    loaded = _load(data, buffers[:-1])
    if loaded[0] == "error":
        return _reply(loaded[1])
    fn, calls, timeout = loaded[1]
    offset = 0
    for index, (args, kwargs) in enumerate(calls):
        status, value = _call(fn, args, kwargs, timeout)
        if status == _calls.TIMEOUT:
            return _batch_reply(index, (status, None))
        try:
            payload = _calls.dumps_inband(value) if status == _calls.EXCEPTION else _inband(value)
        except Exception as exception:  # noqa: BLE001
            status = _calls.EXCEPTION
            value = _with_traceback(
                TypeError(f"tunebox: could not pickle the result of {fn!r}: {exception}")
            )
            payload = _calls.dumps_inband(value)
        next_offset = _calls.write_record(region, offset, status, payload)
        if next_offset is None:
            return _batch_reply(index, (status, value))
        offset = next_offset
    return _batch_reply(len(calls), None)


def _inband(value: object) -> bytes:
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - not picklable by reference: cloudpickle
        return _calls.dumps_inband(value)


def _batch_reply(count: int, tail: tuple[int, Any] | None) -> _Reply:
    try:
        data, views = _calls.dumps_result((count, tail))
    except Exception as exception:  # noqa: BLE001
        message = f"tunebox: could not pickle the result of a call: {exception}"
        data, views = _calls.dumps_result((count, (_calls.EXCEPTION, TypeError(message))))
    return _calls.COMPLETE, data, _calls.addresses(views), views


def _call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
) -> tuple[int, Any]:
    """``(status, value)`` of one call of a batch: the value, or the exception with the
    worker's traceback; ``sys.exit`` ends the worker, as in a single call."""
    try:
        timer = _arm(timeout)
        started = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
        finally:
            if timer is not None:
                timer.cancel()
        if timeout is not None and time.perf_counter() - started > timeout:
            return _calls.TIMEOUT, None
        return _calls.COMPLETE, value
    except SystemExit as stop:
        _exit_now(stop.code)
    except BaseException as exception:  # noqa: BLE001 - every task error goes back as a value
        return _calls.EXCEPTION, _with_traceback(exception)
    finally:
        _flush()


def _arm(timeout: float | None) -> _Watch | None:
    """TVM's watcher: a thread that ends the worker when the call runs past ``timeout``, with
    the exit code the parent reads as a timeout (the parent's own kill, at ``timeout`` plus a
    slack, covers a call that holds the GIL). Returns what ``cancel()`` disarms, or None.

    One watcher thread serves every call: starting a ``threading.Timer`` per call cost more than
    a trivial call itself."""
    if timeout is None:
        return None
    _WATCH.arm(timeout)
    return _WATCH


class _Watch:
    """The watcher thread, started with the first call that has a timeout. ``arm`` sets the
    deadline and wakes it; ``cancel`` clears it without a wake (the thread, waking at the old
    deadline, finds none and sleeps again)."""

    def __init__(self) -> None:
        self._condition: threading.Condition | None = None
        self._deadline: float | None = None

    def arm(self, timeout: float) -> None:
        if self._condition is None:
            import threading

            self._condition = threading.Condition(threading.Lock())
            threading.Thread(
                target=self._run, args=(self._condition,), name="tunebox-timeout", daemon=True
            ).start()
        with self._condition:
            self._deadline = time.monotonic() + timeout
            self._condition.notify()

    def cancel(self) -> None:
        if self._condition is None:
            return  # never armed: nothing to cancel
        with self._condition:
            self._deadline = None

    def _run(self, condition: threading.Condition) -> None:
        with condition:
            while True:
                if self._deadline is None:
                    condition.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    _timed_out()
                condition.wait(left)


_WATCH = _Watch()


def _timed_out() -> NoReturn:
    _flush()
    os._exit(int(os.environ.get("TUNEBOX_PYTHON_TIMED_OUT_EXIT", "211")))


def _import_all(modules: Iterable[str]) -> None:
    """Imports what the calls so far came from, so that the next call's unpickling finds them."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001, S112 - the call itself will report it
            continue


def _load(data: bytes, buffers: _Buffers) -> _Loaded:
    try:
        return "ok", _calls.loads(data, buffers)
    except BaseException as exception:  # noqa: BLE001 - reported by the call
        return "error", _with_traceback(exception)


def _with_traceback(exception: BaseException) -> BaseException:
    """TVM's convention: the same exception type, its message the worker's traceback."""
    text = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    try:
        copy = type(exception)(text)
        _calls.loads(_calls.dumps_inband(copy))
        return copy
    except Exception:  # noqa: BLE001 - a type that cannot be rebuilt from a message
        return RuntimeError(text)


def _exception_reply(exception: BaseException) -> _Reply:
    return _reply(_with_traceback(exception))


def _reply(exception: BaseException) -> _Reply:
    try:
        data = _calls.dumps_inband(exception)
    except Exception:  # noqa: BLE001
        data = _calls.dumps_inband(RuntimeError(str(exception)))
    return _calls.EXCEPTION, data, [], None


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream loses nothing of ours
            pass


def _exit_now(code: object) -> NoReturn:
    """``sys.exit`` in a task ends the worker, as in TVM's (the parent sees it die)."""
    _flush()
    if code is None:
        os._exit(0)
    if isinstance(code, int):
        os._exit(code & 0xFF)
    print(code, file=sys.stderr)
    _flush()
    os._exit(1)


def _extend_path() -> None:
    """The parent's ``sys.path`` (``TUNEBOX_PYTHON_PATH``), so that functions pickled by reference
    from modules it can import (a test module, a script's folder) import here too."""
    extra = os.environ.get("TUNEBOX_PYTHON_PATH")
    if not extra:
        return
    for entry in extra.split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)


def main() -> NoReturn:

    _extend_path()
    from tunebox import _native

    code = _native.serve_worker(handle)
    _flush()
    # Skip interpreter teardown: threads a task left running must not keep the worker alive.
    os._exit(code)


if __name__ == "__main__":
    main()
