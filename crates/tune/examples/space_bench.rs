//! Search-space construction benchmark (issue "Search at scale"): builds each space in a child
//! process of its own (so that its peak RSS is its own) and reports the valid and raw choice
//! counts, the best of 3 build times, and the peak RSS; with Kernel Tuner installed (a virtual
//! environment with `kernel_tuner`, `$KT_VENV` or `target/kernel-tuner-venv`), builds the same
//! spaces with Kernel Tuner's `Searchspace` for a side-by-side. Run by `cargo xtask
//! space-bench`.
//!
//! ```text
//! cargo run --release -p tunebox-tune --example space_bench -- [--hub DIR] [--no-kt]
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The 10.6-million raw GEMM-like space (CLBlast's Xgemm parameters): 1,870,848 valid.
const GEMM10M: &str = r#"name = "gemm-like-10m"
restrictions = [
  "KWG % KWI == 0",
  "MWG % (MDIMC * VWM) == 0",
  "NWG % (NDIMC * VWN) == 0",
  "MWG % (MDIMA * VWM) == 0",
  "NWG % (NDIMB * VWN) == 0",
  "KWG % ((MDIMC * NDIMC)/MDIMA) == 0",
  "KWG % ((MDIMC * NDIMC)/NDIMB) == 0",
  "not (MWG == 128 and NWG == 128 and MDIMC == 8 and NDIMC == 8)",
]
[kernel]
source = "k.c"
entry = "k"
[[tensors]]
name = "x"
dtype = "f32"
shape = [1]
[params]
GEMMK = [0]
MWG = [16, 32, 64, 128]
NWG = [16, 32, 64, 128]
KWG = [16, 32]
MDIMC = [8, 16, 32]
NDIMC = [8, 16, 32]
MDIMA = [8, 16, 32]
NDIMB = [8, 16, 32]
KWI = [1, 2]
VWM = [1, 2, 4, 8]
VWN = [1, 2, 4, 8]
STRM = [0, 1]
STRN = [0, 1]
SA = [0, 1]
SB = [0, 1]
KREG = [1, 2, 4, 8]
PRECISION = [16, 32]
"#;

/// Builds one space in Kernel Tuner: argv[1] a manifest (.toml) or T1 file (.json); prints
/// `valid seconds peak_kib`.
const KT_SCRIPT: &str = r#"
import json, sys, time, resource, tomllib
from kernel_tuner.searchspace import Searchspace
path = sys.argv[1]
if path.endswith(".json"):
    t1 = json.load(open(path))
    space = t1["ConfigurationSpace"]
    params = {p["Name"]: eval(p["Values"]) for p in space["TuningParameters"]}
    restrictions = [c["Expression"] for c in space.get("Conditions", [])]
else:
    m = tomllib.load(open(path, "rb"))
    params, restrictions = m["params"], m.get("restrictions", [])
start = time.perf_counter()
ss = Searchspace(params, restrictions, 1 << 30)
seconds = time.perf_counter() - start
print(ss.size, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"#;

fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// In the child: build the space at `path` 3 times; print `valid raw best_seconds peak_kib`.
fn one(path: &Path) {
    let mut best = f64::INFINITY;
    let mut counts = (0, 0);
    for _ in 0..3 {
        let start = Instant::now();
        let space = tunebox_tune::load_space(path).expect("a valid space");
        best = best.min(start.elapsed().as_secs_f64());
        counts = (space.len(), space.raw_len());
    }
    println!("{} {} {best} {}", counts.0, counts.1, peak_kib());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut hub = root.join("data/benchmark_hub");
    let mut kt = true;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--one" => return one(Path::new(&args.next().expect("a path"))),
            "--hub" => hub = args.next().expect("a folder").into(),
            "--no-kt" => kt = false,
            other => {
                eprintln!("space_bench: unknown option {other}");
                std::process::exit(2);
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("tunebox-space-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    std::fs::write(dir.join("gemm10m.toml"), GEMM10M).expect("writable temp dir");
    std::fs::write(dir.join("k.c"), "void k(float *x) { (void)x; }\n").expect("writable");
    let spaces: Vec<(&str, PathBuf)> = vec![
        ("GEMM-like 10.6M raw", dir.join("gemm10m.toml")),
        ("hub GEMM (T1)", hub.join("kernels/gemm_milo.json")),
        ("hub hotspot (T1)", hub.join("kernels/hotspot_milo.json")),
        (
            "hub convolution (T1)",
            hub.join("kernels/convolution_milo.json"),
        ),
        (
            "hub dedispersion (T1)",
            hub.join("kernels/dedispersion_milo.json"),
        ),
    ];
    let venv = std::env::var_os("KT_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/kernel-tuner-venv"));
    let python = venv.join("bin/python");
    let kt = kt && python.is_file();
    let me = std::env::current_exe().expect("own path");
    println!(
        "| space | valid | raw | tunebox build | tunebox peak RSS |{}",
        if kt {
            " Kernel Tuner build | Kernel Tuner peak RSS |"
        } else {
            ""
        }
    );
    println!(
        "|---|---:|---:|---:|---:|{}",
        if kt { "---:|---:|" } else { "" }
    );
    for (name, path) in &spaces {
        let out = Command::new(&me)
            .arg("--one")
            .arg(path)
            .output()
            .expect("the benchmark runs itself");
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = text.split_whitespace().collect();
        if !out.status.success() || f.len() < 4 {
            println!(
                "| {name} | failed: {} |",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            continue;
        }
        let (secs, kib): (f64, f64) = (f[2].parse().unwrap_or(0.0), f[3].parse().unwrap_or(0.0));
        let mut row = format!(
            "| {name} | {} | {} | {:.3} s | {:.0} MB |",
            f[0],
            f[1],
            secs,
            kib / 1024.0
        );
        if kt {
            let out = Command::new(&python)
                .args(["-c", KT_SCRIPT])
                .arg(path)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .output()
                .expect("python runs");
            let text = String::from_utf8_lossy(&out.stdout);
            let k: Vec<&str> = text.split_whitespace().collect();
            if out.status.success() && k.len() >= 3 {
                let secs: f64 = k[1].parse().unwrap_or(0.0);
                let kib: f64 = k[2].parse().unwrap_or(0.0);
                let agree = if k[0] == f[0] {
                    ""
                } else {
                    " (count differs!)"
                };
                row.push_str(&format!(" {secs:.3} s{agree} | {:.0} MB |", kib / 1024.0));
            } else {
                let err = String::from_utf8_lossy(&out.stderr);
                let last = err.lines().last().unwrap_or("").to_owned();
                row.push_str(&format!(" failed: {last} | |"));
            }
        }
        println!("{row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
