//! Timed reps on varied inputs, some of them checked (`TimingConfig::varied_reps`,
//! docs/sandbox.md): what a backend does around each rep so that no rep is safe to skip. Shared
//! by the backends, so that a candidate and its reference vary their inputs the same way.

use tunebox_protocol::{BenchError, Bytes, CheckedRep, TensorData, TensorSpec, TimingConfig};

use crate::HostTensor;

/// A varied tensor to put back: its index, then `0` and no bytes (the whole tensor was drawn
/// again: [`HostTensor::reset`] puts it back). The shape of a block's offset and old bytes,
/// what a varied rep changed before every element was.
type Saved = (usize, usize, Vec<u8>);

/// A backend's reps on varied inputs: the seed and the bytes to put back of the rep under way,
/// which reps are checked, and where every rep's outputs are copied.
///
/// Every rep ends the same way, checked or not: its outputs are copied into buffers allocated
/// (and written through) before the first call, a checked rep's into a slot of its own, any
/// other's into a spare. Keeping only the checked reps' outputs would make those reps' ends
/// differ (a copy, an allocation, for outputs over 16 KiB a shared-memory region with its file
/// descriptor and mapping), and a candidate looking at the clock or at `/proc/self` on its next
/// call would know which reps had been checked, and once it had seen them all, that the rest
/// were safe to skip. The outputs become [`TensorData`] (shared memory where large) only after
/// the reps ([`VariedReps::into_checked`]).
#[derive(Debug)]
pub struct VariedReps {
    /// At most this many reps are checked.
    checked: u32,
    /// The seed of the rep under way.
    current: Option<u64>,
    /// Tensors varied and not yet put back ([`VariedReps::put_back`]): a rep's inputs stay
    /// drawn until the next rep draws them again (the same tensors: those of `specs` that
    /// vary), not put back in between.
    varied: Vec<usize>,
    /// The output tensors: their index among the request's tensors, and their spec.
    outputs: Vec<(usize, TensorSpec)>,
    /// One buffer per output for each of the `checked` slots, then one more set: the spare.
    slots: Vec<Vec<Vec<u8>>>,
    /// For each checked slot, the rep and seed whose outputs it holds.
    filled: Vec<Option<(u32, u64)>>,
}

impl VariedReps {
    /// The varied reps `timing` asks for, for the tensors of `specs` (in request order);
    /// `None` when it asks for none. Allocates and writes the buffers every rep's outputs will
    /// be copied into: `checked + 1` copies of the outputs.
    pub fn new(timing: &TimingConfig, specs: &[TensorSpec]) -> Option<VariedReps> {
        // Checked reps return outputs: a request that returns none checks none.
        let varied = timing.varied_reps.filter(|_| timing.return_outputs)?;
        let outputs: Vec<(usize, TensorSpec)> = specs
            .iter()
            .enumerate()
            .filter(|(_, spec)| spec.output)
            .map(|(i, spec)| (i, spec.clone()))
            .collect();
        // Written through now (a non-zero fill touches every page), so that copying into a
        // checked slot and into the spare cost the same: no slot faults its pages in later.
        let set = || {
            outputs
                .iter()
                .map(|(_, spec)| vec![0xA5u8; byte_len(spec)])
                .collect::<Vec<_>>()
        };
        Some(VariedReps {
            checked: varied.checked,
            current: None,
            slots: (0..=varied.checked).map(|_| set()).collect(),
            filled: vec![None; varied.checked as usize],
            outputs,
            varied: Vec::new(),
        })
    }

    /// Varies the next rep's inputs: every randomly initialized input of `specs` drawn again
    /// with a seed from the operating system's randomness (a candidate in this process cannot
    /// know it before the rep). Call it before the rep; after the reps,
    /// [`VariedReps::put_back`] puts the inputs back.
    pub fn vary(&mut self, specs: &[TensorSpec], tensors: &mut [HostTensor]) {
        let seed = random_u64();
        self.varied = vary_with(specs, tensors, seed)
            .into_iter()
            .map(|(i, _, _)| i)
            .collect();
        self.current = Some(seed);
    }

    /// Puts back the inputs the reps varied (their initial contents: a copy-on-write input
    /// reads the caller's pages again). Call it after the last rep, before any call on the
    /// request's own inputs.
    pub fn put_back(&mut self, tensors: &mut [HostTensor]) {
        for i in self.varied.drain(..) {
            if let Some(tensor) = tensors.get_mut(i) {
                tensor.reset();
            }
        }
    }

