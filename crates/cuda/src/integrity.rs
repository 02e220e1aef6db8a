//! Checks a CUDA candidate cannot pass by cheating the harness (docs/sandbox.md), after the
//! timed reps and outside them:
//!
//! - **fresh inputs:** the last call runs with every random input drawn again
//!   ([`tunebox_bench::fresh_inputs`]) and the outputs poisoned, so a kernel that memoizes its
//!   first answer (in a `__device__` buffer) or writes its outputs once fails against the
//!   reference's outputs on the same fresh inputs, which the parent holds;
//! - **outputs that change after the call:** the measuring stream said the call was done; a
//!   device-wide synchronize follows, and the outputs must not have changed since;
//! - **work outside the measuring stream:** one more call is timed twice, by the events on the
//!   measuring stream and by the host's clock from before the launch to the end of a
//!   device-wide synchronize. Work the events do not bracket (queued elsewhere, still running
//!   when the stream's end event fires) makes the second far longer than the first.
//!
//! The decisions are pure functions of what was observed ([`StreamVsDevice`],
//! [`changed_outputs`]), tested without a GPU; the backend makes the observations.

use tunebox_protocol::{BenchError, TensorData};

/// How much longer than the events a device-wide wait may take, at least, before the work
/// counts as outside the stream: launch latency, the synchronize's wake-up and a busy host
/// take microseconds to a few hundred of them.
pub(crate) const ESCAPE_MIN_MS: f64 = 1.0;

/// How many times, at most, a call is timed both ways: the first look that sees no escaped
/// work clears the candidate (interference only adds host time, so one clean look is proof).
pub(crate) const ESCAPE_LOOKS: usize = 3;

/// One call, timed two ways.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StreamVsDevice {
    /// The call's time by the events around it on the measuring stream, in ms.
    pub(crate) event_ms: f64,
    /// The host's time from before the launch until a device-wide synchronize returned, in ms.
    pub(crate) device_ms: f64,
}

impl StreamVsDevice {
    /// What the device-wide wait took beyond the events, in ms.
    pub(crate) fn beyond_ms(&self) -> f64 {
        self.device_ms - self.event_ms
    }

    /// Whether the device was busy well past the events: by more than [`ESCAPE_MIN_MS`] and
    /// more than the call itself (the device-wide wait took over twice the event time).
    pub(crate) fn escaped(&self) -> bool {
        self.beyond_ms() > ESCAPE_MIN_MS.max(self.event_ms)
    }
}

/// `Suspicious (work_outside_stream)` when every look escaped; `looks` holds at least one.
pub(crate) fn work_outside_stream(looks: &[StreamVsDevice]) -> Result<(), BenchError> {
    if looks.is_empty() || !looks.iter().all(StreamVsDevice::escaped) {
        return Ok(());
    }
    let seen: Vec<String> = looks
        .iter()
        .map(|l| {
            format!(
                "{:.3} ms by the events, {:.3} ms device-wide",
                l.event_ms, l.device_ms
            )
        })
        .collect();
    Err(BenchError::Suspicious {
        check: "work_outside_stream".into(),
        seen: format!(
            "the device stayed busy long after the kernel's call ended on the measuring stream \
             ({}): work queued elsewhere (another stream, a device-side launch) is not in the \
             timed window",
            seen.join("; ")
        ),
    })
}

/// The names of the outputs whose bytes differ between `before` and `after` (the same outputs,
/// in the same order; an output missing from either counts as changed).
pub(crate) fn changed_outputs(before: &[TensorData], after: &[TensorData]) -> Vec<String> {
    let mut changed: Vec<String> = before
        .iter()
        .zip(after)
        .filter(|(a, b)| a.name != b.name || a.bytes[..] != b.bytes[..])
        .map(|(a, _)| a.name.clone())
        .collect();
    let longer = if before.len() > after.len() {
        before
    } else {
        after
    };
    changed.extend(
        longer[before.len().min(after.len())..]
            .iter()
            .map(|t| t.name.clone()),
    );
    changed
}

/// `Suspicious (outputs_changed_after_call)` when `changed` names outputs.
pub(crate) fn outputs_settled(changed: &[String]) -> Result<(), BenchError> {
    if changed.is_empty() {
        return Ok(());
    }
    Err(BenchError::Suspicious {
        check: "outputs_changed_after_call".into(),
        seen: format!(
            "output(s) {} changed between the end of the kernel's call on the measuring stream \
             and a device-wide synchronize: work is still being done outside the timed window",
            changed.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{Bytes, DType};

    fn data(name: &str, bytes: &[u8]) -> TensorData {
        TensorData::new(
            name,
            DType::U8,
            vec![bytes.len() as u64],
            Bytes::copy_from_slice(bytes).unwrap(),
        )
    }

    #[test]
    fn work_the_events_bracket_is_not_escaped() {
        let honest = StreamVsDevice {
            event_ms: 0.5,
            device_ms: 0.56,
        };
        assert!(!honest.escaped());
        // A slow kernel on a busy host: 0.9 ms more, under the 1 ms floor.
        assert!(
            !StreamVsDevice {
                event_ms: 0.2,
                device_ms: 1.1
            }
            .escaped()
        );
        // A long kernel: more than 1 ms of slack, but not more than the call itself.
        assert!(
            !StreamVsDevice {
                event_ms: 50.0,
                device_ms: 80.0
            }
            .escaped()
        );
        assert!(work_outside_stream(&[honest]).is_ok());
        assert!(work_outside_stream(&[]).is_ok());
    }

    #[test]
    fn work_past_the_events_is_escaped_when_every_look_says_so() {
        let hidden = StreamVsDevice {
            event_ms: 0.01,
            device_ms: 5.0,
        };
        assert!(hidden.escaped());
        assert!((hidden.beyond_ms() - 4.99).abs() < 1e-9);
        let err = work_outside_stream(&[hidden, hidden]).unwrap_err();
        let BenchError::Suspicious { check, seen } = err else {
            panic!("{err:?}")
        };
        assert_eq!(check, "work_outside_stream");
        assert!(
            seen.contains("0.010 ms by the events, 5.000 ms device-wide"),
            "{seen}"
        );
        // One clean look clears it: interference only ever adds host time.
        let clean = StreamVsDevice {
            event_ms: 0.01,
            device_ms: 0.05,
        };
        assert!(work_outside_stream(&[hidden, clean]).is_ok());
    }

    #[test]
    fn changed_outputs_are_named() {
        let before = [data("y", &[1, 2]), data("z", &[3])];
        assert!(changed_outputs(&before, &before).is_empty());
        assert!(outputs_settled(&changed_outputs(&before, &before)).is_ok());
        let after = [data("y", &[1, 2]), data("z", &[4])];
        assert_eq!(changed_outputs(&before, &after), ["z"]);
        assert_eq!(changed_outputs(&before, &before[..1]), ["z"]);
        let err = outputs_settled(&changed_outputs(&before, &after)).unwrap_err();
        assert!(
            matches!(&err, BenchError::Suspicious { check, seen }
                if check == "outputs_changed_after_call" && seen.contains("output(s) z")),
            "{err:?}"
        );
    }
}
