#!/usr/bin/env python3
"""Counts the valid configurations of T1 files the way Kernel Tuner does: itertools.product over
each parameter's values (`eval` of the `Values` string), in the file's order, keeping those for
which every condition's `Expression` is true under Python's `eval`.

Usage: python3 crates/tune/tests/t1_counts.py FILE.json...
Prints `FILE raw valid` per file. The expected counts in crates/cli/tests/cli/t1.rs come from it.
"""
import itertools
import json
import sys


def count(path):
    with open(path) as f:
        t1 = json.load(f)
    space = t1["ConfigurationSpace"]
    names = [p["Name"] for p in space["TuningParameters"]]
    values = []
    for p in space["TuningParameters"]:
        v = p["Values"]
        values.append(eval(v) if isinstance(v, str) else v)
    conditions = [
        compile(c["Expression"], "<condition>", "eval") for c in space.get("Conditions", [])
    ]
    raw = valid = 0
    for combo in itertools.product(*values):
        raw += 1
        env = dict(zip(names, combo))
        if all(eval(c, {}, env) for c in conditions):
            valid += 1
    return raw, valid


for path in sys.argv[1:]:
    raw, valid = count(path)
    print(path, raw, valid, flush=True)
