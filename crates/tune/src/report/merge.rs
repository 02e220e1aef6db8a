//! `tunebox merge`: shard results (JSON reports or results caches) into one ranked result.
//!
//! Files must come from one tunebox version and one manifest (the same manifest hash and
//! selection); the merge reports choices no file has (naming the shards whose files are
//! missing), choices more than one file has, and keeps the results of different devices apart
//! unless asked to rank them together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Result, bail, ensure};

use crate::base::shard;
use crate::report;
use crate::results::{ChoiceResult, NotMeasured, Report, RunInfo, choices, rank, rank_by_device};
use crate::search::strategy;

/// Most missing or duplicated choices named one by one in a note.
const NAMED: usize = 8;

/// Merges the results in `files`.
///
/// # Errors
///
/// No file, an unreadable file, or files from different tunebox versions, manifests or
/// selections (the message names the two files and what differs).
pub fn merge(files: &[PathBuf], across_devices: bool) -> crate::Result<Report> {
    merge_files(files, across_devices).map_err(crate::TuneError::merge)
}

fn merge_files(files: &[PathBuf], across_devices: bool) -> Result<Report> {
    ensure!(!files.is_empty(), "give the shard results to merge");
    let mut loaded: Vec<(String, Report)> = Vec::new();
    for file in files {
        for report in report::load(file)? {
            loaded.push((file.display().to_string(), report));
        }
    }
    check_compatible(&loaded)?;
    let h0 = &loaded[0].1.info.header;

    // One result per choice and device (per choice, across devices).
    let mut results: Vec<ChoiceResult> = Vec::new();
    let mut origin: BTreeMap<(String, usize), String> = BTreeMap::new();
    let mut duplicates: Vec<String> = Vec::new();
    let mut not_measured: Vec<NotMeasured> = Vec::new();
    let mut elapsed: f64 = 0.0;
    for (file, report) in &loaded {
        elapsed = elapsed.max(report.info.elapsed_s);
        not_measured.extend(report.info.not_measured.iter().cloned());
        for r in &report.results {
            let device = if across_devices {
                String::new()
            } else {
                r.device.clone()
            };
            match origin.get(&(device.clone(), r.index)) {
                Some(other) => duplicates.push(format!(
                    "{} (#{}) is in {other} and {file}; kept {other}'s",
                    r.choice.label(),
                    r.index
                )),
                None => {
                    origin.insert((device, r.index), file.clone());
                    let mut r = r.clone();
                    r.cached = false;
                    results.push(r);
                }
            }
        }
    }
    let present: BTreeSet<usize> = results.iter().map(|r| r.index).collect();
    not_measured.retain(|n| !present.contains(&n.index));
    not_measured.sort_by_key(|n| n.index);
    not_measured.dedup_by_key(|n| n.index);
    let listed: BTreeSet<usize> = not_measured.iter().map(|n| n.index).collect();
    // A space too large to list (indices are raw ranks) has no expected list to check.
    let expected = if h0.space_size <= crate::space::MAX_VALID {
        strategy::select(h0.space_size, &h0.selection)
    } else {
        Vec::new()
    };
    let mut missing: Vec<usize> = expected
        .into_iter()
        .filter(|i| !present.contains(i) && !listed.contains(i))
        .collect();
    missing.sort_unstable();

    let mut notes = Vec::new();
    notes.extend(missing_notes(&loaded, &missing));
    if !duplicates.is_empty() {
        let mut note = format!(
            "{} in more than one file: {}",
            plural_are(duplicates.len()),
            duplicates[..duplicates.len().min(NAMED)].join("; ")
        );
        if duplicates.len() > NAMED {
            note.push_str("; …");
        }
        notes.push(note);
    }
    let devices = devices_of(&results);
    notes.extend(device_note(&devices, across_devices));
    if across_devices {
        rank(&mut results);
    } else {
        rank_by_device(&mut results);
    }
    let mut header = h0.clone();
    header.shard = None;
    if devices.len() > 1 {
        header.device = devices.join("; ");
    }
    Ok(Report {
        info: RunInfo {
            elapsed_s: elapsed,
            refine: loaded.iter().find_map(|(_, r)| r.info.refine),
            interrupted: loaded.iter().any(|(_, r)| r.info.interrupted),
            not_measured,
            notes,
            merged_from: files.iter().map(|f| f.display().to_string()).collect(),
            missing,
            across_devices,
            ..RunInfo::new(header)
        },
        results,
    })
}

