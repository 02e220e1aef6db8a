//! A results cache on a full or read-only file system: the run goes on, writes its table and
//! `--json`, says (even with `-q`) how many results were not kept and why, and exits 3; a
//! re-run on the still-full disk measures what is missing instead of aborting; a full disk never
//! leaves a cut line, and a cut line is reported for what it is.
//!
//! The file system is a small tmpfs the test mounts (we run as root, as CI does); without the
//! right to mount, a read-only directory stands in (which root could write anyway: then the test
//! says it was skipped).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::util::{json, text, tunebox, tunebox_env};

/// Six choices that all succeed quickly.
const QUICK: &str = r#"#include <stdint.h>
void quick(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 0.0f * MODE;
}
"#;

const MANIFEST: &str = r#"timeout_s = 20
[kernel]
source = "quick.c"
entry = "quick"
flags = ["-O1"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [64]
[[tensors]]
name = "y"
dtype = "f32"
shape = [64]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 64
[params]
MODE = [0, 1, 2, 3, 4, 5]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
"#;

/// A tmpfs mounted on a folder of a temporary directory, unmounted when dropped.
struct Tmpfs {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `kib` KiB, or `None` when this process may not mount one.
    fn mount(kib: usize) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("small");
        std::fs::create_dir(&mount).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&mount)
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(Tmpfs { mount, _dir: dir })
    }

    /// Fills the file system, then frees `free` bytes (whole pages) of the filler.
    fn fill_leaving(&self, free: u64) {
        let filler = self.mount.join("filler");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&filler)
            .unwrap();
        let page = [0u8; 4096];
        while file.write_all(&page).is_ok() {}
        let len = std::fs::metadata(&filler).unwrap().len();
        // A failed write may have left part of a page: drop it, then `free` more.
        let whole = len - len % 4096;
        file.set_len(whole.saturating_sub(free)).unwrap();
    }

    /// Makes the file system read-only.
    fn remount_read_only(&self) {
        let status = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.mount)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("quick.c"), QUICK).unwrap();
    std::fs::write(dir.path().join("quick.toml"), MANIFEST).unwrap();
    dir
}

/// `tunebox tune quick.toml -q --cache CACHE --json out.json` in `dir`.
fn tune(dir: &Path, cache: &Path) -> Output {
    let cache = cache.to_str().unwrap();
    tunebox(
        dir,
        &[
            "tune",
            "quick.toml",
            "-q",
            "--cache",
            cache,
            "--json",
            "out.json",
        ],
    )
}

/// The report's results and its cache's `not_cached`.
fn report(dir: &Path) -> (usize, u64) {
    let report: Value = json(&dir.join("out.json"));
    (
        report["results"].as_array().unwrap().len(),
        report["cache"]["not_cached"].as_u64().unwrap_or(0),
    )
}

/// Every line of the cache file is a whole line (no cut line at the end); how many.
/// The results a cache holds: its whole lines' distinct keys (a choice measured in rounds has
/// its screening line and one with all its windows).
fn whole_lines(cache: &Path) -> usize {
    let text = std::fs::read_to_string(cache).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a cut line:\n{text}"
    );
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let line = serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            line["key"].as_str().unwrap_or(l).to_owned()
        })
        .collect::<std::collections::HashSet<_>>()
        .len()
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

