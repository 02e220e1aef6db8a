#!/usr/bin/env python3
"""Side-by-side: tunebox vs Kernel Tuner (C backend) on one of tunebox's example jobs.

Usually started by run.sh, which prepares the virtualenv and the tunebox binary:

    compare.py --tunebox target/release/tunebox [--reps 3] [--job matmul|histogram] [--out SUMMARY.md]

Jobs (JOBS below): `matmul` (the default), examples/matmul-cpu.toml's 27 choices of
examples/kernels/matmul.c; `histogram`, examples/histogram-omp.toml's 32 choices of the OpenMP
examples/kernels/histogram.c. For each repetition both tools tune the same choices of the job's
kernel, one after the other, the order flipped every repetition. Each tool runs as a child
process of this driver; we record its wall time, its peak RSS (/usr/bin/time -v when present,
else os.wait4's rusage: both give the largest single process of the tree) and, sampled from
/proc, the peak of the RSS summed over its whole process tree. Then the per-choice times are
compared: Spearman's rank correlation between the tools and within each tool across repetitions
(the noise floor), and top-1 regrets.

`compare.py kt-tune [--job JOB] --out FILE.json` is the Kernel Tuner side of one repetition (run
by the driver under /usr/bin/time in the venv's Python); it needs kernel_tuner and numpy.

The driver itself needs only the standard library (Python >= 3.8; tomllib from 3.11 reads the
manifest, older versions use the job's built-in copy of its parameters).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def matmul_arguments(space, np):
    """matmul.c's arguments (A, B, C, M, N, K) and the float64 reference of C."""
    sc = space["scalars"]
    M, N, K = int(sc["M"]), int(sc["N"]), int(sc["K"])
    rng = np.random.default_rng(0)
    A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = np.zeros((M, N), np.float32)
    ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    return {
        "problem_size": (M, N),
        "arguments": [A, B, C, np.int64(M), np.int64(N), np.int64(K)],
        "answer": [None, None, ref, None, None, None],
        "atol": 1e-3,  # np.allclose(rtol=1e-5, atol=1e-3); the f32 kernel is off by ~3e-5
    }


def histogram_arguments(space, np):
    """histogram.c's arguments (data, hist, n), numpy's counts, and an exact check of them.

    Kernel Tuner's default check is np.allclose, whose rtol=1e-5 lets a count of ~131072 be off
    by 1; counts must be equal, as tunebox checks integer outputs, hence `verify`.
    """
    n = int(space["scalars"]["n"])
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, n, dtype=np.uint8)  # uniform bytes, as tunebox's random u8
    hist = np.zeros(256, np.int64)
    ref = np.bincount(data, minlength=256).astype(np.int64)

    def exact(answer, result_host, atol=None):
        return all(np.array_equal(a, r) for a, r in zip(answer, result_host) if a is not None)

    return {
        "problem_size": (n,),
        "arguments": [data, hist, np.int64(n)],
        "answer": [None, ref, None],
        "verify": exact,
    }


# The jobs both tools can tune. `space` is the manifest's, used when tomllib is unavailable
# (Python < 3.11); `arguments` builds Kernel Tuner's arguments and answer from the space.
JOBS = {
    "matmul": {
        "manifest": "examples/matmul-cpu.toml",
        "wrapper": os.path.join(HERE, "matmul_kt.c"),
        "entry": "matmul_timed",
        "arguments": matmul_arguments,
        "out": os.path.join("target", "kernel-tuner-compare", "summary.md"),
        "space": {
            "params": {"BM": [32, 96], "BN": [64, 512], "BK": [16, 256], "UNROLL": [1, 2, 4, 6, 8]},
            "restrictions": ["BM % UNROLL == 0", "BN * BK <= 65536"],
            "flags": ["-O3", "-march=native"],
            "kernel_dir": "examples/kernels",
            "scalars": {"M": 512, "N": 512, "K": 512},
        },
    },
    "histogram": {
        "manifest": "examples/histogram-omp.toml",
        "wrapper": os.path.join(HERE, "histogram_kt.c"),
        "entry": "histogram_timed",
        "arguments": histogram_arguments,
        "out": os.path.join("target", "kernel-tuner-compare", "histogram", "summary.md"),
        "space": {
            "params": {"NTHREADS": [1, 2, 4, 8], "COPIES": [1, 2, 4, 8], "WORDS": [0, 1]},
            "restrictions": [],
            "flags": ["-O3", "-march=native", "-fopenmp"],
            "kernel_dir": "examples/kernels",
            "scalars": {"n": 33554432},
        },
    },
}
JOB = JOBS["matmul"]  # the job of this run, set by main()


