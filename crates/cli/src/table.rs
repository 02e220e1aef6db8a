//! The ranked table (fitted to the terminal) and its summary: how `tunebox` shows a report.

use std::io::Write;

use tunebox_pool::Status;
use tunebox_tune::{
    ChoiceResult, ErrorGroup, Report, RunInfo, best, choice_count as choices, define_line,
    error_groups, format_value, rank_labels, short_error, ties, windowed,
};

/// Widest the error column gets in the table.
const ERROR_WIDTH: usize = 60;
/// Narrowest the error column gets on a narrow terminal.
const MIN_ERROR_WIDTH: usize = 16;

/// How to print a table.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TableOptions<'a> {
    /// The terminal's width; `None`: not a terminal (errors are cut at 60 characters).
    pub(crate) width: Option<usize>,
    /// Rows shown per device (the rest are counted).
    pub(crate) top: Option<usize>,
    /// The files being written with every row (`--json`, `--csv`), named when `top` hides some.
    pub(crate) files: &'a [String],
    /// Print each distinct error message whole (`--errors`), after the table.
    pub(crate) errors: bool,
    /// A file holding the whole messages, for `tunebox report FILE --errors` (the report read,
    /// the `--json` written, or the run's results cache).
    pub(crate) source: Option<&'a str>,
    /// How choices tied within the noise can be measured again.
    pub(crate) remeasure: Remeasure<'a>,
}

/// How the table says to measure tied choices again (`--refine`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Remeasure<'a> {
    /// `--refine N`: this is `tunebox tune`.
    Flag,
    /// `tunebox tune MANIFEST --refine N`: a report of tunebox's measurements of MANIFEST.
    Command(&'a str),
    /// Not at all: measurements recorded by another tool, or replayed.
    #[default]
    No,
}

impl Remeasure<'_> {
    /// `; --refine N measures them longer`, as the table's tie note ends (empty for `No`).
    fn hint(self, n: usize, them: &str) -> String {
        match self {
            Remeasure::Flag => format!("; --refine {n} measures {them} longer"),
            Remeasure::Command(manifest) => {
                format!("; `tunebox tune {manifest} --refine {n}` measures {them} longer")
            }
            Remeasure::No => String::new(),
        }
    }
}

/// The width of the terminal on stdout: `$COLUMNS` when set, else the terminal's, else `None`.
pub(crate) fn terminal_width() -> Option<usize> {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return Some(columns);
    }
    console::Term::stdout()
        .size_checked()
        .map(|(_, columns)| usize::from(columns))
}

/// Writes the ranked table of each device, a summary, and the best choice.
pub(crate) fn print_table(
    report: &Report,
    out: &mut impl Write,
    options: TableOptions<'_>,
) -> std::io::Result<()> {
    let info = &report.info;
    let groups = report.groups();
    if groups.is_empty() {
        writeln!(out, "{}", title(info, &info.header.device))?;
        writeln!(out, "no results")?;
    }
    for (g, (device, members)) in groups.iter().enumerate() {
        if g > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{}", title(info, device))?;
        print_rows(members, info, out, options)?;
    }
    writeln!(out)?;
    print_summary(report, out)?;
    for (device, members) in &groups {
        match best(members.iter().copied()) {
            Some(best) => {
                let on = if groups.len() > 1 {
                    format!(" on {device}")
                } else {
                    String::new()
                };
                print_best(best, members, &on, info, out, options)?;
            }
            None if groups.len() > 1 => writeln!(out, "no choice succeeded on {device}")?,
            None => writeln!(out, "no choice succeeded")?,
        }
    }
    Ok(())
}

/// `best on DEVICE: X=4 at 1.234 ms, …`: the best of `members` (ranked), its metrics, what ranks
/// it and whether it ties with the next; then its `#define`s and manifest line, if it has
/// params.
fn print_best(
    best: &ChoiceResult,
    members: &[&ChoiceResult],
    on: &str,
    info: &RunInfo,
    out: &mut impl Write,
    options: TableOptions<'_>,
) -> std::io::Result<()> {
    let median = format_time(best.median_ms().unwrap_or(f64::NAN));
    let tied = tie_note(best, members, info, options.remeasure);
    let metrics: Vec<String> = best
        .metrics
        .iter()
        .map(|(name, value)| format!(", {} {name}", format_value(*value)))
        .collect();
    let ranked_by = info
        .header
        .objective
        .as_ref()
        .map(|o| format!(" (ranked by {})", o.describe()))
        .unwrap_or_default();
    writeln!(
        out,
        "best{on}: {} at {median}{}{ranked_by}{tied}",
        best.choice.label(),
        metrics.concat()
    )?;
    let defines = define_line(&best.choice);
    if !defines.is_empty() {
        writeln!(out, "      {defines}")?;
        writeln!(out, "      best = {}", best.choice.toml())?;
    }
    Ok(())
}

