"""tunebox.popen_pool.PopenPoolExecutor: TVM's behaviour."""

import concurrent.futures
import os

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
