#!/usr/bin/env bash
# tunebox vs Kernel Tuner, side by side on examples/matmul-cpu.toml (or, with --job histogram,
# examples/histogram-omp.toml). See README.md.
#
#   benchmarks/kernel-tuner/run.sh [REPS] [--job matmul|histogram] [compare.py options...]
#
# Environment: KT_VENV (virtualenv, default target/kernel-tuner-venv), KT_COMPARE_OUT (summary
# path, default target/kernel-tuner-compare/summary.md, for the histogram job
# target/kernel-tuner-compare/histogram/summary.md), TUNEBOX_BIN (use this binary, no
# build), PYTHON (python3 that creates the venv), CC (C compiler for both tools),
# KT_COMPARE_NO_BUILD=1 (use target/release/tunebox as it is).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

reps="${KT_COMPARE_REPS:-3}"
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
    reps="$1"
    shift
fi
venv="${KT_VENV:-$root/target/kernel-tuner-venv}"
python="${PYTHON:-python3}"

die() { echo "run.sh: $*" >&2; exit 1; }

command -v "$python" >/dev/null || die "needs python3 (or set PYTHON)"
cc_bin="${CC:-cc}"
command -v "${cc_bin%% *}" >/dev/null || die "needs a C compiler: '$cc_bin' not found (set CC)"

# 1. Virtualenv with Kernel Tuner 1.5.x and numpy (reused when already there).
kt_ok() {
    "$venv/bin/python" - <<'EOF' 2>/dev/null
from importlib import metadata
import kernel_tuner, numpy  # noqa: F401
v = metadata.version("kernel_tuner")
raise SystemExit(0 if v.startswith("1.5.") else 1)
EOF
}
if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating virtualenv $venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" ||
        die "could not create a virtualenv at $venv with $python -m venv (on Debian/Ubuntu: apt install python3-venv)"
fi
if ! kt_ok; then
    echo "installing kernel_tuner 1.5.x and numpy into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'kernel_tuner>=1.5,<1.6' numpy ||
        die "pip install of kernel_tuner 1.5.x / numpy into $venv failed (is PyPI reachable? a proxy in PIP_INDEX_URL?)"
    kt_ok || die "kernel_tuner 1.5.x still does not import from $venv/bin/python"
fi

# 2. The tunebox binary (compare.py copies it before timing anything).
if [[ -n "${TUNEBOX_BIN:-}" ]]; then
    bin="$TUNEBOX_BIN"
else
    bin="$root/target/release/tunebox"
    if [[ "${KT_COMPARE_NO_BUILD:-0}" != 1 ]]; then
        echo "building tunebox (cargo build --release -p tunebox-cli)"
        if ! cargo build --release -q -p tunebox-cli; then
            [[ -x "$bin" ]] || die "cargo build failed and there is no $bin"
            echo "run.sh: warning: cargo build failed; using the existing $bin" >&2
        fi
    fi
fi
[[ -x "$bin" ]] || die "no tunebox binary at $bin"

# 3. The comparison (compare.py picks the summary's path: KT_COMPARE_OUT, else the job's).
exec "$venv/bin/python" "$here/compare.py" --reps "$reps" --tunebox "$bin" "$@"
