//! `cargo xtask html-test` and `cargo xtask html-bench`: the HTML report opened in a real
//! headless Chromium (issue 37).
//!
//! - `html-test [--screenshots DIR]`: writes the pages of the main job's recorded report, a
//!   replayed hub file, a comparison of two GPUs and the faults example with the debug
//!   `tunebox`, opens each, and checks that every figure is an SVG drawn with its points, that
//!   the page's policy forbids fetches, and that the browser fetched nothing but the page
//!   (its network log, console and resource timing). Fails when Chromium is missing.
//! - `html-bench [--choices N]`: a synthetic report of N choices (default 100,000): the time
//!   `tunebox report --html` takes (release), the page's size, and the time Chromium takes to
//!   load and draw it, each the median of 3.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::browser::{Browser, find_chromium};
use crate::{cargo, target_dir, workspace_root};

/// One page of the test: how `tunebox` writes it, and what it must show.
struct Case {
    /// The page's file name (and its screenshot's, in docs/).
    name: &'static str,
    /// `tunebox` arguments before `--html PATH`.
    args: &'static [&'static str],
    /// Figures it must have.
    figures: &'static [&'static str],
    /// Whether `--screenshots` takes a picture of it (the three of docs/cli.md).
    screenshot: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "main-job",
        args: &["report", "crates/tune/tests/data/matmul-cpu.report.json"],
        figures: &[
            "ranking",
            "param-0",
            "search-time",
            "search-count",
            "windows",
        ],
        screenshot: true,
    },
    Case {
        name: "replay",
        args: &[
            "tune",
            "data/benchmark_hub/kernels/convolution_milo.json",
            "--replay",
            "data/benchmark_hub/cachefiles/convolution_milo/A100.json.gz",
            "--strategy",
            "auto",
            "--budget",
            "200",
            "--quiet",
        ],
        figures: &[
            "ranking",
            "by-rank",
            "param-0",
            "search-time",
            "search-count",
        ],
        screenshot: true,
    },
    Case {
        name: "comparison",
        args: &[
            "report",
            "data/benchmark_hub/cachefiles/convolution_milo/A100.json.gz",
            "data/benchmark_hub/cachefiles/convolution_milo/A4000.json.gz",
        ],
        figures: &["a-against-b", "ratio-by-rank", "rank-change"],
        screenshot: true,
    },
    Case {
        name: "faults",
        args: &["report", "crates/tune/tests/data/faults-cpu.report.json"],
        figures: &["ranking", "param-0", "search-time", "windows"],
        screenshot: false,
    },
];

/// What the page reports of itself: its policy, every figure, what it loaded.
const INSPECT: &str = r#"(() => {
  const csp = document.querySelector('meta[http-equiv="Content-Security-Policy"]');
  const figures = [...document.querySelectorAll('figure')].map(f => {
    const svg = f.querySelector('svg');
    if (!svg) return { id: f.id, svg: false };
    const box = svg.getBoundingClientRect();
    const marks = [...svg.querySelectorAll('circle,polygon,polyline,line,rect')];
    const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 || b.height > 0; });
    const caption = document.getElementById(svg.getAttribute('aria-labelledby'));
    return {
      id: f.id, svg: true, width: box.width, height: box.height,
      points: Number(f.dataset.points), drawn: drawn.length,
      texts: svg.querySelectorAll('text').length,
      caption: caption ? caption.textContent.length : 0,
    };
  });
  return {
    csp: csp ? csp.content : '',
    figures,
    resources: performance.getEntriesByType('resource').map(r => r.name),
  };
})()"#;

/// `cargo xtask html-test [--screenshots DIR]`.
pub(crate) fn html_test(args: &[String]) -> Result<(), String> {
    let screenshots = match args {
        [] => None,
        [flag, dir] if flag == "--screenshots" => Some(PathBuf::from(dir)),
        _ => return Err("usage: cargo xtask html-test [--screenshots DIR]".into()),
    };
    // Before building: a machine without the browser fails at once, and loudly.
    let chromium = find_chromium()?;
    let root = workspace_root();
    cargo(&["build", "--quiet", "-p", "tunebox-cli"], &[])?;
    let tunebox = target_dir(&root).join("debug").join("tunebox");
    let out = target_dir(&root).join("html-test");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut browser = Browser::start(&chromium, &out)?;
    browser.viewport(1000, 900)?;
    let mut policy = String::new();
    for case in CASES {
        let page = out.join(format!("{}.html", case.name));
        write_page(&tunebox, &root, case.args, &page)?;
        let url = file_url(&page)?;
        browser.open(&url)?;
        let (summary, csp) = check(&mut browser, case, &url)
            .map_err(|e| format!("{} ({}): {e}", case.name, page.display()))?;
        policy = csp;
        eprintln!("xtask: html-test: {}: {summary}", case.name);
        if let Some(dir) = screenshots.as_ref().filter(|_| case.screenshot) {
            let png = browser.screenshot(1000, 4000)?;
            let path = dir.join(format!("html-report-{}.png", case.name));
            std::fs::write(&path, &png)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("xtask: wrote {} ({} KiB)", path.display(), png.len() / 1024);
        }
    }
    controls(&mut browser, &out, &policy)?;
    eprintln!(
        "xtask: html-test: {} pages drawn in {}, nothing fetched",
        CASES.len(),
        chromium.display()
    );
    Ok(())
}

