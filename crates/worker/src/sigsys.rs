//! Naming the system call the sandbox refused: the sandbox's seccomp filter traps the calls that
//! reach into another process (`SECCOMP_RET_TRAP`: SIGSYS, the call not made), and this
//! handler writes the call's number to stderr, for the parent's error, then lets the worker die
//! of SIGSYS as before.
//!
//! The handler runs with `SA_RESETHAND | SA_NODEFER`, so re-raising the signal meets the
//! default action (the process ends). It only reads the `siginfo_t` the kernel gave it, fills a
//! buffer on its stack, and calls `write`, `raise` and `_exit`: async-signal-safe.

use tunebox_protocol::REFUSED_SYSTEM_CALL_LINE;

/// The SIGSYS fields of a 64-bit Linux `siginfo_t` (`_sigsys` of `_sifields`, which starts
/// at offset 16 after `si_signo`, `si_errno`, `si_code` and padding).
#[repr(C)]
struct SigsysInfo {
    _signo: libc::c_int,
    _errno: libc::c_int,
    _code: libc::c_int,
    _pad: libc::c_int,
    _call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    _arch: libc::c_uint,
}

/// Installs the SIGSYS handler (once, at the worker's start, before any task). A worker that is
/// not sandboxed gets SIGSYS only from a seccomp filter of its own candidate's; it still dies of
/// it, one line more talkative.
pub(crate) fn install() {
    if cfg!(not(target_pointer_width = "64")) {
        return;
    }
    // SAFETY: `sigaction` with a zeroed struct (empty mask) whose handler is an
    // `extern "C" fn(c_int, *mut siginfo_t, *mut c_void)`, as `SA_SIGINFO` requires; the
    // handler is async-signal-safe (see the module). A failure leaves SIGSYS at its default
    // action: the worker still dies, unnamed.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigsys as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_NODEFER;
        libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut());
    }
}

extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a `siginfo_t` for SIGSYS, whose layout on 64-bit Linux begins
    // as `SigsysInfo` (install() does nothing elsewhere); it lives through the handler.
    let number = unsafe { (*info.cast::<SigsysInfo>()).syscall };
    let mut buffer = [0u8; 96];
    let len = line(&mut buffer, number);
    // SAFETY: `write` of a live stack buffer to stderr, then `raise`: SIGSYS is back at its
    // default action (SA_RESETHAND) and not blocked (SA_NODEFER), so the process ends there;
    // `_exit` is the fallback should it not.
    unsafe {
        libc::write(libc::STDERR_FILENO, buffer.as_ptr().cast(), len);
        libc::raise(libc::SIGSYS);
        libc::_exit(128 + libc::SIGSYS);
    }
}

/// Writes `\n<REFUSED_SYSTEM_CALL_LINE><number>\n` into `buffer`; returns its length. No
/// allocation.
fn line(buffer: &mut [u8; 96], number: libc::c_int) -> usize {
    let mut len = 0;
    let mut push = |byte: u8, len: &mut usize| {
        buffer[*len] = byte;
        *len += 1;
    };
    push(b'\n', &mut len);
    for &byte in REFUSED_SYSTEM_CALL_LINE.as_bytes() {
        push(byte, &mut len);
    }
    let mut digits = [0u8; 12];
    let mut n = number.unsigned_abs();
    let mut count = 0;
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if number < 0 {
        push(b'-', &mut len);
    }
    for &digit in digits[..count].iter().rev() {
        push(digit, &mut len);
    }
    push(b'\n', &mut len);
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_number() {
        let mut buffer = [0u8; 96];
        for number in [0, 7, 101, 310, 2147483647, -1] {
            let len = line(&mut buffer, number);
            assert_eq!(
                std::str::from_utf8(&buffer[..len]).unwrap(),
                format!("\n{REFUSED_SYSTEM_CALL_LINE}{number}\n")
            );
        }
    }

    #[test]
    fn the_fields_sit_where_the_kernel_puts_them() {
        assert_eq!(std::mem::offset_of!(SigsysInfo, _call_addr), 16);
        assert_eq!(std::mem::offset_of!(SigsysInfo, syscall), 24);
        assert!(std::mem::size_of::<SigsysInfo>() <= std::mem::size_of::<libc::siginfo_t>());
    }
}
