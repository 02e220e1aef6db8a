//! Timed reps on varied inputs, some of them checked (`TimingConfig::varied_reps`,
//! docs/sandbox.md): what a backend does around each rep so that no rep is safe to skip. Shared
//! by the backends, so that a candidate and its reference vary their inputs the same way.

use tunebox_protocol::{BenchError, CheckedRep, TensorData, TensorSpec, TimingConfig};

use crate::HostTensor;

/// A varied block to put back: the tensor's index, the block's byte offset, the bytes it held.
type Saved = (usize, usize, Vec<u8>);

/// A backend's reps on varied inputs: the seed and the bytes to put back of the rep under way,
/// which reps are checked, and the outputs kept of those that were.
#[derive(Debug)]
pub struct VariedReps {
    /// At most this many reps are checked.
    checked: u32,
    /// The reps picked for checking, once the number of reps is known.
    picked: Option<Vec<u32>>,
    /// The rep under way: its seed, and for each varied tensor its index, the block's offset
    /// and the bytes the block held before.
    current: Option<(u64, Vec<Saved>)>,
    kept: Vec<CheckedRep>,
}

impl VariedReps {
    /// The varied reps `timing` asks for; `None` when it asks for none.
    pub fn new(timing: &TimingConfig) -> Option<VariedReps> {
        let varied = timing.varied_reps?;
        Some(VariedReps {
            checked: varied.checked,
            picked: None,
            current: None,
            kept: Vec::new(),
        })
    }

    /// Varies the next rep's inputs: a block of every randomly initialized input of `specs`
    /// drawn again with a seed from the operating system's randomness (a candidate in this
    /// process cannot know it before the rep). Call it after the tensors were restored and
    /// before the rep; [`VariedReps::end_rep`] puts the blocks back.
    pub fn vary(&mut self, specs: &[TensorSpec], tensors: &mut [HostTensor]) {
        let seed = random_u64();
        let saved = vary_with(specs, tensors, seed);
        self.current = Some((seed, saved));
    }

    /// Ends rep `rep` (from 0) of about `planned`: when it is one of those picked for checking
    /// (picked at random among the first `planned`, once, at the first rep's end), keeps its
    /// seed and `outputs(tensors)` (unless there are none); then puts the varied blocks back.
    ///
    /// # Errors
    ///
    /// `outputs`' error (copying the outputs failed).
    pub fn end_rep(
        &mut self,
        rep: u32,
        planned: u32,
        tensors: &mut [HostTensor],
        outputs: impl FnOnce(&[HostTensor]) -> Result<Vec<TensorData>, BenchError>,
    ) -> Result<(), BenchError> {
        let Some((seed, saved)) = self.current.take() else {
            return Ok(());
        };
        let checked = self.checked;
        let picked = self
            .picked
            .get_or_insert_with(|| pick(checked, planned.max(1)));
        let result = if picked.contains(&rep) {
            outputs(tensors).map(|outputs| {
                // A window that returns no outputs varies its inputs and checks nothing.
                if !outputs.is_empty() {
                    self.kept.push(CheckedRep::new(seed, outputs));
                }
            })
        } else {
            Ok(())
        };
        for (i, offset, bytes) in saved {
            tensors[i].bytes_mut()[offset..offset + bytes.len()].copy_from_slice(&bytes);
        }
        result
    }

    /// The checked reps, in the order they ran.
    pub fn into_checked(self) -> Vec<CheckedRep> {
        self.kept
    }
}

