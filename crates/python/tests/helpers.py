"""Task functions the tests send to workers by reference (this folder is on the parent's
sys.path, which tunebox passes on to its workers)."""

import os
import signal
import subprocess
import sys
import time
from typing import IO, Any

STATE: list[Any] = []


def init(*values):
    STATE[:] = values


def state():
    return list(STATE)


def failing_init():
    raise KeyError("no such device")


def identity_after(x, seconds):
    time.sleep(seconds)
    return x


def pid():
    return os.getpid()


def kill_self(signum):
    os.kill(os.getpid(), signum)
    time.sleep(10)


def leave_grandchild_and_hang(pidfile):
    """Starts a long sleep (a helper process of the task), records its pid, then hangs."""
    child = subprocess.Popen(["sleep", "300"])
    with open(pidfile, "w") as f:
        f.write(str(child.pid))
    time.sleep(300)


def exit_with(code):
    sys.exit(code)


def write_stdout(text):
    print(text)
    return len(text)


def unpicklable():
    import threading

    return threading.Lock()


class CustomError(Exception):
    """An exception type of the tests' own."""


def raise_custom(message):
    raise CustomError(message)


def segfault():
    import ctypes

    ctypes.string_at(0)


SIGKILL = signal.SIGKILL


def getenv(name):
    return os.environ.get(name)


COUNT = [0]
KEPT: list[IO[str]] = []


def count_and_keep(path):
    """Counts its calls in a module global; the second call leaves a thread running and the
    third a file open (kept in a global), as a module's cache or pool would."""
    import threading

    COUNT[0] += 1
    if COUNT[0] == 2:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    if COUNT[0] == 3:
        KEPT.append(open(path, "w"))  # noqa: SIM115 - kept open on purpose
    return COUNT[0], os.getpid()


KEPT_ARRAYS: list[Any] = []


def keep_array(a):
    """Keeps the array it got (on the request's shared memory) in a global."""
    KEPT_ARRAYS.append(a)
    return float(a[0])


def kept_firsts():
    return [float(a[0]) for a in KEPT_ARRAYS] + [float(a[-1]) for a in KEPT_ARRAYS]


def echo(a):
    return a


def first_and_last(a):
    return float(a[0]), float(a[-1])
