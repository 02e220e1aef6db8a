//! Large inputs made once per pool: a request's big generated tensors (random or ones) are
//! filled once in the parent, in shared memory, and every worker maps that buffer
//! copy-on-write ([`TensorSpec::contents`]) instead of generating and faulting in its own copy
//! for every window.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tunebox_protocol::{BenchmarkRequest, DType, Init, SharedBuffer, TensorSpec};

/// Inputs of at least this many bytes are made once per pool: past any core's own cache (L2,
/// at most a few MiB per core), where a kernel streams them and which physical pages hold them
/// moves its time little (the main job's matmul, 1 MiB tensors, on 8 placements: within 2-5 %,
/// as much as the noise of its windows), and large enough that a worker's own pass of the
/// generator and the fresh pages it fills cost far more than mapping the pool's copy (16 MiB of
/// random bytes: ~10-15 ms to generate and fault in huge pages, against ~2 ms to map 4,096
/// shared pages). With 64 MiB, the histogram job (a 32 MiB input) made it in every window: 11.3-11.9 s
/// against 7.9-8.9 s with 16 MiB (2 + 2 runs interleaved, 2-vCPU EPYC guest).
pub const SHARED_INPUT_MIN_BYTES: u64 = 16 << 20;

/// Most inputs a pool keeps.
const MAX_INPUTS: usize = 16;

/// What identifies a made input: what determines its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    dtype: DType,
    bytes: u64,
    /// `None`: ones; `Some(seed)`: random.
    seed: Option<u64>,
}

impl Key {
    /// The key of `spec` when it is an input worth making once: not an output, not reset
    /// before every call (the kernel writes those), generated (random or ones), and large.
    fn of(spec: &TensorSpec) -> Option<Key> {
        if spec.output || spec.reset {
            return None;
        }
        let seed = match spec.init {
            Init::Random { seed } => Some(seed),
            Init::Ones => None,
            Init::Zeros | Init::Data(_) => return None,
        };
        let bytes = spec.byte_len()?;
        (bytes >= SHARED_INPUT_MIN_BYTES).then_some(Key {
            dtype: spec.dtype,
            bytes,
            seed,
        })
    }
}

/// The inputs a pool made, by what they hold; bounded by [`MAX_INPUTS`] and a quarter of the
/// machine's memory, beyond which workers make their own.
pub(crate) struct Contents {
    made: Mutex<Made>,
    max_bytes: u64,
}

#[derive(Default)]
struct Made {
    buffers: HashMap<Key, SharedBuffer>,
    bytes: u64,
}

impl Contents {
    pub(crate) fn new() -> Contents {
        Contents {
            made: Mutex::default(),
            max_bytes: tunebox_protocol::physical_memory_bytes().map_or(4 << 30, |m| m / 4),
        }
    }

