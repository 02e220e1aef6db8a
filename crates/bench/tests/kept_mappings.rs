//! A worker keeps the huge mappings of its large tensors between requests
//! (`tunebox_bench::keep_mappings`): what the next request gets reads as fresh memory, whatever
//! the last task did to it, and what nothing uses is given back. One test, in a process of its
//! own: the kept mappings are the process's.

use tunebox_bench::{HostTensor, end_request, keep_mappings, kept_mappings_kib};
use tunebox_protocol::{DType, TensorSpec};

/// `madvise` advice that installs a guard marker (Linux 6.13).
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// A transparent huge page.
const HUGE: usize = 2 << 20;

/// Floats in a tensor large enough to be kept (64 MiB and more).
const FLOATS: u64 = 20 << 20;

fn zeros() -> TensorSpec {
    TensorSpec::new("y", DType::F32, [FLOATS]).zeros().output()
}

/// Reads as zeros throughout, and its guards hold.
fn fresh(t: &HostTensor) -> bool {
    t.bytes().iter().all(|&b| b == 0) && t.check_bounds().is_ok()
}

/// Sets the protection of the whole tensor's pages (a task's `mprotect`).
fn protect(t: &mut HostTensor, protection: libc::c_int) {
    let page = 4096;
    let start = t.as_mut_ptr() as usize & !(page - 1);
    // SAFETY: the pages of the tensor's own mapping, which nothing else uses.
    let done = unsafe { libc::mprotect(start as *mut libc::c_void, t.len(), protection) };
    assert_eq!(done, 0);
}

/// Maps `bytes` of anonymous memory (`MAP_PRIVATE` or `MAP_SHARED`) at `at`, over whatever is
/// there (`MAP_FIXED`), as a task or the worker could.
///
/// # Safety
///
/// `at` is page-aligned and nothing the caller still uses lies in the `bytes` from it.
unsafe fn map_anonymous_at(at: usize, bytes: usize, sharing: libc::c_int) -> &'static mut [u8] {
    // SAFETY: as the caller promises.
    let mapped = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            sharing | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_ne!(mapped, libc::MAP_FAILED);
    // SAFETY: `bytes` just mapped, readable and writable, left mapped.
    unsafe { std::slice::from_raw_parts_mut(mapped.cast::<u8>(), bytes) }
}

