"""Large numpy arrays go to the worker and back out of band (shared memory), intact."""

import pytest

import helpers
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


def test_more_arrays_than_one_message_carries_go_in_band():
    arrays = [np.full(20_000, i, dtype=np.float64) for i in range(70)]  # 160 KB each
    worker = PopenWorker()
    worker.send(lambda xs: [x * 2 for x in xs], (arrays,))
    back = worker.recv()
    assert len(back) == 70 and all(np.array_equal(b, a * 2) for a, b in zip(arrays, back))


def test_empty_and_non_contiguous_arrays():
    worker = PopenWorker()
    big = np.arange(1_000_000, dtype=np.int32).reshape(1000, 1000)
    worker.send(lambda a, b: (a, b.copy()), (np.zeros(0), big[:, ::2]))
    empty, strided = worker.recv()
    assert empty.shape == (0,)
    assert np.array_equal(strided, big[:, ::2])


def test_received_arrays_live_on_the_shared_memory_and_outlive_the_worker():
    """Neither side copies a received buffer: the array is a writable view of the mapping,
    which lives as long as the array (after the worker is gone, after the message)."""
    a = np.arange(2 * 1024 * 1024, dtype=np.float64)  # 16 MiB

    def in_place(x):
        x *= 3  # the worker's view is writable
        return x, type(x.base).__name__

    worker = PopenWorker()
    worker.send(in_place, (a,))
    b, base = worker.recv()
    assert base in ("ndarray", "memoryview")
    assert np.array_equal(b, a * 3) and b.flags.writeable
    assert not np.shares_memory(a, b)
    worker.kill()
    del worker
    import gc

    gc.collect()
    b += 1  # the parent's mapping outlives the worker and the reply
    assert b[-1] == a[-1] * 3 + 1
    view = b[10:20]
    del b
    gc.collect()
    assert np.array_equal(view, a[10:20] * 3 + 1)


def test_an_array_the_task_returns_from_its_arguments_comes_back_without_a_copy():
    """An argument the task returns (or a slice of it) is handed back as a reference to the
    request's shared buffer, which the parent still maps: both results share its memory."""
    a = np.arange(1024 * 1024, dtype=np.float64)  # 8 MiB
    worker = PopenWorker()
    worker.send(lambda x: (x, x[10:20_000], x * 2), (a,))
    whole, part, doubled = worker.recv()
    assert np.array_equal(whole, a) and np.array_equal(part, a[10:20_000])
    assert np.array_equal(doubled, a * 2)
    assert np.shares_memory(whole, part) and not np.shares_memory(whole, doubled)
    assert not np.shares_memory(whole, a)
    whole[10] = -1
    assert part[0] == -1
    worker.kill()


SPARE_SIZE = 2 * 1024 * 1024 // 8  # 2 MiB of float64: large enough to reuse its region


def test_arrays_of_one_size_sent_again_and_again_arrive_intact():
    # The later calls reuse the regions of the earlier ones.
    worker = PopenWorker()
    for fill in range(6):
        worker.send(helpers.first_and_last, (np.full(SPARE_SIZE, float(fill)),))
        assert worker.recv() == (fill, fill)


def test_an_array_sent_back_keeps_its_contents_while_more_are_sent():
    worker = PopenWorker()
    worker.send(helpers.echo, (np.full(SPARE_SIZE, 1.0),))
    kept = worker.recv()
    for fill in range(2, 5):
        worker.send(helpers.echo, (np.full(SPARE_SIZE, float(fill)),))
        assert worker.recv()[-1] == fill
    assert kept[0] == 1.0 and kept[-1] == 1.0


def test_an_array_the_task_keeps_in_the_worker_keeps_its_contents():
    worker = PopenWorker()
    worker.send(helpers.keep_array, (np.full(SPARE_SIZE, 1.0),))
    assert worker.recv() == 1.0
    for fill in range(2, 5):
        worker.send(helpers.first_and_last, (np.full(SPARE_SIZE, float(fill)),))
        assert worker.recv() == (fill, fill)
    worker.send(helpers.kept_firsts)
    assert worker.recv() == [1.0, 1.0]
