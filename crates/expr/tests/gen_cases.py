#!/usr/bin/env python3
"""Generate python_cases.txt: random expressions, bindings, and what CPython's eval gives.

Run from this folder with Python 3 (no packages needed):

    python3 gen_cases.py > python_cases.txt
    python3 gen_cases.py --launch > launch_cases.txt
    python3 gen_cases.py --lists > list_cases.txt

`--launch` writes the cases of launch geometry instead (grid, block and shared memory
expressions: `//`, `/`, `ceil_div`, `math.ceil`, products of params), with `ceil_div(a, b)`
defined as tunebox defines it, `-(-a // b)`. `--lists` writes the cases of value lists, as
T1 files write them (list displays, comprehensions, `range`, `list`, `+` and `*` on lists,
subscripts, `len`, `min`/`max`, `in`), for `tunebox_expr::eval`; their bindings add `L`, a list.

Each line is `expression<TAB>bindings<TAB>expected`, where bindings are `name=repr` separated
by spaces and expected is `= repr(result)` or `! ExceptionName`. The Rust test
(python_cases.rs) evaluates every expression with tunebox-expr over the same values and checks
the same repr or the same exception. The output is deterministic (fixed seed).

Cases whose evaluation involves an int beyond 2**53 (where tunebox-expr's i64 ints and
Python's unbounded ones part ways, by design), a complex number (unsupported), or `in` with a
NaN about (Python's `in` also matches the identical object) are skipped.
"""

import ast
import math
import random

SEED = 16
COUNT = 3000

INT_VARS = ["a", "b", "c"]
FLOAT_VARS = ["x", "y"]
INT_VALUES = [-9, -7, -3, -2, -1, 0, 0, 1, 1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 100, 1024, -1000]
FLOAT_VALUES = [0.0, -0.0, 0.5, -1.5, 2.0, 3.25, 0.001, 7.0, -2.5, 1e20, 0.1, 1.0, -4.0,
                float("inf"), float("-inf"), float("nan"), 1e-300, 123.456]
STRINGS = ["NHWC", "NCHW", "", "a"]

BUILTINS = {f.__name__: f for f in (min, max, abs, int, float, bool, round, pow)}
LIMIT = 2 ** 53


