//! Kernel Tuner cache files that a run is still writing (or that an interrupted run left) are
//! unterminated JSON: `report` and `--replay` read them as Kernel Tuner's own reader does.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::util::{text, tunebox};

fn hub() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/benchmark_hub")
}

/// The hub's convolution cache (A100) as Kernel Tuner leaves it open for appending: the closing
/// `}\n}` taken off and a comma after the last record; then `tail` appended.
fn open_cache(dir: &Path, name: &str, tail: &str) -> PathBuf {
    let gz = std::fs::read(hub().join("cachefiles/convolution_milo/A100.json.gz")).unwrap();
    let mut closed = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut closed)
        .unwrap();
    let closed = closed.trim_end();
    let body = closed
        .strip_suffix("}\n}")
        .expect("a closed Kernel Tuner cache");
    let path = dir.join(name);
    std::fs::write(&path, format!("{body},{tail}")).unwrap();
    path
}

#[test]
fn report_and_replay_read_a_cache_still_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let open = open_cache(dir.path(), "open.json", "");
    let out = tunebox(
        dir.path(),
        &["report", open.to_str().unwrap(), "--top", "3"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("4362 records"), "{stdout}");
    assert!(stdout.contains("was not closed"), "{stdout}");

    let t1 = hub().join("kernels/convolution_milo.json");
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            t1.to_str().unwrap(),
            "--replay",
            open.to_str().unwrap(),
            "--top",
            "3",
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("replayed 4362 measurements"),
        "{}",
        text(&out.stdout)
    );
}

/// Caught in the middle of writing a record: the records before it are read, it is left out.
#[test]
fn a_record_cut_short_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let cut = open_cache(
        dir.path(),
        "cut.json",
        "\n\"16,1,1,1,1,1,0,1,15,15\": {\"block_size_x\": 16, \"time\": 3.8",
    );
    let out = tunebox(dir.path(), &["report", cut.to_str().unwrap(), "--top", "1"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("4362 records"), "{stdout}");
    assert!(stdout.contains("left out"), "{stdout}");
}
