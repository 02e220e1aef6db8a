//! Sharding a run across nodes: `--shard K/N`, or `--shard auto` from a Slurm job array
//! (`SLURM_ARRAY_TASK_ID` with `SLURM_ARRAY_TASK_COUNT`, or `_MIN`/`_MAX`/`_STEP`) or a
//! Kubernetes Indexed Job (`JOB_COMPLETION_INDEX` with `--shards N`).
//!
//! Shard K of N measures the selected choices whose stable index `i` (after restrictions, in
//! canonical order) has `i % N == K`: round robin, so that neighbouring choices, which tend to
//! cost alike, are spread over the shards.

use anyhow::{Context, Result, bail, ensure};

use serde::{Deserialize, Serialize};

/// Shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// This shard, from 0.
    pub index: usize,
    /// The number of shards.
    pub count: usize,
}

impl std::fmt::Display for ShardInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `--shard` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardSpec {
    /// `K/N`.
    Fixed(ShardInfo),
    /// `auto`: from the scheduler's environment.
    Auto,
}

/// Most shards a run may be split into.
const MAX_SHARDS: usize = 1_000_000;

/// Parses `--shard`: `K/N` (0 <= K < N) or `auto`.
///
/// # Errors
///
/// Anything else, with the forms that work.
pub fn parse(text: &str) -> Result<ShardSpec, String> {
    if text == "auto" {
        return Ok(ShardSpec::Auto);
    }
    let usage = "give K/N (shard K of N, numbered from 0 like Slurm array indices and Kubernetes \
                 completion indexes, e.g. 0/4 … 3/4) or `auto`";
    let (k, n) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?}: {usage}"))?;
    let k: usize = k.trim().parse().map_err(|_| format!("{text:?}: {usage}"))?;
    let n: usize = n.trim().parse().map_err(|_| format!("{text:?}: {usage}"))?;
    check(k, n).map_err(|e| format!("{text:?}: {e}"))?;
    Ok(ShardSpec::Fixed(ShardInfo { index: k, count: n }))
}

fn check(k: usize, n: usize) -> Result<(), String> {
    if n == 0 || n > MAX_SHARDS {
        return Err(format!("the shard count must be 1 to {MAX_SHARDS}"));
    }
    if k >= n {
        return Err(format!(
            "shard {k} of {n} does not exist: shards are numbered from 0 to {}",
            n - 1
        ));
    }
    Ok(())
}

/// The shard this process runs: `spec`, resolved against the environment `var`.
///
/// # Errors
///
/// `--shards` without `--shard`, `auto` without a scheduler's variables, Kubernetes without
/// `--shards`, values that do not parse or do not fit, a `--shards` that contradicts the shard.
pub fn resolve(
    spec: Option<ShardSpec>,
    shards: Option<usize>,
    var: impl Fn(&str) -> Option<String>,
) -> crate::Result<Option<ShardInfo>> {
    resolve_with(spec, shards, var).map_err(crate::TuneError::invalid_options)
}

