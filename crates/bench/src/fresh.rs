//! Fresh inputs for the last verification call (docs/sandbox.md): every randomly initialized
//! input drawn again with the run's fresh seed mixed into its seed, so that a memoized or
//! replayed answer fails. Shared by the backends, so that a candidate and its reference (which
//! run in the same backend kind) see the same fresh inputs.

use tunebox_protocol::{BenchError, BenchmarkRequest, TensorSpec};

use crate::HostTensor;

/// `spec` with `fresh` mixed into its seed, when it is a randomly initialized input; `None`
/// for an output, or an input given as data or a constant (which cannot be drawn again). As
/// [`TensorSpec::fresh_input`]: its `contents` are the spec's `fresh_contents`.
pub fn fresh_input_spec(spec: &TensorSpec, fresh: u64) -> Option<TensorSpec> {
    spec.fresh_input(fresh)
}

/// The fresh contents of each of `request`'s tensors, by index: `Some(tensor)` for each
/// randomly initialized input ([`fresh_input_spec`]), `None` for the rest.
///
/// # Errors
///
/// A tensor cannot be allocated (as [`HostTensor::allocate`]).
pub fn fresh_inputs(
    request: &BenchmarkRequest,
    fresh: u64,
) -> Result<Vec<Option<HostTensor>>, BenchError> {
    request
        .tensors
        .iter()
        .map(|spec| {
            fresh_input_spec(spec, fresh)
                .map(|s| HostTensor::allocate(&s))
                .transpose()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::DType;

    #[test]
    fn only_random_inputs_are_drawn_again() {
        let x = TensorSpec::new("x", DType::F32, [4]).random(7);
        let fresh = fresh_input_spec(&x, 99).unwrap();
        assert_ne!(fresh.init, x.init);
        assert_eq!(
            fresh_input_spec(&x, 99).unwrap().init,
            fresh.init,
            "deterministic"
        );
        assert_ne!(fresh_input_spec(&x, 98).unwrap().init, fresh.init);
        assert!(fresh_input_spec(&TensorSpec::new("y", DType::F32, [4]).output(), 1).is_none());
        assert!(fresh_input_spec(&TensorSpec::new("z", DType::F32, [4]), 1).is_none());
        let made = x.make_contents().unwrap();
        let with_contents = x.clone().contents(made.share());
        assert_eq!(fresh_input_spec(&with_contents, 99).unwrap().contents, None);
        let fresh_made = fresh.make_contents().unwrap();
        let with_fresh = {
            let mut v = with_contents;
            v.fresh_contents = Some(fresh_made.share());
            v
        };
        let fresh_spec = fresh_input_spec(&with_fresh, 99).unwrap();
        assert_eq!(fresh_spec.contents.unwrap().id(), fresh_made.share().id());
        assert!(fresh_spec.fresh_contents.is_none());
    }
}
