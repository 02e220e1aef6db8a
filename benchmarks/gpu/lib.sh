# Sourced by the device_*.sh scripts: `gpu_run NAME` makes /tmp/NAME (the run's folder, $r) and
# sets $bundle (target/gpu-bundle) and $tb (its tunebox); `step NAME TIMEOUT CMD...` runs CMD
# with a fresh kernel cache, its stdout and stderr stamped with the seconds since it started in
# $r/NAME.log, notes its exit code and wall time in $r/steps.txt, and packs $r into
# $OUT/NAME.tgz, so that a run cut short still returns what it did; `wheels` installs .whl/ (the
# Kernel Tuner wheels of benchmarks/gpu/README.md) for python3.
set -u
bundle=$(pwd)/target/gpu-bundle
tb=$bundle/tunebox
export TUNEBOX_WORKER=$bundle/tunebox-worker RUST_BACKTRACE=1 PYTHONUNBUFFERED=1
stamp='import sys,time
t=time.monotonic()
for line in sys.stdin: print(f"{time.monotonic()-t:8.3f} {line}", end="", flush=True)'

gpu_run() {
  run=$1
  r=/tmp/$run
  rm -rf "$r"; mkdir -p "$r"
}

pack() { tar czf "$OUT/$run.tgz" -C "$r" . ; }

step() {
  local name=$1 limit=$2; shift 2
  local start
  start=$(date +%s.%N)
  TUNEBOX_CACHE_DIR=$(mktemp -d) timeout "$limit" "$@" 2>&1 | python3 -c "$stamp" >"$r/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc $(awk "BEGIN{print $(date +%s.%N) - $start}") s" | tee -a "$r/steps.txt"
  pack
}

wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$r/pip.log" 2>&1
  export PYTHONPATH=/tmp/site
}
