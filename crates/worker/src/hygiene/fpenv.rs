//! The floating-point environment of the serving thread: the modes a kernel may switch
//! (flush-to-zero, denormals-are-zero, rounding, exception masks) and every later kernel would
//! run under.

/// The floating-point control state: x86-64's MXCSR and x87 control word, arm64's FPCR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FpEnv {
    #[cfg(target_arch = "x86_64")]
    mxcsr: u32,
    #[cfg(target_arch = "x86_64")]
    x87_control: u16,
    #[cfg(target_arch = "aarch64")]
    fpcr: u64,
}

/// MXCSR's sticky exception flags (bits 0-5): set by ordinary arithmetic, not a mode.
#[cfg(target_arch = "x86_64")]
const MXCSR_FLAGS: u32 = 0x3F;

impl FpEnv {
    /// The current environment of this thread.
    pub(crate) fn current() -> FpEnv {
        #[cfg(target_arch = "x86_64")]
        {
            let mut mxcsr: u32 = 0;
            let mut x87_control: u16 = 0;
            // SAFETY: `stmxcsr` and `fnstcw` store the control registers into the two locals
            // they are given and change nothing else.
            unsafe {
                std::arch::asm!("stmxcsr [{}]", in(reg) &raw mut mxcsr, options(nostack));
                std::arch::asm!("fnstcw [{}]", in(reg) &raw mut x87_control, options(nostack));
            }
            FpEnv { mxcsr, x87_control }
        }
        #[cfg(target_arch = "aarch64")]
        {
            let fpcr: u64;
            // SAFETY: reading FPCR has no side effect.
            unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack)) };
            FpEnv { fpcr }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        FpEnv {}
    }

    /// Makes `self` the environment of this thread (exception flags cleared).
    pub(crate) fn install(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            let mxcsr = self.mxcsr & !MXCSR_FLAGS;
            // SAFETY: `ldmxcsr` and `fldcw` load control values that were read from these
            // registers at start-up; `fnclex` clears pending x87 exceptions first, so that
            // loading the control word cannot raise one.
            unsafe {
                std::arch::asm!("ldmxcsr [{}]", in(reg) &raw const mxcsr, options(nostack));
                std::arch::asm!("fnclex", options(nomem, nostack));
                std::arch::asm!("fldcw [{}]", in(reg) &raw const self.x87_control, options(nostack));
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: writes back an FPCR value read from the register at start-up.
        unsafe {
            std::arch::asm!("msr fpcr, {}", in(reg) self.fpcr, options(nomem, nostack))
        };
    }

    /// Whether the modes (not the sticky flags) equal `other`'s.
    pub(crate) fn same_modes(&self, other: &FpEnv) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.mxcsr & !MXCSR_FLAGS == other.mxcsr & !MXCSR_FLAGS
                && self.x87_control & 0x0F3F == other.x87_control & 0x0F3F
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == other
        }
    }

    /// The modes in words: `MXCSR 0x9fc0 (flush-to-zero, denormals-are-zero, rounding toward
    /// zero)`.
    pub(crate) fn describe(&self) -> String {
        #[cfg(target_arch = "x86_64")]
        {
            let mut modes = Vec::new();
            if self.mxcsr & (1 << 15) != 0 {
                modes.push("flush-to-zero");
            }
            if self.mxcsr & (1 << 6) != 0 {
                modes.push("denormals-are-zero");
            }
            modes.push(match (self.mxcsr >> 13) & 3 {
                0 => "rounding to nearest",
                1 => "rounding down",
                2 => "rounding up",
                _ => "rounding toward zero",
            });
            if self.mxcsr & 0x1F80 != 0x1F80 {
                modes.push("floating-point exceptions unmasked");
            }
            format!(
                "MXCSR {:#06x}, x87 control {:#06x} ({})",
                self.mxcsr & !MXCSR_FLAGS,
                self.x87_control,
                modes.join(", ")
            )
        }
        #[cfg(target_arch = "aarch64")]
        {
            let mut modes = Vec::new();
            if self.fpcr & (1 << 24) != 0 {
                modes.push("flush-to-zero");
            }
            modes.push(match (self.fpcr >> 22) & 3 {
                0 => "rounding to nearest",
                1 => "rounding up",
                2 => "rounding down",
                _ => "rounding toward zero",
            });
            format!("FPCR {:#x} ({})", self.fpcr, modes.join(", "))
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        String::from("unknown")
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn a_changed_mode_is_seen_and_put_back() {
        let start = FpEnv::current();
        let mut changed = start;
        changed.mxcsr |= (1 << 15) | (1 << 6) | (3 << 13);
        changed.install();
        let now = FpEnv::current();
        assert!(!now.same_modes(&start));
        assert!(
            now.describe()
                .contains("flush-to-zero, denormals-are-zero, rounding toward zero"),
            "{}",
            now.describe()
        );
        // A denormal flushes to zero under these modes.
        let tiny = std::hint::black_box(f64::MIN_POSITIVE) / std::hint::black_box(4.0);
        assert_eq!(tiny, 0.0);
        start.install();
        assert!(FpEnv::current().same_modes(&start));
        let tiny = std::hint::black_box(f64::MIN_POSITIVE) / std::hint::black_box(4.0);
        assert!(tiny > 0.0);
    }
}
