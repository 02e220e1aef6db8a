//! Checking a candidate's outputs against a reference's.

use tunebox_protocol::{DType, TensorData};

/// How close a candidate's outputs must be to the reference's, as `numpy.allclose(candidate,
/// reference, rtol, atol, equal_nan)`: a floating-point element passes when
/// `|candidate - reference| <= atol + rtol * |reference|` (numpy's asymmetric form: the
/// reference scales the tolerance), both being finite; an infinity passes only against the same
/// infinity; a NaN passes only against a NaN, and only with `equal_nan`. Integer outputs are
/// compared exactly, whatever the tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Whether a NaN where the reference has a NaN passes (numpy's `equal_nan`, default
    /// `false`: a NaN is never close to anything).
    pub equal_nan: bool,
}

impl Tolerance {
    /// Elements within `atol + rtol * |reference|` of the reference pass; a NaN passes only with
    /// [`Tolerance::equal_nan`].
    pub fn new(rtol: f64, atol: f64) -> Tolerance {
        Tolerance {
            rtol,
            atol,
            equal_nan: false,
        }
    }

    /// Whether NaN equals NaN (numpy's `equal_nan`).
    #[must_use]
    pub fn equal_nan(mut self, equal_nan: bool) -> Tolerance {
        self.equal_nan = equal_nan;
        self
    }
}

impl Default for Tolerance {
    /// `rtol = 1e-5, atol = 1e-8, equal_nan = false`, numpy's defaults.
    fn default() -> Self {
        Tolerance {
            rtol: 1e-5,
            atol: 1e-8,
            equal_nan: false,
        }
    }
}

/// How one output tensor compares with the reference's.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TensorComparison {
    /// The tensor's name.
    pub name: String,
    /// Elements compared.
    pub elements: u64,
    /// Elements outside the tolerance.
    pub mismatches: u64,
    /// Of the mismatches, those where the candidate or the reference is NaN or infinite: their
    /// error is not a number, so `max_abs_error` and `max_rel_error` are `inf` when this is not
    /// 0, and [`Verification::summary`] describes them in words.
    pub nonfinite_mismatches: u64,
    /// Largest `|candidate - reference|` (exact for integers, then rounded to `f64`); `inf` when
    /// a NaN or an infinity mismatches.
    pub max_abs_error: f64,
    /// Largest `|candidate - reference| / |reference|` over elements with a non-zero reference;
    /// `inf` when a NaN or an infinity mismatches.
    pub max_rel_error: f64,
    /// The first element outside the tolerance, if any.
    pub first_mismatch: Option<ElementMismatch>,
    /// Set when the tensors cannot be compared element by element (different names, dtypes,
    /// shapes or sizes); such a comparison never passes.
    pub incompatible: Option<String>,
}

/// One element outside the tolerance, its values written as their dtype's (`NaN`, `inf`,
/// integers in full).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElementMismatch {
    /// Flat (row-major) index of the element.
    pub index: u64,
    /// The candidate's value.
    pub got: String,
    /// The reference's value.
    pub expected: String,
}

impl TensorComparison {
    /// Whether every element is within the tolerance.
    pub fn passed(&self) -> bool {
        self.incompatible.is_none() && self.mismatches == 0
    }
}

/// The verdict on one candidate: a comparison per reference output.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Verification {
    /// One entry per reference output, in the reference's order.
    pub tensors: Vec<TensorComparison>,
}

impl Verification {
    /// Whether every output passed.
    pub fn passed(&self) -> bool {
        self.tensors.iter().all(TensorComparison::passed)
    }

    /// Largest absolute error over all outputs (`inf` when a NaN or infinity mismatches).
    pub fn max_abs_error(&self) -> f64 {
        self.tensors
            .iter()
            .map(|t| t.max_abs_error)
            .fold(0.0, f64::max)
    }

    /// Largest relative error over all outputs (`inf` when a NaN or infinity mismatches).
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

