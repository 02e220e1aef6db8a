//! The CUDA example manifests (`examples/*-cuda.toml`) parse, and every choice they generate has
//! a launch that this backend's [`validate_launch`] accepts on a Hopper GPU — except the one
//! meant to be invalid. The launch rules are the ones the manifests' comments describe (Kernel
//! Tuner's conventions); the CLI implements them for real.

use std::collections::BTreeMap;

use tunebox_cuda::{DeviceLimits, FunctionLimits, validate_launch};
use tunebox_expr::{Expr, Value};
use tunebox_protocol::{BenchError, LaunchConfig};

fn manifest(name: &str) -> toml::Table {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    toml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

type Choice = BTreeMap<String, i64>;

/// Every combination of the params that passes the restrictions.
fn choices(m: &toml::Table) -> Vec<Choice> {
    let params = m["params"].as_table().unwrap();
    let mut all: Vec<Choice> = vec![Choice::new()];
    for (name, values) in params {
        let values: Vec<i64> = values
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_integer().unwrap())
            .collect();
        all = all
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |&v| {
                    let mut c = c.clone();
                    c.insert(name.clone(), v);
                    c
                })
            })
            .collect();
    }
    let restrictions: Vec<&str> = m
        .get("restrictions")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().map(|v| v.as_str().unwrap()).collect())
        .unwrap_or_default();
    all.into_iter()
        .filter(|c| {
            restrictions.iter().all(|r| {
                let (names, values) = context(c, &[]);
                Expr::parse(r)
                    .and_then(|e| e.bind(&names))
                    .and_then(|e| e.eval_bool(&values))
                    .unwrap_or_else(|e| panic!("{r}: {e}"))
            })
        })
        .collect()
}

/// The names bound in an expression (the params, then `problem_size_x/y/z`) and their values.
fn context(choice: &Choice, problem: &[i64]) -> (Vec<String>, Vec<Value<'static>>) {
    let mut names: Vec<String> = choice.keys().cloned().collect();
    let mut values: Vec<Value<'static>> = choice.values().map(|&v| Value::Int(v)).collect();
    for (axis, &size) in ["x", "y", "z"].iter().zip(problem) {
        names.push(format!("problem_size_{axis}"));
        values.push(Value::Int(size));
    }
    (names, values)
}

/// An integer field of `[launch]`: a TOML integer or an expression (Python, as the CLI's).
fn eval(value: &toml::Value, context: &(Vec<String>, Vec<Value<'static>>)) -> i64 {
    match value {
        toml::Value::Integer(i) => *i,
        toml::Value::String(text) => {
            let compiled = Expr::parse(text)
                .and_then(|e| e.bind(&context.0))
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            match compiled.eval(&context.1) {
                Ok(Value::Int(i)) => i,
                Ok(Value::Float(f)) if f.fract() == 0.0 => f as i64,
                other => panic!("{text}: not an integer: {other:?}"),
            }
        }
        other => panic!("not an integer expression: {other}"),
    }
}

/// The launch of `choice`, by the rules the manifests' comments give (the CLI's): block from
/// `block` (default block_size_x/y/z), grid from `grid` or ceil(problem_size / product of
/// grid_div), shared memory from `shared_mem`.
fn launch(m: &toml::Table, choice: &Choice) -> LaunchConfig {
    let table = m["launch"].as_table().unwrap();
    let problem: Vec<i64> = m["problem_size"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_integer().unwrap())
        .collect();
    let context = context(choice, &problem);
    let axes = ["x", "y", "z"];
    let block_param = |d: usize| choice.get(&format!("block_size_{}", axes[d])).copied();
    let block: [u32; 3] = std::array::from_fn(|d| {
        let v = match table.get("block") {
            Some(b) => eval(&b.as_array().unwrap()[d], &context),
            None => block_param(d).unwrap_or(if d == 0 { 256 } else { 1 }),
        };
        u32::try_from(v).unwrap()
    });
    let grid: [u32; 3] = std::array::from_fn(|d| {
        let v = match table.get("grid") {
            Some(g) => eval(&g.as_array().unwrap()[d], &context),
            None => {
                let div: i64 = match table.get(&format!("grid_div_{}", axes[d])) {
                    Some(list) => list
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|e| eval(e, &context))
                        .product(),
                    None => block_param(d).unwrap_or(if d == 0 { 256 } else { 1 }),
                };
                let size = problem.get(d).copied().unwrap_or(1);
                (size + div - 1) / div
            }
        };
        u32::try_from(v).unwrap()
    });
    let shared_mem_bytes = table
        .get("shared_mem")
        .map_or(0, |s| u32::try_from(eval(s, &context)).unwrap());
    LaunchConfig::new(grid, block).shared_mem_bytes(shared_mem_bytes)
}

