#!/usr/bin/env python3
"""Reads `placements` output (ROUND PLACEMENT MS... per line) from stdin and prints, per kernel,
each placement's median time relative to the other placements of the same rounds, their spread
(slowest / fastest - 1), and the rounds' own noise (median absolute deviation of a placement's
relative times): a spread well above what that noise gives 8 placements says placement moves
the kernel's time."""

import collections
import statistics
import sys


def main() -> None:
    rows = [line.split() for line in sys.stdin if line.strip()]
    kernels = len(rows[0]) - 2
    names = sys.argv[1:] or [f"kernel {k}" for k in range(kernels)]
    for k in range(kernels):
        by_round = collections.defaultdict(list)
        for row in rows:
            by_round[int(row[0])].append((int(row[1]), float(row[2 + k])))
        relative = collections.defaultdict(list)
        for times in by_round.values():
            middle = statistics.median(ms for _, ms in times)
            for placement, ms in times:
                relative[placement].append(ms / middle)
        medians = [statistics.median(relative[p]) for p in sorted(relative)]
        noise = statistics.median(
            abs(x - statistics.median(v)) for v in relative.values() for x in v
        )
        print(
            f"{names[k]:14s} placements: {' '.join(f'{m:.3f}' for m in medians)}  "
            f"spread {max(medians) / min(medians) - 1:.3f}  noise (MAD) {noise:.3f}"
        )


if __name__ == "__main__":
    main()