class Gen:
    def __init__(self, rng):
        self.r = rng

    def leaf(self):
        r = self.r.random()
        if r < 0.35:
            return self.r.choice(INT_VARS)
        if r < 0.55:
            return self.r.choice(FLOAT_VARS)
        if r < 0.6:
            return "t"
        if r < 0.8:
            return self.r.choice(["0", "1", "2", "3", "4", "5", "7", "8", "16", "32", "0x10",
                                  "1_000", "0b101", "0o17"])
        if r < 0.95:
            return self.r.choice(["0.5", "1.0", "2.0", "1e3", ".25", "1.5e-3", "0.0", "3.", "1E2"])
        return self.r.choice(["True", "False"])

    def small(self):
        return self.r.choice(["0", "1", "2", "3", "-1", "-2", "0.5", "-0.5", "2.0", "a", "b", "t"])

    def num(self, d):
        if d <= 0 or self.r.random() < 0.2:
            return self.leaf()
        k = self.r.random()
        sub = lambda: self.num(d - 1)
        if k < 0.30:
            op = self.r.choice(["+", "-", "*", "/", "//", "%", "+", "*", "%", "/"])
            return f"({sub()} {op} {sub()})"
        if k < 0.36:
            return f"({sub()} ** {self.small()})"
        if k < 0.44:
            op = self.r.choice(["&", "|", "^"])
            return f"({self.intish(d - 1)} {op} {self.intish(d - 1)})"
        if k < 0.48:
            op = self.r.choice(["<<", ">>"])
            return f"({sub()} {op} {self.r.choice(['0', '1', '3', 'b', 'c', 't'])})"
        if k < 0.55:
            op = self.r.choice(["-", "+", "~", "not "])
            return f"({op}{sub()})"
        if k < 0.65:
            return self.cond(d - 1)
        if k < 0.72:
            op = self.r.choice(["and", "or"])
            return f"({sub()} {op} {sub()})"
        if k < 0.77:
            return f"({sub()} if {self.cond(d - 1)} else {sub()})"
        return self.call(d - 1)

    def intish(self, d):
        """Mostly int-valued operands, for the bit operators (floats there are TypeErrors)."""
        if self.r.random() < 0.3:
            return self.num(d)
        if d <= 0 or self.r.random() < 0.5:
            return self.r.choice(INT_VARS + ["t", "0", "1", "3", "0xff", "-1", "True"])
        op = self.r.choice(["&", "|", "^", "+", "*", "//", "%", "-"])
        return f"({self.intish(d - 1)} {op} {self.intish(d - 1)})"

    def call(self, d):
        sub = lambda: self.num(d)
        f = self.r.choice(["min", "max", "abs", "int", "float", "round", "round2", "pow", "bool",
                           "math.floor", "math.ceil", "math.sqrt", "math.log2", "math.log",
                           "math.log2", "minlist"])
        if f in ("min", "max"):
            n = self.r.choice([2, 2, 3])
            return f"{f}({', '.join(sub() for _ in range(n))})"
        if f == "minlist":
            g = self.r.choice(["min", "max"])
            return f"{g}([{', '.join(sub() for _ in range(self.r.choice([1, 2, 3])))}])"
        if f == "round2":
            return f"round({sub()}, {self.r.choice(['0', '1', '2', '3', '-1', '-2', 'b'])})"
        if f == "pow":
            return f"pow({sub()}, {self.small()})"
        if f == "math.log" and self.r.random() < 0.5:
            return f"math.log({sub()}, {self.r.choice(['2', '10', '0.5', '1', 'a', 'x'])})"
        return f"{f}({sub()})"

    def cond(self, d):
        k = self.r.random()
        sub = lambda: self.num(d)
        ops = ["<", "<=", ">", ">=", "==", "!="]
        if k < 0.45:
            n = self.r.choice([1, 1, 2, 2, 3])
            parts = [sub()]
            for _ in range(n):
                parts += [self.r.choice(ops), sub()]
            return "(" + " ".join(parts) + ")"
        if k < 0.65:
            op = self.r.choice(["in", "not in"])
            items = ", ".join(self.leaf() for _ in range(self.r.choice([0, 1, 2, 3, 4])))
            seq = self.r.choice([f"[{items}]", f"({items},)" if items else "()"])
            return f"({sub()} {op} {seq})"
        if k < 0.80:
            return self.string_cond()
        if k < 0.9:
            return f"({sub()} % {sub()})"
        return f"(not {sub()})"

    def string_cond(self):
        k = self.r.random()
        lit = repr(self.r.choice(STRINGS + ["NHWC", "x"]))
        if k < 0.3:
            return f"(s {self.r.choice(['==', '!='])} {lit})"
        if k < 0.5:
            items = ", ".join(repr(v) for v in self.r.sample(STRINGS, self.r.choice([1, 2, 3])))
            return f"(s {self.r.choice(['in', 'not in'])} [{items}])"
        if k < 0.6:
            return f"(s {self.r.choice(['<', '>=', '<='])} {lit})"
        if k < 0.7:
            return f"({lit} in s)"
        if k < 0.8:
            return f"(s == {self.leaf()})"
        if k < 0.9:
            return f"(s {self.r.choice(['<', '+', '-', 'in'])} {self.leaf()})"
        return f"(s or {self.leaf()})"