    /// Total mismatching elements where one side is NaN or infinite.
    pub fn nonfinite_mismatches(&self) -> u64 {
        self.tensors.iter().map(|t| t.nonfinite_mismatches).sum()
    }

    /// One line for reports, or why the outputs could not be compared. The errors are written
    /// as numbers only while they are finite (what a JSON report can hold as a number):
    /// `max abs error 2.000e0, max rel error 2.000e-2, 1 of 2 elements differ (first: y[0] is
    /// 102, expected 100)`; when a NaN or an infinity mismatches it says so instead:
    /// `1 of 2 elements differ, 1 of them by NaN or inf, so the errors are not numbers (first:
    /// y[1] is NaN, expected 1)`.
    pub fn summary(&self) -> String {
        if let Some(why) = self.tensors.iter().find_map(|t| t.incompatible.as_ref()) {
            return why.clone();
        }
        let elements: u64 = self.tensors.iter().map(|t| t.elements).sum();
        let first = self
            .tensors
            .iter()
            .find_map(|t| t.first_mismatch.as_ref().map(|m| (t, m)))
            .map(|(t, m)| {
                format!(
                    " (first: {}[{}] is {}, expected {})",
                    t.name, m.index, m.got, m.expected
                )
            })
            .unwrap_or_default();
        let (abs, rel) = (self.max_abs_error(), self.max_rel_error());
        let nonfinite = self.nonfinite_mismatches();
        if nonfinite > 0 || !abs.is_finite() || !rel.is_finite() {
            let by = if nonfinite > 0 {
                format!(", {nonfinite} of them by NaN or inf")
            } else {
                " by more than a double can hold".to_owned()
            };
            return format!(
                "{} of {elements} elements differ{by}, so the errors are not numbers{first}",
                self.mismatches()
            );
        }
        format!(
            "max abs error {abs:.3e}, max rel error {rel:.3e}, {} of {elements} elements \
             differ{first}",
            self.mismatches(),
        )
    }
}

/// Compares a candidate's outputs with the reference's, tensor by tensor, by name.
///
/// Every reference output must be present in `candidate` with the same dtype and shape.
/// Floating-point tensors are compared as `numpy.allclose` within `tolerance` (see
/// [`Tolerance`]); integer tensors (`i32`, `i64`, `u8`) exactly, on their integer values (an
/// `i64` off by one at 2^60 is a mismatch, which a comparison through `f64` would miss).
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
        nonfinite_mismatches: 0,
        max_abs_error: f64::INFINITY,
        max_rel_error: f64::INFINITY,
        first_mismatch: None,
        incompatible: Some(why),
    }
}

/// One element of a tensor, in its own type.
#[derive(Debug, Clone, Copy)]
enum Value {
    F32(f32),
    F64(f64),
    Int(i64),
}

impl Value {
    /// The value as numpy prints it: `NaN`, `inf`, `-inf`, the shortest text that reads back
    /// as the same float, integers in full.
    fn text(self) -> String {
        let float = |v: f64, shortest: String| {
            if v.is_nan() {
                "NaN".to_owned()
            } else if v.is_infinite() {
                if v > 0.0 { "inf" } else { "-inf" }.to_owned()
            } else {
                shortest
            }
        };
        // Very large and very small magnitudes in exponent form, as numpy prints them.
        let exponent = |v: f64| v != 0.0 && !(1e-4..1e16).contains(&v.abs());
        match self {
            Value::F32(v) if exponent(v.into()) => float(v.into(), format!("{v:e}")),
            Value::F64(v) if exponent(v) => float(v, format!("{v:e}")),
            Value::F32(v) => float(v.into(), v.to_string()),
            Value::F64(v) => float(v, v.to_string()),
            Value::Int(v) => v.to_string(),
        }
    }

    /// A float's value as `f64` (exact for `f32`); `None` for an integer.
    fn float(self) -> Option<f64> {
        match self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::Int(_) => None,
        }
    }
}

