"""The worker process: ``python -m tunebox._worker``, started by tunebox, never by hand.

It serves requests through tunebox's worker loop (``tunebox._native.serve_worker``): the
handshake, the parent-death signal and the request loop are tunebox-worker's; :func:`handle` runs
each pickled call.
"""

import os
import struct
import sys
import time
import traceback

from tunebox import _calls

# The reply to a LOAD or WARM: (status, pickle, buffer addresses, their owners).
_NOTHING = (_calls.COMPLETE, b"", [], None)

# What the last LOAD kept for the next RUN: ("ok", (fn, args, kwargs)) or ("error", exception).
_loaded = None


def handle(op, data, buffers):
    """Runs one request; returns ``(status, pickle, buffers)`` (see ``tunebox._calls``)."""
    global _loaded
    if op == _calls.LOAD:
        _loaded = _load(data, buffers)
        return _NOTHING
    if op == _calls.WARM:
        _import_all(data.decode().split("\n"))
        return _NOTHING
    timeout = None
    if op == _calls.RUN:
        (timeout,) = struct.unpack("<d", data)
        loaded, _loaded = _loaded, None
        if loaded is None:
            loaded = ("error", RuntimeError("tunebox: RUN without a LOAD before it"))
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


def _arm(timeout):
    """TVM's watcher: a timer thread that ends the worker when the call runs past ``timeout``,
    with the exit code the parent reads as a timeout (the parent's own kill, at ``timeout`` plus
    a slack, covers a call that holds the GIL)."""
    if timeout is None:
        return None
    import threading

    timer = threading.Timer(timeout, _timed_out)
    timer.daemon = True
    timer.start()
    return timer


def _timed_out():
    _flush()
    os._exit(int(os.environ.get("TUNEBOX_PYTHON_TIMED_OUT_EXIT", "211")))


def _import_all(modules):
    """Imports what the calls so far came from, so that the next call's unpickling finds them."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001, S112 - the call itself will report it
            continue


def _load(data, buffers):
    try:
        return "ok", _calls.loads(data, buffers)
    except BaseException as exception:  # noqa: BLE001 - reported by the call
        return "error", _with_traceback(exception)


def _with_traceback(exception):
    """TVM's convention: the same exception type, its message the worker's traceback."""
    text = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    try:
        copy = type(exception)(text)
        _calls.loads(_calls.dumps_inband(copy))
        return copy
    except Exception:  # noqa: BLE001 - a type that cannot be rebuilt from a message
        return RuntimeError(text)


def _exception_reply(exception):
    return _reply(_with_traceback(exception))


def _reply(exception):
    try:
        data = _calls.dumps_inband(exception)
    except Exception:  # noqa: BLE001
        data = _calls.dumps_inband(RuntimeError(str(exception)))
    return _calls.EXCEPTION, data, [], None


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream loses nothing of ours
            pass


def _exit_now(code):
    """``sys.exit`` in a task ends the worker, as in TVM's (the parent sees it die)."""
    _flush()
    if code is None:
        os._exit(0)
    if isinstance(code, int):
        os._exit(code & 0xFF)
    print(code, file=sys.stderr)
    _flush()
    os._exit(1)


def _extend_path():
    """The parent's ``sys.path`` (``TUNEBOX_PYTHON_PATH``), so that functions pickled by reference
    from modules it can import (a test module, a script's folder) import here too."""
    extra = os.environ.get("TUNEBOX_PYTHON_PATH")
    if not extra:
        return
    for entry in extra.split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)


def main():
    _extend_path()
    from tunebox import _native

    code = _native.serve_worker(handle)
    _flush()
    # Skip interpreter teardown: threads a task left running must not keep the worker alive.
    os._exit(code)


if __name__ == "__main__":
    main()