def load_space(job):
    """Params, restrictions, flags and sizes from the job's tunebox manifest (tomllib), else
    the job's built-in copy."""
    manifest = os.path.join(ROOT, job["manifest"])
    try:
        import tomllib
    except ImportError:
        return dict(job["space"], source="built-in copy (no tomllib)")
    with open(manifest, "rb") as f:
        m = tomllib.load(f)
    kernel = m.get("kernel", {})
    return {
        "params": {k: list(v) for k, v in m["params"].items()},
        "restrictions": list(m.get("restrictions", [])),
        "flags": list(kernel.get("flags", ["-O3", "-march=native"])),
        "kernel_dir": os.path.dirname(os.path.join(os.path.dirname(manifest), kernel["source"])),
        "scalars": {s["name"]: s["value"] for s in m.get("scalars", [])},
        "source": manifest,
    }


# --------------------------------------------------------------------------------------------
# Kernel Tuner side (runs inside the venv)
# --------------------------------------------------------------------------------------------


def kt_tune(args):
    t_start = time.perf_counter()
    from collections import OrderedDict
    from importlib import metadata

    import numpy as np
    import kernel_tuner

    t_imported = time.perf_counter()
    job = JOB
    space = load_space(job)
    kt = job["arguments"](space, np)
    tune_params = OrderedDict((k, v) for k, v in space["params"].items())
    cc = os.environ.get("CC") or "cc"
    if " " in cc.strip():  # Kernel Tuner runs the compiler as one executable name
        cc = "cc"
    kernel_dir = os.path.join(ROOT, space["kernel_dir"])
    options = space["flags"] + ["-I" + kernel_dir]
    t0 = time.perf_counter()
    checks = {k: kt[k] for k in ("atol", "verify") if k in kt}
    results, env = kernel_tuner.tune_kernel(
        job["entry"],
        job["wrapper"],
        kt["problem_size"],
        kt["arguments"],
        tune_params,
        lang="C",
        compiler=cc,
        compiler_options=options,
        restrictions=space["restrictions"],
        answer=kt["answer"],
        **checks,
    )
    t1 = time.perf_counter()
    rows = []
    for r in results:
        choice = {p: int(r[p]) for p in tune_params}
        t = r.get("time")
        ok = isinstance(t, (int, float)) and not isinstance(t, bool)
        times = [float(x) for x in r.get("times", [])] if ok else []
        rows.append({
            "choice": choice,
            "status": "ok" if ok else str(t),
            "time_ms": float(t) if ok else None,  # Kernel Tuner's objective: mean of `times`
            "median_ms": statistics.median(times) if times else None,
            "times_ms": times,
            "compile_ms": float(r["compile_time"]) if "compile_time" in r else None,
        })
    out = {
        "tool": "kernel_tuner",
        "kernel_tuner_version": metadata.version("kernel_tuner"),
        "numpy_version": np.__version__,
        "compiler": cc,
        "compiler_options": options,
        "iterations": env.get("iterations"),
        "import_s": t_imported - t_start,
        "tune_s": t1 - t0,
        "total_compile_s": env.get("total_compile_time", 0) / 1e3,
        "total_benchmark_s": env.get("total_benchmark_time", 0) / 1e3,
        "total_verification_s": env.get("total_verification_time", 0) / 1e3,
        "results": rows,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


# --------------------------------------------------------------------------------------------
# Process measurement
# --------------------------------------------------------------------------------------------

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class TreeRss:
    """Samples the RSS summed over a process and all its descendants (from /proc).

    Cheap: /proc is listed every `period` s, but a process's parent is read only once (when its
    pid is first seen) and RSS only for the tree's members. Processes shorter than the period
    (a compiler's cc1, a worker measuring a fast choice) may be missed: a lower bound.
    """

    def __init__(self, root_pid, period):
        self.root = root_pid
        self.period = period
        self.peak = 0
        self.samples = 0
        self._ppid = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        if self.period > 0 and os.path.isdir("/proc/self"):
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.peak if self.samples else None

    def _parent(self, pid):
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                s = f.read()
            return int(s[s.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def _sample(self):
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        for p in pids:
            if p not in self._ppid:
                self._ppid[p] = self._parent(p)
        live = set(pids)
        children = {}
        for p in live:
            children.setdefault(self._ppid.get(p), []).append(p)
        tree, todo = [], [self.root]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(children.get(p, []))
        total = 0
        for p in tree:
            try:
                with open("/proc/%d/statm" % p, "rb") as f:
                    total += int(f.read().split()[1]) * PAGE
            except (OSError, ValueError, IndexError):
                pass
        for p in list(self._ppid):  # forget dead pids (pid reuse)
            if p not in live:
                del self._ppid[p]
        self.peak = max(self.peak, total)
        self.samples += 1

    def _run(self):
        while not self._stop.is_set():
            try:
                self._sample()
            except OSError:
                pass
            self._stop.wait(self.period)


def have_gnu_time():
    try:
        r = subprocess.run(["/usr/bin/time", "-v", "true"], capture_output=True, text=True)
        return r.returncode == 0 and "Maximum resident set size" in r.stderr
    except OSError:
        return False


def measure(cmd, log_path, env, use_time, sample_period, cwd):
    """Run cmd; return wall seconds, peak RSS of the largest process (KiB), peak tree sum (KiB)."""
    time_out = log_path + ".time"
    full = (["/usr/bin/time", "-v", "-o", time_out] if use_time else []) + cmd
    with open(log_path, "w") as log:
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        sampler = TreeRss(p.pid, sample_period).start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    tree_peak = sampler.stop()
    rc = p.returncode
    maxrss_kib = ru.ru_maxrss  # Linux: KiB, max over the child and its waited-for descendants
    rss_source = "wait4"
    if use_time:
        try:
            with open(time_out) as f:
                for line in f:
                    if "Maximum resident set size" in line:
                        maxrss_kib = int(line.rsplit(":", 1)[1])
                        rss_source = "/usr/bin/time -v"
                    if "exited with non-zero status" in line:
                        rc = int(line.rsplit(" ", 1)[1])
        except (OSError, ValueError):
            pass
    return {
        "rc": rc,
        "wall_s": wall,
        "peak_rss_kib": maxrss_kib,
        "rss_source": rss_source,
        "tree_rss_sum_kib": tree_peak // 1024 if tree_peak is not None else None,
    }


def fail(msg, log_path=None):
    sys.stderr.write("compare.py: %s\n" % msg)
    if log_path and os.path.exists(log_path):
        with open(log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        sys.stderr.write("--- last lines of %s ---\n%s\n" % (log_path, tail))
    sys.exit(1)


def run_kt(rep, work, args, use_time):
    out = os.path.join(work, "kt-%d.json" % rep)
    log = os.path.join(work, "kt-%d.log" % rep)
    cmd = [args.python, os.path.abspath(__file__), "kt-tune", "--job", args.job, "--out", out]
    m = measure(cmd, log, dict(os.environ), use_time, args.sample_ms / 1e3, ROOT)
    if m["rc"] != 0 or not os.path.exists(out):
        fail("Kernel Tuner run %d failed (exit %s)" % (rep + 1, m["rc"]), log)
    with open(out) as f:
        data = json.load(f)
    times = {key(r["choice"]): r["time_ms"] for r in data["results"] if r["status"] == "ok"}
    medians = {key(r["choice"]): r["median_ms"] for r in data["results"] if r["status"] == "ok"}
    m.update(times=times, medians=medians, n_results=len(data["results"]), internal_s=data["tune_s"],
             meta={k: v for k, v in data.items() if k != "results"})
    return m


def run_tunebox(rep, work, args, use_time):
    out = os.path.join(work, "tunebox-%d.json" % rep)
    log = os.path.join(work, "tunebox-%d.log" % rep)
    cache = tempfile.mkdtemp(prefix="tunebox-kernel-cache-", dir=work)
    env = dict(os.environ, TUNEBOX_CACHE_DIR=cache)
    cmd = [args.tunebox, "tune", JOB["manifest"], "--no-cache", "--json", out, "-q"] + args.tunebox_arg
    try:
        m = measure(cmd, log, env, use_time, args.sample_ms / 1e3, ROOT)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if m["rc"] != 0 or not os.path.exists(out):
        fail("tunebox run %d failed (exit %s)" % (rep + 1, m["rc"]), log)
    with open(out) as f:
        data = json.load(f)
    times = {key(r["choice"]): r["median_ms"] for r in data["results"]
             if r.get("status") == "ok" and r.get("median_ms") is not None}
    m.update(times=times, medians=times, n_results=len(data["results"]), internal_s=data.get("elapsed_s"),
             meta={k: data.get(k) for k in ("tunebox_version", "device", "space_size", "workers")})
    return m


PARAM_ORDER = []


def key(choice):
    return tuple(int(choice[p]) for p in PARAM_ORDER)


def fmt_choice(k):
    return " ".join("%s=%s" % (p, v) for p, v in zip(PARAM_ORDER, k))


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def avg_ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b):
    """Spearman's rho over the common keys of two {choice: time} maps (average ranks for ties)."""
    common = sorted(set(a) & set(b))
    if len(common) < 3:
        return None
    ra, rb = avg_ranks([a[k] for k in common]), avg_ranks([b[k] for k in common])
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else None


def best(t):
    return min(t, key=lambda k: (t[k], k))


def regret(pick_from, judge):
    """How much slower (fraction) pick_from's best is than judge's best, under judge's timing."""
    common = set(pick_from) & set(judge)
    if not common:
        return None
    b = best({k: pick_from[k] for k in common})
    j = {k: judge[k] for k in common}
    return j[b] / j[best(j)] - 1


def mmm(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "n": len(xs)}


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return ""


def machine_info():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "cc": sh([os.environ.get("CC") or "cc", "--version"]).splitlines()[:1]}


def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main_compare(args):
    if args.reps < 1:
        fail("--reps must be >= 1")
    if not os.path.isfile(args.tunebox) or not os.access(args.tunebox, os.X_OK):
        fail("no tunebox binary at %s (cargo build --release -p tunebox-cli)" % args.tunebox)
    space = load_space(JOB)
    PARAM_ORDER[:] = list(space["params"])
    out_md = os.path.abspath(args.out or os.path.join(ROOT, JOB["out"]))
    out_dir = os.path.dirname(out_md)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = os.path.join(out_dir, "runs", stamp)
    os.makedirs(work, exist_ok=True)
    # Snapshot the binary: others may rebuild target/release/tunebox while this runs.
    tb = os.path.join(work, "tunebox")
    shutil.copy2(args.tunebox, tb)
    args.tunebox = tb
    use_time = have_gnu_time()
    git = {"commit": sh(["git", "rev-parse", "--short", "HEAD"]),
           "dirty": bool(sh(["git", "status", "--porcelain", "--untracked-files=no"]))}
    info = machine_info()
    print("tunebox vs Kernel Tuner: %s, %d repetition(s), %s (%s cores), load %.2f"
          % (JOB["manifest"], args.reps, info["cpu"], info["cores"], loadavg() or 0), flush=True)
    print("raw files: %s" % work, flush=True)

    # Untimed warm-up: page cache for Python + kernel_tuner and for the tunebox binary.
    subprocess.run([args.python, "-c", "import kernel_tuner, numpy"], cwd=ROOT, capture_output=True)
    subprocess.run([tb, "--version"], cwd=ROOT, capture_output=True)

    reps = []
    for rep in range(args.reps):
        order = ["kt", "tunebox"] if rep % 2 == 0 else ["tunebox", "kt"]
        r = {"order": order, "load_before": loadavg()}
        for tool in order:
            print("  rep %d: %-12s ..." % (rep + 1, "Kernel Tuner" if tool == "kt" else "tunebox"),
                  end="", flush=True)
            m = run_kt(rep, work, args, use_time) if tool == "kt" else run_tunebox(rep, work, args, use_time)
            r[tool] = m
            print(" %6.2f s, peak RSS %.0f MiB, %d ok" % (m["wall_s"], m["peak_rss_kib"] / 1024, len(m["times"])),
                  flush=True)
        r["load_after"] = loadavg()
        reps.append(r)

    summary = summarize(reps, space, args, info, git, use_time, work)
    md = render_md(summary)
    with open(out_md, "w") as f:
        f.write(md)
    out_json = os.path.splitext(out_md)[0] + ".json"
    with open(out_json, "w") as f:
        json.dump(summary, f, indent=1)
    if not args.keep_binary:
        os.remove(tb)
    print()
    print(md)
    print("wrote %s and %s" % (out_md, out_json))
    return 0


def summarize(reps, space, args, info, git, use_time, work):
    per_rep = []
    for i, r in enumerate(reps):
        kt, tb = r["kt"], r["tunebox"]
        per_rep.append({
            "rep": i + 1,
            "order": r["order"],
            "load": [r["load_before"], r["load_after"]],
            "kt_wall_s": kt["wall_s"], "tunebox_wall_s": tb["wall_s"],
            "ratio_tunebox_over_kt": tb["wall_s"] / kt["wall_s"],
            "kt_internal_s": kt["internal_s"], "tunebox_internal_s": tb["internal_s"],
            "kt_peak_rss_mib": kt["peak_rss_kib"] / 1024, "tunebox_peak_rss_mib": tb["peak_rss_kib"] / 1024,
            "kt_tree_rss_sum_mib": kt["tree_rss_sum_kib"] / 1024 if kt["tree_rss_sum_kib"] is not None else None,
            "tunebox_tree_rss_sum_mib": tb["tree_rss_sum_kib"] / 1024 if tb["tree_rss_sum_kib"] is not None else None,
            "kt_ok": len(kt["times"]), "tunebox_ok": len(tb["times"]),
            "common": len(set(kt["times"]) & set(tb["times"])),
            "spearman_between": spearman(kt["times"], tb["times"]),
            "spearman_between_kt_median": spearman(kt["medians"], tb["times"]),
            "kt_best": fmt_choice(best(kt["times"])), "kt_best_ms": min(kt["times"].values()),
            "tunebox_best": fmt_choice(best(tb["times"])), "tunebox_best_ms": min(tb["times"].values()),
            # each tool's best, timed by the other tool (same repetition)
            "regret_tunebox_best_under_kt": regret(tb["times"], kt["times"]),
            "regret_kt_best_under_tunebox": regret(kt["times"], tb["times"]),
        })
    within = {}
    for tool in ("kt", "tunebox"):
        rho, reg = [], []
        for i in range(len(reps)):
            for j in range(len(reps)):
                if i < j:
                    rho.append(spearman(reps[i][tool]["times"], reps[j][tool]["times"]))
                if i != j:  # rep i's best measured in rep j
                    reg.append(regret(reps[i][tool]["times"], reps[j][tool]["times"]))
        within[tool] = {"spearman": rho, "regret": reg}
    col = lambda k: [p[k] for p in per_rep]
    agg = {k: mmm(col(k)) for k in (
        "kt_wall_s", "tunebox_wall_s", "ratio_tunebox_over_kt", "kt_internal_s", "tunebox_internal_s",
        "kt_peak_rss_mib", "tunebox_peak_rss_mib", "kt_tree_rss_sum_mib", "tunebox_tree_rss_sum_mib",
        "spearman_between", "spearman_between_kt_median",
        "regret_tunebox_best_under_kt", "regret_kt_best_under_tunebox")}
    for tool in ("kt", "tunebox"):
        agg["spearman_within_" + tool] = mmm(within[tool]["spearman"])
        agg["regret_within_" + tool] = mmm(within[tool]["regret"])
    kt_meta = reps[0]["kt"]["meta"]
    tb_meta = reps[0]["tunebox"]["meta"]
    return {
        "generated": datetime.datetime.now().isoformat(timespec="seconds"),
        "manifest": JOB["manifest"],
        "space": {"params": space["params"], "restrictions": space["restrictions"],
                  "flags": space["flags"], "from": space["source"]},
        "machine": info,
        "git": git,
        "tunebox": {"binary": args.tunebox, "extra_args": args.tunebox_arg, **tb_meta},
        "kernel_tuner": {k: kt_meta.get(k) for k in ("kernel_tuner_version", "numpy_version", "compiler",
                                                       "compiler_options", "iterations")},
        "rss_source": "/usr/bin/time -v" if use_time else "os.wait4 rusage",
        "tree_sample_ms": args.sample_ms,
        "raw_dir": work,
        "repetitions": per_rep,
        "within_tool": within,
        "aggregate": agg,
        "per_choice": {
            fmt_choice(k): {"kt_time_ms": [r["kt"]["times"].get(k) for r in reps],
                            "tunebox_median_ms": [r["tunebox"]["times"].get(k) for r in reps]}
            for k in sorted(set().union(*[set(r["kt"]["times"]) | set(r["tunebox"]["times"]) for r in reps]))
        },
    }


def f(x, spec):
    return "-" if x is None else format(x, spec)


def pct(x):
    return "-" if x is None else "%.1f%%" % (100 * x)


def render_md(s):
    a = s["aggregate"]
    L = []
    L.append("# tunebox vs Kernel Tuner: %s" % s["manifest"])
    L.append("")
    L.append("%s; %s cores; tunebox %s (git %s%s); Kernel Tuner %s, numpy %s, compiler `%s %s`; %s; "
             "peak RSS from %s; tree sums sampled every %d ms."
             % (s["machine"]["cpu"], s["machine"]["cores"], s["tunebox"].get("tunebox_version"),
                s["git"]["commit"], "+dirty" if s["git"]["dirty"] else "",
                s["kernel_tuner"]["kernel_tuner_version"], s["kernel_tuner"]["numpy_version"],
                s["kernel_tuner"]["compiler"], " ".join(s["space"]["flags"]), s["generated"],
                s["rss_source"], s["tree_sample_ms"]))
    L.append("")
    L.append("| rep | order | KT wall s | tunebox wall s | tunebox/KT | KT RSS MiB (tree sum) "
             "| tunebox RSS MiB (tree sum) | ok KT/tb | rho KT~tb | KT best | tunebox best | load |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p in s["repetitions"]:
        L.append("| %d | %s | %.2f | %.2f | %.2f | %.0f (%s) | %.0f (%s) | %d/%d | %s | %s (%.2f ms) | %s (%.2f ms) | %s |" % (
            p["rep"], " then ".join("KT" if t == "kt" else "tunebox" for t in p["order"]),
            p["kt_wall_s"], p["tunebox_wall_s"], p["ratio_tunebox_over_kt"],
            p["kt_peak_rss_mib"], f(p["kt_tree_rss_sum_mib"], ".0f"),
            p["tunebox_peak_rss_mib"], f(p["tunebox_tree_rss_sum_mib"], ".0f"),
            p["kt_ok"], p["tunebox_ok"], f(p["spearman_between"], ".3f"),
            p["kt_best"], p["kt_best_ms"], p["tunebox_best"], p["tunebox_best_ms"],
            "%.1f->%.1f" % tuple(x or 0 for x in p["load"])))
    L.append("")
    L.append("| figure | min | median | max |")
    L.append("|---|---|---|---|")

    def row(name, k, spec=".2f", as_pct=False):
        v = a.get(k)
        if v is None:
            L.append("| %s | - | - | - |" % name)
        elif as_pct:
            L.append("| %s | %s | %s | %s |" % (name, pct(v["min"]), pct(v["median"]), pct(v["max"])))
        else:
            L.append("| %s | %s | %s | %s |" % (name, f(v["min"], spec), f(v["median"], spec), f(v["max"], spec)))

    row("Kernel Tuner wall s (process)", "kt_wall_s")
    row("tunebox wall s (process)", "tunebox_wall_s")
    row("ratio tunebox / KT (wall, per rep)", "ratio_tunebox_over_kt", ".3f")
    row("Kernel Tuner tune_kernel() s (no imports)", "kt_internal_s")
    row("tunebox elapsed_s (its JSON)", "tunebox_internal_s")
    row("Kernel Tuner peak RSS MiB (largest process)", "kt_peak_rss_mib", ".0f")
    row("tunebox peak RSS MiB (largest process)", "tunebox_peak_rss_mib", ".0f")
    row("Kernel Tuner peak RSS MiB (tree sum, sampled)", "kt_tree_rss_sum_mib", ".0f")
    row("tunebox peak RSS MiB (tree sum, sampled)", "tunebox_tree_rss_sum_mib", ".0f")
    row("Spearman KT time vs tunebox median (same rep)", "spearman_between", ".3f")
    row("Spearman KT median-of-7 vs tunebox median", "spearman_between_kt_median", ".3f")
    row("Spearman within Kernel Tuner (rep pairs)", "spearman_within_kt", ".3f")
    row("Spearman within tunebox (rep pairs)", "spearman_within_tunebox", ".3f")
    row("regret: tunebox's best under KT's timing", "regret_tunebox_best_under_kt", as_pct=True)
    row("regret: KT's best under tunebox's timing", "regret_kt_best_under_tunebox", as_pct=True)
    row("regret: KT rep i's best in KT rep j", "regret_within_kt", as_pct=True)
    row("regret: tunebox rep i's best in tunebox rep j", "regret_within_tunebox", as_pct=True)
    L.append("")
    L.append("Kernel Tuner's time is its objective (mean of %s calls, no cache flush, in-process); "
             "tunebox's is the median of its timed reps (LLC flushed before each, fresh worker per choice). "
             "Wall times are whole processes (Python start and imports included for Kernel Tuner). "
             "Regret = how much slower a pick is than the judge's own best, under the judge's timing."
             % s["kernel_tuner"]["iterations"])
    L.append("")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    k = sub.add_parser("kt-tune", help="run Kernel Tuner once (internal)")
    k.add_argument("--out", required=True)
    k.add_argument("--job", choices=sorted(JOBS), default=argparse.SUPPRESS,
                   help="the job to tune (default matmul)")
    ap.add_argument("--job", choices=sorted(JOBS), default="matmul",
                    help="the job both tools tune: matmul (examples/matmul-cpu.toml, the default) or "
                         "histogram (examples/histogram-omp.toml)")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("KT_COMPARE_REPS", "3")))
    ap.add_argument("--out", default=os.environ.get("KT_COMPARE_OUT") or None,
        help="markdown summary; the JSON goes beside it (.json), raw runs under runs/ (default "
             "target/kernel-tuner-compare/summary.md for matmul, target/kernel-tuner-compare/"
             "histogram/summary.md for histogram)")
    ap.add_argument("--tunebox", default=os.environ.get("TUNEBOX_BIN", os.path.join(ROOT, "target", "release", "tunebox")))
    ap.add_argument("--tunebox-arg", action="append", default=[],
                    help="extra argument for `tunebox tune` (repeatable), e.g. --tunebox-arg=--workers=2")
    ap.add_argument("--python", default=sys.executable, help="Python with kernel_tuner for the KT side")
    ap.add_argument("--sample-ms", type=int, default=int(os.environ.get("KT_COMPARE_SAMPLE_MS", "100")),
                    help="period of the process-tree RSS sampler (0 = off)")
    ap.add_argument("--keep-binary", action="store_true", help="keep the snapshot of the tunebox binary")
    args = ap.parse_args()
    global JOB
    JOB = JOBS[args.job]
    if args.cmd == "kt-tune":
        return kt_tune(args)
    return main_compare(args)


if __name__ == "__main__":
    sys.exit(main())