fn function(static_shared_bytes: u32) -> FunctionLimits {
    FunctionLimits {
        max_threads_per_block: 1024,
        registers_per_thread: 64,
        static_shared_bytes,
        max_dynamic_shared_bytes: 48 * 1024 - static_shared_bytes,
    }
}

#[test]
fn matmul_cuda_choices_all_launch() {
    let m = manifest("matmul-cuda.toml");
    assert_eq!(m["kernel"]["language"].as_str(), Some("cuda"));
    assert_eq!(m["kernel"]["entry"].as_str(), Some("matmul"));
    assert!(m["kernel"]["options"].is_array());
    let choices = choices(&m);
    assert_eq!(choices.len(), 40, "the restrictions keep 40 of 48");
    for choice in &choices {
        let launch = launch(&m, choice);
        // The As and Bs tiles are the kernel's static shared memory.
        let (bx, by) = (choice["block_size_x"], choice["block_size_y"]);
        let tiles = (by * choice["WM"] + bx * choice["WN"]) * choice["TILE_K"] * 4;
        validate_launch(
            &launch,
            "matmul",
            &DeviceLimits::hopper(),
            &function(tiles as u32),
        )
        .unwrap_or_else(|e| panic!("{choice:?}: {e}"));
        // The grid covers C exactly: 1024 is a multiple of every tile.
        assert_eq!(
            i64::from(launch.grid[0]) * bx * choice["WN"],
            1024,
            "{choice:?}"
        );
        assert_eq!(i64::from(launch.grid[1]) * by * choice["WM"], 1024);
    }
    let reference = m["verify"]["reference"].as_table().unwrap();
    assert_eq!(reference["source"].as_str(), Some("kernels/matmul_ref.c"));
}

#[test]
fn faults_cuda_has_one_invalid_launch() {
    let m = manifest("faults-cuda.toml");
    assert_eq!(m["kernel"]["language"].as_str(), Some("cuda"));
    assert_eq!(m["timeout_s"].as_integer(), Some(2));
    let choices = choices(&m);
    let modes: Vec<i64> = choices.iter().map(|c| c["MODE"]).collect();
    assert_eq!(modes, (0..=8).collect::<Vec<_>>());
    for choice in &choices {
        let launch = launch(&m, choice);
        assert_eq!(
            u64::from(launch.grid[0]) * u64::from(launch.block[0]),
            1 << 20
        );
        let result = validate_launch(&launch, "faulty", &DeviceLimits::hopper(), &function(0));
        match (choice["MODE"], result) {
            (5, Err(BenchError::InvalidLaunch { detail })) => assert!(
                detail.contains("(requested 2048, allowed 1024)"),
                "{detail}"
            ),
            (5, other) => panic!("MODE 5 must be an invalid launch: {other:?}"),
            (_, result) => {
                result.unwrap_or_else(|e| panic!("{choice:?}: {e}"));
            }
        }
    }
    let reference = m["verify"]["reference"]["choice"].as_table().unwrap();
    assert_eq!(reference["MODE"].as_integer(), Some(0));
}
