//! The seccomp programs of a sandboxed worker, compiled with seccompiler before `fork`.
//!
//! Three filters, because a seccompiler filter has one action for all its rules (the kernel runs
//! every installed filter and the strictest answer wins):
//! - **trap** (`SECCOMP_RET_TRAP`: SIGSYS, the call not made): reaching into another process —
//!   `ptrace`, `process_vm_readv`/`process_vm_writev`, `kcmp`, `pidfd_getfd`. The worker's
//!   SIGSYS handler (tunebox-worker) writes the call's number to stderr and the worker dies of
//!   the signal; the parent reports a sandbox violation naming the call ([`trapped_name`]). A
//!   worker without the handler dies of SIGSYS's default action, unnamed. A candidate that
//!   installs a SIGSYS handler of its own survives, but the call is still not made.
//! - **refuse** (`EPERM`): sockets other than `AF_UNIX` (without network), io_uring (its
//!   operations are not seen by seccomp), new namespaces and mounts, `bpf`,
//!   `perf_event_open`, `userfaultfd`, keyrings, module loading, and `kill` of every process
//!   (`-1`) or of the parent. Code that probes for these gets an error it can handle.
//! - **clone3 → ENOSYS**: its flags sit in a struct that seccomp cannot read, so the C library
//!   falls back to `clone`, whose namespace flags the refuse filter sees.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The compiled programs, in the order they are installed.
pub(crate) struct Filters {
    pub(crate) programs: Vec<BpfProgram>,
}

/// System calls that read or write another process: they are trapped, and the worker dies.
const TRAPPED: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
];

/// System calls refused outright with `EPERM`.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_open_by_handle_at,
];

/// Namespace flags refused on `clone`.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// Compiles the filters for a worker whose parent is `parent`; `network` allows every socket
/// family.
pub(crate) fn compile(network: bool, parent: u32) -> Result<Filters, String> {
    let arch = target_arch()?;
    let e = |e: seccompiler::BackendError| e.to_string();
    let trap_rules: BTreeMap<i64, Vec<SeccompRule>> =
        TRAPPED.iter().map(|&(_, nr)| (nr, Vec::new())).collect();
    let trap = SeccompFilter::new(trap_rules, SeccompAction::Allow, SeccompAction::Trap, arch)
        .map_err(e)?;

    let mut refuse: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
    if !network {
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            let not_unix = condition(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?;
            refuse.insert(nr, vec![rule(vec![not_unix])?]);
        }
    }
    let namespaces = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            rule(vec![condition(0, SeccompCmpOp::MaskedEq(flag), flag)?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    refuse.insert(libc::SYS_clone, namespaces);
    let everyone = condition(0, SeccompCmpOp::Eq, u64::from(u32::MAX))?;
    let the_parent = condition(0, SeccompCmpOp::Eq, u64::from(parent))?;
    refuse.insert(
        libc::SYS_kill,
        vec![rule(vec![everyone])?, rule(vec![the_parent])?],
    );
    let the_parent = condition(0, SeccompCmpOp::Eq, u64::from(parent))?;
    refuse.insert(libc::SYS_pidfd_open, vec![rule(vec![the_parent])?]);
    let refuse = SeccompFilter::new(
        refuse,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(e)?;

    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(e)?;

    let programs = [trap, refuse, clone3]
        .into_iter()
        .map(|f| BpfProgram::try_from(f).map_err(e))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Filters { programs })
}

/// The name of a system call the sandbox traps, from its number on this architecture (the
/// number a worker's SIGSYS handler reports); `None` for any other number.
pub(crate) fn trapped_name(number: i64) -> Option<&'static str> {
    TRAPPED
        .iter()
        .find(|&&(_, nr)| nr == number)
        .map(|&(name, _)| name)
}

/// Installs the programs on the calling thread. Async-signal-safe: `prctl` and `seccomp` system
/// calls over memory prepared before `fork`.
pub(crate) fn install(filters: &Filters) -> std::io::Result<()> {
    for program in &filters.programs {
        seccompiler::apply_filter(program).map_err(|_| std::io::Error::last_os_error())?;
    }
    Ok(())
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

fn target_arch() -> Result<TargetArch, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        "riscv64" => Ok(TargetArch::riscv64),
        other => Err(format!("no seccomp filter for the {other} architecture")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trapped_calls_are_named_from_their_numbers() {
        assert_eq!(trapped_name(libc::SYS_ptrace), Some("ptrace"));
        assert_eq!(
            trapped_name(libc::SYS_process_vm_readv),
            Some("process_vm_readv")
        );
        assert_eq!(trapped_name(libc::SYS_read), None);
        assert_eq!(trapped_name(-1), None);
    }

    #[test]
    fn the_filters_compile_for_this_machine() {
        let filters = compile(false, 1).unwrap();
        assert_eq!(filters.programs.len(), 3);
    }
}