/// Pages that try to fetch, with and without the reports' `policy`: the checks must catch
/// both, or they would pass a page that fetches.
fn controls(browser: &mut Browser, out: &Path, policy: &str) -> Result<(), String> {
    let policy = format!("<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">");
    for (name, head) in [("control-blocked", policy.as_str()), ("control-open", "")] {
        let page = out.join(format!("{name}.html"));
        let html = format!(
            "<!DOCTYPE html><html><head>{head}<title>control</title></head><body>\
             <img src=\"http://127.0.0.1:9/x.png\" alt=\"\"></body></html>"
        );
        std::fs::write(&page, html).map_err(|e| format!("{}: {e}", page.display()))?;
        let url = file_url(&page)?;
        browser.open(&url)?;
        // Give a blocked or failed fetch its moment to be reported.
        browser.evaluate("new Promise(done => setTimeout(done, 200))")?;
        match fetched_nothing(browser, &url) {
            Err(caught) => {
                eprintln!("xtask: html-test: {name} (a page that fetches) caught: {caught}")
            }
            Ok(()) => {
                return Err(format!(
                    "{name}: a page that fetches an image passed the checks; they cannot be \
                     trusted"
                ));
            }
        }
    }
    Ok(())
}

/// Runs `tunebox ARGS --html PAGE` in `root`.
fn write_page(tunebox: &Path, root: &Path, args: &[&str], page: &Path) -> Result<(), String> {
    let output = Command::new(tunebox)
        .args(args)
        .arg("--html")
        .arg(page)
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tunebox.display()))?;
    if !output.status.success() {
        return Err(format!(
            "`tunebox {} --html {}` failed ({}): {}",
            args.join(" "),
            page.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

fn file_url(path: &Path) -> Result<String, String> {
    let path = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(format!("file://{}", path.display()))
}

/// Checks the page open in `browser` (loaded from `url`): a line saying what was checked, and
/// the page's policy.
fn check(browser: &mut Browser, case: &Case, url: &str) -> Result<(String, String), String> {
    let page = browser.evaluate(INSPECT)?;
    let csp = page["csp"].as_str().unwrap_or_default();
    if !csp.contains("default-src 'none'") {
        return Err(format!("its policy does not forbid fetches: {csp:?}"));
    }
    let resources = page["resources"].as_array().map_or(0, Vec::len);
    if resources > 0 {
        return Err(format!("it loaded resources: {}", page["resources"]));
    }
    fetched_nothing(browser, url)?;
    let figures = page["figures"].as_array().cloned().unwrap_or_default();
    for id in case.figures {
        if !figures.iter().any(|f| f["id"] == *id) {
            return Err(format!("figure {id} is missing"));
        }
    }
    let mut points = 0;
    for f in &figures {
        check_figure(f)?;
        points += f["points"].as_u64().unwrap_or(0);
    }
    Ok((
        format!(
            "{} figures drawn ({points} points), no request but the page",
            figures.len()
        ),
        csp.to_owned(),
    ))
}

/// One figure: an SVG of a readable size, with its points drawn, axis text and a caption.
fn check_figure(f: &Value) -> Result<(), String> {
    let id = f["id"].as_str().unwrap_or("?");
    let number = |key: &str| f[key].as_f64().unwrap_or(0.0);
    if f["svg"] != true {
        return Err(format!("figure {id} has no SVG"));
    }
    if number("width") < 200.0 || number("height") < 100.0 {
        return Err(format!(
            "figure {id} is drawn {}×{}",
            number("width"),
            number("height")
        ));
    }
    let points = number("points");
    if points < 1.0 || number("drawn") < points.min(10.0) {
        return Err(format!(
            "figure {id}: {} visible marks for {points} points",
            number("drawn")
        ));
    }
    if number("texts") < 4.0 || number("caption") < 40.0 {
        return Err(format!("figure {id} lacks axis labels or a caption: {f}"));
    }
    Ok(())
}

/// No request but the page's own, no request blocked, no error in the console.
fn fetched_nothing(browser: &mut Browser, url: &str) -> Result<(), String> {
    for event in browser.events() {
        let params = &event["params"];
        match event["method"].as_str().unwrap_or_default() {
            "Network.requestWillBeSent" => {
                let requested = params["request"]["url"].as_str().unwrap_or_default();
                if requested != url {
                    return Err(format!("it requested {requested}"));
                }
            }
            "Network.loadingFailed" => {
                return Err(format!("a request failed or was blocked: {params}"));
            }
            "Log.entryAdded" if params["entry"]["level"] == "error" => {
                return Err(format!("the console says: {}", params["entry"]));
            }
            "Runtime.exceptionThrown" => {
                return Err(format!("a script failed: {params}"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `cargo xtask html-bench [--choices N]`.
pub(crate) fn html_bench(args: &[String]) -> Result<(), String> {
    let choices = match args {
        [] => 100_000,
        [flag, n] if flag == "--choices" => n
            .parse::<usize>()
            .map_err(|_| format!("--choices {n}: not a number"))?,
        _ => return Err("usage: cargo xtask html-bench [--choices N]".into()),
    };
    let chromium = find_chromium()?;
    let root = workspace_root();
    let out = target_dir(&root).join("html-bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let report = out.join(format!("report-{choices}.json"));
    let page = out.join(format!("report-{choices}.html"));
    cargo(&["build", "--release", "--quiet", "-p", "tunebox-cli"], &[])?;
    synthetic_report(choices, &report)?;
    let tunebox = target_dir(&root).join("release").join("tunebox");
    let mut writes = time_writes(&tunebox, &root, &report, &page)?;
    let bytes = std::fs::metadata(&page)
        .map_err(|e| format!("{}: {e}", page.display()))?
        .len();
    let url = file_url(&page)?;
    let (mut loads, mut drawn) = time_loads(&chromium, &out, &url)?;
    let report_bytes = std::fs::metadata(&report).map_or(0, |m| m.len());
    println!(
        "html-bench: {choices} choices ({:.1} MB of JSON report)\n\
         tunebox report --html (release, wall): {:.2} s (median of 3)\n\
         page size: {:.2} MB (target < 5 MB)\n\
         Chromium, navigation to load event: {:.2} s; to the first frames drawn after it: {:.2} s \
         (target < 2 s; median of 3, a fresh browser each)",
        report_bytes as f64 / 1e6,
        median(&mut writes),
        bytes as f64 / 1e6,
        median(&mut loads),
        median(&mut drawn),
    );
    Ok(())
}

/// Writes a synthetic JSON report of `choices` choices to `report` (the `synthetic_report`
/// example of `tunebox-tune`, release).
fn synthetic_report(choices: usize, report: &Path) -> Result<(), String> {
    let report_arg = report.to_string_lossy().into_owned();
    let n = choices.to_string();
    crate::example(
        "synthetic_report",
        &[],
        &["--choices", &n, "--json", &report_arg],
    )
}

/// The wall times (s) of 3 runs of `tunebox report REPORT --html PAGE`.
fn time_writes(
    tunebox: &Path,
    root: &Path,
    report: &Path,
    page: &Path,
) -> Result<Vec<f64>, String> {
    let report_arg = report.to_string_lossy();
    let mut writes = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        write_page(tunebox, root, &["report", &report_arg], page)?;
        writes.push(started.elapsed().as_secs_f64());
    }
    Ok(writes)
}

/// Opens `url` in 3 fresh browsers (profiles under `out`), checking that it fetched nothing:
/// the times (s) from navigation to the load event, and to the first frames drawn after it.
fn time_loads(chromium: &Path, out: &Path, url: &str) -> Result<(Vec<f64>, Vec<f64>), String> {
    let mut loads = Vec::new();
    let mut drawn = Vec::new();
    for _ in 0..3 {
        let mut browser = Browser::start(chromium, out)?;
        browser.viewport(1000, 900)?;
        browser.open(url)?;
        let timing = browser.evaluate(
            "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {
               const n = performance.getEntriesByType('navigation')[0];
               done({ load: n.loadEventEnd, drawn: performance.now() });
             })))",
        )?;
        fetched_nothing(&mut browser, url)?;
        loads.push(timing["load"].as_f64().unwrap_or(f64::NAN) / 1000.0);
        drawn.push(timing["drawn"].as_f64().unwrap_or(f64::NAN) / 1000.0);
    }
    Ok((loads, drawn))
}

/// The median of `values` (the upper of the middle two for an even count), sorting them.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
