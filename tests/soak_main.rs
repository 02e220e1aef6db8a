//! `tunebox-soak [TASKS] --worker PATH`: the soak of `cargo xtask soak` (100,000 tasks by
//! default). Prints the counts, the parent's resources before and after, and every violated
//! invariant; exits 1 on any.

#[allow(dead_code)]
#[path = "soak.rs"]
mod soak;

fn main() {
    let mut tasks = 100_000;
    let mut worker = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--worker" => worker = args.next(),
            other => match other.parse() {
                Ok(n) => tasks = n,
                Err(_) => {
                    eprintln!("usage: tunebox-soak [TASKS] --worker PATH");
                    std::process::exit(2);
                }
            },
        }
    }
    let Some(worker) = worker else {
        eprintln!("usage: tunebox-soak [TASKS] --worker PATH");
        std::process::exit(2);
    };
    let soak = soak::run(std::path::Path::new(&worker), tasks);
    println!(
        "soak: {} tasks in {:.1} s ({:.0} tasks/s)",
        soak.tasks,
        soak.elapsed.as_secs_f64(),
        soak.tasks as f64 / soak.elapsed.as_secs_f64()
    );
    for (kind, count) in &soak.counts {
        println!("  {kind:<9} {count}");
    }
    println!("before: {:?}", soak.before);
    println!("after:  {:?}", soak.after);
    let violations = soak.violations();
    if violations.is_empty() {
        println!("soak: every task got exactly one result of the right kind; no leak");
    } else {
        for v in &violations {
            println!("VIOLATION: {v}");
        }
        std::process::exit(1);
    }
}
