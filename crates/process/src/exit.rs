//! Describing how a process ended.

/// Human description of an exit: `exited with code 3`, `killed by signal 11 (SIGSEGV)`.
pub(crate) fn describe_exit(exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (exit_code, signal) {
        (_, Some(signal)) if sent_from_outside(signal) => format!(
            "killed by signal {signal} ({}), which another process sends (the system's \
             out-of-memory killer, a person, a script) unless the kernel sent it to itself",
            signal_name(signal).unwrap_or("?")
        ),
        (_, Some(signal)) => match signal_name(signal) {
            Some(name) => format!("killed by signal {signal} ({name})"),
            None => format!("killed by signal {signal}"),
        },
        (Some(code), None) => format!("exited with code {code}"),
        (None, None) => "ended for an unknown reason".to_owned(),
    }
}

/// Whether `signal` is one that another process sends to end a process (SIGKILL, SIGTERM,
/// SIGHUP, SIGINT; the out-of-memory killer's is SIGKILL), not one a fault of the candidate's
/// raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, …). tunebox's own kills (a timeout, a
/// stop) are reported otherwise.
pub(crate) fn sent_from_outside(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGKILL | libc::SIGTERM | libc::SIGHUP | libc::SIGINT
    )
}

/// The name of the signals a crashing candidate typically dies of.
pub(crate) fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        19 => "SIGSTOP",
        20 => "SIGTSTP",
        21 => "SIGTTIN",
        22 => "SIGTTOU",
        24 => "SIGXCPU",
        31 => "SIGSYS",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions() {
        assert_eq!(describe_exit(Some(3), None), "exited with code 3");
        assert_eq!(
            describe_exit(None, Some(11)),
            "killed by signal 11 (SIGSEGV)"
        );
        assert_eq!(describe_exit(None, Some(64)), "killed by signal 64");
        assert_eq!(describe_exit(None, None), "ended for an unknown reason");
    }
}
