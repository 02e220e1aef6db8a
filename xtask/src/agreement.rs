//! `cargo xtask agreement [RUNS] [-- TUNE_ARGS…]`: how well back-to-back runs of the main job
//! (`tunebox tune examples/matmul-cpu.toml`) agree on one machine.
//!
//! For each pair of consecutive runs it reports Spearman's rank correlation over the choices
//! both measured `ok`, and the top-1 regret: run i's best as run i+1 measured it, against run
//! i+1's best (0 % when both runs pick the same choice, or choices within the noise of each
//! other). Writes `target/agreement/summary.json` and each run's JSON report beside it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use crate::{cargo, target_dir, workspace_root};

/// One run's `ok` results: choice label → median ms.
pub(crate) type Medians = BTreeMap<String, f64>;

/// `cargo xtask agreement`.
pub(crate) fn agreement(args: &[String]) -> Result<(), String> {
    let (own, tune_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let runs: usize = match own {
        [] => 2,
        [n] => n
            .parse()
            .ok()
            .filter(|&n: &usize| n >= 2)
            .ok_or("usage: cargo xtask agreement [RUNS ≥ 2] [-- TUNE_ARGS…]")?,
        _ => return Err("usage: cargo xtask agreement [RUNS ≥ 2] [-- TUNE_ARGS…]".into()),
    };
    let root = workspace_root();
    cargo(&["build", "--release", "--package", "tunebox-cli"], &[])?;
    let tunebox = target_dir(&root).join("release").join("tunebox");
    let out = target_dir(&root).join("agreement");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    // Kernels compile once, in the first run; every run measures afresh (--no-cache).
    let kernels = fresh_dir(&out.join("kernel-cache"))?;

    let mut medians = Vec::new();
    let mut walls = Vec::new();
    for run in 0..runs {
        let json_path = out.join(format!("run-{run}.json"));
        let started = Instant::now();
        let status = Command::new(&tunebox)
            .args([
                "tune",
                "examples/matmul-cpu.toml",
                "--no-cache",
                "-q",
                "--json",
            ])
            .arg(&json_path)
            .args(tune_args)
            .env("TUNEBOX_CACHE_DIR", &kernels)
            .current_dir(&root)
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {}: {e}", tunebox.display()))?;
        if !status.success() {
            return Err(format!("run {run} failed ({status})"));
        }
        walls.push(started.elapsed().as_secs_f64());
        medians.push(ok_medians(&json_path)?);
        eprintln!(
            "xtask: run {run}: {} ok choices in {:.1} s",
            medians[run].len(),
            walls[run]
        );
    }

    let mut pairs = Vec::new();
    println!("runs     spearman  top-1 regret  best (run i)                 best (run i+1)");
    for i in 0..runs - 1 {
        let (a, b) = (&medians[i], &medians[i + 1]);
        let rho = spearman(a, b).ok_or("fewer than 2 choices measured ok in both runs")?;
        let (best_a, best_b) = (best(a), best(b));
        let regret = regret(a, b).ok_or("no choice measured ok")?;
        println!(
            "{i}→{}     {rho:>8.3}  {:>11.1}%  {:<27}  {}",
            i + 1,
            regret * 100.0,
            best_a.as_deref().unwrap_or_default(),
            best_b.as_deref().unwrap_or_default()
        );
        pairs.push(json!({
            "runs": [i, i + 1],
            "spearman": rho,
            "top1_regret": regret,
            "best": [best_a, best_b],
        }));
    }
    let summary = json!({ "runs": runs, "wall_s": walls, "tune_args": tune_args, "pairs": pairs });
    let path = out.join("summary.json");
    std::fs::write(&path, format!("{summary:#}\n"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(())
}

/// A fresh, empty directory at `path`.
fn fresh_dir(path: &Path) -> Result<std::path::PathBuf, String> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// The results of a JSON report (`tunebox tune --json`).
pub(crate) fn report_results(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    report["results"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no results", path.display()))
}

/// A choice's label, `BM=32 BN=64`, from its JSON object.
pub(crate) fn label(choice: &Value) -> String {
    choice.as_object().map_or_else(String::new, |params| {
        params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The median of every `ok` choice of a JSON report.
fn ok_medians(path: &Path) -> Result<Medians, String> {
    Ok(report_results(path)?
        .iter()
        .filter(|r| r["status"] == "ok")
        .filter_map(|r| Some((label(&r["choice"]), r["median_ms"].as_f64()?)))
        .collect())
}

/// The fastest choice.
fn best(medians: &Medians) -> Option<String> {
    medians
        .iter()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(label, _)| label.clone())
}

/// Run `a`'s best as `b` measured it, relative to `b`'s best: `b[best(a)] / min(b) - 1`.
fn regret(a: &Medians, b: &Medians) -> Option<f64> {
    let best_b = b.values().copied().min_by(f64::total_cmp)?;
    let chosen = b.get(&best(a)?)?;
    Some(chosen / best_b - 1.0)
}

/// Spearman's rank correlation of the choices in both (average ranks for ties), or `None` for
/// fewer than 2 common choices.
pub(crate) fn spearman(a: &Medians, b: &Medians) -> Option<f64> {
    let common: Vec<(f64, f64)> = a
        .iter()
        .filter_map(|(label, &x)| Some((x, *b.get(label)?)))
        .collect();
    if common.len() < 2 {
        return None;
    }
    let ra = ranks(&common.iter().map(|p| p.0).collect::<Vec<_>>());
    let rb = ranks(&common.iter().map(|p| p.1).collect::<Vec<_>>());
    Some(pearson(&ra, &rb))
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        let average = (start + end + 1) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = average;
        }
        start = end;
    }
    ranks
}

fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    if vx == 0.0 || vy == 0.0 {
        0.0
    } else {
        cov / (vx * vy).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn medians(pairs: &[(&str, f64)]) -> Medians {
        pairs.iter().map(|(l, m)| (l.to_string(), *m)).collect()
    }

    #[test]
    fn spearman_and_regret() {
        let a = medians(&[("x", 1.0), ("y", 2.0), ("z", 3.0), ("w", 4.0)]);
        assert_eq!(spearman(&a, &a), Some(1.0));
        let reversed = medians(&[("x", 4.0), ("y", 3.0), ("z", 2.0), ("w", 1.0)]);
        assert_eq!(spearman(&a, &reversed), Some(-1.0));
        // Ties share their average rank (scipy.stats.spearmanr gives 0.9487 here).
        let tied = medians(&[("x", 1.0), ("y", 1.0), ("z", 3.0), ("w", 4.0)]);
        assert!((spearman(&a, &tied).unwrap() - 0.948_683).abs() < 1e-6);
        assert_eq!(regret(&a, &a), Some(0.0));
        // Run a's best (x) took 4 in run b, whose best took 1: 300 % regret.
        assert_eq!(regret(&a, &reversed), Some(3.0));
        assert_eq!(spearman(&a, &medians(&[("x", 1.0)])), None);
    }

    #[test]
    fn labels_follow_the_params() {
        let choice: Value = serde_json::from_str(r#"{"BM": 32, "NAME": "a"}"#).unwrap();
        assert_eq!(label(&choice), r#"BM=32 NAME="a""#);
    }
}