/// [`resolve`] with environment variables read through `var`, its errors as `anyhow`.
fn resolve_with(
    spec: Option<ShardSpec>,
    shards: Option<usize>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<ShardInfo>> {
    let shard = match (spec, shards) {
        (None, None) => return Ok(None),
        (Some(ShardSpec::Fixed(shard)), shards) => {
            if let Some(n) = shards {
                ensure!(
                    n == shard.count,
                    "--shard {shard} and --shards {n} disagree on the number of shards"
                );
            }
            shard
        }
        (None, Some(n)) => bail!(
            "--shards {n} needs --shard auto: it is the number of shards for the shard index a \
             scheduler gives (Slurm, Kubernetes); outside a scheduler give --shard K/{n}"
        ),
        (Some(ShardSpec::Auto), shards) => from_env(shards, &var)?,
    };
    Ok(Some(shard))
}

fn from_env(shards: Option<usize>, var: &impl Fn(&str) -> Option<String>) -> Result<ShardInfo> {
    let number = |name: &str| -> Result<Option<i64>> {
        var(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .with_context(|| format!("{name}={v:?} is not an integer"))
            })
            .transpose()
    };
    if let Some(id) = number("SLURM_ARRAY_TASK_ID")? {
        if let Some(n) = shards {
            // Told the count: the array ids are the shard indices (`--array=0-N-1`, or any
            // subset of it when failed shards are submitted again, e.g. `--array=3,7`).
            return fit(id, n as i64, "SLURM_ARRAY_TASK_ID / --shards");
        }
        let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let step = number("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
        let count = match (
            number("SLURM_ARRAY_TASK_COUNT")?,
            number("SLURM_ARRAY_TASK_MAX")?,
        ) {
            (Some(count), _) => count,
            (None, Some(max)) => (max - min) / step + 1,
            (None, None) => bail!(
                "--shard auto: SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor \
                 SLURM_ARRAY_TASK_MAX is; pass --shards N"
            ),
        };
        ensure!(
            id >= min && (id - min) % step == 0,
            "--shard auto: SLURM_ARRAY_TASK_ID={id} is not in the array {min}-…:{step}; submit \
             the array as a range (sbatch --array=0-{}), or pass --shards N",
            count - 1
        );
        return fit(
            (id - min) / step,
            count,
            "SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT",
        );
    }
    if let Some(index) = number("JOB_COMPLETION_INDEX")? {
        let Some(n) = shards else {
            bail!(
                "--shard auto: JOB_COMPLETION_INDEX={index} (a Kubernetes Indexed Job) gives this \
                 shard's index but not the number of shards; pass --shards N, N being the Job's \
                 `completions`"
            );
        };
        return fit(index, n as i64, "JOB_COMPLETION_INDEX / --shards");
    }
    bail!(
        "--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX \
         (a Kubernetes Indexed Job) is set; outside a scheduler give --shard K/N"
    )
}

fn fit(index: i64, count: i64, source: &str) -> Result<ShardInfo> {
    let (Ok(k), Ok(n)) = (usize::try_from(index), usize::try_from(count)) else {
        bail!("--shard auto: {source} give shard {index} of {count}, which does not exist");
    };
    check(k, n).map_err(|e| anyhow::anyhow!("--shard auto ({source}): {e}"))?;
    Ok(ShardInfo { index: k, count: n })
}

/// Whether `shard` measures the choice of stable index `index`.
pub(crate) fn owns(shard: Option<ShardInfo>, index: usize) -> bool {
    shard.is_none_or(|s| index % s.count == s.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn auto(vars: &[(&str, &str)], shards: Option<usize>) -> Result<Option<ShardInfo>> {
        resolve_with(Some(ShardSpec::Auto), shards, env(vars))
    }

    fn shard(index: usize, count: usize) -> Option<ShardInfo> {
        Some(ShardInfo { index, count })
    }

    #[test]
    fn fixed_shards_parse() {
        assert_eq!(
            parse("1/4"),
            Ok(ShardSpec::Fixed(ShardInfo { index: 1, count: 4 }))
        );
        assert_eq!(parse("auto"), Ok(ShardSpec::Auto));
        for bad in ["4/4", "1", "a/4", "0/0", "-1/4"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("4/4").unwrap_err().contains("numbered from 0 to 3"));
    }

    #[test]
    fn slurm_arrays() {
        let s = auto(
            &[
                ("SLURM_ARRAY_TASK_ID", "2"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
            None,
        );
        assert_eq!(s.unwrap(), shard(2, 4));
        // --array=1-8: ids 1..=8 are shards 0..8.
        let s = auto(
            &[
                ("SLURM_ARRAY_TASK_ID", "8"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", "8"),
            ],
            None,
        );
        assert_eq!(s.unwrap(), shard(7, 8));
        // --array=0-6:2 → ids 0, 2, 4, 6.
        let s = auto(
            &[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "6"),
                ("SLURM_ARRAY_TASK_STEP", "2"),
            ],
            None,
        );
        assert_eq!(s.unwrap(), shard(2, 4));
        // With --shards, the ids are the shard indices: shards 3 and 7 of 16 submitted again
        // as --array=3,7 keep their numbers.
        let again = [
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
            ("SLURM_ARRAY_TASK_MIN", "3"),
            ("SLURM_ARRAY_TASK_MAX", "7"),
        ];
        assert_eq!(auto(&again, Some(16)).unwrap(), shard(7, 16));
        // Without it, that array is 2 tasks from 3 to 7: task 7 has no shard.
        assert!(auto(&again, None).is_err());
        let err = auto(&[("SLURM_ARRAY_TASK_ID", "16")], Some(16)).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn kubernetes_indexed_jobs_need_the_count() {
        assert_eq!(
            auto(&[("JOB_COMPLETION_INDEX", "3")], Some(5)).unwrap(),
            shard(3, 5)
        );
        // --shards alone is not auto: it says what it needs, even inside a scheduler.
        for vars in [&[("JOB_COMPLETION_INDEX", "0")][..], &[]] {
            let err = resolve(None, Some(5), env(vars)).unwrap_err();
            assert!(
                err.to_string().starts_with("--shards 5 needs --shard auto"),
                "{err}"
            );
        }
        let err = auto(&[("JOB_COMPLETION_INDEX", "3")], None).unwrap_err();
        assert!(err.to_string().contains("pass --shards N"), "{err}");
        let err = auto(&[("JOB_COMPLETION_INDEX", "5")], Some(5)).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn auto_outside_a_scheduler_says_what_to_do() {
        let err = auto(&[], None).unwrap_err();
        assert!(err.to_string().contains("give --shard K/N"), "{err}");
        assert_eq!(resolve(None, None, env(&[])).unwrap(), None);
    }

    #[test]
    fn round_robin_ownership() {
        let mine: Vec<usize> = (0..10).filter(|&i| owns(shard(1, 4), i)).collect();
        assert_eq!(mine, [1, 5, 9]);
        assert!(owns(None, 7));
    }
}
