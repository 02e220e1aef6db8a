//! `CUDA_VISIBLE_DEVICES`, read the way the CUDA driver reads it.

use crate::DeviceToken;

/// Which devices a `CUDA_VISIBLE_DEVICES` value exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// The variable is unset: every device of the machine is visible.
    All,
    /// Exactly these devices, in this order (possibly none).
    List(Vec<DeviceToken>),
    /// The value names this device twice (`0,0`, or `0,00`): the driver then hides every
    /// device, as it does for an empty value.
    Repeated(DeviceToken),
}

/// Parses a `CUDA_VISIBLE_DEVICES` value as the CUDA driver does.
///
/// - `None` (unset) is [`VisibleDevices::All`].
/// - An empty or blank value hides every device: `List([])`.
/// - Otherwise the value is a comma-separated list of tokens, each trimmed of spaces: a device
///   index (`0`, `3`), a `GPU-…` UUID, or a MIG instance (`MIG-<uuid>`, or the form of drivers
///   before R470, `MIG-GPU-<uuid>/<GPU instance>/<compute instance>`). Tokens keep their order and
///   are returned verbatim (trimmed). The first invalid token (for example `-1` or `gpu0`) hides
///   itself and every token after it, so `0,2,-1,1` exposes `0` and `2`.
/// - A device named twice before that point (`0,1,0`; indices compare by value, so `0,00`
///   too) hides every device: [`VisibleDevices::Repeated`]. This is the driver's rule, which
///   PyTorch's `_parse_visible_devices` follows as well ("repeated ordinal results in empty
///   set").
///
///
/// ```
/// use tunebox_process::{parse_visible_devices, DeviceToken, VisibleDevices};
///
/// assert_eq!(parse_visible_devices(None), VisibleDevices::All);
/// assert_eq!(
///     parse_visible_devices(Some("3,1")),
///     VisibleDevices::List(vec![DeviceToken::from("3"), DeviceToken::from("1")])
/// );
/// ```
pub fn parse_visible_devices(value: Option<&str>) -> VisibleDevices {
    let Some(value) = value else {
        return VisibleDevices::All;
    };
    if value.trim().is_empty() {
        return VisibleDevices::List(Vec::new());
    }
    let tokens: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .take_while(|token| is_valid_token(token))
        .collect();
    for (i, token) in tokens.iter().enumerate() {
        if tokens[..i]
            .iter()
            .any(|earlier| same_device(earlier, token))
        {
            return VisibleDevices::Repeated(DeviceToken::from(*token));
        }
    }
    VisibleDevices::List(tokens.into_iter().map(DeviceToken::from).collect())
}

/// Whether two valid tokens name the same device as the driver reads them: indices by value
/// (`0` and `00`), identifiers as written.
fn same_device(a: &str, b: &str) -> bool {
    fn index(t: &str) -> Option<&str> {
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.trim_start_matches('0'))
    }
    match (index(a), index(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

/// The parent's own `CUDA_VISIBLE_DEVICES`, parsed with [`parse_visible_devices`]. A value that
/// is not Unicode hides every device, as an unparseable value does for CUDA.
pub fn visible_devices_from_env() -> VisibleDevices {
    match std::env::var_os("CUDA_VISIBLE_DEVICES") {
        None => VisibleDevices::All,
        Some(value) => match value.to_str() {
            Some(value) => parse_visible_devices(Some(value)),
            None => VisibleDevices::List(Vec::new()),
        },
    }
}

fn is_valid_token(token: &str) -> bool {
    let uuid_like =
        |rest: &str| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    let number = |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit());
    if let Some(rest) = token.strip_prefix("GPU-") {
        return uuid_like(rest);
    }
    if let Some(rest) = token.strip_prefix("MIG-") {
        // Before driver R470: MIG-GPU-<uuid>/<GPU instance id>/<compute instance id>.
        if let Some(legacy) = rest.strip_prefix("GPU-") {
            let mut parts = legacy.split('/');
            return matches!(
                (parts.next(), parts.next(), parts.next(), parts.next()),
                (Some(uuid), Some(gi), Some(ci), None) if uuid_like(uuid) && number(gi) && number(ci)
            );
        }
        return uuid_like(rest);
    }
    number(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(tokens: &[&str]) -> VisibleDevices {
        VisibleDevices::List(tokens.iter().map(|t| DeviceToken::from(*t)).collect())
    }

    fn repeated(token: &str) -> VisibleDevices {
        VisibleDevices::Repeated(DeviceToken::from(token))
    }

    #[test]
    fn table() {
        let uuid = "GPU-5ec1b5d2-1b8e-4f6c-9a1d-2b8f0c3e7a41";
        let mig = "MIG-0c5b9a2e-7d41-5e8f-a3b2-9f1e6d4c8b70";
        let legacy_mig = format!("MIG-{uuid}/1/0");
        let legacy_then_0 = format!("{legacy_mig},0");
        let uuid_twice = format!("{uuid},1,{uuid}");
        let cases: Vec<(Option<&str>, VisibleDevices)> = vec![
            (None, VisibleDevices::All),
            (Some(""), list(&[])),
            (Some("  "), list(&[])),
            (Some("0,2,-1,1"), list(&["0", "2"])),
            (Some(uuid), list(&[uuid])),
            (Some(mig), list(&[mig])),
            (Some("3,1"), list(&["3", "1"])),
            (Some(" 1 , 0 "), list(&["1", "0"])),
            (Some("gpu0,1"), list(&[])),
            (Some("0,,1"), list(&["0"])),
            (Some("GPU-"), list(&[])),
            // The MIG form of drivers before R470.
            (Some(&legacy_mig), list(&[&legacy_mig])),
            (Some(&legacy_then_0), list(&[&legacy_mig, "0"])),
            (Some("MIG-GPU-5ec1b5d2/1"), list(&[])),
            (Some("MIG-GPU-5ec1b5d2/1/x"), list(&[])),
            (Some("MIG-5ec1b5d2/1/0"), list(&[])),
            // A repeated device hides them all; a repeat after an invalid token is not read.
            (Some("0,0"), repeated("0")),
            (Some("1,0,1"), repeated("1")),
            (Some("0,00"), repeated("00")),
            (Some(&uuid_twice), repeated(uuid)),
            (Some("0,-1,0"), list(&["0"])),
            (Some("10,1"), list(&["10", "1"])),
        ];
        for (value, expected) in cases {
            assert_eq!(parse_visible_devices(value), expected, "{value:?}");
        }
    }
}
