#!/usr/bin/env python3
"""Replays settling at screening on recorded runs: which choices a rule would have measured in
their screening window only, and how well the runs then agree. Reads tunebox's JSON reports
(the runs `cargo xtask agreement` leaves in target/agreement/run-*.json), each choice's windows
in the order they were measured.

    benchmarks/windows/settling.py target/agreement/run-idle-?.json

For each run, the margin is the largest spread (slowest window over fastest, less 1) of any
choice measured twice or more, as `Settling` in crates/tune/src/run/race.rs computes it. A
settled choice's time is its screening window; the others keep the run's estimate. Rules:

- `none`: nothing settles.
- `neighbour` (tunebox's): the screening window trails the best by more than the margin, and no
  other choice's estimate lies within the margin of it.
- `cluster`: the screening windows linked within the margin of each other form chains; a chain
  whose fastest member trails the best by more than the margin settles whole.
- `halving` (successive halving): every choice trailing the best by more than the margin.

Printed per rule: Spearman's rank correlation over every pair of runs and the worst top-1
regret (min / median), the windows settling would have saved, and the choices settled per run.
The replay uses the run's final margin and estimates, where the run decided with what it had
measured so far: an approximation of the rule, not of the run."""

import itertools
import json
import statistics
import sys

RULES = ("none", "neighbour", "cluster", "halving")


def ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share their mean rank), as scipy's rankdata."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2
        i = j + 1
    return result


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5


def spread(medians: list[float]) -> float:
    return max(medians) / min(medians) - 1


def settled(results: list[dict], rule: str) -> set[int]:
    """The indices of the choices `rule` settles in one run's `ok` results."""
    measured_twice = [
        r["windows"]["medians_ms"] for r in results if len(r["windows"]["medians_ms"]) >= 2
    ]
    if rule == "none" or not measured_twice:
        return set()
    margin = max(spread(m) for m in measured_twice)
    estimates = [r["windows"]["estimate_ms"] for r in results]
    best = min(estimates)
    far = {r["index"] for r in results if r["windows"]["medians_ms"][0] > best * (1 + margin)}
    if rule == "halving":
        return far
    if rule == "neighbour":
        chosen = set()
        for r in results:
            first = r["windows"]["medians_ms"][0]
            low, high = first / (1 + margin), first * (1 + margin)
            if r["index"] in far and sum(low <= e <= high for e in estimates) <= 1:
                chosen.add(r["index"])
        return chosen
    firsts = sorted((r["windows"]["medians_ms"][0], r["index"]) for r in results)
    chains: list[list[tuple[float, int]]] = [[firsts[0]]]
    for previous, current in zip(firsts, firsts[1:]):
        if current[0] <= previous[0] * (1 + margin):
            chains[-1].append(current)
        else:
            chains.append([current])
    chosen = set()
    for chain in chains:
        if chain[0][0] / (1 + margin) > best * (1 + margin):
            chosen.update(index for _, index in chain)
    return chosen


def replay(report: dict, rule: str) -> tuple[dict[int, float], int, int]:
    """The run's times under `rule`, the windows it would have saved, and the choices settled."""
    results = [r for r in report["results"] if r["status"] == "ok" and r.get("windows")]
    chosen = settled(results, rule)
    times, saved = {}, 0
    for r in results:
        windows = r["windows"]
        if r["index"] in chosen:
            times[r["index"]] = windows["medians_ms"][0]
            saved += len(windows["medians_ms"]) - 1
        else:
            times[r["index"]] = windows["estimate_ms"]
    return times, saved, len(chosen)


def main(paths: list[str]) -> None:
    reports = [json.load(open(p)) for p in paths]
    total = sum(
        len(r["windows"]["medians_ms"])
        for rep in reports
        for r in rep["results"]
        if r.get("windows")
    )
    for rule in RULES:
        runs = [replay(report, rule) for report in reports]
        rhos, regrets = [], []
        for (a, _, _), (b, _, _) in itertools.combinations(runs, 2):
            keys = sorted(set(a) & set(b))
            rhos.append(spearman([a[k] for k in keys], [b[k] for k in keys]))
            best_a, best_b = min(keys, key=a.get), min(keys, key=b.get)
            regrets.append(max(b[best_a] / b[best_b] - 1, a[best_b] / a[best_a] - 1))
        print(
            f"{rule:10} Spearman {min(rhos):.3f} / {statistics.median(rhos):.3f}  "
            f"worst regret {100 * max(regrets):.1f} %  "
            f"windows saved {sum(s for _, s, _ in runs)} of {total}  "
            f"settled per run {[n for _, _, n in runs]}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: settling.py RUN.json RUN.json [...]")
    main(sys.argv[1:])
