#!/bin/bash
# The GPU run of ../shared/notes/gpu-run.md in one script, for a lent GPU machine (no toolchain):
# run from the repository root after `cargo xtask gpu-bundle`, with the bundle carried.
#   OUT=/dir benchmarks/gpu/device_run.sh
# Everything lands in /tmp/gpu-run and is packed into $OUT/gpu-run.tgz after every step, so a run
# cut short still returns what it did.
. "$(dirname "$0")/lib.sh"
gpu_run gpu-run
{ date -u; nvidia-smi; nvidia-smi -q -d CLOCK | head -40; ldd --version | head -1; nproc; } >"$r/machine.txt" 2>&1
step run_sh 200 env OUT="$r/bundle" "$bundle/run.sh"
step devices_json 30 "$tb" devices --json
step doctor 60 "$tb" doctor
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1)
for v in 0 "$uuid" 1 0,0 "GPU-00000000-bad"; do
  step "cvd_${v//[^A-Za-z0-9]/_}" 30 env CUDA_VISIBLE_DEVICES="$v" "$tb" devices
done
step do_bench 100 bash -c "python3 benchmarks/gpu/do_bench_matmul.py --passes 2 >$r/do_bench.json"
step matmul_second 90 "$tb" tune examples/matmul-cuda.toml --no-cache --json "$r/matmul-second.json"
step matmul_kt 90 "$tb" tune examples/matmul-cuda-kt.toml --no-cache --json "$r/matmul-kt.json"
step hub_convolution 20 "$tb" tune data/benchmark_hub/kernels/convolution_milo.json --no-cache --strategy random --budget 16 --json "$r/convolution.json"
step hub_hotspot 80 "$tb" tune data/benchmark_hub/kernels/hotspot_milo.json --no-cache --strategy random --budget 16 --json "$r/hotspot.json"
# Whether the hub's hotspot kernel reads past its `temp` (docs/gpu.md, "Seen, not fixed").
step hotspot_memcheck 120 compute-sanitizer --target-processes all --tool memcheck --print-limit 5 "$tb" tune data/benchmark_hub/kernels/hotspot_milo.json --no-cache --strategy random --budget 2 --rounds 0 --timeout 60 --json "$r/hotspot-memcheck.json"
step cvd_tune 45 env CUDA_VISIBLE_DEVICES="$uuid" "$tb" tune examples/matmul-cuda.toml --no-cache --strategy random --budget 4 --json "$r/cvd-tune.json"
echo done >>"$r/steps.txt"; pack
