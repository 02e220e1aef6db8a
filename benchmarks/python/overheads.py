"""Overheads of tunebox's Python face against TVM's PopenPoolExecutor and Python's
ProcessPoolExecutor, in one run (`cargo xtask python-bench`; docs/performance.md).

Measured for each pool: cold start (constructor to the first result of a trivial task), round
trip (one worker, one trivial task at a time), throughput (10,000 trivial tasks on 2 workers),
crash -> next result (a task that kills its worker, then the time until the next task's result)
and a 256 MiB numpy array to the worker and back: the first to a fresh worker, and a second one
to the same worker. Each figure is the median of --repeat runs,
with the min and max.

ProcessPoolExecutor uses the platform's default start method (fork on Linux), its fastest; a
crash breaks it (BrokenProcessPool), so its "crash -> next result" includes making a new pool.
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time


def trivial(x=0):
    return x


def die():
    os._exit(1)


def echo(a):
    return a


def tunebox_pool(workers):
    from tunebox.popen_pool import PopenPoolExecutor

    return PopenPoolExecutor(max_workers=workers)


def tvm_pool(workers):
    from tvm.support.popen_pool import PopenPoolExecutor

    return PopenPoolExecutor(max_workers=workers)


def python_pool(workers):
    return concurrent.futures.ProcessPoolExecutor(max_workers=workers)


POOLS = {
    "tunebox.popen_pool": tunebox_pool,
    "tvm PopenPoolExecutor": tvm_pool,
    "ProcessPoolExecutor": python_pool,
}


def close(pool):
    try:
        pool.shutdown(wait=True)
    except Exception:  # noqa: BLE001
        pass


def cold_start(make):
    start = time.perf_counter()
    pool = make(1)
    pool.submit(trivial, 1).result()
    elapsed = time.perf_counter() - start
    close(pool)
    return elapsed


def round_trip(make, calls):
    pool = make(1)
    pool.submit(trivial).result()
    start = time.perf_counter()
    for i in range(calls):
        pool.submit(trivial, i).result()
    elapsed = (time.perf_counter() - start) / calls
    close(pool)
    return elapsed


def throughput(make, tasks):
    pool = make(2)
    for f in [pool.submit(trivial) for _ in range(4)]:
        f.result()
    start = time.perf_counter()
    if hasattr(pool, "map_with_error_catching"):
        results = list(pool.map_with_error_catching(trivial, range(tasks)))
    else:
        results = list(pool.map(trivial, range(tasks)))
    elapsed = time.perf_counter() - start
    assert len(results) == tasks
    close(pool)
    return tasks / elapsed


def crash_to_next(make, name):
    pool = make(1)
    pool.submit(trivial).result()
    start = time.perf_counter()
    try:
        pool.submit(die).result()
    except Exception:  # noqa: BLE001 - the crash, as each pool reports it
        pass
    try:
        pool.submit(trivial, 2).result()
    except concurrent.futures.process.BrokenProcessPool:
        close(pool)
        pool = make(1)
        pool.submit(trivial, 2).result()
    elapsed = time.perf_counter() - start
    close(pool)
    return elapsed


def big_array(make, mib, again=False):
    """The first array to a fresh worker (which imports numpy for it, unless it has it from its
    start as TVM's has), or with ``again`` a second one to that worker, of the same size."""
    import numpy as np

    a = np.ones(mib * 1024 * 1024 // 8, dtype=np.float64)
    pool = make(1)
    pool.submit(trivial).result()
    if again:
        b = pool.submit(echo, a).result()
        del b
        a = np.full(a.shape, 2.0)
    start = time.perf_counter()
    b = pool.submit(echo, a).result()
    elapsed = time.perf_counter() - start
    assert b.shape == a.shape and b[-1] == a[-1]
    del b
    close(pool)
    return elapsed


def measure(name, make, args):
    rows = {}
    rows["cold start (s)"] = [cold_start(make) for _ in range(args.repeat)]
    rows["round trip (us)"] = [round_trip(make, args.calls) * 1e6 for _ in range(args.repeat)]
    rows["10k tasks on 2 workers (tasks/s)"] = [
        throughput(make, args.tasks) for _ in range(args.repeat)
    ]
    rows["crash -> next result (s)"] = [crash_to_next(make, name) for _ in range(args.repeat)]
    rows[f"{args.mib} MiB array round trip (s)"] = [
        big_array(make, args.mib) for _ in range(args.repeat)
    ]
    rows[f"{args.mib} MiB array again, same worker (s)"] = [
        big_array(make, args.mib, again=True) for _ in range(args.repeat)
    ]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1000, help="round trips per run")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="1 run, 200 calls, 1000 tasks, 64 MiB")
    parser.add_argument("--only", action="append", choices=list(POOLS), help="pools to run")
    parser.add_argument("--json", default=os.path.join("target", "python", "bench.json"))
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.calls, args.tasks, args.mib = 1, 200, 1000, 64
    results = {}
    for name, make in POOLS.items():
        if args.only and name not in args.only:
            continue
        try:
            results[name] = measure(name, make, args)
        except ImportError as error:
            print(f"skipping {name}: {error}", file=sys.stderr)
    metrics = list(next(iter(results.values())).keys())
    ours, tvm = "tunebox.popen_pool", "tvm PopenPoolExecutor"
    ratio = ours in results and tvm in results
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\n{os.cpu_count()} CPUs, load average {load:.2f} at the end; median (min-max) of {args.repeat} run(s)\n"
    )
    print("| metric | " + " | ".join(results) + (" | tunebox vs TVM |" if ratio else " |"))
    print("|---" * (len(results) + 1 + ratio) + "|")
    for metric in metrics:
        cells = []
        for name in results:
            values = results[name][metric]
            cells.append(
                f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"
            )
        if ratio:
            a, b = (statistics.median(results[n][metric]) for n in (ours, tvm))
            # Throughput is better higher; every other figure is a time.
            cells.append(f"{(a / b if 'tasks/s' in metric else b / a):.1f}x")
        print(f"| {metric} | " + " | ".join(cells) + " |")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)


def fmt(x):
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.1:
        return f"{x:.2f}"
    return f"{x:.3f}"


if __name__ == "__main__":
    main()
