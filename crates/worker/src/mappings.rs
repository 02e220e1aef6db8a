//! Mappings of the caller's shared buffers, kept across requests.

use std::collections::VecDeque;

use tunebox_protocol::{BenchmarkRequest, Init, SharedData};

/// Most buffers whose mappings a worker keeps.
const MAX_BUFFERS: usize = 8;
/// Most bytes of buffers whose mappings a worker keeps.
const MAX_BYTES: usize = 512 << 20;

/// The mappings of the shared buffers this worker saw last, by buffer id.
///
/// Every request maps the buffers it carries afresh, and reading a fresh mapping faults in every
/// page (about 16 ms for 256 MiB here). A worker that keeps the mapping of a buffer it has seen
/// reads it again without those faults; the fresh mapping is dropped untouched. The contents are
/// the caller's current ones either way: both mappings are of the same memory. Bounded by
/// [`MAX_BUFFERS`] and [`MAX_BYTES`]; the least recently used go first.
#[derive(Default)]
pub(crate) struct Mappings {
    recent: VecDeque<SharedData>,
    bytes: usize,
}

impl Mappings {
    /// Swaps every buffer of `request` this worker already maps for its kept mapping, and keeps
    /// the others.
    pub(crate) fn intern(&mut self, request: &mut BenchmarkRequest) {
        for tensor in &mut request.tensors {
            let Init::Data(data) = &mut tensor.init else {
                continue;
            };
            let known = self
                .recent
                .iter()
                .position(|k| k.id() == data.id() && k.len() == data.len());
            match known.and_then(|position| self.recent.remove(position)) {
                Some(known) => {
                    *data = known.clone();
                    self.recent.push_back(known);
                }
                None => {
                    self.bytes += data.len();
                    self.recent.push_back(data.clone());
                    while self.recent.len() > MAX_BUFFERS || self.bytes > MAX_BYTES {
                        match self.recent.pop_front() {
                            Some(old) => self.bytes -= old.len(),
                            None => break,
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::{DType, DiagnosticTask, Kernel, SharedBuffer, TensorSpec};

    use super::*;

    fn request(data: &[SharedData]) -> BenchmarkRequest {
        let mut request = BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Checksum));
        for d in data {
            request.tensors.push(
                TensorSpec::new("d", DType::U8, vec![d.len() as u64]).init(Init::Data(d.clone())),
            );
        }
        request
    }

    #[test]
    fn keeps_recent_buffers_and_forgets_old_ones() {
        let buffers: Vec<SharedBuffer> = (0..10).map(|_| SharedBuffer::new(16).unwrap()).collect();
        let mut mappings = Mappings::default();
        for buffer in &buffers {
            mappings.intern(&mut request(&[buffer.share()]));
        }
        assert_eq!(mappings.recent.len(), MAX_BUFFERS);
        assert_eq!(mappings.bytes, MAX_BUFFERS * 16);
        let ids: Vec<u64> = mappings.recent.iter().map(SharedData::id).collect();
        assert_eq!(
            ids,
            buffers[2..]
                .iter()
                .map(|b| b.share().id())
                .collect::<Vec<_>>()
        );
        // Seeing a known buffer again moves it to the back and changes nothing else.
        mappings.intern(&mut request(&[buffers[2].share()]));
        assert_eq!(
            mappings.recent.back().unwrap().id(),
            buffers[2].share().id()
        );
        assert_eq!(mappings.recent.len(), MAX_BUFFERS);
    }
}
