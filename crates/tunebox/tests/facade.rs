//! A downstream tuner needs `tunebox` alone: the tuning engine, the tensor and status types
//! and the options builder are all reachable from the facade.

use tunebox::{
    BruteForce, CacheMode, DType, Element, Manifest, Plan, SearchSpace, Status, StatusKind,
    TensorSpec, TuneOptions,
};

/// A tensor of any element type, through the facade's [`Element`].
fn tensor_of<T: Element>(name: &str, values: &[T]) -> TensorSpec {
    TensorSpec::from_values(name, values).expect("a small tensor")
}

#[test]
fn a_downstream_tuner_plans_a_run_with_the_facade_alone() {
    let manifest = Manifest::builder("scale")
        .c_source(
            "scale.c",
            "void scale(const float *x, float *y, long n) { for (long i = 0; i < n; i++) \
             y[i] = UNROLL * x[i]; }",
            "scale",
        )
        .tensor(tensor_of("x", &[1.0f32, 2.0, 3.0, 4.0]))
        .tensor(TensorSpec::new("y", DType::F32, [4]).output())
        .scalar("n", 4)
        .param("UNROLL", [1, 2, 4, 8])
        .restriction("UNROLL < 8")
        .build()
        .expect("a valid manifest");
    let plan = Plan::new(manifest, Box::new(BruteForce::new()), None).expect("a plan");
    let space: &SearchSpace = plan.space();
    assert_eq!(space.len(), 3);
    assert_eq!(plan.selected(), [0, 1, 2]);
    let labels: Vec<String> = space.choices().map(|c| c.label()).collect();
    assert_eq!(labels, ["UNROLL=1", "UNROLL=2", "UNROLL=4"]);
    // Every strategy of the engine, by name.
    assert!(tunebox::tune::strategies::by_name("genetic", 10, 0).is_some());

    let options = TuneOptions::new()
        .strategy("random")
        .budget(2)
        .cache(CacheMode::Off);
    assert_eq!(options.selection.budget, Some(2));
    assert_eq!(options.workers, 1);

    assert_eq!(Status::Ok.kind(), StatusKind::Complete);
    assert_eq!(Status::Timeout.kind(), StatusKind::Timeout);
}
