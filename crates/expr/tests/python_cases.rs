//! Every case of python_cases.txt and launch_cases.txt (written by gen_cases.py from CPython's
//! `eval`; the launch cases with `ceil_div(a, b)` defined as `-(-a // b)`): the same expression
//! over the same values gives the same repr, or the same exception. list_cases.txt (value lists,
//! as T1 files write them) is checked the same way through `tunebox_expr::eval`.

use tunebox_expr::{Expr, ExprError, Object, Value, eval};

const CASES: &str = include_str!("python_cases.txt");
const LAUNCH_CASES: &str = include_str!("launch_cases.txt");
const LIST_CASES: &str = include_str!("list_cases.txt");
const LIST_NAMES: [&str; 7] = ["a", "b", "c", "x", "y", "t", "L"];
const NAMES: [&str; 7] = ["a", "b", "c", "x", "y", "t", "s"];

/// A binding's value, written as Python's repr.
fn parse_value(repr: &str) -> Value<'_> {
    match repr {
        "True" => Value::Bool(true),
        "False" => Value::Bool(false),
        _ if repr.starts_with('\'') => Value::Str(&repr[1..repr.len() - 1]),
        _ => match repr.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Float(repr.parse().expect("a float repr")),
        },
    }
}

#[test]
fn same_answers_as_python() {
    let checked = check(CASES);
    assert!(checked >= 3000, "only {checked} cases");
}

#[test]
fn launch_geometry_as_python() {
    let checked = check(LAUNCH_CASES);
    assert!(checked >= 400, "only {checked} cases");
}

#[test]
fn value_lists_as_python() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in LIST_CASES.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split('\t');
        let (text, bindings, expected) = (
            fields.next().unwrap(),
            fields.next().unwrap(),
            fields.next().unwrap(),
        );
        let names: Vec<(&str, Object)> = bindings
            .split(' ')
            .zip(LIST_NAMES)
            .map(|(b, name)| {
                let (n, v) = b.split_once('=').unwrap();
                assert_eq!(n, name);
                let object = match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                    Some("") => Object::List(Vec::new()),
                    Some(items) => Object::List(
                        items
                            .split(',')
                            .map(|i| Object::from(parse_value(i)))
                            .collect(),
                    ),
                    None => Object::from(parse_value(v)),
                };
                (name, object)
            })
            .collect();
        let got = outcome(eval(text, &names));
        if got != expected {
            failures.push(format!(
                "{text}  [{bindings}]: Python {expected}, tunebox-expr {got}"
            ));
        }
        checked += 1;
    }
    assert_none_differ(&failures, checked);
    assert!(checked >= 600, "only {checked} cases");
}

/// A result as the case files write Python's: `= value`, or `! ExceptionName`.
fn outcome<T: std::fmt::Display>(result: Result<T, ExprError>) -> String {
    match result {
        Ok(v) => format!("= {v}"),
        Err(ExprError::UnknownName { .. }) => "! NameError".to_owned(),
        Err(e) => match e.python_exception() {
            Some(name) => format!("! {name}"),
            None => format!("! {e}"),
        },
    }
}

fn assert_none_differ(failures: &[String], checked: usize) {
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ from Python:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Checks every case of `cases`; returns how many there were.
fn check(cases: &str) -> usize {
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in cases.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split('\t');
        let (text, bindings, expected) = (
            fields.next().unwrap(),
            fields.next().unwrap(),
            fields.next().unwrap(),
        );
        let values: Vec<Value<'_>> = bindings
            .split(' ')
            .zip(NAMES)
            .map(|(b, name)| {
                let (n, v) = b.split_once('=').unwrap();
                assert_eq!(n, name);
                parse_value(v)
            })
            .collect();
        let expr = match Expr::parse(text) {
            Ok(e) => e,
            Err(e) => {
                failures.push(format!("{text}: does not parse: {e}"));
                continue;
            }
        };
        let compiled = expr.bind(&NAMES).unwrap();
        let got = outcome(compiled.eval(&values));
        if got != expected {
            failures.push(format!(
                "{text}  [{bindings}]: Python {expected}, tunebox-expr {got}"
            ));
        }
        checked += 1;
    }
    assert_none_differ(&failures, checked);
    checked
}
