//! Properties every strategy keeps, over random small spaces with restrictions and random
//! objectives (failures included): proposals are choices of the space, never repeated, at most
//! the budget (and exactly as many as the budget and space allow), and deterministic for a seed
//! and a sequence of tells, however the asks are batched.

use indexmap::IndexMap;
use proptest::prelude::*;
use tunebox_pool::Status;

use super::{NAMES, by_name};
use crate::search::replay::{Measurement, result_of};
use crate::space::{ParamValue, SearchSpace};

/// A space of `sizes.len()` params `P0…` with values `0..size`, under `restriction` over
/// `P0` and the last param.
fn space(sizes: &[usize], restriction: u8, modulus: i64) -> Option<SearchSpace> {
    let params: IndexMap<String, Vec<ParamValue>> = sizes
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            (
                format!("P{p}"),
                (0..n as i64).map(|v| ParamValue::Int(v * 2)).collect(),
            )
        })
        .collect();
    let last = format!("P{}", sizes.len() - 1);
    let restrictions = match restriction {
        0 => vec![],
        1 => vec![format!("(P0 + {last}) % {modulus} != 1")],
        _ => vec![format!("P0 <= {last} or P0 == {modulus}")],
    };
    let space = SearchSpace::from_params(&params, &restrictions).ok()?;
    (!space.is_empty()).then_some(space)
}

/// Runs `name` to its end, asking in batches of `batches` (cycled; 0 means as many as it
/// likes), telling `objectives` (a negative one is a failure); the choices asked, in order.
fn drive(
    name: &str,
    space: &SearchSpace,
    budget: usize,
    seed: u64,
    objectives: &[f64],
    batches: &[usize],
) -> Vec<usize> {
    let mut strategy = by_name(name, budget, seed).unwrap();
    let mut asked = Vec::new();
    for round in 0..10_000 {
        let n = match batches[round % batches.len()] {
            0 => usize::MAX,
            n => n,
        };
        let batch = strategy.ask(space, n);
        assert!(
            batch.len() <= n,
            "{name}: asked for {n}, got {}",
            batch.len()
        );
        if batch.is_empty() {
            return asked;
        }
        for index in batch {
            let value = objectives[index % objectives.len()];
            let m = if value < 0.0 {
                Measurement {
                    time_ms: None,
                    status: Status::Crashed,
                    cost_ms: 1.0,
                }
            } else {
                Measurement {
                    time_ms: Some(value),
                    status: Status::Ok,
                    cost_ms: 1.0,
                }
            };
            let result = result_of(space, index, m, "test");
            strategy.tell(index, &result);
            asked.push(index);
        }
    }
    panic!("{name} never ended");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn strategies_propose_valid_distinct_choices_within_budget_deterministically(
        sizes in prop::collection::vec(1usize..6, 1..5),
        restriction in 0u8..3,
        modulus in 2i64..5,
        budget in 1usize..80,
        seed in any::<u64>(),
        objectives in prop::collection::vec(-1.0f64..100.0, 1..50),
        batches in prop::collection::vec(0usize..4, 1..4),
    ) {
        let Some(space) = space(&sizes, restriction, modulus) else {
            return Ok(());
        };
        for name in NAMES.iter().filter(|n| **n != "brute-force") {
            let asked = drive(name, &space, budget, seed, &objectives, &batches);
            prop_assert!(asked.iter().all(|&i| i < space.len()), "{}: outside the space", name);
            let mut distinct = asked.clone();
            distinct.sort_unstable();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), asked.len(), "{}: asked one twice", name);
            prop_assert_eq!(asked.len(), budget.min(space.len()), "{}: not the budget", name);
            let again = drive(name, &space, budget, seed, &objectives, &batches);
            prop_assert_eq!(&again, &asked, "{}: not deterministic", name);
            let one_by_one = drive(name, &space, budget, seed, &objectives, &[1]);
            prop_assert_eq!(one_by_one.len(), asked.len(), "{}", name);
        }
    }
}

#[test]
fn every_name_makes_its_strategy() {
    for name in NAMES {
        assert_eq!(by_name(name, 10, 0).unwrap().name(), name);
    }
    assert!(by_name("nope", 10, 0).is_none());
}

/// A higher-is-better metric reaches the strategies negated: the logarithm the model strategies
/// take must keep its order (it took `ln` of a clamped negative, so every rate looked alike).
#[test]
fn log_cost_keeps_the_order_of_negated_metrics() {
    let rates = [-900.0, -100.0, -10.0];
    let log = super::log_cost(&rates);
    let mapped: Vec<f64> = rates.iter().map(|&v| log(v)).collect();
    assert!(mapped[0] < mapped[1] && mapped[1] < mapped[2], "{mapped:?}");
    let times = [0.5, 2.0, 8.0];
    let log = super::log_cost(&times);
    assert!((log(2.0) - 2.0f64.ln()).abs() < 1e-12);
    let mixed = [-1.0, 0.0, 3.0];
    let log = super::log_cost(&mixed);
    assert_eq!(mixed.map(&log), mixed);
}

#[test]
fn auto_batches_only_when_built_for_a_batch() {
    let params = crate::space::tests::params(&[("A", &(0..6).collect::<Vec<_>>())]);
    let space = SearchSpace::new(&params, &[]).unwrap();
    let mut one = super::by_name("auto", 20, 1).unwrap();
    assert_eq!(one.ask(&space, usize::MAX).len(), 1);
    let mut four = super::by_name_batched("auto", 20, 1, 4).unwrap();
    assert_eq!(four.ask(&space, usize::MAX).len(), 4);
    // The others are as `by_name` builds them.
    let mut ils = super::by_name_batched("ils", 20, 1, 4).unwrap();
    assert_eq!(ils.ask(&space, usize::MAX).len(), 1);
}