def sub_values(tree, env):
    """Every sub-expression's value in isolation (those that raise are left out)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or isinstance(node, (ast.List, ast.Tuple)):
            continue
        try:
            code = compile(ast.Expression(body=node), "<sub>", "eval")
            yield eval(code, {"__builtins__": BUILTINS, "math": math}, dict(env))
        except Exception:
            continue


def acceptable(text, env):
    tree = ast.parse(text, mode="eval")
    # `in` matches the identical object before trying `==`; that differs from `==` only for
    # NaN (`y in [y]` is True for y = nan), which tunebox-expr does not track.
    if any(isinstance(v, float) and math.isnan(v) for v in env.values()) and any(
        isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops)
        for n in ast.walk(tree)
    ):
        return False
    for v in sub_values(tree.body, env):
        if isinstance(v, complex):
            return False
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > LIMIT:
            return False
        if isinstance(v, str) and v not in STRINGS and v not in ("NHWC", "x"):
            return False
    return True


def main():
    rng = random.Random(SEED)
    g = Gen(rng)
    print("# Generated by gen_cases.py (CPython %s); do not edit." % ".".join(map(str, __import__("sys").version_info[:3])))
    print("# expression<TAB>bindings<TAB>= repr(result) | ! exception")
    seen = set()
    n = 0
    while n < COUNT:
        text = g.num(rng.choice([1, 2, 3, 4]))
        if text in seen:
            continue
        seen.add(text)
        env = {v: rng.choice(INT_VALUES) for v in INT_VARS}
        env.update({v: rng.choice(FLOAT_VALUES) for v in FLOAT_VARS})
        env["t"] = rng.choice([True, False])
        env["s"] = rng.choice(STRINGS)
        if not acceptable(text, env):
            continue
        try:
            result = eval(text, {"__builtins__": BUILTINS, "math": math}, dict(env))
            if not isinstance(result, (bool, int, float, str)):
                continue
            expected = "= " + repr(result)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as e:
            expected = "! " + type(e).__name__
        bindings = " ".join(f"{k}={env[k]!r}" for k in ["a", "b", "c", "x", "y", "t", "s"])
        print(f"{text}\t{bindings}\t{expected}")
        n += 1


def ceil_div(a, b):
    """tunebox's launch helper: the ceiling of a / b, as Python's `-(-a // b)`."""
    return -(-a // b)


LAUNCH_FORMS = [
    "ceil_div({p}, {q})",
    "ceil_div({p}, {q} * {r})",
    "ceil_div({p} * {r}, {q})",
    "{p} // {q}",
    "{p} / {q}",
    "({p} + {q} - 1) // {q}",
    "math.ceil({p} / {q})",
    "int({p} / {q})",
    "max(1, {p} // {q})",
    "ceil_div({p}, {q}) * {r}",
    "({p} + {q}) * {r} * 4",
    "{p} * {q} // {r}",
    "min({p}, {q}) * {r}",
    "ceil_div({p}, {q}) if {p} > {q} else 1",
]
LAUNCH_OPERANDS = ["a", "b", "c", "a", "b", "c", "x", "t", "1", "2", "4", "8", "16", "32", "0",
                   "-3", "1024", "1000", "2.0", "(a * 2)"]


def launch_cases():
    rng = random.Random(SEED + 1)
    builtins = dict(BUILTINS, ceil_div=ceil_div)
    print("# Generated by gen_cases.py --launch (CPython %s); do not edit." % ".".join(map(str, __import__("sys").version_info[:3])))
    print("# expression<TAB>bindings<TAB>= repr(result) | ! exception")
    seen = set()
    n = 0
    while n < 400:
        form = rng.choice(LAUNCH_FORMS)
        text = form.format(p=rng.choice(LAUNCH_OPERANDS), q=rng.choice(LAUNCH_OPERANDS),
                           r=rng.choice(LAUNCH_OPERANDS))
        env = {v: rng.choice(INT_VALUES) for v in INT_VARS}
        env.update({v: rng.choice(FLOAT_VALUES[:13]) for v in FLOAT_VARS})
        env["t"] = rng.choice([True, False])
        env["s"] = ""
        if (text, tuple(env.items())) in seen:
            continue
        seen.add((text, tuple(env.items())))
        try:
            result = eval(text, {"__builtins__": builtins, "math": math}, dict(env))
            if isinstance(result, int) and abs(result) > LIMIT:
                continue
            expected = "= " + repr(result)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as e:
            expected = "! " + type(e).__name__
        bindings = " ".join(f"{k}={env[k]!r}" for k in ["a", "b", "c", "x", "y", "t", "s"])
        print(f"{text}\t{bindings}\t{expected}")
        n += 1


LIST_FORMS = [
    "[{e} for i in range({p})]",
    "[{e} for i in range({p}, {q})]",
    "[{e} for i in range({p}, {q}, {s})]",
    "[{e} for i in range({p}) if {c}]",
    "[{e} for i in L if {c}]",
    "[{e} for i in range({p}) for j in range(i)]",
    "[{e} for i in L for j in L if i != j]",
    "list(range({p}, {q} + 1, {s}))",
    "[{p}, {q}] + list(range({p}, {q} * 4 + 1, {s}))",
    "[{p}, {q}, {e0}] * {p}",
    "{p} * [{q}]",
    "L + [{e0}]",
    "L[{p}]",
    "L[-1] + L[0]",
    "[L[i] * 2 for i in range(len(L))]",
    "len([{e} for i in range({p})])",
    "max([{e} for i in range({p})])",
    "min(L) + max(L)",
    "{p} in L",
    "{p} not in [{e} for i in range({q})]",
    "[{p}, {q}] == [{q}, {p}]",
    "[{p}, {q}] < [{q}, {p}]",
    "L == list(L)",
    "[i for i in range(3)][{p}]",
    "[2**i for i in range(0, {p})]",
    "[i for i in range(1, {q}+1)]",
    "[{e} for i in 'ab']",
    "[{e0}, [{p}, {q}]]",
    "list({p})",
    "[{e} for i in range({p})] + {q}",
    "L * L",
]
LIST_OPERANDS = ["a", "b", "c", "t", "0", "1", "2", "3", "4", "5", "8", "-1", "-2", "x", "2.0"]
LIST_ELEMENTS = ["i", "i * 2", "2 ** i", "i // 2", "i % 3", "i * a", "a + i", "i / 2", "-i",
                 "i * j", "i + j", "float(i)", "i if i % 2 else -i", "max(i, b)", "i == 1",
                 "ceil_div(i, 3)", "'s'", "i * x", "[i]", "abs(i - 2)", "i ** 2 - a"]
LIST_CONDS = ["i % 2 == 0", "i > a", "i", "not i", "i % 3 != 1 and i < 10", "i in L",
              "i / 2 > 1", "i != b"]
LIST_VALUES = [[], [1], [1, 2, 3], [4, 2, 8, 16], [0, 5, -3], [2.5, 1, 7], [3, 3]]


def list_cases():
    rng = random.Random(SEED + 2)
    builtins = dict(BUILTINS, ceil_div=ceil_div, range=range, list=list, len=len)
    print("# Generated by gen_cases.py --lists (CPython %s); do not edit." % ".".join(map(str, __import__("sys").version_info[:3])))
    print("# expression<TAB>bindings<TAB>= repr(result) | ! exception")
    seen = set()
    n = 0
    while n < 600:
        form = rng.choice(LIST_FORMS)
        text = form.format(p=rng.choice(LIST_OPERANDS), q=rng.choice(LIST_OPERANDS),
                           s=rng.choice(["1", "2", "3", "-1", "-2", "0", "a", "2.0"]),
                           e=rng.choice([e for e in LIST_ELEMENTS if "for j" in form or "j" not in e]),
                           e0=rng.choice(LIST_OPERANDS),
                           c=rng.choice(LIST_CONDS))
        if "'ab'" in form and "%" in text:
            continue  # `str % x` is string formatting, which tunebox-expr does not do
        env = {v: rng.choice([-2, -1, 0, 1, 2, 3, 5, 8]) for v in INT_VARS}
        env.update({v: rng.choice([0.5, -1.5, 2.0, 3.25]) for v in FLOAT_VARS})
        env["t"] = rng.choice([True, False])
        env["L"] = rng.choice(LIST_VALUES)
        key = (text, tuple((k, repr(v)) for k, v in env.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            # The names are globals, as a T1 file's are for Kernel Tuner: a comprehension's
            # body sees them (a local of `eval` would be hidden from it).
            result = eval(text, dict(env, __builtins__=builtins))
            if "(" in repr(result) or len(repr(result)) > 400:
                continue
            expected = "= " + repr(result)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError, IndexError,
                NameError) as e:
            expected = "! " + type(e).__name__
        bindings = " ".join(f"{k}={env[k]!r}".replace(" ", "") for k in
                            ["a", "b", "c", "x", "y", "t", "L"])
        print(f"{text}\t{bindings}\t{expected}")
        n += 1


if __name__ == "__main__":
    if __import__("sys").argv[1:] == ["--launch"]:
        launch_cases()
    elif __import__("sys").argv[1:] == ["--lists"]:
        list_cases()
    else:
        main()
