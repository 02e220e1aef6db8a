//! How a ranked report reads, whoever shows it (the CLI's table, the HTML report): which
//! choices are tied within the noise and share a rank, and which failures say the same.

use tunebox_pool::Status;

use crate::base::error_line::short_error;
use crate::results::ChoiceResult;

/// Whether `r` was measured in more than one window (its interval is over windows, not over
/// the reps of one window).
pub fn windowed(r: &ChoiceResult) -> bool {
    r.windows.as_ref().is_some_and(|w| w.medians_ms.len() > 1)
}

/// The interval of an `ok` result's time, ms, that [`ties`] compares: its 90 % interval over
/// windows when measured in several, else its reps' 20th–80th percentiles (stretched to take
/// in the median); `None` for a single rep or no measurement.
pub(crate) fn interval_ms(r: &ChoiceResult) -> Option<[f64; 2]> {
    if windowed(r) {
        return r.windows.as_ref().map(|w| w.interval_ms);
    }
    let s = r.stats.as_ref().filter(|s| s.reps > 1)?;
    let median = r.median_ms()?;
    Some([s.p20_ms.min(median), s.p80_ms.max(median)])
}

/// Whether `other`, ranked after `leader`, is tied with it within the noise: both `ok` and
/// measured alike (both refined or neither), and their intervals overlap (over windows when
/// both were measured in several, else their 20th–80th percentile ranges). Never for a run
/// ranked by a metric: the noise of a time says nothing of the metric's closeness.
pub fn ties(leader: &ChoiceResult, other: &ChoiceResult) -> bool {
    let ok = |r: &ChoiceResult| r.status == Status::Ok;
    if leader.objective.is_some() {
        return false;
    }
    if let (Some(a), Some(b)) = (&leader.windows, &other.windows)
        && windowed(leader)
        && windowed(other)
    {
        return ok(leader)
            && ok(other)
            && leader.screen_median_ms.is_some() == other.screen_median_ms.is_some()
            && a.overlaps(b);
    }
    match (&leader.stats, &other.stats) {
        (Some(a), Some(b)) if ok(leader) && ok(other) => {
            leader.screen_median_ms.is_some() == other.screen_median_ms.is_some()
                && b.p20_ms <= a.p80_ms
        }
        _ => false,
    }
}

/// The rank of each of ranked `members` as shown: `ok` choices are numbered from 1, and a
/// choice tied within the noise ([`ties`]) with the first choice of the current rank shares its
/// rank, shown as `=N`; failed choices get `-`.
pub fn rank_labels(members: &[&ChoiceResult]) -> Vec<String> {
    let mut labels = Vec::with_capacity(members.len());
    let mut leader: Option<(usize, &ChoiceResult)> = None;
    for (position, r) in members.iter().enumerate() {
        if r.status != Status::Ok {
            labels.push("-".into());
            continue;
        }
        match leader {
            Some((rank, first)) if ties(first, r) => labels.push(format!("={rank}")),
            _ => {
                leader = Some((position + 1, r));
                labels.push((position + 1).to_string());
            }
        }
    }
    labels
}

/// Failed choices whose errors say the same: one status, one meaningful line
/// ([`crate::short_error`]).
#[derive(Debug, Clone)]
pub struct ErrorGroup<'r> {
    /// Their status.
    pub status: Status,
    /// The meaningful line of their errors, whole.
    pub line: String,
    /// The choices, in the order given (the first one's message stands for all).
    pub members: Vec<&'r ChoiceResult>,
}

/// The groups of identical errors among `members` (every status but `ok` with an error), in
/// order of first appearance.
pub fn error_groups<'r>(members: &[&'r ChoiceResult]) -> Vec<ErrorGroup<'r>> {
    let mut groups: Vec<ErrorGroup<'r>> = Vec::new();
    for r in members.iter().copied() {
        let Some(error) = r.error.as_deref().filter(|_| r.status != Status::Ok) else {
            continue;
        };
        let line = short_error(error, usize::MAX);
        match groups
            .iter_mut()
            .find(|g| g.status == r.status && g.line == line)
        {
            Some(group) => group.members.push(r),
            None => groups.push(ErrorGroup {
                status: r.status,
                line,
                members: vec![r],
            }),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Choice;

    /// An `ok` result with median `median` and 20th/80th percentiles `p20`/`p80`.
    fn measured(index: usize, median: f64, p20: f64, p80: f64) -> ChoiceResult {
        let mut r = ChoiceResult::failed(
            index,
            Choice::new(Default::default()),
            Status::Ok,
            String::new(),
            "cpu",
        );
        r.error = None;
        r.stats = Some(
            tunebox_protocol::TimingStats::unmeasured()
                .with_median_ms(median)
                .with_mean_ms(median)
                .with_min_ms(p20)
                .with_max_ms(p80)
                .with_p20_ms(p20)
                .with_p80_ms(p80)
                .with_stddev_ms(0.0)
                .with_reps(10)
                .with_warmup_reps(1)
                .with_stopped("reps".into())
                .with_preempted_reps(0),
        );
        r
    }

    fn failed(index: usize, status: Status, error: &str) -> ChoiceResult {
        ChoiceResult::failed(
            index,
            Choice::new(Default::default()),
            status,
            error.into(),
            "cpu",
        )
    }

    #[test]
    fn choices_within_the_noise_share_a_rank() {
        let results = [
            measured(0, 1.00, 0.98, 1.03),
            measured(1, 1.01, 1.00, 1.05), // overlaps #1
            measured(2, 1.04, 1.02, 1.06), // overlaps #1's range too
            measured(3, 1.10, 1.08, 1.12), // clear of #1: a rank of its own
            measured(4, 1.11, 1.09, 1.13), // overlaps #4
            measured(5, 2.00, 1.99, 2.01),
            failed(6, Status::Crashed, "boom"),
        ];
        let members: Vec<&ChoiceResult> = results.iter().collect();
        assert_eq!(
            rank_labels(&members),
            ["1", "=1", "=1", "4", "=4", "6", "-"]
        );
        // A refined result never ties with a screened one.
        let mut refined = measured(7, 1.0, 0.9, 1.1);
        refined.screen_median_ms = Some(1.0);
        assert!(!ties(&refined, &results[0]));
        assert!(ties(&results[0], &results[1]));
    }

    #[test]
    fn failures_group_by_status_and_meaningful_line() {
        let results = [
            failed(0, Status::CompileError, "k.c:3: error: nope\nmore"),
            failed(1, Status::Crashed, "worker 1 crashed"),
            failed(2, Status::CompileError, "k.c:3: error: nope\nother tail"),
            failed(3, Status::Error, "k.c:3: error: nope"),
        ];
        let members: Vec<&ChoiceResult> = results.iter().collect();
        let groups = error_groups(&members);
        let shape: Vec<(Status, Vec<usize>)> = groups
            .iter()
            .map(|g| (g.status, g.members.iter().map(|r| r.index).collect()))
            .collect();
        assert_eq!(
            shape,
            [
                (Status::CompileError, vec![0, 2]),
                (Status::Crashed, vec![1]),
                (Status::Error, vec![3]),
            ]
        );
    }
}