/// Refuses reports that cannot be merged: of different tunebox versions, manifests or
/// selections (naming the two files and what differs).
fn check_compatible(loaded: &[(String, Report)]) -> Result<()> {
    let (first_file, first) = &loaded[0];
    let h0 = &first.info.header;
    for (file, report) in &loaded[1..] {
        let h = &report.info.header;
        if h.tunebox_version != h0.tunebox_version {
            bail!(
                "cannot merge {first_file} (tunebox {}) with {file} (tunebox {}): results of \
                 different tunebox versions are not comparable; run every shard with one version",
                h0.tunebox_version,
                h.tunebox_version
            );
        }
        if h.manifest_hash != h0.manifest_hash {
            bail!(
                "cannot merge {first_file} with {file}: they come from different manifests \
                 ({} {} with hash {}, {} {} with hash {}); the kernel, its headers, params, \
                 restrictions, tensors, scalars, timing or verification differ. Merge only the \
                 shards of one run",
                h0.name,
                h0.manifest,
                h0.manifest_hash,
                h.name,
                h.manifest,
                h.manifest_hash
            );
        }
        if h.selection != h0.selection || h.space_size != h0.space_size {
            bail!(
                "cannot merge {first_file} with {file}: they measured different selections \
                 ({} vs {}); run every shard with the same --strategy, --budget and --seed",
                describe(&h0.selection),
                describe(&h.selection)
            );
        }
    }
    Ok(())
}

/// The devices `results` were measured on, in order of appearance.
fn devices_of(results: &[ChoiceResult]) -> Vec<String> {
    let mut devices: Vec<String> = Vec::new();
    for r in results {
        if !devices.contains(&r.device) {
            devices.push(r.device.clone());
        }
    }
    devices
}

/// What the report says about results of more than one device: ranked together
/// (`across_devices`) or apart.
fn device_note(devices: &[String], across_devices: bool) -> Option<String> {
    (devices.len() > 1).then(|| {
        if across_devices {
            format!(
                "ranked across {} devices ({}) as --across-devices asks",
                devices.len(),
                devices.join("; ")
            )
        } else {
            format!(
                "the shards ran on {} devices ({}); each device's results are ranked apart, as \
                 timings from different hardware do not compare (--across-devices ranks them \
                 together)",
                devices.len(),
                devices.join("; ")
            )
        }
    })
}

/// `1 choice is`, `2 choices are`.
fn plural_are(n: usize) -> String {
    format!("{} {}", choices(n), if n == 1 { "is" } else { "are" })
}

/// `random sample of 10 (seed 0)`, `brute force`.
fn describe(selection: &crate::results::Selection) -> String {
    match selection.budget {
        Some(budget) if selection.strategy == "random" => {
            format!("a random sample of {budget} (seed {})", selection.seed)
        }
        _ => selection.strategy.clone(),
    }
}

/// What is missing, by shard when the files are shards of one split.
fn missing_notes(loaded: &[(String, Report)], missing: &[usize]) -> Vec<String> {
    if missing.is_empty() {
        return Vec::new();
    }
    let counts: BTreeSet<usize> = loaded
        .iter()
        .filter_map(|(_, r)| r.info.header.shard.map(|s| s.count))
        .collect();
    let named = |indices: &[usize]| {
        let mut text = indices[..indices.len().min(NAMED)]
            .iter()
            .map(|i| format!("#{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        if indices.len() > NAMED {
            text.push_str(", …");
        }
        text
    };
    let [count] = counts.iter().copied().collect::<Vec<_>>()[..] else {
        return vec![format!(
            "MISSING: {} in no file ({})",
            plural_are(missing.len()),
            named(missing)
        )];
    };
    let seen: BTreeSet<usize> = loaded
        .iter()
        .filter_map(|(_, r)| r.info.header.shard.map(|s| s.index))
        .collect();
    let mut notes = Vec::new();
    for k in 0..count {
        let lost: Vec<usize> = missing
            .iter()
            .copied()
            .filter(|&i| shard::owns(Some(crate::results::ShardInfo { index: k, count }), i))
            .collect();
        if lost.is_empty() {
            continue;
        }
        notes.push(if seen.contains(&k) {
            format!(
                "MISSING: {} of shard {k}/{count} in no file ({}); its run did not finish: \
                 run it again (it resumes from its results cache)",
                plural_are(lost.len()),
                named(&lost)
            )
        } else {
            format!(
                "MISSING: shard {k}/{count} has no file, so its {} ({}) {} missing; run \
                 `tunebox tune … --shard {k}/{count}` and merge again",
                choices(lost.len()),
                named(&lost),
                if lost.len() == 1 { "is" } else { "are" }
            )
        });
    }
    notes
}