fn compare(want: &TensorData, got: &TensorData, tolerance: Tolerance) -> TensorComparison {
    // A right answer, the common case, takes one vectorized pass (`all_close`); only a wrong
    // one is gone through element by element, one loop per dtype with the decoding inlined.
    let fast = match want.dtype {
        DType::F32 => all_close(want, got, tolerance, |c: [u8; 4]| {
            f32::from_ne_bytes(c).into()
        }),
        DType::F64 => all_close(want, got, tolerance, f64::from_ne_bytes),
        // Integers are compared exactly: equal bytes are equal values.
        DType::I32 | DType::I64 | DType::U8 => {
            (want.bytes[..] == got.bytes[..]).then_some((0.0, 0.0))
        }
    };
    if let Some((max_abs_error, max_rel_error)) = fast {
        return TensorComparison {
            name: want.name.clone(),
            elements: (want.bytes.len() / want.dtype.size_bytes()) as u64,
            mismatches: 0,
            nonfinite_mismatches: 0,
            max_abs_error,
            max_rel_error,
            first_mismatch: None,
            incompatible: None,
        };
    }
    // Some element is out: the element-by-element account, with the first mismatch.
    match want.dtype {
        DType::F32 => compare_as(want, got, tolerance, |c: [u8; 4]| {
            Value::F32(f32::from_ne_bytes(c))
        }),
        DType::F64 => compare_as(want, got, tolerance, |c: [u8; 8]| {
            Value::F64(f64::from_ne_bytes(c))
        }),
        DType::I32 => compare_as(want, got, tolerance, |c: [u8; 4]| {
            Value::Int(i32::from_ne_bytes(c).into())
        }),
        DType::I64 => compare_as(want, got, tolerance, |c: [u8; 8]| {
            Value::Int(i64::from_ne_bytes(c))
        }),
        DType::U8 => compare_as(want, got, tolerance, |c: [u8; 1]| Value::Int(c[0].into())),
    }
}

/// When every element of two float tensors is finite and within `tolerance`, the largest
/// absolute and relative errors (as [`compare_as`] computes them); `None` otherwise. A
/// branch-free pass over [`LANES`] elements at a time, each lane with its own maxima (a
/// float maximum cannot be reordered by the compiler otherwise), so that it vectorizes, over
/// the runs whose bytes differ from the reference's ([`all_close_run`]): the common case, a
/// right answer, costs tens of milliseconds for tens of millions of elements.
/// Tensors of [`PARALLEL_MIN_BYTES`] or more are split among up to [`MAX_COMPARE_THREADS`]
/// threads, each taking at least half that: the compare lies between one window and the next.
fn all_close<const N: usize>(
    want: &TensorData,
    got: &TensorData,
    tolerance: Tolerance,
    value: impl Fn([u8; N]) -> f64 + Copy + Send + Sync,
) -> Option<(f64, f64)> {
    let (want, _) = want.bytes.as_chunks::<N>();
    let (got, _) = got.bytes.as_chunks::<N>();
    let threads = compare_threads(std::mem::size_of_val(want));
    if threads <= 1 {
        return all_close_run(want, got, tolerance, value);
    }
    let step = want.len().div_ceil(threads).next_multiple_of(LANES);
    std::thread::scope(|scope| {
        let parts: Vec<_> = want
            .chunks(step)
            .zip(got.chunks(step))
            .map(|(want, got)| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || all_close_run(want, got, tolerance, value))
                    .map_err(|_| (want, got))
            })
            .collect();
        let mut total = Some((0.0f64, 0.0f64));
        for part in parts {
            let part = match part {
                Ok(thread) => thread.join().ok().flatten(),
                // No thread: that part here.
                Err((want, got)) => all_close_run(want, got, tolerance, value),
            };
            total = total
                .zip(part)
                .map(|((a, r), (pa, pr))| (a.max(pa), r.max(pr)));
        }
        total
    })
}

/// Tensors of at least this many bytes are compared on more than one thread.
const PARALLEL_MIN_BYTES: usize = 16 << 20;

