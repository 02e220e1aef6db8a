//! Large inputs made once per pool: a request's big generated tensors (random or ones) are
//! filled once in the parent, in shared memory, and every worker maps that buffer
//! copy-on-write ([`TensorSpec::contents`]) instead of generating and faulting in its own copy
//! for every window.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tunebox_protocol::{BenchmarkRequest, DType, Init, SharedBuffer, TensorSpec};

/// Inputs of at least this many bytes are made once per pool: well past any last-level
/// cache, so that the physical pages they share between workers average out (and with them
/// the cache sets their lines fall in), and large enough that a worker's own pass of the
/// generator and its fresh pages cost more than mapping the pool's copy (64 MiB of random
/// floats: about 60 ms to generate, 16,384 pages to fault in).
pub const SHARED_INPUT_MIN_BYTES: u64 = 64 << 20;

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
    /// before every call (the kernel writes those), generated (random or ones), large, and not
    /// given contents already.
    fn of(spec: &TensorSpec) -> Option<Key> {
        if spec.output || spec.reset || spec.contents.is_some() {
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
            max_bytes: physical_memory_bytes().map_or(4 << 30, |m| m / 4),
        }
    }

    /// Gives every large generated input of `request` its contents, made on the first
    /// request that needs them (one pass of the generator, in the calling thread) and shared
    /// by every later one. An input that cannot be made (out of memory, over the bound) is
    /// left to its worker, as without this.
    pub(crate) fn attach(&self, request: &mut BenchmarkRequest) {
        if !cfg!(target_os = "linux") {
            return; // Workers map contents copy-on-write on Linux only.
        }
        for spec in &mut request.tensors {
            let Some(key) = Key::of(spec) else { continue };
            let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
            if !made.buffers.contains_key(&key) {
                if made.buffers.len() >= MAX_INPUTS || made.bytes + key.bytes > self.max_bytes {
                    continue;
                }
                match spec.make_contents() {
                    Ok(buffer) => {
                        made.bytes += key.bytes;
                        made.buffers.insert(key.clone(), buffer);
                    }
                    Err(e) => {
                        log::warn!("tensor `{}` left to its worker: {e}", spec.name);
                        continue;
                    }
                }
            }
            spec.contents = made.buffers.get(&key).map(SharedBuffer::share);
        }
    }
}

/// Total physical memory from `/proc/meminfo`, or `None` where it cannot be read.
fn physical_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
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
        assert_eq!(&a[..], &*tensors[0].make_contents().unwrap().as_slice());
        let mut second = request(tensors);
        contents.attach(&mut second);
        let again = second.tensors[0].contents.as_ref().unwrap();
        assert_eq!(a.id(), again.id(), "made once, shared by every request");
        assert_eq!(first, second, "equality ignores where the contents come from");
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