/// How sure the pick of `best` (the first of `members`) is: ` (tied within the noise with
/// the next choice; …)`, the windows' confidence, or nothing (refined, or no tie).
fn tie_note(
    best: &ChoiceResult,
    members: &[&ChoiceResult],
    info: &RunInfo,
    remeasure: Remeasure<'_>,
) -> String {
    let tied = members[1..].iter().take_while(|r| ties(best, r)).count();
    match tied {
        // Refined choices were measured longer already.
        _ if best.screen_median_ms.is_some() => String::new(),
        // Measured in windows: the run says how sure it is.
        _ if windowed(best) => info
            .conditions
            .as_ref()
            .map(|c| format!(" ({})", c.confidence))
            .unwrap_or_default(),
        0 => String::new(),
        1 => format!(
            " (tied within the noise with the next choice{})",
            remeasure.hint(2, "both")
        ),
        n => format!(
            " (tied within the noise with the next {}{})",
            choices(n),
            remeasure.hint(n + 1, "them")
        ),
    }
}

/// `matmul-512: matmul (kernels/matmul.c) on AMD EPYC (2 cores), shard 1/4`.
fn title(info: &RunInfo, device: &str) -> String {
    let h = &info.header;
    let mut title = format!("{}: {} on {device}", h.name, h.kernel);
    if let Some(shard) = h.shard {
        title.push_str(&format!(", shard {shard}"));
    }
    if let Some(budget) = h
        .selection
        .budget
        .filter(|_| h.selection.strategy == "random")
    {
        title.push_str(&format!(
            ", random sample of {} of {} choices (seed {})",
            budget.min(h.space_size),
            h.space_size,
            h.selection.seed
        ));
    }
    title
}

/// A row of the table: a choice, or the count of those hidden under the first of their error
/// group.
enum Row<'r> {
    Choice(&'r ChoiceResult),
    More(usize),
}

/// Writes one device's rows (the first `options.top`, a failed choice whose error an earlier
/// row shows counted under it), aligned to their widest cell, then the error footnotes.
fn print_rows(
    members: &[&ChoiceResult],
    info: &RunInfo,
    out: &mut impl Write,
    options: TableOptions<'_>,
) -> std::io::Result<()> {
    let shown = options.top.unwrap_or(usize::MAX).min(members.len());
    let with_windows = members.iter().any(|r| windowed(r));
    let header = header(info, with_windows);
    let columns = header.len();
    let groups = error_groups(&members[..shown]);
    let layout = layout(&members[..shown], rank_labels(members), &groups);
    let mut rows: Vec<Vec<String>> = layout
        .iter()
        .map(|(row, rank)| match row {
            Row::Choice(r) => choice_cells(r, rank, info, with_windows),
            Row::More(g) => more_cells(&groups[*g], info, with_windows),
        })
        .collect();
    let widths = widths(&header, &rows);
    // The error column takes what the terminal has left.
    let fixed: usize = widths[..columns - 1].iter().sum::<usize>() + 2 * (columns - 1);
    let error_width = options.width.map_or(ERROR_WIDTH, |w| {
        w.saturating_sub(fixed).clamp(MIN_ERROR_WIDTH, ERROR_WIDTH)
    });
    let notes = footnotes(&groups, error_width);
    for (cells, (row, _)) in rows.iter_mut().zip(&layout) {
        cells[columns - 1] = error_cell(row, &groups, &notes, error_width);
    }
    // Numbers right-aligned; the choice, the device, the status and the error left-aligned.
    let left = |c: usize| c == 1 || (c == 2 && info.across_devices) || c >= columns - 2;
    writeln!(out, "{}", aligned(&header, &widths, left))?;
    for row in &rows {
        writeln!(out, "{}", aligned(row, &widths, left))?;
    }
    if shown < members.len() {
        let all = match options.files {
            [] => String::new(),
            [file] => format!("; {file} has them all"),
            files => format!("; {} have them all", files.join(" and ")),
        };
        writeln!(
            out,
            "… {} more (--top shows {shown}{all})",
            members.len() - shown
        )?;
    }
    print_error_notes(&groups, &notes, out, options)
}

