"""tunebox.popen_pool.PopenPoolExecutor: TVM's behaviour."""

import concurrent.futures
import os
import time

import pytest

import helpers
from tunebox.popen_pool import MapResult, PopenPoolExecutor, StatusKind


def test_submit_returns_futures_and_each_failure_is_its_own():
    pool = PopenPoolExecutor(max_workers=2, timeout=0.5)
    slow = pool.submit(helpers.identity_after, 1, 60)
    dies = pool.submit(helpers.exit_with, -1)
    fine = pool.submit(helpers.identity_after, 3, 0)
    raises = pool.submit(helpers.raise_custom, "bad")
    assert isinstance(fine, concurrent.futures.Future)
    with pytest.raises(TimeoutError):
        slow.result()
    with pytest.raises(ChildProcessError):
        dies.result()
    with pytest.raises(helpers.CustomError):
        raises.result()
    assert fine.result() == 3
    pool.shutdown()


def test_map_with_error_catching_keeps_order_and_statuses():
    pool = PopenPoolExecutor(max_workers=2, timeout=1.0)

    def task(x):
        import time

        if x == 3:
            raise ValueError("three")
        if x == 5:
            time.sleep(60)
        return x * x

    results = list(pool.map_with_error_catching(task, range(8)))
    assert [r.status for r in results] == [
        StatusKind.COMPLETE,
        StatusKind.COMPLETE,
        StatusKind.COMPLETE,
        StatusKind.EXCEPTION,
        StatusKind.COMPLETE,
        StatusKind.TIMEOUT,
        StatusKind.COMPLETE,
        StatusKind.COMPLETE,
    ]
    assert all(isinstance(r, MapResult) for r in results)
    assert isinstance(results[3].value, ValueError)
    assert isinstance(results[5].value, TimeoutError)
    assert [r.value for r in results if r.status == StatusKind.COMPLETE] == [0, 1, 4, 16, 36, 49]
    pool.shutdown()


def test_many_tasks_on_few_workers():
    with PopenPoolExecutor(max_workers=3) as pool:
        values = pool.map_with_error_catching(lambda x: x + 1, range(500))
        assert [v.value for v in values] == list(range(1, 501))


def test_initializer_and_maximum_process_uses():
    pool = PopenPoolExecutor(
        max_workers=1, initializer=helpers.init, initargs=("a",), maximum_process_uses=2
    )
    first = pool.submit(os.getpid).result()
    assert pool.submit(os.getpid).result() == first
    assert pool.submit(os.getpid).result() != first
    assert pool.submit(helpers.state).result() == ["a"]
    pool.shutdown()


def test_uses_at_most_max_workers_processes():
    pool = PopenPoolExecutor(max_workers=2)
    pids = {f.result() for f in [pool.submit(helpers.pid) for _ in range(40)]}
    assert 1 <= len(pids) <= 2
    pool.shutdown()


