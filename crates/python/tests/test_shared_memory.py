"""Large numpy arrays go to the worker and back out of band (shared memory), intact."""

import pytest

from tunebox.popen_pool import PopenWorker

np = pytest.importorskip("numpy")


def test_large_array_round_trip_is_exact_and_writable():
    a = np.arange(4 * 1024 * 1024, dtype=np.float32)  # 16 MiB
    worker = PopenWorker()
    worker.send(lambda x: x * 2, (a,))
    b = worker.recv()
    assert b.dtype == np.float32 and b.shape == a.shape
    assert np.array_equal(b, a * 2)
    assert b.flags.writeable
    b[0] = 7


def test_many_arrays_and_small_ones_in_one_call():
    arrays = [np.full(100_000, i, dtype=np.int64) for i in range(8)]
    small = np.arange(10)
    worker = PopenWorker()
    worker.send(lambda xs, s: [x.sum() for x in xs] + [s.sum()], (arrays, small), timeout=30)
    assert worker.recv() == [100_000 * i for i in range(8)] + [45]


def test_array_the_worker_writes_is_the_workers_copy():
    a = np.zeros(1_000_000)

    def fill(x):
        x[:] = 1
        return x.sum()

    worker = PopenWorker()
    worker.send(fill, (a,))
    assert worker.recv() == 1_000_000
    assert a.sum() == 0