/// The table's header: rank, choice, device (across devices), median, the metrics, windows
/// (`with_windows`), spread, status, error.
fn header(info: &RunInfo, with_windows: bool) -> Vec<String> {
    let mut header: Vec<String> = vec!["rank".into(), "choice".into()];
    if info.across_devices {
        header.push("device".into());
    }
    header.push("median".into());
    header.extend(info.header.metrics.iter().cloned());
    if with_windows {
        header.push("windows".into());
    }
    header.extend(["spread".into(), "status".into(), "error".into()]);
    header
}

/// The error group (by position in `groups`) that `r` belongs to.
fn group_of(r: &ChoiceResult, groups: &[ErrorGroup<'_>]) -> Option<usize> {
    groups
        .iter()
        .position(|g| g.members.iter().any(|m| std::ptr::eq(*m, r)))
}

/// The rows of `shown`, each with its rank label: a failed choice whose error an earlier row
/// shows is counted under it (`Row::More` after the first of its group).
fn layout<'r>(
    shown: &[&'r ChoiceResult],
    ranks: Vec<String>,
    groups: &[ErrorGroup<'_>],
) -> Vec<(Row<'r>, String)> {
    let mut layout: Vec<(Row<'_>, String)> = Vec::with_capacity(shown.len());
    for (r, rank) in shown.iter().copied().zip(ranks) {
        match group_of(r, groups) {
            Some(g) if !std::ptr::eq(groups[g].members[0], r) => continue,
            Some(g) => {
                layout.push((Row::Choice(r), rank));
                if groups[g].members.len() > 1 {
                    layout.push((Row::More(g), String::new()));
                }
            }
            None => layout.push((Row::Choice(r), rank)),
        }
    }
    layout
}

/// The cells of a `… N more` row of `group`: the count and the status, the error cell left
/// empty.
fn more_cells(group: &ErrorGroup<'_>, info: &RunInfo, with_windows: bool) -> Vec<String> {
    let mut cells = vec![String::new(), format!("… {} more", group.members.len() - 1)];
    if info.across_devices {
        cells.push(String::new());
    }
    let blank = info.header.metrics.len() + 2 + usize::from(with_windows);
    cells.extend(std::iter::repeat_n(String::new(), blank));
    cells.push(group.status.to_string());
    cells.push(String::new());
    cells
}

/// The width of each column: its widest cell, the header's included (in characters).
fn widths(header: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    widths
}

/// The footnote number of each error group (by the same position): one for each error shared
/// by several choices or longer than `error_width`, numbered from 1.
fn footnotes(groups: &[ErrorGroup<'_>], error_width: usize) -> Vec<Option<usize>> {
    let mut next_note = 0;
    groups
        .iter()
        .map(|group| {
            (group.members.len() > 1 || group.line.chars().count() > error_width).then(|| {
                next_note += 1;
                next_note
            })
        })
        .collect()
}

/// A row's error cell: its footnote's tag (`[1]`) and the error cut to `error_width`.
fn error_cell(
    row: &Row<'_>,
    groups: &[ErrorGroup<'_>],
    notes: &[Option<usize>],
    error_width: usize,
) -> String {
    let (group, error) = match row {
        Row::Choice(r) => (group_of(r, groups), r.error.as_deref()),
        Row::More(g) => (Some(*g), None),
    };
    match (group.and_then(|g| notes[g]), error) {
        (Some(note), Some(e)) => {
            let tag = format!("[{note}] ");
            format!(
                "{tag}{}",
                short_error(e, error_width.saturating_sub(tag.len()).max(8))
            )
        }
        (Some(note), None) => format!("[{note}]"),
        (None, Some(e)) => short_error(e, error_width),
        _ => String::new(),
    }
}

/// `cells` padded to `widths`, two spaces apart, left-aligned in the columns `left` names
/// (else right-aligned), with no trailing spaces.
fn aligned(cells: &[String], widths: &[usize], left: impl Fn(usize) -> bool) -> String {
    let mut text = String::new();
    for (c, cell) in cells.iter().enumerate() {
        if c > 0 {
            text.push_str("  ");
        }
        let pad = widths[c].saturating_sub(cell.chars().count());
        if left(c) {
            text.push_str(cell);
            text.push_str(&" ".repeat(pad));
        } else {
            text.push_str(&" ".repeat(pad));
            text.push_str(cell);
        }
    }
    text.trim_end().to_owned()
}

/// The cells of a choice's row, the error cell left empty.
fn choice_cells(r: &ChoiceResult, rank: &str, info: &RunInfo, with_windows: bool) -> Vec<String> {
    let mut row = vec![rank.to_owned(), r.choice.label()];
    if info.across_devices {
        row.push(r.device.clone());
    }
    row.push(r.median_ms().map_or("-".into(), |m| {
        format!(
            "{}{}",
            format_time(m),
            if r.screen_median_ms.is_some() {
                "*"
            } else {
                ""
            }
        )
    }));
    for name in &info.header.metrics {
        row.push(r.metrics.get(name).map_or("-".into(), |v| format_value(*v)));
    }
    if with_windows {
        row.push(
            r.windows
                .as_ref()
                .map_or("-".into(), |w| match w.disturbed_count() {
                    0 => w.medians_ms.len().to_string(),
                    d => format!("{} ({d} busy)", w.medians_ms.len()),
                }),
        );
    }
    // One rep has no spread to show; windows show their interval's.
    row.push(match (&r.windows, &r.stats) {
        (Some(w), Some(_)) if windowed(r) => format!(
            "{:.1}%",
            (w.interval_ms[1] - w.interval_ms[0]) / w.estimate_ms * 100.0
        ),
        (_, stats) => stats
            .as_ref()
            .filter(|s| s.reps > 1)
            .map_or("-".into(), |s| format!("{:.1}%", s.noise() * 100.0)),
    });
    row.push(r.status.to_string());
    row.push(String::new());
    row
}

/// The footnotes of the error column (each shared or cut error's line, whole; `notes` by the
/// same position as `groups`), then either every distinct message whole (`--errors`) or how to
/// see them.
fn print_error_notes(
    groups: &[ErrorGroup<'_>],
    notes: &[Option<usize>],
    out: &mut impl Write,
    options: TableOptions<'_>,
) -> std::io::Result<()> {
    for (group, note) in groups.iter().zip(notes) {
        let Some(note) = note else { continue };
        let count = match group.members.len() {
            1 => String::new(),
            n => format!("{n} choices ({}): ", named(&group.members)),
        };
        writeln!(out, "[{note}] {count}{}", group.line)?;
    }
    let longer = groups.iter().zip(notes).any(|(g, note)| {
        note.is_some()
            || g.members
                .iter()
                .any(|r| r.error.as_deref().is_some_and(|e| e.trim() != g.line))
    });
    if options.errors {
        for (group, note) in groups.iter().zip(notes) {
            writeln!(out)?;
            let labels: Vec<String> = group.members.iter().map(|r| r.choice.label()).collect();
            let tag = note.map_or_else(String::new, |n| format!("[{n}] "));
            writeln!(out, "{tag}{} ({}):", group.status, labels.join(", "))?;
            let first = group.members[0].error.as_deref().unwrap_or_default();
            for line in first.lines() {
                writeln!(out, "    {line}")?;
            }
        }
    } else if longer {
        let report = options.source.map_or_else(String::new, |file| {
            format!(" (or `tunebox report {file} --errors`)")
        });
        writeln!(
            out,
            "whole error messages: run with --errors{report}; --json keeps them too"
        )?;
    }
    Ok(())
}

/// What a stopped run left, and how to finish it: `3 choices not measured, 9 measured without
/// all their rounds; run the same command again to finish them (…)`.
fn what_is_left((not_measured, unfinished): (usize, usize)) -> String {
    let mut text = format!("{} not measured", choices(not_measured));
    if unfinished > 0 {
        text.push_str(&format!(
            ", {unfinished} measured without all their rounds; run the same command again to \
             finish them (what was measured is in the results cache, their windows so far \
             included)"
        ));
    } else {
        text.push_str(
            "; run the same command again to measure only those (finished choices are in the \
             results cache)",
        );
    }
    text
}

/// Most choices a footnote names before it counts the rest.
const NAMED: usize = 4;

/// The labels of `members`, the first [`NAMED`] of them and how many more: the choices a folded
/// row (`… 3 more`) stands for, so that each can be found without `--errors`.
fn named(members: &[&ChoiceResult]) -> String {
    let labels: Vec<String> = members
        .iter()
        .take(NAMED)
        .map(|r| r.choice.label())
        .collect();
    let mut text = labels.join(", ");
    if members.len() > NAMED {
        text.push_str(&format!(
            " and {} more; --errors lists them",
            members.len() - NAMED
        ));
    }
    text
}

/// A time given in ms, with four significant digits and the unit that fits: `12.35 s`,
/// `3.699 ms`, `812.3 µs`, `45.20 ns`.
pub(crate) fn format_time(ms: f64) -> String {
    tunebox_protocol::short_ms(ms)
}

/// Writes the summary under the tables: the counts by status, what the windows found, the
/// results cache, what a stop left, the refined choices, the merged files and the run's notes.
fn print_summary(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let info = &report.info;
    writeln!(out, "{}", counts_line(report))?;
    if let Some(c) = info
        .conditions
        .as_ref()
        .filter(|c| c.rounds > 0 && c.windows > 0)
    {
        writeln!(out, "{}", windows_line(c))?;
    }
    print_cache(info, out)?;
    print_left(info, out)?;
    if let Some(refine) = info.refine
        && report.results.iter().any(|r| r.screen_median_ms.is_some())
    {
        writeln!(
            out,
            "* re-measured with {}x rep_ms (--refine {}); these rank first, by the re-measured \
             median",
            refine.rep_factor, refine.top
        )?;
    }
    if !info.merged_from.is_empty() {
        let mut line = format!("merged from {} files", info.merged_from.len());
        if info.elapsed_s > 0.0 {
            line.push_str(&format!(" (the slowest took {:.1} s)", info.elapsed_s));
        }
        writeln!(out, "{line}")?;
    }
    for note in &info.notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}

/// `12 choices (10 ok, 2 failed) in 3.4 s with 2 worker(s); spread = …`: the results by
/// status, the run's time and workers, and what the spread column means.
fn counts_line(report: &Report) -> String {
    let info = &report.info;
    let mut counts: Vec<(Status, usize)> = Vec::new();
    for r in &report.results {
        match counts.iter_mut().find(|(s, _)| *s == r.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((r.status, 1)),
        }
    }
    counts.sort();
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut line = choices(report.results.len());
    if !counts.is_empty() {
        line.push_str(&format!(" ({})", counts.join(", ")));
    }
    if info.elapsed_s > 0.0 && info.merged_from.is_empty() {
        line.push_str(&format!(" in {:.1} s", info.elapsed_s));
    }
    if info.workers > 0 {
        line.push_str(&format!(" with {} worker(s)", info.workers));
    }
    if report.results.iter().any(windowed) {
        line.push_str("; spread = the 90 % interval over windows / median");
    } else if report.results.iter().any(|r| r.stats.is_some()) {
        line.push_str("; spread = (p80 - p20) / median");
    }
    line
}

/// `windows: 40 in 3 rounds and the race (…)`: what the windows of a run found, and how sure
/// its ranking is.
fn windows_line(c: &tunebox_tune::RunConditions) -> String {
    let mut windows = format!(
        "windows: {} in {} rounds and the race ({} disturbed, {} measured again), {} raced \
         for the top",
        c.windows,
        c.rounds,
        c.disturbed,
        c.remeasured,
        choices(c.raced)
    );
    if c.confirmed_early > 0 {
        windows.push_str(&format!(
            "; {} confirmed early (two windows agreed)",
            choices(c.confirmed_early)
        ));
    }
    if c.beside_compiles > 0 {
        windows.push_str(&format!(
            "; {} measured while choices compiled (first rounds' windows)",
            c.beside_compiles
        ));
    }
    if c.settled > 0 {
        windows.push_str(&format!(
            "; {} settled after two windows (more than {:.0} % behind the best, the largest \
             spread of any choice's windows, with no other choice that close)",
            choices(c.settled),
            c.settle_margin * 100.0
        ));
    }
    if c.busy {
        windows.push_str("; the machine was busy: the ranking is less sure");
    } else if c.drifted() {
        windows.push_str(&format!(
            "; the machine's speed drifted (a choice's windows differ by {:.0} %): the \
             ranking is less sure",
            c.drift * 100.0
        ));
    }
    windows
}

/// The results cache's lines: how many results it gave, how many it could not keep.
fn print_cache(info: &RunInfo, out: &mut impl Write) -> std::io::Result<()> {
    if let Some(cache) = &info.cache
        && cache.hits > 0
    {
        writeln!(
            out,
            "cache: {} of them from {} (measured earlier; --fresh re-measures)",
            cache.hits, cache.path
        )?;
    }
    if let Some(cache) = &info.cache
        && cache.not_cached > 0
    {
        writeln!(
            out,
            "cache: {} of them could not be written to {}; a re-run measures them again",
            cache.not_cached, cache.path
        )?;
    }
    Ok(())
}

/// What a stop left (Ctrl-C, `--max-time`), and how to finish it.
fn print_left(info: &RunInfo, out: &mut impl Write) -> std::io::Result<()> {
    let by_reason = |list: &[tunebox_tune::NotMeasured], reason: &str| {
        list.iter().filter(|n| n.reason == reason).count()
    };
    let left = |reason: &str| {
        (
            by_reason(&info.not_measured, reason),
            by_reason(&info.unfinished, reason),
        )
    };
    let (interrupted, timed_out) = (left("interrupted"), left("max_time"));
    if info.interrupted || interrupted != (0, 0) {
        writeln!(out, "interrupted: {}", what_is_left(interrupted))?;
    }
    if timed_out != (0, 0) {
        writeln!(out, "--max-time reached: {}", what_is_left(timed_out))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_get_the_unit_that_fits() {
        assert_eq!(format_time(3.69891), "3.699 ms");
        assert_eq!(format_time(12.345), "12.35 ms");
        assert_eq!(format_time(123.45), "123.5 ms");
        assert_eq!(format_time(12_345.0), "12.35 s");
        assert_eq!(format_time(0.8123), "812.3 µs");
        assert_eq!(format_time(0.0012), "1.200 µs");
        // What used to print as 0.0000 ms.
        assert_eq!(format_time(0.000_045_2), "45.20 ns");
        assert_eq!(format_time(0.000_000_5), "0.500 ns");
        assert_eq!(format_time(0.0), "0.000 ns");
        assert_eq!(format_time(f64::NAN), "NaN ms");
    }

    /// A failed result of `X = index` with `error`.
    fn failed(index: usize, error: &str) -> ChoiceResult {
        let choice = tunebox_tune::Choice::new(
            [("X".to_owned(), tunebox_tune::ParamValue::Int(index as i64))]
                .into_iter()
                .collect(),
        );
        ChoiceResult::failed(index, choice, Status::Suspicious, error.into(), "cpu")
    }

    fn table(results: Vec<ChoiceResult>) -> String {
        let header = tunebox_tune::RunHeader {
            tunebox_version: "0".into(),
            manifest: "m".into(),
            manifest_hash: "h".into(),
            name: "m".into(),
            kernel: "k (k.c)".into(),
            backend: "cpu".into(),
            device: "cpu".into(),
            space_size: results.len(),
            selection: tunebox_tune::Selection {
                strategy: "brute-force".into(),
                budget: None,
                seed: 0,
            },
            shard: None,
            metrics: Vec::new(),
            objective: None,
        };
        let report = Report {
            info: RunInfo::new(header),
            results,
        };
        let mut out = Vec::new();
        print_table(&report, &mut out, TableOptions::default()).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A row folded under the first of its error group (`… N more`) can be found: its
    /// footnote names the choices (the first few, and says that `--errors` lists the rest).
    #[test]
    fn a_folded_row_names_its_choices() {
        let same = "suspicious (children_after_call): 1 child process(es) still running";
        let two = table(vec![failed(1, same), failed(2, same)]);
        assert!(two.contains("… 1 more"), "{two}");
        assert!(
            two.contains(&format!("[1] 2 choices (X=1, X=2): {same}")),
            "{two}"
        );
        let many = table((0..7).map(|i| failed(i, same)).collect());
        assert!(
            many.contains(&format!(
                "[1] 7 choices (X=0, X=1, X=2, X=3 and 3 more; --errors lists them): {same}"
            )),
            "{many}"
        );
    }
}