/// Varies `tensors` (of `specs`, in order) with `seed`: each randomly initialized input's block
/// ([`TensorSpec::varied_block`]) written in. Returns, for each tensor varied, its index, the
/// block's offset and the bytes it held before. What a reference's call on a checked rep's
/// inputs does with that rep's seed.
pub fn vary_with(specs: &[TensorSpec], tensors: &mut [HostTensor], seed: u64) -> Vec<Saved> {
    let mut saved = Vec::new();
    for (i, (spec, tensor)) in specs.iter().zip(tensors.iter_mut()).enumerate() {
        let Some((offset, block)) = spec.varied_block(seed) else {
            continue;
        };
        if offset + block.len() > tensor.len() {
            continue;
        }
        let bytes = &mut tensor.bytes_mut()[offset..offset + block.len()];
        saved.push((i, offset, bytes.to_vec()));
        bytes.copy_from_slice(&block);
    }
    saved
}

/// `checked` distinct reps of `0..planned` (all of them when there are fewer), at random.
fn pick(checked: u32, planned: u32) -> Vec<u32> {
    let mut reps: Vec<u32> = (0..planned).collect();
    let take = (checked as usize).min(reps.len());
    for i in 0..take {
        let j = i + (random_u64() % (reps.len() - i) as u64) as usize;
        reps.swap(i, j);
    }
    reps.truncate(take);
    reps
}

/// 64 bits from the operating system's randomness (`getrandom(2)`), or from the clock where
/// that fails.
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` is a valid, writable buffer of 8 bytes; `getrandom` writes at most that.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got == 8 {
        return u64::from_ne_bytes(bytes);
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{DType, TimingConfig, VariedReps as Asked};

    fn specs() -> Vec<TensorSpec> {
        vec![
            TensorSpec::new("x", DType::F32, [1 << 12]).random(3),
            TensorSpec::new("ones", DType::F32, [64]).ones(),
            TensorSpec::new("y", DType::F32, [1 << 12]).output(),
        ]
    }

    /// Each rep's inputs differ from the request's in one block of every random input, drawn
    /// anew for every rep and put back after it; the picked reps keep their seed and outputs,
    /// and varying the same inputs with a kept seed gives the inputs that rep ran on.
    #[test]
    fn reps_vary_their_random_inputs_and_the_picked_ones_are_kept() {
        let specs = specs();
        let mut tensors: Vec<HostTensor> = specs
            .iter()
            .map(|s| HostTensor::allocate(s).unwrap())
            .collect();
        let pristine: Vec<Vec<u8>> = tensors.iter().map(|t| t.bytes().to_vec()).collect();
        let timing = TimingConfig::default().varied_reps(Some(Asked::new(2)));
        let mut varied = VariedReps::new(&timing).unwrap();
        let mut seen = Vec::new();
        for rep in 0..5 {
            varied.vary(&specs, &mut tensors);
            assert_ne!(tensors[0].bytes(), &pristine[0][..], "x varied");
            assert_eq!(tensors[1].bytes(), &pristine[1][..], "constants are not");
            seen.push(tensors[0].bytes().to_vec());
            // The "kernel": y = x.
            let x = tensors[0].bytes().to_vec();
            tensors[2].bytes_mut().copy_from_slice(&x);
            varied
                .end_rep(rep, 5, &mut tensors, |t| Ok(vec![t[2].to_data()?]))
                .unwrap();
            assert_eq!(tensors[0].bytes(), &pristine[0][..], "put back");
        }
        assert!(
            seen.windows(2).all(|w| w[0] != w[1]),
            "a new variation every rep"
        );
        let checked = varied.into_checked();
        assert_eq!(checked.len(), 2);
        for rep in checked {
            let mut again: Vec<HostTensor> = specs
                .iter()
                .map(|s| HostTensor::allocate(s).unwrap())
                .collect();
            vary_with(&specs, &mut again, rep.seed);
            assert_eq!(&rep.outputs[0].bytes[..], again[0].bytes());
        }
    }

    #[test]
    fn no_more_reps_are_picked_than_ran() {
        assert_eq!(pick(2, 1), [0]);
        let mut three = pick(3, 3);
        three.sort_unstable();
        assert_eq!(three, [0, 1, 2]);
        assert!(pick(0, 10).is_empty());
    }
}
