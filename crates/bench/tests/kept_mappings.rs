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
    let over = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            4 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_ne!(over, libc::MAP_FAILED);
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
        let own = libc::mmap(
            hole as *mut libc::c_void,
            2 * HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        );
        assert_ne!(own, libc::MAP_FAILED);
        libc::madvise(own, 2 * HUGE, libc::MADV_HUGEPAGE);
        std::slice::from_raw_parts_mut(own.cast::<u8>(), 2 * HUGE)
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

    // A worker's last request keeps nothing.
    keep_mappings(false);
    let mut last = HostTensor::allocate(&zeros()).unwrap();
    last.bytes_mut().fill(1);
    drop(last);
    assert_eq!(kept_mappings_kib(), 0);
    keep_mappings(true);
}