def test_submit_after_shutdown_is_an_error():
    pool = PopenPoolExecutor(max_workers=1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(pow, 1, 1)


def test_bad_max_workers():
    with pytest.raises(ValueError, match="max_workers=0"):
        PopenPoolExecutor(max_workers=0)


def test_map_in_batches_costs_a_crash_or_a_timeout_only_its_own_call(tmp_path):
    """map_with_error_catching sends its calls in batches; a call that kills the worker or runs
    past the timeout in the middle of one is that call's status, the calls before it keep their
    results (from the batch's results region) and run once, the calls after it run in a fresh
    worker."""
    log = tmp_path / "ran"

    def task(x):
        import os
        import time

        with open(log, "a") as f:
            f.write(f"{x}\n")
        if x == 7:
            os._exit(3)
        if x == 19:
            time.sleep(60)
        if x == 23:
            raise KeyError(x)
        return [x] * 3

    pool = PopenPoolExecutor(max_workers=1, timeout=2.0)
    results = list(pool.map_with_error_catching(task, range(40)))
    pool.shutdown()
    assert [r.status for r in results] == [
        StatusKind.EXCEPTION
        if x in (7, 23)
        else StatusKind.TIMEOUT
        if x == 19
        else StatusKind.COMPLETE
        for x in range(40)
    ]
    assert isinstance(results[7].value, ChildProcessError)
    assert isinstance(results[19].value, TimeoutError)
    assert isinstance(results[23].value, KeyError) and "Traceback" in str(results[23].value)
    assert all(r.value == [x] * 3 for x, r in enumerate(results) if r.status == StatusKind.COMPLETE)
    ran = [int(line) for line in log.read_text().split()]
    assert sorted(ran) == list(range(40)), "each call ran exactly once"


def test_map_in_batches_takes_results_larger_than_the_region():
    np = pytest.importorskip("numpy")
    pool = PopenPoolExecutor(max_workers=2)
    results = list(
        pool.map_with_error_catching(lambda n: np.full(n, n, np.int32), [10, 200_000] * 8)
    )
    pool.shutdown()
    assert [r.status for r in results] == [StatusKind.COMPLETE] * 16
    assert all(
        r.value.shape == (n,) and r.value[-1] == n for n, r in zip([10, 200_000] * 8, results)
    )


def test_map_with_maximum_process_uses_is_not_batched():
    pool = PopenPoolExecutor(max_workers=1, maximum_process_uses=2)
    pids = [r.value for r in pool.map_with_error_catching(lambda _: os.getpid(), range(6))]
    pool.shutdown()
    assert len(set(pids)) == 3


def warm_pool(**kwargs):
    """A pool whose one worker is idle: the next submit is sent by the calling thread."""
    pool = PopenPoolExecutor(max_workers=1, **kwargs)
    assert pool.submit(helpers.pid).result() > 0
    return pool


def test_a_call_sent_by_the_caller_completes_for_callbacks_wait_and_as_completed():
    # Nothing calls result() on these futures: a pool thread must take their replies.
    pool = warm_pool()
    done: concurrent.futures.Future[concurrent.futures.Future[int]] = concurrent.futures.Future()
    pool.submit(helpers.identity_after, 1, 0.05).add_done_callback(done.set_result)
    assert done.result(timeout=30).result() == 1
    waited = pool.submit(helpers.identity_after, 2, 0.05)
    finished, _ = concurrent.futures.wait([waited], timeout=30)
    assert finished == {waited}
    completed = pool.submit(helpers.identity_after, 3, 0.05)
    assert [f._result for f in concurrent.futures.as_completed([completed], timeout=30)] == [3]
    pool.shutdown()


def test_result_with_a_timeout_times_out_and_the_call_goes_on():
    pool = warm_pool()
    slow = pool.submit(helpers.identity_after, 7, 1.0)
    with pytest.raises(concurrent.futures.TimeoutError):
        slow.result(timeout=0.05)
    assert slow.result(timeout=30) == 7
    pool.shutdown()


def test_a_call_queued_behind_one_sent_by_the_caller_waits_for_it():
    pool = warm_pool()
    first = pool.submit(helpers.identity_after, 1, 0.3)
    second = pool.submit(helpers.identity_after, 2, 0)
    assert second.result(timeout=30) == 2
    assert first.done() and first.result() == 1
    assert pool.submit(helpers.identity_after, 3, 0).result() == 3
    pool.shutdown()


def test_a_call_that_cannot_be_pickled_fails_its_future_not_submit():
    import threading

    pool = warm_pool()
    future = pool.submit(helpers.identity_after, threading.Lock(), 0)
    with pytest.raises(TypeError):
        future.result(timeout=30)
    assert pool.submit(helpers.identity_after, 4, 0).result() == 4
    pool.shutdown()


def test_a_death_holds_for_a_call_sent_by_the_caller():
    pool = warm_pool()
    with pytest.raises(ChildProcessError):
        pool.submit(helpers.exit_with, 3).result()
    assert pool.submit(helpers.identity_after, 5, 0).result() == 5
    pool.shutdown()


def test_with_a_timeout_submit_returns_at_once_and_the_deadline_holds():
    pool = warm_pool(timeout=0.5)
    started = time.monotonic()
    slow = pool.submit(helpers.identity_after, 1, 60)
    assert time.monotonic() - started < 5
    with pytest.raises(TimeoutError):
        slow.result()
    assert pool.submit(helpers.identity_after, 5, 0).result() == 5
    pool.shutdown()


def test_shutdown_waits_for_a_call_nobody_collected():
    pool = warm_pool()
    future = pool.submit(helpers.identity_after, 6, 0.2)
    pool.shutdown(wait=True)
    assert future.done() and future.result() == 6


def test_an_idle_pool_does_not_spin():
    psutil = pytest.importorskip("psutil")
    pool = warm_pool()
    for i in range(50):
        assert pool.submit(helpers.identity_after, i, 0).result() == i
    worker = psutil.Process(pool.submit(helpers.pid).result())
    me = psutil.Process()
    before = (me.cpu_times(), worker.cpu_times())
    time.sleep(1.0)
    after = (me.cpu_times(), worker.cpu_times())
    used = sum((a.user + a.system) - (b.user + b.system) for a, b in zip(after, before))
    # Generous: a spin that never stops would use about 1 s of each process.
    assert used < 0.3, f"{used:.3f} s of CPU in 1 s of idling"
    pool.shutdown()


def test_a_future_sent_by_the_caller_is_freed_without_the_garbage_collector():
    # Its result may be an array on shared memory, whose region a later call reuses once freed.
    import gc
    import weakref

    pool = warm_pool()
    gc.disable()
    try:
        future = pool.submit(helpers.identity_after, 8, 0)
        assert future.result() == 8
        freed = weakref.ref(future)
        del future
        assert freed() is None
    finally:
        gc.enable()
    pool.shutdown()


def test_a_pool_nobody_shut_down_stops_its_workers_when_it_is_collected():
    # Its threads and futures hold what they share, not the pool: its finalizer can run.
    import gc

    def gone(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(")")[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    pool = warm_pool()
    pid = pool.submit(helpers.pid).result()
    del pool
    gc.collect()
    deadline = time.monotonic() + 30
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)