    /// Ends rep `rep` (from 0): copies the outputs out (into a checked slot when the rep is
    /// kept for checking, else into the spare: the same work either way). Its inputs stay as
    /// drawn: the next rep draws every one again, and [`VariedReps::put_back`] puts them back
    /// after the last (putting back after every rep would cost a pass over them, and a
    /// copy-on-write input's page faults, each rep). Which reps are kept is drawn by reservoir
    /// sampling as each rep ends (`keep_in_slot`): however many reps run in the end (a budget
    /// can re-plan them while they run), each is as likely as any other to be among the
    /// `checked` kept, and nothing told a kept rep from another while it ran. `planned` (the
    /// reps planned when this rep ran) is not needed for that and is ignored. (Out-of-bounds
    /// writes are the caller's to look for, after the reps: looking after the checked reps only
    /// would set them apart.)
    pub fn end_rep(&mut self, rep: u32, planned: u32, tensors: &mut [HostTensor]) {
        let _ = planned;
        let Some(seed) = self.current.take() else {
            return;
        };
        let slot = keep_in_slot(self.checked, rep);
        let spare = self.slots.len() - 1;
        let buffers = &mut self.slots[slot.unwrap_or(spare)];
        for (buffer, (i, _)) in buffers.iter_mut().zip(&self.outputs) {
            let bytes = tensors[*i].bytes();
            if buffer.len() == bytes.len() {
                buffer.copy_from_slice(bytes);
            }
        }
        if let Some(slot) = slot {
            self.filled[slot] = Some((rep, seed));
        }
    }

    /// The checked reps, in the order they ran; none when the request has no outputs (a
    /// round's window varies its inputs and checks nothing).
    ///
    /// # Errors
    ///
    /// [`BenchError::Failed`] when a shared-memory region for large outputs cannot be made.
    pub fn into_checked(self) -> Result<Vec<CheckedRep>, BenchError> {
        if self.outputs.is_empty() {
            return Ok(Vec::new());
        }
        let mut filled: Vec<(usize, u32, u64)> = self
            .filled
            .iter()
            .enumerate()
            .filter_map(|(slot, f)| f.map(|(rep, seed)| (slot, rep, seed)))
            .collect();
        filled.sort_by_key(|&(_, rep, _)| rep);
        let mut slots = self.slots;
        filled
            .into_iter()
            .map(|(slot, _, seed)| {
                let buffers = std::mem::take(&mut slots[slot]);
                let outputs = buffers
                    .into_iter()
                    .zip(&self.outputs)
                    .map(|(bytes, (_, spec))| tensor_data(spec, bytes))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(CheckedRep::new(seed, outputs))
            })
            .collect()
    }
}

