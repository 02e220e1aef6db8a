#!/usr/bin/env bash
# Does where the main job's tensors lie in memory move its time? Compiles four choices of
# examples/kernels/matmul.c and benchmarks/windows/placements.c, runs 8 placements x ROUNDS
# rounds with huge pages and with small ones, and prints placements.py's summary.
#
#   benchmarks/windows/placements.sh [ROUNDS]     (default 15; ~1 minute on 2 cores)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rounds="${1:-15}"
cc="${CC:-cc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
choices=("96 512 16 8" "32 64 16 8" "96 64 256 8" "32 64 256 8")
libs=()
names=()
for choice in "${choices[@]}"; do
    read -r bm bn bk unroll <<<"$choice"
    lib="$work/matmul_${bm}_${bn}_${bk}_${unroll}.so"
    $cc -O3 -march=native -shared -fPIC -DBM="$bm" -DBN="$bn" -DBK="$bk" -DUNROLL="$unroll" \
        "$root/examples/kernels/matmul.c" -o "$lib"
    libs+=("$lib")
    names+=("$bm/$bn/$bk/$unroll")
done
$cc -O2 "$here/placements.c" -o "$work/placements" -ldl
for huge in 1 0; do
    echo "== $( ((huge)) && echo "huge pages" || echo "small pages" ), $rounds rounds (BM/BN/BK/UNROLL)"
    "$work/placements" "$huge" "$rounds" "${libs[@]}" | python3 "$here/placements.py" "${names[@]}"
done
