//! The pages of the main job's report, a replayed hub file, a comparison, failures and a large
//! report, checked as documents: every figure drawn with its points, nothing that could fetch.
//! `cargo xtask html-test` opens the same pages in a headless Chromium.

use std::path::{Path, PathBuf};

use super::{HtmlComparison, HtmlReport, synthetic};
use crate::report::compare::Comparison;
use crate::results::{Report, Selection};
use crate::search::replay::{Budget, Recorded, Recording};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn one_report(path: &Path) -> Report {
    let mut reports = crate::report::load(path).expect("a report");
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

/// A figure of a page: its id and the points it says it draws.
#[derive(Debug)]
struct Drawn {
    id: String,
    points: usize,
}

/// Checks what every page must be and returns its figures: the policy that forbids fetches,
/// nothing that refers outside the page, balanced elements, each figure an SVG labelled by
/// its caption with at least as many primitives as points (up to 10).
fn check_page(html: &str) -> Vec<Drawn> {
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(&format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">",
        super::CONTENT_SECURITY_POLICY
    )));
    for fetching in [
        "<script", "<link", "<img", "<iframe", "<object", "<embed", " src=", "url(", "@import",
    ] {
        assert!(!html.contains(fetching), "the page holds {fetching}");
    }
    for (at, _) in html.match_indices("href=\"") {
        let target = &html[at + 6..];
        assert!(
            target.starts_with('#'),
            "a link out of the page: {}",
            &target[..40.min(target.len())]
        );
    }
    for tag in [
        "figure",
        "table",
        "details",
        "svg",
        "main",
        "figcaption",
        "nav",
    ] {
        let open = html.matches(&format!("<{tag}")).count();
        let close = html.matches(&format!("</{tag}>")).count();
        assert_eq!(open, close, "<{tag}> opened {open} times, closed {close}");
    }
    let mut figures = Vec::new();
    for part in html.split("<figure id=\"").skip(1) {
        let id = &part[..part.find('"').expect("an id")];
        let points: usize = part
            .split("data-points=\"")
            .nth(1)
            .and_then(|p| p[..p.find('"')?].parse().ok())
            .expect("data-points");
        let figure = &part[..part.find("</figure>").expect("closed")];
        assert!(
            figure.contains(&format!(
                "<svg role=\"img\" aria-labelledby=\"{id}-caption\""
            )),
            "{id} is not an SVG labelled by its caption"
        );
        let caption = figure
            .split(&format!("<figcaption id=\"{id}-caption\">"))
            .nth(1)
            .expect("a caption");
        assert!(caption.len() > 40, "{id}'s caption says little: {caption}");
        let primitives = ["<circle", "<polygon", "<polyline", "<line", "<rect"]
            .iter()
            .map(|p| figure.matches(p).count())
            .sum::<usize>();
        assert!(points > 0, "{id} draws no point");
        assert!(
            primitives >= points.min(10),
            "{id}: {primitives} primitives for {points} points"
        );
        figures.push(Drawn {
            id: id.to_owned(),
            points,
        });
    }
    let mut ids: Vec<&str> = figures.iter().map(|f| f.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), figures.len(), "figure ids repeat");
    figures
}

fn ids(figures: &[Drawn]) -> Vec<&str> {
    figures.iter().map(|f| f.id.as_str()).collect()
}

