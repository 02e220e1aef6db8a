//! The HTML report (`tunebox report FILE --html OUT.html`, `tunebox tune … --html OUT.html`):
//! one self-contained page, its figures SVG drawn by plotters, its style inline, and a
//! Content-Security-Policy that forbids every fetch, so that it opens from disk in any browser
//! and can be attached to a pull request or kept as a CI artefact.
//!
//! - [`HtmlReport`]: the page of one report: the best choice, the ranking (intervals, ties,
//!   failures by status with their messages folded), each parameter's effect, the search
//!   (best so far against time and against choices measured; for a replay, with the
//!   methodology's random-search baseline and the optimum), the measuring (each window along
//!   the run, disturbed windows marked) and the run's conditions.
//! - [`HtmlComparison`]: two reports of one space side by side ([`crate::Comparison`]).
//!
//! A large report stays small: figures draw a seeded sample of their many points (every
//! best kept), curves are cut to what a figure can show, tables list the best and count the
//! rest (the page of a 100,000-choice report is measured in docs/cli.md).
//!
//! Inside: `page` writes the document, `plot` the figures, `measure` what they plot and how
//! they thin; one module per section.

mod compare;
mod conditions;
mod measure;
mod measuring;
mod page;
mod params;
mod plot;
mod ranked;
mod search;
pub(crate) mod synthetic;
#[cfg(test)]
mod tests;

use std::path::Path;

use self::measure::{Measure, count};
use self::page::{Page, esc};
use crate::report::ranking::{interval_ms, ties};
use crate::results::{Report, best};
use crate::search::replay::{Recorded, Trace};

pub use self::compare::HtmlComparison;
pub use self::page::CONTENT_SECURITY_POLICY;

/// The HTML page of one report.
///
/// # Example
///
/// ```no_run
/// let reports = tunebox_tune::load_reports("results.json".as_ref())?;
/// tunebox_tune::HtmlReport::new(&reports[0]).write("results.html".as_ref())?;
/// # Ok::<(), tunebox_tune::TuneError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HtmlReport<'a> {
    report: &'a Report,
    replayed: Option<search::Replayed<'a>>,
}

impl<'a> HtmlReport<'a> {
    /// The page of `report`.
    pub fn new(report: &'a Report) -> HtmlReport<'a> {
        HtmlReport {
            report,
            replayed: None,
        }
    }

    /// A replayed run's page: its search is drawn from `trace` on the simulated clock, with the
    /// methodology's random-search baseline and the optimum when `recorded` (the recording it
    /// replayed, every choice's time and cost) is given.
    pub fn replayed(mut self, trace: &'a Trace, recorded: Option<&'a Recorded>) -> Self {
        self.replayed = Some(search::Replayed { trace, recorded });
        self
    }

    /// The page, as text.
    pub fn render(&self) -> String {
        let report = self.report;
        let h = &report.info.header;
        let mut page = Page::new(&format!("tunebox report: {}", h.name));
        page.title(&format!("{}: {}", h.name, h.kernel));
        page.lede(&lede(report));
        let measure = Measure::of(report);
        let groups = report.groups();
        page.section("ranking", "Ranking");
        if groups.is_empty() {
            page.p("The report holds no result.");
        }
        for (g, (device, members)) in groups.iter().enumerate() {
            if groups.len() > 1 {
                page.h3(&format!("on {device}"));
            }
            ranked::section(&mut page, members, &measure, &group_tag(g, groups.len()));
        }
        page.section("parameters", "Parameters");
        for (g, (device, members)) in groups.iter().enumerate() {
            if groups.len() > 1 {
                page.h3(&format!("on {device}"));
            }
            params::section(&mut page, members, &measure, &group_tag(g, groups.len()));
        }
        page.section("search", "Search");
        search::section(&mut page, report, self.replayed, &measure);
        page.section("measuring", "Measuring");
        measuring::section(&mut page, report);
        page.section("conditions", "Conditions");
        conditions::section(&mut page, report);
        page.finish()
    }

    /// Writes the page to `path` (whole or not at all).
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Report`]: the file cannot be written.
    pub fn write(&self, path: &Path) -> crate::Result<()> {
        page::write(&self.render(), path)
    }
}

/// The suffix of a device group's figure ids (none with one group).
fn group_tag(g: usize, groups: usize) -> String {
    if groups > 1 {
        format!("-{g}")
    } else {
        String::new()
    }
}

/// The line under the title: where it ran, what came of it, the best and how sure it is.
fn lede(report: &Report) -> String {
    let info = &report.info;
    let ok = report
        .results
        .iter()
        .filter(|r| r.status == tunebox_pool::Status::Ok)
        .count();
    let mut text = format!(
        "{} on {}: {}, {} ok",
        esc(&info.header.name),
        esc(&info.header.device),
        count(report.results.len(), "choice"),
        ok
    );
    if info.elapsed_s > 0.0 {
        text.push_str(&format!(", in {:.1} s", info.elapsed_s));
    }
    text.push_str(".<br>");
    let groups = report.groups();
    let Some(first) = groups.first() else {
        text.push_str("No results.");
        return text;
    };
    let Some(b) = best(first.1.iter().copied()) else {
        text.push_str("No choice succeeded.");
        return text;
    };
    let measure = Measure::of(report);
    let value = measure.value(b).map_or("-".into(), |v| measure.show(v));
    text.push_str(&format!(
        "<strong>Best: <code>{}</code> at {}</strong>",
        esc(&b.choice.label()),
        esc(&value)
    ));
    if let Some([low, high]) = interval_ms(b) {
        text.push_str(&format!(
            " (interval {} – {})",
            esc(&tunebox_protocol::short_ms(low)),
            esc(&tunebox_protocol::short_ms(high))
        ));
    }
    let tied = first.1[1..].iter().take_while(|r| ties(b, r)).count();
    match &info.conditions {
        Some(c) => text.push_str(&format!("; {}", esc(&c.confidence))),
        None if tied > 0 => text.push_str(&format!(
            "; tied within the noise with the next {}",
            count(tied, "choice")
        )),
        None => {}
    }
    let defines = crate::define_line(&b.choice);
    if !defines.is_empty() {
        text.push_str(&format!(
            ".<br><code>{}</code> &nbsp; <code>best = {}</code>",
            esc(&defines),
            esc(&b.choice.toml())
        ));
    }
    text
}
