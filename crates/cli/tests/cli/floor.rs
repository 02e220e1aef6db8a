//! The physical floor (a time below what writing the outputs takes cannot be real) and the
//! outputs it does not hold a kernel to: `reset` ones, which a kernel may update in part.

use crate::util::{check, json, outcomes, tunebox};

/// A histogram of 4096 keys into 1 Mi `i32` bins: each call adds to 4096 bins of 4 MiB, which
/// `reset` zeroes before every call. `V` changes nothing but the choice.
const SPARSE: &str = r#"#include <stdint.h>
void hist(const int32_t *keys, int32_t *bins, int64_t nkeys) {
    for (int64_t i = 0; i < nkeys; i++)
        bins[(uint32_t)(keys[i] + 100) * 2654435761u % 1048576u] += V;
}
"#;

const SPARSE_MANIFEST: &str = r#"
timeout_s = 10
[kernel]
source = "hist.c"
entry = "hist"
flags = ["-O2", "-DV=1"]
[[tensors]]
name = "keys"
dtype = "i32"
shape = [4096]
[[tensors]]
name = "bins"
dtype = "i32"
shape = [1048576]
init = "zeros"
output = true
reset = true
[[scalars]]
name = "nkeys"
value = 4096
[params]
UNROLL = [1, 2]
[timing]
min_reps = 5
[verify]
reference = { choice = { UNROLL = 1 } }
"#;

/// An honest kernel writing a few KiB of a 4 MiB `reset` output takes microseconds, far below
/// what writing 4 MiB takes: it is `ok`, not `suspicious` ("below the physical floor").
#[test]
fn a_kernel_updating_part_of_a_reset_output_is_held_to_no_floor_for_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hist.c"), SPARSE).unwrap();
    std::fs::write(dir.path().join("m.toml"), SPARSE_MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "m.toml",
            "--no-cache",
            "--json",
            "r.json",
            "--rounds",
            "1",
        ],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    for (choice, status) in outcomes(&report) {
        assert_eq!(status, "ok", "{choice}: {report:#}");
    }
}
