//! How a call and its reply travel in one payload: an op byte, then byte strings.
//!
//! Layout: `op: u8`, `count: u32` (little endian), `count` lengths (`u64` each), then the parts
//! back to back. Part 0 is the pickle; its out-of-band buffers (pickle protocol 5) travel as the
//! request's shared-memory tensors, so that a large numpy array is copied once and never pickled.
//! A reply's part 1 says where each of its buffers is (`buffers::Place`), and part 2 which of the
//! request's buffers the worker let go of (`buffers::released`), one byte each.

/// What a request asks of the Python worker, or what a reply reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Op {
    /// Unpickle `(fn, args, kwargs)` and call it: one round trip (no timeout to start late).
    Call = 0,
    /// Unpickle `(fn, args, kwargs)` and keep it for the next `Run` (a `prepare` request, so the
    /// imports that unpickling does are outside the call's timeout, as in TVM's worker).
    Load = 1,
    /// Call what the last `Load` kept.
    Run = 2,
    /// Call the initializer: an exception fails the worker's start.
    Init = 3,
    /// Import the modules named in part 0 (one per line), ahead of the calls that need them.
    Warm = 4,
    /// Unpickle `(fn, [(args, kwargs)…], timeout)` and call `fn` for each in turn, writing each
    /// result into the request's last buffer, the batch's results region, as it finishes: a
    /// batch that dies part way keeps what it finished. The region's records are written and
    /// read by `tunebox._calls` (`write_record`, `region_records`) alone; to Rust they are bytes.
    Batch = 5,
}

impl Op {
    /// Every op, with the name `tunebox._calls` gives it.
    const ALL: [(Op, &'static str); 6] = [
        (Op::Call, "CALL"),
        (Op::Load, "LOAD"),
        (Op::Run, "RUN"),
        (Op::Init, "INIT"),
        (Op::Warm, "WARM"),
        (Op::Batch, "BATCH"),
    ];

    pub(crate) fn from_byte(byte: u8) -> Option<Op> {
        Op::ALL
            .iter()
            .find(|(op, _)| *op as u8 == byte)
            .map(|(op, _)| *op)
    }

    /// `{name: code}` for Python (`tunebox._native.OPS`), so that `tunebox._calls` takes its op
    /// codes from here rather than writing them a second time.
    pub(crate) fn codes(
        py: pyo3::Python<'_>,
    ) -> pyo3::PyResult<pyo3::Bound<'_, pyo3::types::PyDict>> {
        use pyo3::types::PyDictMethods as _;
        let codes = pyo3::types::PyDict::new(py);
        for (op, name) in Op::ALL {
            codes.set_item(name, op as u8)?;
        }
        Ok(codes)
    }
}

/// Encodes `tag` and `parts` in one buffer.
pub(crate) fn encode(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let body: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(1 + 4 + 8 * parts.len() + body);
    out.push(tag);
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    for part in parts {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
    }
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

/// Splits a buffer written by [`encode`] into its tag and parts (borrowed).
///
/// # Errors
///
/// A message naming what is malformed (truncated header or parts).
pub(crate) fn decode(bytes: &[u8]) -> Result<(u8, Vec<&[u8]>), String> {
    let malformed = |what: &str| format!("malformed tunebox Python payload: {what}");
    let (&tag, rest) = bytes.split_first().ok_or_else(|| malformed("empty"))?;
    let (count, mut rest) = rest
        .split_at_checked(4)
        .ok_or_else(|| malformed("no part count"))?;
    let count = u32::from_le_bytes(count.try_into().expect("4 bytes")) as usize;
    let mut lengths = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let (length, tail) = rest
            .split_at_checked(8)
            .ok_or_else(|| malformed("truncated lengths"))?;
        lengths.push(u64::from_le_bytes(length.try_into().expect("8 bytes")) as usize);
        rest = tail;
    }
    let mut parts = Vec::with_capacity(count);
    for length in lengths {
        let (part, tail) = rest
            .split_at_checked(length)
            .ok_or_else(|| malformed("truncated part"))?;
        parts.push(part);
        rest = tail;
    }
    Ok((tag, parts))
}
