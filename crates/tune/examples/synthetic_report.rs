//! Writes a synthetic JSON report of a long brute-force run (`tunebox_tune::synthetic_report`:
//! five parameters, about 6 % failures, two to four windows per choice), for the benchmark of
//! the HTML report's page on a large report (`cargo xtask html-bench`).
//!
//! ```text
//! cargo run --release -p tunebox-tune --example synthetic_report -- --choices 100000 --json PATH
//! ```

use std::path::PathBuf;

fn main() -> Result<(), String> {
    let mut choices = 100_000usize;
    let mut json: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--choices" => {
                let n = value()?;
                choices = n
                    .parse()
                    .map_err(|_| format!("--choices {n}: not a number"))?;
            }
            "--json" => json = Some(value()?.into()),
            other => {
                return Err(format!(
                    "unknown option {other}; usage: synthetic_report --choices N --json PATH"
                ));
            }
        }
    }
    let json = json.ok_or("--json PATH is required")?;
    let report = tunebox_tune::synthetic_report(choices, 1);
    tunebox_tune::write_json(&report, &json).map_err(|e| e.to_string())?;
    eprintln!(
        "synthetic_report: wrote {} ({} choices)",
        json.display(),
        report.results.len()
    );
    Ok(())
}
