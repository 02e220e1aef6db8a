//! Checking a candidate's outputs against a reference's.

use tunebox_protocol::{DType, TensorData};

/// How close a candidate's outputs must be to the reference's, as `numpy.allclose`: an element
/// passes when `|candidate - reference| <= atol + rtol * |reference|`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Default for Tolerance {
    /// `rtol = 1e-5, atol = 1e-8`, numpy's defaults.
    fn default() -> Self {
        Tolerance {
            rtol: 1e-5,
            atol: 1e-8,
        }
    }
}

/// How one output tensor compares with the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorComparison {
    /// The tensor's name.
    pub name: String,
    /// Elements compared.
    pub elements: u64,
    /// Elements outside the tolerance (a NaN where the reference has none counts).
    pub mismatches: u64,
    /// Largest `|candidate - reference|`.
    pub max_abs_error: f64,
    /// Largest `|candidate - reference| / |reference|` over elements with a non-zero reference.
    pub max_rel_error: f64,
    /// Set when the tensors cannot be compared element by element (different names, dtypes,
    /// shapes or sizes); such a comparison never passes.
    pub incompatible: Option<String>,
}

impl TensorComparison {
    /// Whether every element is within the tolerance.
    pub fn passed(&self) -> bool {
        self.incompatible.is_none() && self.mismatches == 0
    }
}

/// The verdict on one candidate: a comparison per reference output.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    /// One entry per reference output, in the reference's order.
    pub tensors: Vec<TensorComparison>,
}

impl Verification {
    /// Whether every output passed.
    pub fn passed(&self) -> bool {
        self.tensors.iter().all(TensorComparison::passed)
    }

    /// Largest absolute error over all outputs.
    pub fn max_abs_error(&self) -> f64 {
        self.tensors
            .iter()
            .map(|t| t.max_abs_error)
            .fold(0.0, f64::max)
    }

    /// Largest relative error over all outputs.
    pub fn max_rel_error(&self) -> f64 {
        self.tensors
            .iter()
            .map(|t| t.max_rel_error)
            .fold(0.0, f64::max)
    }

    /// Total mismatching elements over all outputs.
    pub fn mismatches(&self) -> u64 {
        self.tensors.iter().map(|t| t.mismatches).sum()
    }

    /// One line for reports: `max abs error 0.5, max rel error 1, 12 of 1024 elements differ`,
    /// or why the outputs could not be compared.
    pub fn summary(&self) -> String {
        if let Some(why) = self.tensors.iter().find_map(|t| t.incompatible.as_ref()) {
            return why.clone();
        }
        let elements: u64 = self.tensors.iter().map(|t| t.elements).sum();
        format!(
            "max abs error {:.3e}, max rel error {:.3e}, {} of {} elements differ",
            self.max_abs_error(),
            self.max_rel_error(),
            self.mismatches(),
            elements
        )
    }
}

/// Compares a candidate's outputs with the reference's, tensor by tensor, by name.
///
/// Every reference output must be present in `candidate` with the same dtype and shape.
/// Floating-point tensors are compared within `tolerance`; integer tensors are compared with the
/// same formula on their values (so `atol = 0, rtol = 0` means exact).
pub fn verify_outputs(
    reference: &[TensorData],
    candidate: &[TensorData],
    tolerance: Tolerance,
) -> Verification {
    let tensors = reference
        .iter()
        .map(
            |want| match candidate.iter().find(|got| got.name == want.name) {
                None => incompatible(want, format!("output `{}` is missing", want.name)),
                Some(got) if got.dtype != want.dtype || got.shape != want.shape => incompatible(
                    want,
                    format!(
                        "output `{}` is {} {:?}, the reference's is {} {:?}",
                        want.name,
                        got.dtype.name(),
                        got.shape,
                        want.dtype.name(),
                        want.shape
                    ),
                ),
                Some(got) if got.bytes.len() != want.bytes.len() => incompatible(
                    want,
                    format!(
                        "output `{}` has {} bytes, the reference's has {}",
                        want.name,
                        got.bytes.len(),
                        want.bytes.len()
                    ),
                ),
                Some(got) => compare(want, got, tolerance),
            },
        )
        .collect();
    Verification { tensors }
}

fn incompatible(want: &TensorData, why: String) -> TensorComparison {
    TensorComparison {
        name: want.name.clone(),
        elements: 0,
        mismatches: 0,
        max_abs_error: f64::INFINITY,
        max_rel_error: f64::INFINITY,
        incompatible: Some(why),
    }
}

