//! The tensors put back before every call after the first, as triton's `restore_value` and
//! `reset_to_zero`: the same rule for every backend.

use tunebox_protocol::TensorSpec;

/// The tensors a backend restores before every call after the first, by index: the `reset`
/// ones (the request asks for it), then the inputs the first call wrote (a kernel must not
/// change its inputs; restoring them keeps the measurement of unchanged data, and the result
/// lists them as `mutated_inputs`).
///
/// ```
/// use tunebox_bench::Restore;
/// use tunebox_protocol::{DType, TensorSpec};
///
/// let specs = [
///     TensorSpec::new("acc", DType::F32, [4]).reset(),
///     TensorSpec::new("x", DType::F32, [4]),
///     TensorSpec::new("y", DType::F32, [4]).output(),
/// ];
/// let mut restore = Restore::resets(&specs);
/// assert_eq!(restore.indices(), [0]);
/// // The first call wrote `x` (an input) and `y` (an output, which is not restored).
/// let written = restore.add_written_inputs(&specs, |i| Ok::<_, ()>(i != 0))?;
/// assert_eq!(written, ["x"]);
/// assert_eq!(restore.indices(), [0, 1]);
/// # Ok::<(), ()>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restore {
    indices: Vec<usize>,
}

impl Restore {
    /// The `reset` tensors of `specs`.
    pub fn resets(specs: &[TensorSpec]) -> Restore {
        Restore {
            indices: specs
                .iter()
                .enumerate()
                .filter(|(_, spec)| spec.reset)
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// Adds every input (neither `output` nor `reset`) for which `wrote(index)` says the first
    /// call changed its tensor, and returns their names (the result's `mutated_inputs`).
    ///
    /// # Errors
    ///
    /// The first error of `wrote` (reading a device tensor back can fail).
    pub fn add_written_inputs<E>(
        &mut self,
        specs: &[TensorSpec],
        mut wrote: impl FnMut(usize) -> Result<bool, E>,
    ) -> Result<Vec<String>, E> {
        let mut names = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            if !spec.output && !spec.reset && wrote(i)? {
                self.indices.push(i);
                names.push(spec.name.clone());
            }
        }
        Ok(names)
    }

    /// The tensors to restore, in order: the `reset` ones, then the written inputs.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}
