#!/bin/bash
# tunebox against Kernel Tuner (CuPy backend) on examples/matmul-cuda.toml's 40 choices, on a lent
# GPU machine, interleaved: KT, tunebox, KT, tunebox, ... (ROUNDS pairs, default 2). Run from the
# repository root after `cargo xtask gpu-bundle`, with the bundle carried and Kernel Tuner's
# wheels in .whl/ (kernel_tuner, python-constraint2, jsonschema and its deps, xmltodict):
#   OUT=/dir [ROUNDS=2] [WARM=1] benchmarks/gpu/device_kt.sh
# Then examples/faults-cuda.toml once. Results: $OUT/gpu-kt.tgz (each run's JSON and log, its
# lines stamped with the seconds since it started; steps.txt with the wall times).
. "$(dirname "$0")/lib.sh"
gpu_run gpu-kt
wheels
# Kernel Tuner keeps CuPy's kernel cache between its runs (its first run compiles); tunebox's
# kernel cache is its own per run unless WARM=1, when its later runs find the first's cubins.
warm=()
[ "${WARM:-0}" = 1 ] && warm=(env TUNEBOX_CACHE_DIR="$(mktemp -d)")
for i in $(seq "${ROUNDS:-2}"); do
  step "kt$i" 150 python3 benchmarks/gpu/kt_matmul.py "$r/kt$i.json"
  step "tunebox$i" 150 "${warm[@]}" "$tb" tune examples/matmul-cuda.toml --no-cache --json "$r/tunebox$i.json"
done
step faults 120 "$tb" tune examples/faults-cuda.toml --no-cache --json "$r/faults.json"
echo done >>"$r/steps.txt"; pack