fn compare(want: &TensorData, got: &TensorData, tolerance: Tolerance) -> TensorComparison {
    let mut comparison = TensorComparison {
        name: want.name.clone(),
        elements: 0,
        mismatches: 0,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        incompatible: None,
    };
    let pairs = elements(want.dtype, &want.bytes).zip(elements(got.dtype, &got.bytes));
    for (reference, candidate) in pairs {
        comparison.elements += 1;
        let diff = (candidate - reference).abs();
        let within = if reference.is_nan() {
            candidate.is_nan()
        } else if reference.is_infinite() {
            candidate == reference
        } else {
            diff <= tolerance.atol + tolerance.rtol * reference.abs()
        };
        if !within {
            comparison.mismatches += 1;
        }
        // A NaN difference (candidate NaN) counts as infinitely wrong.
        let diff = if diff.is_nan() && !reference.is_nan() {
            f64::INFINITY
        } else if diff.is_nan() {
            0.0
        } else {
            diff
        };
        comparison.max_abs_error = comparison.max_abs_error.max(diff);
        if reference != 0.0 && reference.is_finite() {
            comparison.max_rel_error = comparison.max_rel_error.max(diff / reference.abs());
        }
    }
    comparison
}

/// The elements of a tensor's bytes (native byte order) as `f64`.
fn elements(dtype: DType, bytes: &[u8]) -> Box<dyn Iterator<Item = f64> + '_> {
    let chunks = bytes.chunks_exact(dtype.size_bytes());
    match dtype {
        DType::F32 => Box::new(chunks.map(|c| f64::from(f32::from_ne_bytes(array(c))))),
        DType::F64 => Box::new(chunks.map(|c| f64::from_ne_bytes(array(c)))),
        DType::I32 => Box::new(chunks.map(|c| f64::from(i32::from_ne_bytes(array(c))))),
        DType::I64 => Box::new(chunks.map(|c| i64::from_ne_bytes(array(c)) as f64)),
        DType::U8 => Box::new(chunks.map(|c| f64::from(c[0]))),
    }
}

fn array<const N: usize>(chunk: &[u8]) -> [u8; N] {
    chunk
        .try_into()
        .expect("chunks_exact yields chunks of the element size")
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::Bytes;

    use super::*;

    fn f32s(name: &str, values: &[f32]) -> TensorData {
        TensorData {
            name: name.into(),
            dtype: DType::F32,
            shape: vec![values.len() as u64],
            bytes: Bytes::from_vec(values.iter().flat_map(|v| v.to_ne_bytes()).collect()).unwrap(),
        }
    }

    #[test]
    fn equal_outputs_pass() {
        let a = [f32s("y", &[1.0, 2.0, -3.0])];
        let v = verify_outputs(&a, &a, Tolerance::default());
        assert!(v.passed());
        assert_eq!(v.max_abs_error(), 0.0);
        assert_eq!(v.tensors[0].elements, 3);
    }

    #[test]
    fn tolerance_is_numpy_allclose() {
        let reference = [f32s("y", &[100.0, 1.0])];
        let close = [f32s("y", &[100.5, 1.0])];
        let tol = Tolerance {
            rtol: 1e-2,
            atol: 0.0,
        };
        assert!(verify_outputs(&reference, &close, tol).passed());
        let far = [f32s("y", &[102.0, 1.0])];
        let v = verify_outputs(&reference, &far, tol);
        assert!(!v.passed());
        assert_eq!(v.mismatches(), 1);
        assert_eq!(v.max_abs_error(), 2.0);
        assert!((v.max_rel_error() - 0.02).abs() < 1e-12);
        assert!(
            v.summary().contains("1 of 2 elements differ"),
            "{}",
            v.summary()
        );
    }

    #[test]
    fn nan_in_candidate_is_a_mismatch() {
        let v = verify_outputs(
            &[f32s("y", &[1.0])],
            &[f32s("y", &[f32::NAN])],
            Tolerance::default(),
        );
        assert!(!v.passed());
        assert_eq!(v.max_abs_error(), f64::INFINITY);
    }

    #[test]
    fn incompatible_outputs_never_pass() {
        let reference = [f32s("y", &[1.0, 2.0])];
        let missing = verify_outputs(&reference, &[f32s("z", &[1.0, 2.0])], Tolerance::default());
        assert!(!missing.passed());
        assert!(missing.summary().contains("`y` is missing"));
        let shape = verify_outputs(&reference, &[f32s("y", &[1.0])], Tolerance::default());
        assert!(!shape.passed());
        assert!(shape.summary().contains("[1]"), "{}", shape.summary());
    }

    #[test]
    fn integers_compare_exactly_with_zero_tolerance() {
        let int = |v: i64| TensorData {
            name: "n".into(),
            dtype: DType::I64,
            shape: vec![1],
            bytes: Bytes::copy_from_slice(&v.to_ne_bytes()).unwrap(),
        };
        let exact = Tolerance {
            rtol: 0.0,
            atol: 0.0,
        };
        assert!(verify_outputs(&[int(5)], &[int(5)], exact).passed());
        assert!(!verify_outputs(&[int(5)], &[int(6)], exact).passed());
    }
}
