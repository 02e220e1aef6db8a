//! `cargo xtask semver`: the library crates' public API checked against the last release with
//! cargo-semver-checks (docs/extending.md, "Public API and semver").

use std::process::Command;

use crate::{cargo, workspace_root};

/// Where the last release's commit is written (its one line that is not a comment).
const BASELINE_FILE: &str = "release/BASELINE";

/// The cargo-semver-checks release that reads the rustdoc JSON of the toolchain CI uses
/// (Rust 1.95); `.ci/run` installs it.
pub(crate) const TOOL_VERSION: &str = "0.51.0";

/// The workspace's packages that no downstream program depends on: the CLI, the Python
/// extension module (a cdylib), the xtask, the tests, the benchmarks and the examples.
const NOT_LIBRARIES: &[&str] = &[
    "tunebox-cli",
    "tunebox-python",
    "xtask",
    "tunebox-tests",
    "tunebox-benchmarks",
    "tunebox-example-rust-fns",
];

/// `cargo xtask semver [--baseline-rev REV]`: `cargo semver-checks` on every library crate of
/// the workspace against `REV` (default: the commit in [`BASELINE_FILE`]).
pub(crate) fn semver(args: &[String]) -> Result<(), String> {
    let baseline = match args {
        [] => baseline()?,
        [flag, rev] if flag == "--baseline-rev" => rev.clone(),
        _ => return Err("usage: cargo xtask semver [--baseline-rev REV]".into()),
    };
    check_tool()?;
    check_baseline_present(&baseline)?;
    let mut check = vec!["semver-checks", "--workspace", "--baseline-rev", &baseline];
    for package in NOT_LIBRARIES {
        check.extend(["--exclude", package]);
    }
    cargo(&check, &[])
}

/// The commit in [`BASELINE_FILE`].
fn baseline() -> Result<String, String> {
    let path = workspace_root().join(BASELINE_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_baseline(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The one line of `text` that is neither blank nor a `#` comment: a commit's full hash.
fn parse_baseline(text: &str) -> Result<String, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    match lines.as_slice() {
        [commit] if commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()) => {
            Ok((*commit).to_owned())
        }
        [other] => Err(format!(
            "`{other}` is not a commit's full hash (40 hex digits): write `git rev-parse REV`'s \
             output"
        )),
        _ => Err(format!(
            "{} lines that are not comments; write the release's commit on one line",
            lines.len()
        )),
    }
}

/// Whether this checkout has the commit `rev` (cargo-semver-checks builds the baseline from
/// it): an error naming the fix otherwise (a shallow clone lacks it).
fn check_baseline_present(rev: &str) -> Result<(), String> {
    let root = workspace_root();
    let present = Command::new("git")
        .current_dir(&root)
        .args(["cat-file", "-e", &format!("{rev}^{{commit}}")])
        .status()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if present.success() {
        return Ok(());
    }
    Err(format!(
        "{BASELINE_FILE} names {rev}, which this checkout does not have (a shallow clone?): \
         `git fetch --unshallow` (or fetch that commit), then run again"
    ))
}

/// Whether `cargo semver-checks` runs, and is [`TOOL_VERSION`]: an error naming the install
/// command otherwise.
fn check_tool() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let install = format!("cargo install cargo-semver-checks --locked --version {TOOL_VERSION}");
    let output = Command::new(&cargo)
        .args(["semver-checks", "--version"])
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "cargo-semver-checks is not installed: run `{install}` (about 10 minutes)"
        ));
    }
    if version.split_whitespace().nth(1) != Some(TOOL_VERSION) {
        return Err(format!(
            "found {}, this check expects cargo-semver-checks {TOOL_VERSION} (the release \
             that reads this toolchain's rustdoc JSON): run `{install} --force`",
            version.trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_is_the_one_commit_among_comments() {
        let commit = "690c32cb75fd57446eee4d11fba5e40b07861fc1";
        let text = format!("# the last release\n\n{commit}\n");
        assert_eq!(parse_baseline(&text).unwrap(), commit);
    }

    #[test]
    fn a_baseline_that_is_not_one_full_hash_is_refused() {
        let short = parse_baseline("690c32c\n").unwrap_err();
        assert!(
            short.contains("`690c32c` is not a commit's full hash"),
            "{short}"
        );
        let none = parse_baseline("# nothing\n").unwrap_err();
        assert!(none.contains("0 lines"), "{none}");
        let two = parse_baseline("main\nv0.1.0\n").unwrap_err();
        assert!(two.contains("2 lines"), "{two}");
    }

    #[test]
    fn the_committed_baseline_parses() {
        baseline().unwrap();
    }
}
