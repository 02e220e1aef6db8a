"""tunebox.popen_pool.PopenWorker: TVM's behaviour, and what tunebox adds."""

import os
import signal
import subprocess
import time
from typing import Any

import pytest

import helpers
from tunebox.popen_pool import PopenWorker


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); tunebox reaps, so a reaped pid is gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_round_trip_of_builtins_lambdas_and_closures():
    worker = PopenWorker()
    worker.send(pow, (2, 10))
    assert worker.recv() == 1024
    worker.send(lambda x, y=1: x + y, (41,))
    assert worker.recv() == 42
    offset = 100
    worker.send(lambda x: x + offset, (1,))
    assert worker.recv() == 101
    worker.send(helpers.identity_after, ["ok", 0], {}, timeout=5)
    assert worker.recv() == "ok"
    worker.send(dict, kwargs={"a": 1})
    assert worker.recv() == {"a": 1}


def test_runs_in_another_process():
    worker = PopenWorker()
    worker.send(os.getpid)
    child = worker.recv()
    assert child != os.getpid()
    assert worker.pid == child


def test_timeout_raises_kills_the_worker_and_the_next_call_works():
    worker = PopenWorker()
    worker.send(helpers.pid)
    first = worker.recv()
    started = time.monotonic()
    worker.send(helpers.identity_after, [1, 60], timeout=0.2)
    with pytest.raises(TimeoutError):
        worker.recv()
    assert time.monotonic() - started < 30
    assert not pid_alive(first)
    worker.send(helpers.identity_after, [2, 0], timeout=5)
    assert worker.recv() == 2


def test_timeout_kills_the_helpers_a_task_started(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    worker = PopenWorker()
    worker.send(helpers.leave_grandchild_and_hang, [str(pidfile)], timeout=1.0)
    with pytest.raises(TimeoutError):
        worker.recv()
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild), "the task's helper outlived the worker's process group"


@pytest.mark.parametrize(
    "task, args, words",
    [
        (helpers.kill_self, [signal.SIGKILL], "SIGKILL"),
        (helpers.segfault, [], "SIGSEGV"),
        (helpers.exit_with, [3], "code 3"),
        (os._exit, [7], "code 7"),
    ],
)
def test_a_dying_worker_is_child_process_error_naming_how(task, args, words):
    worker = PopenWorker()
    worker.send(task, args)
    with pytest.raises(ChildProcessError, match=words):
        worker.recv()
    worker.send(pow, (3, 2))
    assert worker.recv() == 9


def test_task_exception_keeps_its_type_and_the_worker_traceback():
    worker = PopenWorker()
    worker.send(helpers.raise_custom, ["the candidate failed"])
    with pytest.raises(helpers.CustomError) as info:
        worker.recv()
    text = str(info.value)
    assert "the candidate failed" in text
    assert "Traceback" in text and "raise_custom" in text
    # The worker lives on.
    worker.send(pow, (2, 2))
    assert worker.recv() == 4


def test_exception_while_unpickling_in_the_worker_is_the_calls_exception():
    worker = PopenWorker()
    worker.send(helpers.identity_after, [1, 0], timeout=5)
    assert worker.recv() == 1

    class Unloadable:
        def __reduce__(self):
            return (helpers.raise_custom, ("cannot load",))

    worker.send(len, [Unloadable()], timeout=5)
    with pytest.raises(helpers.CustomError, match="cannot load"):
        worker.recv()


def test_unpicklable_result_is_an_exception():
    worker = PopenWorker()
    worker.send(helpers.unpicklable)
    with pytest.raises(TypeError, match="could not pickle"):
        worker.recv()


def test_initializer_runs_in_every_new_process():
    worker = PopenWorker(initializer=helpers.init, initargs=[1, 2, 3], maximum_uses=2)
    worker.send(helpers.state)
    assert worker.recv() == [1, 2, 3]
    worker.send(helpers.pid)
    first = worker.recv()
    worker.send(helpers.pid)
    second = worker.recv()
    assert second != first
    worker.send(helpers.state)
    assert worker.recv() == [1, 2, 3]


def test_failing_initializer_is_reported_by_recv():
    worker = PopenWorker(initializer=helpers.failing_init)
    worker.send(pow, (2, 2))
    with pytest.raises(Exception, match="no such device"):
        worker.recv()


def test_maximum_uses_recycles_and_reaps_the_old_process():
    worker = PopenWorker(maximum_uses=2)
    worker.send(helpers.pid)
    first = worker.recv()
    worker.send(helpers.pid)
    assert worker.recv() == first
    worker.send(helpers.pid)
    assert worker.recv() != first
    assert not pid_alive(first)


def test_no_maximum_uses_reuses_one_process():
    worker = PopenWorker(maximum_uses=None)
    pids = set()
    for _ in range(20):
        worker.send(helpers.pid)
        pids.add(worker.recv())
    assert len(pids) == 1


def test_a_worker_keeps_what_its_calls_leave_as_tvms_does(tmp_path):
    # Globals, a thread left running and an open file stay for the next call, in one process.
    worker = PopenWorker()
    seen = []
    for _ in range(5):
        worker.send(helpers.count_and_keep, [str(tmp_path / "kept.txt")])
        seen.append(worker.recv())
    assert [count for count, _ in seen] == [1, 2, 3, 4, 5]
    assert len({pid for _, pid in seen}) == 1


def test_calls_with_a_timeout_reuse_one_process():
    # Each call's timer thread is no reason to replace the worker.
    worker = PopenWorker()
    pids = set()
    for _ in range(30):
        worker.send(helpers.pid, timeout=10)
        pids.add(worker.recv())
    assert len(pids) == 1


