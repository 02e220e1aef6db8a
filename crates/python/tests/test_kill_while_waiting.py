"""Killing a worker, or shutting a pool down without waiting, while another thread waits on a
call: the call ends at once, instead of the kill waiting for its reply."""

import threading
import time

import pytest

import helpers
from tunebox.popen_pool import PopenPoolExecutor, PopenWorker


def test_kill_ends_a_call_another_thread_waits_on():
    worker = PopenWorker()
    worker.send(helpers.identity_after, (5, 30.0))
    outcome: list[object] = []

    def receive():
        try:
            outcome.append(worker.recv())
        except Exception as error:  # noqa: BLE001 - the outcome is what is checked
            outcome.append(error)

    waiter = threading.Thread(target=receive)
    waiter.start()
    time.sleep(0.5)
    start = time.monotonic()
    worker.kill()
    killed_after = time.monotonic() - start
    waiter.join(10)
    assert not waiter.is_alive(), "the waiting recv() did not end"
    assert killed_after < 5, f"kill() waited {killed_after:.1f} s for the call"
    assert isinstance(outcome[0], ChildProcessError), outcome
    # The worker serves the next call, with no error left over from the kill.
    worker.send(helpers.identity_after, (7, 0.0))
    assert worker.recv() == 7


def test_shutdown_without_waiting_returns_while_a_call_runs():
    pool = PopenPoolExecutor(max_workers=1)
    running = pool.submit(helpers.identity_after, 1, 30.0)
    time.sleep(0.5)
    start = time.monotonic()
    pool.shutdown(wait=False)
    assert time.monotonic() - start < 5, "shutdown(wait=False) waited for the running call"
    with pytest.raises(Exception):  # noqa: B017, PT011 - killed: how it is reported is TVM's
        running.result(timeout=10)
