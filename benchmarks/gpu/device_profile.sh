#!/bin/bash
# Where tunebox's time goes on examples/matmul-cuda.toml (GPU): each line of its stderr stamped
# with the seconds since start, with the default rounds, --rounds 0, --max-process-uses 0; and
# Kernel Tuner (CuPy) with an empty CuPy kernel cache (its cold compiles). Run as device_kt.sh;
# results in $OUT/gpu-profile.tgz.
. "$(dirname "$0")/lib.sh"
gpu_run gpu-profile
wheels
nproc >"$r/nproc.txt"
step default 90 "$tb" tune examples/matmul-cuda.toml --no-cache --json "$r/default.json"
step rounds0 90 "$tb" tune examples/matmul-cuda.toml --no-cache --rounds 0 --json "$r/rounds0.json"
step reuse 90 "$tb" tune examples/matmul-cuda.toml --no-cache --max-process-uses 0 --json "$r/reuse.json"
step kt_cold 90 env CUPY_CACHE_DIR="$(mktemp -d)" python3 benchmarks/gpu/kt_matmul.py "$r/kt_cold.json"
step nvrtc_only 90 env RUST_LOG=debug "$tb" tune examples/matmul-cuda.toml --no-cache --rounds 0 --strategy random --budget 8 --json "$r/debug.json"
echo done >>"$r/steps.txt"; pack
