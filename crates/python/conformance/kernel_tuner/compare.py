"""Runs Kernel Tuner's vector_add example with tunebox.kernel_tuner and with Kernel Tuner, and
compares the configurations each measured and their verification outcomes.

Usage: python compare.py [--size N]   (N overrides the example's 72 Mi floats, for a quick run)
"""

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
LINE = re.compile(r"^((?:\w+=[^,]+, )+)(time=|ok|wrong|crashed|timeout|compile_error|error)")


def variant(text, size, for_kernel_tuner):
    if size is not None:
        text = text.replace("size = 72 * 1024 * 1024", f"size = {size}")
    if for_kernel_tuner:
        text = text.replace(
            "from tunebox.kernel_tuner import tune_kernel", "from kernel_tuner import tune_kernel"
        )
    return text


def run(text, name):
    path = ROOT / "target" / "python" / f"vector_add_{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # Run beside the script, not in the checkout: Kernel Tuner compiles through temp_*.c
        # files in its working directory and leaves them there when it aborts the run.
        child = subprocess.Popen(
            [sys.executable, str(path)], stdout=out, stderr=err, text=True, cwd=path.parent
        )
        # wait4: the exit status and the peak resident memory of the script's largest process
        # (Linux counts the children it waited for, so a worker can be the largest).
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    print(
        f"{name}: {elapsed:.1f} s wall, peak {usage.ru_maxrss / 1024:.0f} MiB resident, "
        f"load average {load:.2f} at the start"
    )
    configs = {}
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match and not line.startswith("best"):
            key = match.group(1).rstrip(", ")
            configs.setdefault(key, "ok" if match.group(2) == "time=" else match.group(2))
    return child.returncode, elapsed, configs, stderr[-2000:]


def worker_start(runs=30):
    """The engine worker's start, exec to exit, median and min over `runs` (ms): the Rust
    worker tune_kernel uses (tunebox-worker, carried by the extension), the Python launcher it
    falls back to (python -IS, the extension alone) and the `tunebox-engine-worker` console
    script. Started by hand, without a parent, each exits once tunebox-worker's loop finds no
    server to talk to: what it costs to get there is its start."""
    import shutil
    import statistics
    import sysconfig

    from tunebox import _native
    from tunebox.kernel_tuner import _python_worker

    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEBOX_WORKER")}
    with tempfile.TemporaryDirectory() as folder:
        workers = {"Rust worker": str(_native.engine_worker())}
        workers["launcher (python -IS)"] = _python_worker(folder)
        script = shutil.which("tunebox-engine-worker", path=sysconfig.get_path("scripts"))
        if script:
            workers["console script"] = script
        for name, path in workers.items():
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                subprocess.run([path], env=env, stderr=subprocess.DEVNULL, check=False)
                times.append((time.perf_counter() - start) * 1e3)
            print(
                f"engine worker start, {name}: median {statistics.median(times):.1f} ms, "
                f"min {min(times):.1f} ms ({runs} runs)"
            )


def main():
    size = None
    if len(sys.argv) == 3 and sys.argv[1] == "--size":
        size = int(sys.argv[2])
    worker_start()
    text = (HERE / "vector_add.py").read_text()
    ours = run(variant(text, size, False), "tunebox")
    print(f"tunebox.kernel_tuner: exit {ours[0]} in {ours[1]:.1f} s, {len(ours[2])} configurations")
    if ours[0] != 0:
        print(ours[3])
        return 1
    try:
        import kernel_tuner  # noqa: F401
    except ImportError:
        print("Kernel Tuner is not installed: no comparison")
        return 0
    theirs = run(variant(text, size, True), "kernel_tuner")
    print(f"kernel_tuner: exit {theirs[0]} in {theirs[1]:.1f} s, {len(theirs[2])} configurations")
    if theirs[0] != 0:
        print(theirs[3])
    same = ours[2] == theirs[2]
    print("same configurations and verification outcomes:", same)
    if not same:
        for key in sorted(set(ours[2]) | set(theirs[2])):
            if ours[2].get(key) != theirs[2].get(key):
                print(f"  {key}: tunebox {ours[2].get(key)}, Kernel Tuner {theirs[2].get(key)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