    /// Gives every large generated input of `request` its contents (and, for a request that
    /// makes a call on fresh inputs, its fresh contents), made on the first request that needs
    /// them (one pass of the generator each, in parallel, before the request is queued) and
    /// shared by every later one. An input that cannot be made (out of memory, over the bound) is
    /// left to its worker, as without this.
    pub(crate) fn attach(&self, request: &mut BenchmarkRequest) {
        if !cfg!(target_os = "linux") {
            return; // Workers map contents copy-on-write on Linux only.
        }
        // The inputs of the last verification call too, when the request makes one: it has
        // a fresh seed and outputs to return.
        let fresh_seed = request
            .timing
            .fresh_seed
            .filter(|_| request.tensors.iter().any(|t| request.returns(t)));
        let wanted: Vec<(usize, bool, TensorSpec)> = request
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, spec)| Key::of(spec).is_some())
            .flat_map(|(i, spec)| {
                let fresh = fresh_seed.and_then(|f| spec.fresh_input(f));
                std::iter::once((i, false, spec.clone())).chain(fresh.map(|f| (i, true, f)))
            })
            .collect();
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        self.make_missing(&mut made, wanted.iter().map(|(_, _, spec)| spec));
        for (i, fresh, spec) in wanted {
            let contents = Key::of(&spec)
                .and_then(|key| made.buffers.get(&key))
                .map(SharedBuffer::share);
            let tensor = &mut request.tensors[i];
            if fresh {
                tensor.fresh_contents = contents;
            } else {
                tensor.contents = contents;
            }
        }
    }

    /// Makes the contents of every spec of `specs` not made yet, as far as the bounds allow,
    /// each on a thread of its own (the generator is one sequential stream per tensor, but
    /// tensors are independent). One that cannot be made is left to its worker.
    fn make_missing<'s>(&self, made: &mut Made, specs: impl Iterator<Item = &'s TensorSpec>) {
        let mut missing: Vec<(Key, &TensorSpec)> = Vec::new();
        let mut bytes = made.bytes;
        for spec in specs {
            let Some(key) = Key::of(spec) else { continue };
            if made.buffers.contains_key(&key) || missing.iter().any(|(k, _)| *k == key) {
                continue;
            }
            if made.buffers.len() + missing.len() >= MAX_INPUTS
                || bytes + key.bytes > self.max_bytes
            {
                continue;
            }
            bytes += key.bytes;
            missing.push((key, spec));
        }
        let results: Vec<_> = std::thread::scope(|scope| {
            let threads: Vec<_> = missing
                .iter()
                .map(|(_, spec)| scope.spawn(|| spec.make_contents()))
                .collect();
            threads.into_iter().map(|t| t.join()).collect()
        });
        for ((key, spec), result) in missing.into_iter().zip(results) {
            match result {
                Ok(Ok(buffer)) => {
                    made.bytes += key.bytes;
                    made.buffers.insert(key, buffer);
                }
                Ok(Err(e)) => log::warn!("tensor `{}` left to its worker: {e}", spec.name),
                Err(_) => log::warn!(
                    "tensor `{}` left to its worker: its maker panicked",
                    spec.name
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{DiagnosticTask, Kernel};

    const BIG: u64 = SHARED_INPUT_MIN_BYTES / 4;

    fn request(tensors: Vec<TensorSpec>) -> BenchmarkRequest {
        let mut request = BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Checksum));
        request.tensors = tensors;
        request
    }

    #[test]
    fn large_generated_inputs_are_made_once_and_shared() {
        let contents = Contents::new();
        let tensors = vec![
            TensorSpec::new("a", DType::F32, [BIG]).random(3),
            TensorSpec::new("b", DType::F32, [BIG]).ones(),
            TensorSpec::new("small", DType::F32, [1024]).random(3),
            TensorSpec::new("zeros", DType::F32, [BIG]),
            TensorSpec::new("out", DType::F32, [BIG]).random(3).output(),
            TensorSpec::new("acc", DType::F32, [BIG]).random(3).reset(),
        ];
        let mut first = request(tensors.clone());
        contents.attach(&mut first);
        let given: Vec<bool> = first.tensors.iter().map(|t| t.contents.is_some()).collect();
        assert_eq!(given, [true, true, false, false, false, false]);
        let a = first.tensors[0].contents.as_ref().unwrap();
        assert_eq!(&a[..], tensors[0].make_contents().unwrap().as_slice());
        let mut second = request(tensors);
        contents.attach(&mut second);
        let again = second.tensors[0].contents.as_ref().unwrap();
        assert_eq!(a.id(), again.id(), "made once, shared by every request");
        assert_eq!(
            first, second,
            "equality ignores where the contents come from"
        );
    }

    #[test]
    fn the_fresh_inputs_of_the_last_call_are_made_once_too() {
        let contents = Contents::new();
        let a = TensorSpec::new("a", DType::F32, [BIG]).random(3);
        let mut first = request(vec![
            a.clone(),
            TensorSpec::new("b", DType::F32, [BIG]).ones(),
        ]);
        first.timing.fresh_seed = Some(77);
        // Without outputs there is no call on fresh inputs: nothing fresh is made.
        let mut no_outputs = first.clone();
        contents.attach(&mut no_outputs);
        assert!(no_outputs.tensors[0].contents.is_some());
        assert!(no_outputs.tensors[0].fresh_contents.is_none());
        first
            .tensors
            .push(TensorSpec::new("c", DType::F32, [4]).output());
        contents.attach(&mut first);
        let fresh = first.tensors[0].fresh_contents.as_ref().unwrap();
        let expected = a.fresh_input(77).unwrap().make_contents().unwrap();
        assert_eq!(&fresh[..], expected.as_slice());
        assert!(
            first.tensors[1].fresh_contents.is_none(),
            "ones are not drawn again"
        );
        let mut second = first.clone();
        second.tensors[0].fresh_contents = None;
        contents.attach(&mut second);
        assert_eq!(
            second.tensors[0].fresh_contents.as_ref().unwrap().id(),
            fresh.id()
        );
    }

    #[test]
    fn another_seed_is_another_input() {
        let contents = Contents::new();
        let mut request = request(vec![
            TensorSpec::new("a", DType::F32, [BIG]).random(1),
            TensorSpec::new("b", DType::F32, [BIG]).random(2),
        ]);
        contents.attach(&mut request);
        let ids: Vec<u64> = request
            .tensors
            .iter()
            .map(|t| t.contents.as_ref().unwrap().id())
            .collect();
        assert_ne!(ids[0], ids[1]);
    }
}