def test_a_finished_calls_deadline_never_fires_on_the_next_call():
    # One watcher thread serves every call's timeout: disarmed at the end of each call.
    worker = PopenWorker()
    worker.send(helpers.identity_after, (1, 0), timeout=0.3)
    assert worker.recv() == 1
    worker.send(helpers.identity_after, (2, 0.8), timeout=10)
    assert worker.recv() == 2
    started = time.monotonic()
    worker.send(helpers.identity_after, (3, 60), timeout=0.3)
    with pytest.raises(TimeoutError):
        worker.recv()
    assert time.monotonic() - started < 30


def test_stdout_to_a_file(tmp_path):
    out = tmp_path / "out.txt"
    worker = PopenWorker(stdout=str(out))
    worker.send(helpers.write_stdout, ["hello from the worker"])
    assert worker.recv() == len("hello from the worker")
    worker.kill()
    assert "hello from the worker" in out.read_text()


def test_stdout_devnull_and_open_file(tmp_path):
    worker = PopenWorker(stdout=subprocess.DEVNULL)
    worker.send(helpers.write_stdout, ["nobody sees this"])
    assert worker.recv() == len("nobody sees this")
    path = tmp_path / "f.txt"
    with open(path, "w") as f:
        worker = PopenWorker(stdout=f)
        worker.send(helpers.write_stdout, ["through a descriptor"])
        worker.recv()
        worker.kill()
    assert "through a descriptor" in path.read_text()


def test_kill_and_is_alive():
    worker = PopenWorker()
    assert not worker.is_alive()
    worker.send(helpers.pid)
    pid = worker.recv()
    assert worker.is_alive()
    worker.kill()
    assert not worker.is_alive()
    assert not pid_alive(pid)
    worker.send(helpers.pid)
    assert worker.recv() != pid


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="initializer must be callable"):
        PopenWorker(initializer=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stdout="):
        PopenWorker(stdout=object())  # type: ignore[arg-type]
    worker = PopenWorker()
    with pytest.raises(TypeError, match="timeout="):
        worker.send(pow, (1, 1), timeout="soon")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="without a send"):
        worker.recv()


def test_workers_die_with_a_parent_that_is_killed(tmp_path):
    import sys
    import textwrap

    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys, time
            from tunebox.popen_pool import PopenPoolExecutor
            pool = PopenPoolExecutor(max_workers=2)
            pids = {pool.submit(os.getpid).result() for _ in range(20)}
            print(" ".join(map(str, pids)), flush=True)
            time.sleep(300)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert workers and all(pid_alive(p) for p in workers)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in workers), "a worker outlived its killed parent"


def test_env_pins_a_worker_and_the_parents_path_is_passed_on():
    worker = PopenWorker(env={"CUDA_VISIBLE_DEVICES": "3"})
    worker.send(helpers.getenv, ("CUDA_VISIBLE_DEVICES",))
    assert worker.recv() == "3"
    # `helpers` is importable only through this folder, which is on the parent's sys.path.
    worker.send(helpers.state)
    assert worker.recv() == []


def test_a_function_sent_by_value_is_pickled_again_when_what_it_reads_changes():
    """A lambda is cloudpickled once and kept by the worker, until a global it reads is bound
    to another value; a function that writes globals, or closes over a list, travels afresh
    every time, as in TVM."""
    from tunebox import _calls

    worker = PopenWorker()
    scale = 2
    globals()["SCALE_FOR_TEST"] = scale
    f = eval("lambda x: x * SCALE_FOR_TEST", globals())
    worker.send(f, (3,))
    assert worker.recv() == 6
    first = _calls._cached(f)
    assert first is not None and _calls._cached(f) is first
    globals()["SCALE_FOR_TEST"] = 5
    worker.send(f, (3,))
    assert worker.recv() == 15
    assert _calls._cached(f) is not first
    items = [1]
    g = lambda: len(items)  # noqa: E731 - a closure over a list
    assert _calls._cached(g) is None
    worker.send(g)
    assert worker.recv() == 1
    items.append(2)
    worker.send(g)
    assert worker.recv() == 2
    writes: dict[str, Any] = {}
    exec("def bump():\n    global N\n    N = N + 1\n    return N\n", writes)
    writes["N"] = 0
    assert _calls._cached(writes["bump"]) is None
    worker.kill()


def test_a_results_region_gives_back_the_whole_records_only():
    """The batch results region's format lives in ``tunebox._calls`` alone: what
    ``write_record`` writes, ``region_records`` reads, and a record torn by a worker's death
    (its bytes written, its length not yet) or one running past the region is left out."""
    import pickle

    from tunebox import _calls

    region = bytearray(64)
    offset = _calls.write_record(region, 0, 0, pickle.dumps(1))
    assert offset is not None
    offset = _calls.write_record(region, offset, 2, pickle.dumps("x"))
    assert offset is not None
    assert _calls.write_record(region, offset, 0, pickle.dumps(b"y" * 64)) is None
    assert _calls.region_records(bytes(region)) == [(0, 1), (2, "x")]
    # Torn: the third record's bytes are there, its length is still 0.
    torn = bytearray(region)
    payload = pickle.dumps(3)
    torn[offset + 4] = 0
    torn[offset + 5 : offset + 5 + len(payload)] = payload
    assert _calls.region_records(bytes(torn)) == [(0, 1), (2, "x")]
    # A length that runs past the region's end ends the records too.
    cut = bytearray(region)
    cut[offset : offset + 4] = (1000).to_bytes(4, "little")
    assert _calls.region_records(bytes(cut)) == [(0, 1), (2, "x")]
    assert _calls.region_records(b"") == []