/// Bytes of the tensor of `spec` (0 when its size overflows: such a tensor is never allocated).
fn byte_len(spec: &TensorSpec) -> usize {
    spec.byte_len()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

/// `bytes` as the output `spec` names, in shared memory when large.
fn tensor_data(spec: &TensorSpec, bytes: Vec<u8>) -> Result<TensorData, BenchError> {
    let bytes = Bytes::from_vec(bytes).map_err(|e| BenchError::Failed {
        message: format!("cannot return output `{}` of a checked rep: {e}", spec.name),
    })?;
    Ok(TensorData::new(
        spec.name.clone(),
        spec.dtype,
        spec.shape.clone(),
        bytes,
    ))
}

/// Varies `tensors` (of `specs`, in order) with `seed`: every randomly initialized input drawn
/// again ([`TensorSpec::vary_into`]). Returns, for each tensor varied, its index, `0` and no
/// bytes ([`HostTensor::reset`] puts it back). What a reference's call on a checked rep's inputs
/// does with that rep's seed.
pub fn vary_with(specs: &[TensorSpec], tensors: &mut [HostTensor], seed: u64) -> Vec<Saved> {
    let mut saved = Vec::new();
    for (i, (spec, tensor)) in specs.iter().zip(tensors.iter_mut()).enumerate() {
        // Only those drawn again are written (a mutable access copies a mapped tensor).
        if spec.varies() && spec.vary_into(seed, tensor.bytes_mut()) {
            saved.push((i, 0, Vec::new()));
        }
    }
    saved
}

/// The checked slot rep `rep` (from 0) goes into, if it is kept: reservoir sampling (Vitter's
/// algorithm R) over `checked` slots. The first `checked` reps fill them; rep `i` after them
/// replaces a slot at random with probability `checked / (i + 1)`. After any number of reps,
/// each is kept with the same probability.
fn keep_in_slot(checked: u32, rep: u32) -> Option<usize> {
    if rep < checked {
        return Some(rep as usize);
    }
    let drawn = random_u64() % (u64::from(rep) + 1);
    (drawn < u64::from(checked)).then_some(drawn as usize)
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

    /// Each rep's random inputs are drawn again in every element, anew for every rep, and put
    /// back after the reps; the picked reps keep their seed and outputs, and varying the same
    /// inputs with a kept seed gives the inputs that rep ran on.
    #[test]
    fn reps_vary_their_random_inputs_and_the_picked_ones_are_kept() {
        let specs = specs();
        let mut tensors: Vec<HostTensor> = specs
            .iter()
            .map(|s| HostTensor::allocate(s).unwrap())
            .collect();
        let pristine: Vec<Vec<u8>> = tensors.iter().map(|t| t.bytes().to_vec()).collect();
        let timing = TimingConfig::default().varied_reps(Some(Asked::new(2)));
        let mut varied = VariedReps::new(&timing, &specs).unwrap();
        let mut seen = Vec::new();
        for rep in 0..5 {
            varied.vary(&specs, &mut tensors);
            assert_ne!(tensors[0].bytes(), &pristine[0][..], "x varied");
            assert_eq!(tensors[1].bytes(), &pristine[1][..], "constants are not");
            seen.push(tensors[0].bytes().to_vec());
            // The "kernel": y = x.
            let x = tensors[0].bytes().to_vec();
            tensors[2].bytes_mut().copy_from_slice(&x);
            varied.end_rep(rep, 5, &mut tensors);
        }
        varied.put_back(&mut tensors);
        assert_eq!(
            tensors[0].bytes(),
            &pristine[0][..],
            "put back after the reps"
        );
        // No element of a rep's input repeats the last rep's or the request's in the same
        // place (but by chance: 2^-23 for an f32 in [-1, 1)), so that a kernel recomputing
        // only what changed since its last call recomputes everything.
        let same =
            |a: &[u8], b: &[u8]| a.chunks(4).zip(b.chunks(4)).filter(|(p, q)| p == q).count();
        for pair in seen.windows(2) {
            assert!(
                same(&pair[0], &pair[1]) < 4,
                "a new draw of every element every rep"
            );
        }
        assert!(seen.iter().all(|s| same(s, &pristine[0]) < 4));
        let checked = varied.into_checked().unwrap();
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
    fn no_more_reps_are_kept_than_ran_and_every_rep_is_as_likely_to_be_kept() {
        // Fewer reps than slots: every one kept, each in its own slot.
        assert_eq!(keep_in_slot(3, 0), Some(0));
        assert_eq!(keep_in_slot(3, 2), Some(2));
        assert_eq!(keep_in_slot(0, 0), None);
        // 2 of 20 reps kept, 20,000 times: each rep kept ~2,000 times, the late reps (which a
        // plan made on a slow first call may not have counted) as often as the early ones.
        let (checked, reps, trials) = (2u32, 20u32, 20_000u32);
        let mut kept = vec![0u32; reps as usize];
        for _ in 0..trials {
            let mut slots = vec![None; checked as usize];
            for rep in 0..reps {
                if let Some(slot) = keep_in_slot(checked, rep) {
                    slots[slot] = Some(rep);
                }
            }
            for rep in slots.into_iter().flatten() {
                kept[rep as usize] += 1;
            }
        }
        let expected = f64::from(trials * checked) / f64::from(reps);
        for (rep, &n) in kept.iter().enumerate() {
            // Binomial(20,000, 0.1): sd ~42, so 20 % is ~9 sd (a right rule fails about never);
            // a rule that keeps only reps planned early keeps the others 0 times.
            assert!(
                (f64::from(n) - expected).abs() < 0.2 * expected,
                "rep {rep} kept {n} times, expected ~{expected}: {kept:?}"
            );
        }
    }
}