#[test]
fn kept_mappings_read_as_fresh_memory_and_are_given_back() {
    let kib = FLOATS * 4 / 1024;

    // Written, then kept: the next tensor of its size takes it, zeroed.
    let mut first = HostTensor::allocate(&zeros()).unwrap();
    first.bytes_mut().fill(7);
    drop(first);
    assert!(
        kept_mappings_kib() >= kib,
        "kept, written: {}",
        kept_mappings_kib()
    );
    let mut again = HostTensor::allocate(&zeros()).unwrap();
    assert_eq!(kept_mappings_kib(), 0, "taken");
    assert!(fresh(&again));

    // Left read-only (or inaccessible): handed on writable all the same.
    for protection in [libc::PROT_READ, libc::PROT_NONE] {
        again.bytes_mut()[12_345] = 1;
        protect(&mut again, protection);
        drop(again);
        again = HostTensor::allocate(&zeros()).unwrap();
        assert!(fresh(&again));
        again.bytes_mut().fill(3);
    }

    // Something else mapped over part of it: not handed on.
    let page = 4096;
    let at = (again.as_mut_ptr() as usize & !(page - 1)) + 64 * page;
    // SAFETY: pages of the tensor's own mapping: a task maps shared memory over them.
    unsafe { map_anonymous_at(at, 4 * page, libc::MAP_SHARED) };
    drop(again);
    assert_eq!(kept_mappings_kib(), 0, "not kept");
    let untouched = HostTensor::allocate(&zeros()).unwrap();
    assert!(fresh(&untouched));

    // Guard markers a task installed (Linux 6.13; refused elsewhere): removed.
    let mut guarded = HostTensor::allocate(&zeros()).unwrap();
    guarded.bytes_mut().fill(5);
    let page_at = (guarded.as_mut_ptr() as usize & !(page - 1)) + 100 * page;
    // SAFETY: a page of the tensor's own mapping: a task installs a guard marker there.
    unsafe { libc::madvise(page_at as *mut libc::c_void, page, MADV_GUARD_INSTALL) };
    drop(guarded);
    let after_guard = HostTensor::allocate(&zeros()).unwrap();
    assert!(fresh(&after_guard));

    // A hole a task made, where this process then mapped memory of its own (held outputs are
    // advised into huge pages too): never handed on, where the next tensor would zero and
    // write it.
    let mut holed = after_guard;
    let hole = (holed.as_mut_ptr() as usize & !(HUGE - 1)) + 4 * HUGE;
    // SAFETY: two huge pages inside the tensor's own mapping: a task unmaps them, then the
    // process maps memory of its own there and fills it.
    let own = unsafe {
        assert_eq!(libc::munmap(hole as *mut libc::c_void, 2 * HUGE), 0);
        let own = map_anonymous_at(hole, 2 * HUGE, libc::MAP_PRIVATE);
        libc::madvise(own.as_mut_ptr().cast(), 2 * HUGE, libc::MADV_HUGEPAGE);
        own
    };
    own.fill(0xAA);
    // (Dropping a mapping not kept unmaps all of it, the process's memory in the hole with
    // it, as it always did.)
    drop(holed);
    assert_eq!(kept_mappings_kib(), 0, "not kept");
    let next = HostTensor::allocate(&zeros()).unwrap();
    assert!(fresh(&next));
    drop(next);
    // Given back after two requests that did not use it (see below).
    end_request();
    end_request();
    assert_eq!(kept_mappings_kib(), 0);

    // A tensor nothing wrote (read, though) holds nothing but the huge pages its guard zones
    // filled, and its reuse writes nothing more.
    drop(untouched);
    assert!(
        kept_mappings_kib() <= 4 * 1024,
        "{} KiB",
        kept_mappings_kib()
    );
    let unwritten = HostTensor::allocate(&zeros()).unwrap();
    assert!(fresh(&unwritten));
    drop(unwritten);
    assert!(
        kept_mappings_kib() <= 4 * 1024,
        "{} KiB",
        kept_mappings_kib()
    );

    // A request that does not use it gives it back at its end; the request that kept it
    // does not.
    let mut kept = HostTensor::allocate(&zeros()).unwrap();
    kept.bytes_mut().fill(1);
    drop(kept);
    end_request();
    assert!(
        kept_mappings_kib() >= kib,
        "kept through its own request's end"
    );
    end_request();
    assert_eq!(
        kept_mappings_kib(),
        0,
        "given back after a request that did not use it"
    );

    // An output nothing reads before the kernel overwrites it (a round's window) takes a kept
    // mapping as the last request left it, not zeroed, made writable again; its guards hold.
    // One that must read as fresh memory is zeroed as before, and with nothing kept both get
    // fresh memory.
    let mut written = HostTensor::allocate(&zeros()).unwrap();
    written.bytes_mut().fill(9);
    protect(&mut written, libc::PROT_READ);
    drop(written);
    let mut as_left = HostTensor::allocate_overwritten(&zeros()).unwrap();
    assert!(as_left.bytes().iter().all(|&b| b == 9), "not zeroed");
    assert!(as_left.check_bounds().is_ok());
    as_left.bytes_mut()[4321] = 1;
    drop(as_left);
    assert!(fresh(&HostTensor::allocate(&zeros()).unwrap()));
    end_request();
    end_request();
    assert_eq!(kept_mappings_kib(), 0);
    assert!(fresh(&HostTensor::allocate_overwritten(&zeros()).unwrap()));

    // A worker's last request keeps nothing.
    keep_mappings(false);
    let mut last = HostTensor::allocate(&zeros()).unwrap();
    last.bytes_mut().fill(1);
    drop(last);
    assert_eq!(kept_mappings_kib(), 0);
    keep_mappings(true);
}