/// The most threads one compare takes.
const MAX_COMPARE_THREADS: usize = 4;

/// Threads for comparing `bytes` of a tensor: one below [`PARALLEL_MIN_BYTES`], else as many
/// as the machine has CPUs, at most [`MAX_COMPARE_THREADS`], each taking at least half of
/// [`PARALLEL_MIN_BYTES`].
fn compare_threads(bytes: usize) -> usize {
    if bytes < PARALLEL_MIN_BYTES {
        return 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    cpus.min(MAX_COMPARE_THREADS)
        .min(bytes / (PARALLEL_MIN_BYTES / 2))
}

/// [`all_close`] over elements `want` and `got` (of `N` bytes each), on this thread, a run of
/// [`SAME_BYTES_RUN`] elements at a time: a run whose bytes equal the reference's (a kernel
/// that computes as the reference does: an output of Kernel Tuner's `vector_add`, every
/// element) is close exactly when it is finite, with no error, which a `memcmp` and a look
/// at the exponents tell at about three times the speed of the arithmetic; a run that
/// differs stops the `memcmp` within its first bytes, as a rule, and takes the arithmetic.
fn all_close_run<const N: usize>(
    want: &[[u8; N]],
    got: &[[u8; N]],
    tolerance: Tolerance,
    value: impl Fn([u8; N]) -> f64 + Copy,
) -> Option<(f64, f64)> {
    let mut lanes = Maxima::<LANES>::new();
    let mut rest = Maxima::<1>::new();
    // Equal finite values are close only where the tolerance admits a zero error: not with a
    // negative or NaN `atol`, nor an infinite `rtol` (times a zero reference: NaN).
    let zero_is_close =
        tolerance.atol >= 0.0 && tolerance.rtol >= 0.0 && tolerance.rtol.is_finite();
    for (want, got) in want.chunks(SAME_BYTES_RUN).zip(got.chunks(SAME_BYTES_RUN)) {
        if zero_is_close && want.as_flattened() == got.as_flattened() {
            // Equal values: close unless not finite, which the element-by-element account
            // judges (an infinity is close to itself, a NaN only with `equal_nan`).
            if !want.iter().all(|&element| value(element).is_finite()) {
                return None;
            }
            continue;
        }
        let (want_blocks, want_rest) = want.as_chunks::<LANES>();
        let (got_blocks, got_rest) = got.as_chunks::<LANES>();
        for (reference, candidate) in want_blocks.iter().zip(got_blocks) {
            for lane in 0..LANES {
                lanes.add(
                    lane,
                    value(reference[lane]),
                    value(candidate[lane]),
                    tolerance,
                );
            }
        }
        for (&reference, &candidate) in want_rest.iter().zip(got_rest) {
            rest.add(0, value(reference), value(candidate), tolerance);
        }
    }
    let (ok, abs, rel) = lanes.total();
    let (rest_ok, rest_abs, rest_rel) = rest.total();
    (ok && rest_ok).then_some((abs.max(rest_abs), rel.max(rest_rel)))
}

/// Elements [`all_close_run`] compares byte for byte before it computes their errors: 16 Ki
/// (64 KiB of `f32`), a multiple of [`LANES`], so that only the last run has a rest, and
/// small enough that a run's second look (its exponents) reads the cache.
const SAME_BYTES_RUN: usize = 16 << 10;

/// Elements [`all_close`] takes at a time.
const LANES: usize = 8;

/// Per lane: whether every element was close and finite, the largest absolute and relative
/// errors.
struct Maxima<const L: usize> {
    ok: [bool; L],
    abs: [f64; L],
    rel: [f64; L],
}

impl<const L: usize> Maxima<L> {
    fn new() -> Self {
        Maxima {
            ok: [true; L],
            abs: [0.0; L],
            rel: [0.0; L],
        }
    }

    /// Adds reference `b` and candidate `a` to `lane`.
    #[inline(always)]
    fn add(&mut self, lane: usize, b: f64, a: f64, tolerance: Tolerance) {
        let diff = (a - b).abs();
        let close = diff <= tolerance.atol + tolerance.rtol * b.abs();
        self.ok[lane] &= close & a.is_finite() & b.is_finite();
        let rel = if b != 0.0 { diff / b.abs() } else { 0.0 };
        self.abs[lane] = if diff > self.abs[lane] {
            diff
        } else {
            self.abs[lane]
        };
        self.rel[lane] = if rel > self.rel[lane] {
            rel
        } else {
            self.rel[lane]
        };
    }

    fn total(&self) -> (bool, f64, f64) {
        (
            self.ok.iter().all(|&ok| ok),
            self.abs.iter().copied().fold(0.0, f64::max),
            self.rel.iter().copied().fold(0.0, f64::max),
        )
    }
}

/// [`compare`] for elements of `N` bytes, each read by `value` (both tensors have the
/// reference's dtype).
fn compare_as<const N: usize>(
    want: &TensorData,
    got: &TensorData,
    tolerance: Tolerance,
    value: impl Fn([u8; N]) -> Value,
) -> TensorComparison {
    let mut comparison = TensorComparison {
        name: want.name.clone(),
        elements: 0,
        mismatches: 0,
        nonfinite_mismatches: 0,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        first_mismatch: None,
        incompatible: None,
    };
    let pairs = want.bytes.chunks_exact(N).zip(got.bytes.chunks_exact(N));
    for (index, (reference, candidate)) in pairs.enumerate() {
        let (reference, candidate) = (value(array(reference)), value(array(candidate)));
        comparison.elements += 1;
        let (error, close) = element_error(reference, candidate, tolerance);
        match error {
            Some((abs, rel)) => {
                comparison.max_abs_error = comparison.max_abs_error.max(abs);
                if let Some(rel) = rel {
                    comparison.max_rel_error = comparison.max_rel_error.max(rel);
                }
            }
            None => {
                comparison.nonfinite_mismatches += 1;
                comparison.max_abs_error = f64::INFINITY;
                comparison.max_rel_error = f64::INFINITY;
            }
        }
        if !close {
            comparison.mismatches += 1;
            if comparison.first_mismatch.is_none() {
                comparison.first_mismatch = Some(ElementMismatch {
                    index: index as u64,
                    got: candidate.text(),
                    expected: reference.text(),
                });
            }
        }
    }
    comparison
}

/// The error of one element (`None`: not a number: a NaN or an infinity that mismatches),
/// and whether it is within `tolerance`.
#[inline(always)]
fn element_error(
    reference: Value,
    candidate: Value,
    tolerance: Tolerance,
) -> (Option<(f64, Option<f64>)>, bool) {
    match (reference, candidate) {
        (Value::Int(b), Value::Int(a)) => {
            let diff = (i128::from(a) - i128::from(b)).unsigned_abs();
            let rel = (b != 0).then(|| diff as f64 / (i128::from(b).unsigned_abs() as f64));
            (Some((diff as f64, rel)), diff == 0)
        }
        (reference, candidate) => {
            // Both tensors have the reference's dtype: two floats.
            let (b, a) = (
                reference.float().unwrap_or(f64::NAN),
                candidate.float().unwrap_or(f64::NAN),
            );
            if a.is_finite() && b.is_finite() {
                let diff = (a - b).abs();
                let rel = (b != 0.0).then(|| diff / b.abs());
                let close = diff <= tolerance.atol + tolerance.rtol * b.abs();
                (Some((diff, rel)), close)
            } else {
                // An infinity is close only to itself; a NaN only to a NaN, with `equal_nan`.
                let close = a == b || (a.is_nan() && b.is_nan() && tolerance.equal_nan);
                (close.then_some((0.0, None)), close)
            }
        }
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
        TensorData::new(
            name,
            DType::F32,
            vec![values.len() as u64],
            Bytes::from_vec(values.iter().flat_map(|v| v.to_ne_bytes()).collect()).unwrap(),
        )
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
            equal_nan: false,
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
    fn the_one_pass_check_reports_what_the_element_by_element_one_does() {
        // Close everywhere (the one pass answers), then one element out (element by element):
        // the same errors over the close elements either way.
        let reference: Vec<f64> = (0..1000).map(|i| f64::from(i) * 0.5 - 100.0).collect();
        let close: Vec<f64> = reference.iter().map(|v| v + 1e-9 * v.abs()).collect();
        let tol = Tolerance::default();
        let fast = verify_outputs(&[f64s("y", &reference)], &[f64s("y", &close)], tol);
        assert!(fast.passed());
        let slow = compare_as(
            &f64s("y", &reference),
            &f64s("y", &close),
            tol,
            |c: [u8; 8]| Value::F64(f64::from_ne_bytes(c)),
        );
        assert_eq!(fast.tensors[0], slow);
        let mut far = close.clone();
        far[999] = 1e9;
        let wrong = verify_outputs(&[f64s("y", &reference)], &[f64s("y", &far)], tol);
        assert_eq!(wrong.mismatches(), 1);
        assert_eq!(wrong.tensors[0].elements, 1000);
        assert_eq!(wrong.tensors[0].first_mismatch.as_ref().unwrap().index, 999);
        let nan = verify_outputs(
            &[f32s("y", &[1.0, f32::NAN])],
            &[f32s("y", &[1.0, 2.0])],
            tol,
        );
        assert_eq!(nan.nonfinite_mismatches(), 1);
    }

    /// A tensor large enough to be compared on several threads gets the answer the one-thread
    /// pass and the element-by-element account give: the same largest errors when close,
    /// and a mismatch in the last thread's part (the part boundaries are multiples of the
    /// lanes, the last part shorter) found.
    #[test]
    fn a_large_tensor_compared_on_threads_reports_what_one_thread_does() {
        let n = PARALLEL_MIN_BYTES / 4 * 3 + 5;
        assert!(
            n * 4 >= PARALLEL_MIN_BYTES,
            "large enough to be split where there are CPUs"
        );
        let reference: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25 - 50.0).collect();
        let close: Vec<f32> = reference
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if i % 7919 == 0 {
                    v + v.abs() * 1e-6
                } else {
                    *v
                }
            })
            .collect();
        let tol = Tolerance::default();
        let (want, got) = (f32s("y", &reference), f32s("y", &close));
        let value = |c: [u8; 4]| f64::from(f32::from_ne_bytes(c));
        let threaded = all_close(&want, &got, tol, value);
        let (w, _) = want.bytes.as_chunks::<4>();
        let (g, _) = got.bytes.as_chunks::<4>();
        assert_eq!(threaded, all_close_run(w, g, tol, value));
        let slow = compare_as(&want, &got, tol, |c: [u8; 4]| {
            Value::F32(f32::from_ne_bytes(c))
        });
        let (abs, rel) = threaded.unwrap();
        assert!(abs > 0.0, "the close elements differ");
        assert_eq!((abs, rel), (slow.max_abs_error, slow.max_rel_error));
        let mut far = close;
        far[n - 2] = 1e9;
        let wrong = verify_outputs(&[want], &[f32s("y", &far)], tol);
        assert_eq!(wrong.mismatches(), 1);
        assert_eq!(
            wrong.tensors[0].first_mismatch.as_ref().unwrap().index,
            n as u64 - 2
        );
    }

    /// Runs whose bytes equal the reference's take the byte-for-byte look, the others the
    /// arithmetic: together, the largest errors the element-by-element account gives; a NaN
    /// inside an equal run is still judged by the element rules.
    #[test]
    fn equal_and_differing_runs_give_the_element_by_element_answer() {
        let n = SAME_BYTES_RUN * 3 + 11;
        let reference: Vec<f32> = (0..n).map(|i| (i % 977) as f32 * 0.5 - 40.0).collect();
        let mut got = reference.clone();
        // The second run differs, and the last, short one, in its rest.
        got[SAME_BYTES_RUN + 5] += 1e-3;
        got[n - 3] += 5e-4;
        let tol = Tolerance::default();
        let (want, got) = (f32s("y", &reference), f32s("y", &got));
        let value = |c: [u8; 4]| f64::from(f32::from_ne_bytes(c));
        let (w, _) = want.bytes.as_chunks::<4>();
        let (g, _) = got.bytes.as_chunks::<4>();
        let fast = all_close_run(w, g, tol, value).expect("close everywhere");
        let slow = compare_as(&want, &got, tol, |c: [u8; 4]| {
            Value::F32(f32::from_ne_bytes(c))
        });
        assert!(fast.0 > 0.0, "{fast:?}");
        assert_eq!(fast, (slow.max_abs_error, slow.max_rel_error));
        let mut nan = reference;
        nan[7] = f32::NAN;
        let nan = [f32s("y", &nan)];
        assert!(!verify_outputs(&nan, &nan, tol).passed());
        let equal_nan = Tolerance {
            equal_nan: true,
            ..tol
        };
        assert!(verify_outputs(&nan, &nan, equal_nan).passed());
        // A tolerance that admits no zero error fails equal outputs, as the arithmetic does.
        let same = [f32s("y", &[0.0; SAME_BYTES_RUN])];
        for (atol, rtol) in [(-1.0, 0.0), (f64::NAN, 0.0), (0.0, f64::INFINITY)] {
            let never = Tolerance { atol, rtol, ..tol };
            assert!(!verify_outputs(&same, &same, never).passed(), "{never:?}");
        }
    }

    fn f64s(name: &str, values: &[f64]) -> TensorData {
        TensorData::new(
            name,
            DType::F64,
            vec![values.len() as u64],
            Bytes::from_vec(values.iter().flat_map(|v| v.to_ne_bytes()).collect()).unwrap(),
        )
    }

    #[test]
    fn nan_in_candidate_is_a_mismatch_reported_in_words() {
        let v = verify_outputs(
            &[f32s("y", &[1.0, 2.0])],
            &[f32s("y", &[1.0, f32::NAN])],
            Tolerance::default(),
        );
        assert!(!v.passed());
        assert_eq!((v.mismatches(), v.nonfinite_mismatches()), (1, 1));
        assert_eq!(v.max_abs_error(), f64::INFINITY);
        assert_eq!(v.max_rel_error(), f64::INFINITY);
        assert_eq!(
            v.summary(),
            "1 of 2 elements differ, 1 of them by NaN or inf, so the errors are not numbers \
             (first: y[1] is NaN, expected 2)"
        );
    }

    /// numpy.allclose([nan], [nan]) is False; with equal_nan=True it is True.
    #[test]
    fn nan_against_nan_needs_equal_nan() {
        let nan = [f64s("y", &[1.0, f64::NAN])];
        let v = verify_outputs(&nan, &nan, Tolerance::default());
        assert!(!v.passed());
        assert!(
            v.summary().contains("y[1] is NaN, expected NaN"),
            "{}",
            v.summary()
        );
        let equal_nan = Tolerance {
            equal_nan: true,
            ..Tolerance::default()
        };
        let v = verify_outputs(&nan, &nan, equal_nan);
        assert!(v.passed(), "{}", v.summary());
        assert_eq!((v.max_abs_error(), v.max_rel_error()), (0.0, 0.0));
        // equal_nan does not make a NaN close to a number, either way round.
        let number = [f64s("y", &[1.0, 5.0])];
        assert!(!verify_outputs(&nan, &number, equal_nan).passed());
        assert!(!verify_outputs(&number, &nan, equal_nan).passed());
    }

    #[test]
    fn infinities_equal_only_the_same_infinity() {
        let inf = [f32s("y", &[f32::INFINITY, f32::NEG_INFINITY])];
        assert!(verify_outputs(&inf, &inf, Tolerance::default()).passed());
        let flipped = [f32s("y", &[f32::NEG_INFINITY, f32::INFINITY])];
        assert!(!verify_outputs(&inf, &flipped, Tolerance::default()).passed());
        // FLT_MAX is no infinity, whatever the tolerance; both errors say so, consistently.
        let huge = Tolerance {
            rtol: 1.0,
            atol: f64::MAX,
            equal_nan: true,
        };
        let max = [f32s("y", &[f32::MAX, f32::NEG_INFINITY])];
        let v = verify_outputs(&inf, &max, huge);
        assert!(!v.passed());
        assert_eq!(
            (v.max_abs_error(), v.max_rel_error()),
            (f64::INFINITY, f64::INFINITY)
        );
        let summary = v.summary();
        assert!(!summary.contains("0.000e0"), "{summary}");
        assert_eq!(
            summary,
            "1 of 2 elements differ, 1 of them by NaN or inf, so the errors are not numbers \
             (first: y[0] is 3.4028235e38, expected inf)"
        );
        // And the other way round: an infinity where the reference is finite.
        let v = verify_outputs(&max, &inf, huge);
        assert!(!v.passed());
        assert!(
            v.summary().contains("y[0] is inf, expected 3.4028235e38"),
            "{}",
            v.summary()
        );
    }

    /// numpy's asymmetric form: the tolerance scales with the reference, not the candidate.
    #[test]
    fn the_reference_scales_the_tolerance() {
        let half = Tolerance {
            rtol: 0.5,
            atol: 0.0,
            equal_nan: false,
        };
        // |1 - 0.5| = 0.5 > 0.5 * |0.5| with 0.5 the reference…
        assert!(!verify_outputs(&[f64s("y", &[0.5])], &[f64s("y", &[1.0])], half).passed());
        // …and <= 0.5 * |1| with 1 the reference.
        assert!(verify_outputs(&[f64s("y", &[1.0])], &[f64s("y", &[0.5])], half).passed());
    }

    #[test]
    fn finite_errors_are_numbers_in_the_text() {
        let v = verify_outputs(
            &[f32s("y", &[100.0, 0.0])],
            &[f32s("y", &[102.0, 0.0])],
            Tolerance::default(),
        );
        assert_eq!(
            v.summary(),
            "max abs error 2.000e0, max rel error 2.000e-2, 1 of 2 elements differ (first: y[0] \
             is 102, expected 100)"
        );
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

    fn i64s(values: &[i64]) -> TensorData {
        TensorData::new(
            "n",
            DType::I64,
            vec![values.len() as u64],
            Bytes::from_vec(values.iter().flat_map(|v| v.to_ne_bytes()).collect()).unwrap(),
        )
    }

    #[test]
    fn integers_compare_exactly_whatever_the_tolerance() {
        let exact = Tolerance {
            rtol: 0.0,
            atol: 0.0,
            equal_nan: false,
        };
        assert!(verify_outputs(&[i64s(&[5])], &[i64s(&[5])], exact).passed());
        assert!(!verify_outputs(&[i64s(&[5])], &[i64s(&[6])], exact).passed());
        // Off by one at 2^60: the same f64, but not the same integer; default tolerance or not.
        let big = 1i64 << 60;
        for tolerance in [exact, Tolerance::default()] {
            let v = verify_outputs(&[i64s(&[big, 0])], &[i64s(&[big + 1, 0])], tolerance);
            assert!(!v.passed());
            assert_eq!(v.max_abs_error(), 1.0);
            assert_eq!(
                v.summary(),
                format!(
                    "max abs error 1.000e0, max rel error 8.674e-19, 1 of 2 elements differ \
                     (first: n[0] is {}, expected {big})",
                    big + 1
                )
            );
        }
        // The extremes do not overflow.
        let v = verify_outputs(&[i64s(&[i64::MIN])], &[i64s(&[i64::MAX])], exact);
        assert_eq!(v.max_abs_error(), 2f64.powi(64));
    }
}