#[test]
fn the_main_jobs_page_draws_every_section() {
    let report = one_report(&data("matmul-cpu.report.json"));
    let html = HtmlReport::new(&report).render();
    let figures = check_page(&html);
    assert_eq!(
        ids(&figures),
        [
            "ranking",
            // UNROLL moves the best reachable most; then BN, BK, BM.
            "param-0",
            "param-1",
            "param-2",
            "param-3",
            "search-time",
            "search-count",
            "windows",
        ]
    );
    // All 27 choices ranked with their intervals; the best and its ties told apart.
    assert_eq!(figures[0].points, 27);
    for heading in ["Ranking", "Parameters", "Search", "Measuring", "Conditions"] {
        assert!(
            html.contains(&format!("\">{heading}</h2>")),
            "{heading} missing"
        );
    }
    for text in [
        "Best: <code>BM=32 BN=64 BK=256 UNROLL=8</code> at 2.869 ms",
        "tied with the best",
        "No choice failed.",
        "UNROLL (parameter value)",
        "best reachable",
        "disturbed window",
        "the machine was busy",
        "AMD EPYC (2 cores)",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    // Every window of the choices measured in several is drawn (90, less single ones).
    let windows = figures.iter().find(|f| f.id == "windows").expect("windows");
    assert!(windows.points > 60, "{windows:?}");
}

#[test]
fn failures_are_counted_by_status_with_their_messages_folded() {
    let report = one_report(&data("faults-cpu.report.json"));
    let html = HtmlReport::new(&report).render();
    check_page(&html);
    assert!(html.contains("<h3>Failures: 10 choices</h3>"), "{html}");
    for (status, n) in [
        ("wrong", 2),
        ("compile_error", 2),
        ("crashed", 4),
        ("timeout", 2),
    ] {
        assert!(
            html.contains(&format!("<summary><strong>{status}</strong>: {n} choices")),
            "{status} missing"
        );
    }
    // The compiler's message whole, escaped, inside its fold.
    assert!(html.contains("#error &quot;choice MODE=5 does not compile (on purpose)&quot;"));
}

#[test]
fn a_report_without_a_success_or_without_results_still_reads() {
    let mut report = one_report(&data("faults-cpu.report.json"));
    report
        .results
        .retain(|r| r.status != tunebox_pool::Status::Ok);
    let html = HtmlReport::new(&report).render();
    check_page(&html);
    assert!(html.contains("No choice succeeded"));
    report.results.clear();
    let html = HtmlReport::new(&report).render();
    assert!(check_page(&html).is_empty());
    assert!(html.contains("The report holds no result."));
}

#[test]
fn a_replayed_hub_file_draws_the_search_against_random_search_and_the_optimum() {
    let hub = crate::manifest::formats::hub_dir();
    let t1 = hub.join("kernels/convolution_milo.json");
    let cache = hub.join("cachefiles/convolution_milo/A100.json.gz");
    let selection = Selection {
        strategy: "random".into(),
        budget: Some(120),
        seed: 1,
    };
    let (report, trace) =
        crate::search::replay::replay(&t1, &cache, &selection, Budget::new(120, f64::INFINITY))
            .expect("a replay");
    let space = crate::manifest::load_space(&t1).expect("the space");
    let recorded =
        Recorded::new(&Recording::read(&cache).expect("the recording"), &space).expect("bound");
    let html = HtmlReport::new(&report)
        .replayed(&trace, Some(&recorded))
        .render();
    let figures = check_page(&html);
    let found = ids(&figures);
    for id in ["ranking", "by-rank", "search-time", "search-count"] {
        assert!(found.contains(&id), "{id} missing from {found:?}");
    }
    for text in [
        "simulated time (s)",
        "random search, expected best",
        "the optimum (recorded)",
        "The methodology",
        "No choice of this report was measured in several windows",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
    // The 120 measurements, and the baseline's points, are on the time figure.
    let time = figures
        .iter()
        .find(|f| f.id == "search-time")
        .expect("drawn");
    assert!(time.points >= 120, "{time:?}");
    // Without the recording, no baseline.
    let bare = HtmlReport::new(&report).replayed(&trace, None).render();
    assert!(!bare.contains("random search, expected best"));
    // Its JSON report alone keeps no course: said, not drawn in the space's order.
    let alone = HtmlReport::new(&report).render();
    assert!(alone.contains("keeps no course of its search"));
    assert!(!alone.contains("id=\"search-count\""));
}

#[test]
fn a_comparison_draws_ratios_and_rank_changes() {
    let hub = crate::manifest::formats::hub_dir();
    let a = one_report(&hub.join("cachefiles/convolution_milo/A100.json.gz"));
    let b = one_report(&hub.join("cachefiles/convolution_milo/A4000.json.gz"));
    let comparison = Comparison::new(&a, &b).expect("one space");
    let html = HtmlComparison::new(&comparison).render();
    let figures = check_page(&html);
    assert_eq!(
        ids(&figures),
        ["a-against-b", "ratio-by-rank", "rank-change"]
    );
    // 4,195 choices ok on both GPUs: drawn as a sample of 3,000.
    assert!(
        figures.iter().all(|f| f.points >= 3000 && f.points < 3010),
        "{figures:?}"
    );
    for text in [
        "moved beyond the noise",
        "rank in A",
        "time in B / time in A",
        "NVIDIA RTX A4000",
        "Spearman",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
}

#[test]
fn a_large_reports_page_stays_small() {
    let small = HtmlReport::new(&synthetic::report(2_000, 1)).render();
    let large_report = synthetic::report(30_000, 1);
    let large = HtmlReport::new(&large_report).render();
    let figures = check_page(&large);
    // Figures draw samples and tables list the best: 15 times the choices, not 15 times the page.
    assert!(
        large.len() < small.len() * 2,
        "{} bytes for 2,000 choices, {} for 30,000",
        small.len(),
        large.len()
    );
    assert!(large.len() < 5 << 20, "{} bytes", large.len());
    let drawn: usize = figures.iter().map(|f| f.points).sum();
    assert!(drawn < 25_000, "{drawn} points drawn");
    assert!(large.contains("a seeded sample"));
}