#[test]
fn a_full_disk_loses_no_result_and_says_so_even_with_quiet() {
    let Some(fs) = Tmpfs::mount(64) else {
        return read_only_directory_fallback();
    };
    let dir = setup();
    let cache = fs.mount.join("quick.tunebox-cache.jsonl");

    // A report from before, on the same file system.
    let old_report = fs.mount.join("old.json");
    std::fs::write(&old_report, "{}\n").unwrap();
    // Room for a line or two of the six.
    fs.fill_leaving(4096);
    let out = tune(dir.path(), &cache);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        stderr.contains("warning: ") && stderr.contains("results could not be kept"),
        "{stderr}"
    );
    assert!(stderr.contains("file system is full"), "{stderr}");
    assert!(stderr.contains("free space"), "{stderr}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("best: MODE="), "{stdout}");
    assert!(stdout.contains("could not be written"), "{stdout}");
    let (results, not_cached) = report(dir.path());
    assert_eq!(results, 6);
    let kept = whole_lines(&cache);
    assert!(not_cached > 0, "{}", describe(&out));
    assert_eq!(kept + not_cached as usize, 6, "each result kept or counted");

    // Still full: the re-run measures what is missing, and says so again.
    let out = tune(dir.path(), &cache);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert_eq!(report(dir.path()), (6, 6 - kept as u64));
    assert_eq!(whole_lines(&cache), kept);

    // A line cut short (a kill mid-write) at the end of a cache on the full disk.
    std::fs::remove_file(fs.mount.join("filler")).unwrap();
    OpenOptions::new()
        .append(true)
        .open(&cache)
        .unwrap()
        .write_all(b"{\"key\": \"cut")
        .unwrap();
    fs.fill_leaving(0);
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "quick.toml",
            "--cache",
            cache.to_str().unwrap(),
            "--json",
            "out.json",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    // Every write of the run fails alike: said once, however many results and rounds.
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("file system is full").count(),
        1,
        "{}",
        describe(&out)
    );
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("by a kill?"), "{stdout}");
    assert!(
        stdout.contains("cut short while it was written") && stdout.contains("disk was full"),
        "{stdout}"
    );
    assert_eq!(report(dir.path()).0, 6);

    // --json on the full disk too: the table is printed, the loss said, the write fails (exit
    // 1) and the report from before is left whole.
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "quick.toml",
            "-q",
            "--cache",
            cache.to_str().unwrap(),
            "--json",
            old_report.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        text(&out.stdout).contains("best: MODE="),
        "{}",
        describe(&out)
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("results could not be kept"), "{stderr}");
    assert!(stderr.contains("is left as it was"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&old_report).unwrap(), "{}\n");

    // Read-only: what the cache holds is used, the rest measured, the loss said.
    fs.remount_read_only();
    let out = tune(dir.path(), &cache);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("read-only"), "{stderr}");
    assert_eq!(report(dir.path()), (6, 6 - kept as u64));
}

/// Without a tmpfs: a cache in a directory this process cannot write.
fn read_only_directory_fallback() {
    use std::os::unix::fs::PermissionsExt;
    let dir = setup();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(locked.join("probe"), "").is_ok() {
        eprintln!("skipped: cannot mount a tmpfs, and a read-only directory is writable here");
        return;
    }
    let out = tune(dir.path(), &locked.join("c.jsonl"));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("permissions"),
        "{}",
        describe(&out)
    );
    assert_eq!(report(dir.path()), (6, 6));
}

/// A kernel cache that cannot be written does not stop the run: it compiles into a private
/// temporary folder, says so once, and removes it at its end. The cache root is a folder under
/// a regular file (which no user, root included, can create) and, where this process may mount
/// one, a read-only file system on which the folder exists already.
#[test]
fn a_kernel_cache_that_cannot_be_written_does_not_stop_the_run() {
    let dir = setup();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut roots = vec![file.join("cache")];
    let read_only = Tmpfs::mount(64);
    if let Some(fs) = &read_only {
        let cpu = fs.mount.join("cache").join("cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        for folder in [fs.mount.join("cache"), cpu] {
            std::fs::set_permissions(folder, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .unwrap();
        }
        fs.remount_read_only();
        roots.push(fs.mount.join("cache"));
    }
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    for root in roots {
        let out = tunebox_env(
            dir.path(),
            &["tune", "quick.toml", "--no-cache", "--json", "out.json"],
            &[
                ("TUNEBOX_CACHE_DIR", root.to_str().unwrap()),
                ("TMPDIR", tmp.to_str().unwrap()),
            ],
        );
        assert!(out.status.success(), "{}", describe(&out));
        let stderr = text(&out.stderr);
        assert_eq!(
            stderr.matches("warning: the kernel cache").count(),
            1,
            "{}",
            describe(&out)
        );
        assert!(
            stderr.contains(root.to_str().unwrap())
                && stderr.contains(&format!("private folder {}", tmp.display())),
            "{stderr}"
        );
        let report: Value = json(&dir.path().join("out.json"));
        let results = report["results"].as_array().unwrap();
        assert_eq!(results.len(), 6, "{report}");
        assert!(results.iter().all(|r| r["status"] == "ok"), "{report}");
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("tunebox-kernels-")
            })
            .collect();
        assert!(
            left.is_empty(),
            "the private kernel cache was left: {left:?}"
        );
    }
}
