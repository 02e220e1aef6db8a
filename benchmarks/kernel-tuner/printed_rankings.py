#!/usr/bin/env python3
"""How steady the rankings printed by Kernel Tuner's example scripts are from run to run: the
`name=value, ..., time=T` lines that `tune_kernel` prints for each configuration (Kernel
Tuner's own, or tunebox's `tunebox.kernel_tuner` with one import changed), read from the saved
output of each run.

    benchmarks/kernel-tuner/printed_rankings.py RUN.out RUN.out [...]

Runs are grouped by the first two letters of their file name (`tb1.out`, `tb2.out`, `kt1.out`,
`kt2.out`: groups `tb` and `kt`); for every pair of runs in a group it prints the Spearman rank
correlation of the configurations' times and the top-1 regret both ways (how much slower one
run's best is than the other run's best, under the other run's times). Needs only the standard
library. docs/performance.md ("Issue 33, seventh session") has figures for `vector_add.py`.
"""

import itertools
import re
import sys

LINE = re.compile(r"^((?:\w+=[^,]+, )+)time=([0-9.]+)")


def load(path):
    """The first printed time of each configuration in `path`, by its `name=value` text."""
    times = {}
    with open(path) as f:
        for line in f:
            m = LINE.match(line.strip())
            if m and m[1] not in times:
                times[m[1].rstrip(", ")] = float(m[2])
    return times


def ranks(values):
    """The rank of each value (0: the smallest); ties in the order given."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for rank, i in enumerate(order):
        out[i] = rank
    return out


def spearman(a, b):
    """Spearman's rho over the configurations both runs printed."""
    keys = sorted(set(a) & set(b))
    n = len(keys)
    if n < 2:
        return float("nan")
    ra, rb = ranks([a[k] for k in keys]), ranks([b[k] for k in keys])
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def regret(a, b):
    """How much slower `a`'s best is than `b`'s best, under `b`'s times."""
    best = min(a, key=a.get)
    return b[best] / min(b.values()) - 1


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    groups = {}
    for path in sys.argv[1:]:
        name = path.rsplit("/", 1)[-1]
        groups.setdefault(name[:2], []).append((name, load(path)))
    for group, runs in groups.items():
        for (na, a), (nb, b) in itertools.combinations(runs, 2):
            if not a or not b:
                print(f"{group}: {na} or {nb} printed no `name=value, ..., time=T` lines")
                continue
            print(
                f"{group}: {na} ~ {nb}: Spearman {spearman(a, b):.3f}, regret "
                f"{100 * regret(a, b):.1f} % / {100 * regret(b, a):.1f} %, best "
                f"{min(a, key=a.get)} / {min(b, key=b.get)}"
            )


if __name__ == "__main__":
    main()
