//! `CUDA_VISIBLE_DEVICES`, read the way the CUDA driver reads it.

use crate::DeviceToken;

/// Which devices a `CUDA_VISIBLE_DEVICES` value exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// The variable is unset: every device of the machine is visible.
    All,
    /// Exactly these devices, in this order (possibly none).
    List(Vec<DeviceToken>),
}

/// Parses a `CUDA_VISIBLE_DEVICES` value as the CUDA driver does.
///
/// - `None` (unset) is [`VisibleDevices::All`].
/// - An empty or blank value hides every device: `List([])`.
/// - Otherwise the value is a comma-separated list of tokens, each trimmed of spaces: a device
///   index (`0`, `3`), a `GPU-…` UUID or a `MIG-…` identifier. Tokens keep their order and are
///   returned verbatim (trimmed). The first invalid token (for example `-1` or `gpu0`) hides
///   itself and every token after it, so `0,2,-1,1` exposes `0` and `2`.
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
    VisibleDevices::List(
        value
            .split(',')
            .map(str::trim)
            .take_while(|token| is_valid_token(token))
            .map(DeviceToken::from)
            .collect(),
    )
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
    let uuid_like = |rest: &str| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '/')
    };
    if let Some(rest) = token.strip_prefix("GPU-") {
        return uuid_like(rest);
    }
    if let Some(rest) = token.strip_prefix("MIG-") {
        return uuid_like(rest);
    }
    !token.is_empty() && token.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(tokens: &[&str]) -> VisibleDevices {
        VisibleDevices::List(tokens.iter().map(|t| DeviceToken::from(*t)).collect())
    }

    #[test]
    fn table() {
        let uuid = "GPU-5ec1b5d2-1b8e-4f6c-9a1d-2b8f0c3e7a41";
        let mig = "MIG-0c5b9a2e-7d41-5e8f-a3b2-9f1e6d4c8b70";
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
        ];
        for (value, expected) in cases {
            assert_eq!(parse_visible_devices(value), expected, "{value:?}");
        }
    }
}
