//! Anonymous mappings in transparent huge pages for large tensors, and the ones a worker keeps
//! between requests.
//!
//! A worker that serves many requests of one problem (a reused worker measuring window after
//! window) would otherwise map its large outputs afresh for every request: the kernel zeroes
//! each page at the first call's fault, and the tensor is unmapped before the reply. A dropped
//! tensor of [`KEPT_MIN`] bytes or more hands its mapping back instead ([`HugeMap::keep`]), and
//! the next tensor of its size takes it ([`HugeMap::kept_or_new`]) with the pages that held
//! anything zeroed by a `memset` (at the speed memory is written), as fresh pages would read,
//! or, for an output nothing reads before the kernel overwrites it, as it was left.
//! Before another task is handed a kept mapping, its protection and guard markers are undone
//! and `/proc/self/maps` must show it one mapping of its own (a task may have `mprotect`ed it,
//! unmapped part of it, where this process may since have mapped memory it uses, or mapped
//! something else over it). A worker's last request keeps nothing ([`keep_mappings`]); a
//! request that does not use a kept mapping releases it at its end ([`end_request`]), so a
//! problem that shrank gives its memory back; an allocation that fails is tried again once the
//! kept mappings are released; the worker's memory-growth check leaves out what they hold
//! ([`kept_mappings_kib`]).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::private_map::{self, Held};

/// Size and alignment of a transparent huge page on x86-64 and most arm64 kernels.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Mappings of at least this many bytes are kept between requests: well past any last-level
/// cache, where which physical pages back a tensor averages out over its many pages (smaller
/// tensors get fresh pages every time, see [`crate::HostTensor::allocate`]).
const KEPT_MIN: usize = 64 << 20;

/// Most mappings kept at once.
const KEPT_MAPS: usize = 8;

/// What a kept mapping holds when a tensor takes it ([`HugeMap::kept_or_new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptContents {
    /// Zeros, as fresh pages read.
    Zeroed,
    /// What the request that kept it left there: for an output nothing reads before the kernel
    /// overwrites it ([`crate::HostTensor::allocate_overwritten`]).
    AsLeft,
}

/// A mapping a dropped tensor handed back.
#[derive(Debug)]
struct Kept {
    map: HugeMap,
    /// The runs of its pages that held anything when it was kept, as page indices from its
    /// base: what [`kept_mappings_kib`] counts (those of its own).
    resident: Vec<(usize, usize, Held)>,
    /// The request it was kept in ([`REQUEST`]).
    request: u64,
}

/// The kept mappings, least recently kept first.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The number of the request being served ([`end_request`]).
static REQUEST: AtomicU64 = AtomicU64::new(0);

/// Whether the mappings of tensors dropped from now on are kept for a later request of this
/// process: a worker's last request keeps none. `false` also releases those kept so far (and
/// the kept copy-on-write mappings of inputs the caller shares).
pub fn keep_mappings(keep: bool) {
    private_map::set_keeping(keep);
    if !keep {
        release_all();
    }
}

/// Ends a request: releases the kept mappings it did not use (kept by an earlier request and
/// not taken by this one), so that the memory of a problem that shrank comes back after one
/// request.
pub fn end_request() {
    let ended = REQUEST.fetch_add(1, Ordering::AcqRel);
    lock().retain(|k| k.request >= ended);
}

/// The resident memory the kept mappings hold, in KiB: anonymous memory a worker's growth
/// check leaves out (it would be given back, or used, by the next request).
pub fn kept_mappings_kib() -> u64 {
    let page = private_map::page_size() as u64;
    let pages: u64 = lock()
        .iter()
        .flat_map(|k| k.resident.iter())
        .filter(|(_, _, held)| *held == Held::Own)
        .map(|(first, end, _)| (end - first) as u64)
        .sum();
    pages * page / 1024
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Kept>> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

fn release_all() {
    let released = std::mem::take(&mut *lock());
    drop(released);
}

/// An anonymous private mapping, aligned to a huge page and advised into transparent huge pages
/// (where the kernel allows them): `size` bytes from `base`, inside the `mapped` bytes from
/// `start` (up to one huge page more, for the alignment). Unmapped when dropped, unless kept
/// ([`HugeMap::keep`]).
#[derive(Debug)]
pub(crate) struct HugeMap {
    start: NonNull<u8>,
    mapped: usize,
    pub(crate) base: NonNull<u8>,
    size: usize,
}

// SAFETY: the mapping is owned by this value alone (as a `Vec<u8>` owns its buffer); it moves
// between threads only through [`KEPT`]'s lock.
unsafe impl Send for HugeMap {}

impl HugeMap {
    /// A kept mapping of `size` bytes that can still serve ([`HugeMap::usable`]), its
    /// resident pages zeroed unless `contents` says [`KeptContents::AsLeft`], else a new one
    /// ([`HugeMap::new`]); when that fails, tried again once the kept mappings are released.
    /// `None` when it still fails.
    pub(crate) fn kept_or_new(size: usize, contents: KeptContents) -> Option<HugeMap> {
        if size >= KEPT_MIN {
            let found = {
                let mut kept = lock();
                let at = kept.iter().rposition(|k| k.map.size == size);
                at.map(|at| kept.remove(at))
            };
            // Checked (and, to be zeroed, its resident pages read) again: a task of a request
            // that did not use it may have changed it since it was kept.
            if let Some(kept) = found.filter(|k| k.map.usable()) {
                match contents {
                    KeptContents::Zeroed => {
                        if let Some(resident) = kept.map.resident() {
                            kept.map.zero(&resident);
                            return Some(kept.map);
                        }
                    }
                    KeptContents::AsLeft => {
                        kept.map.advise_huge();
                        return Some(kept.map);
                    }
                }
            }
        }
        HugeMap::new(size).or_else(|| {
            release_all();
            HugeMap::new(size)
        })
    }

    /// Keeps this mapping for a later tensor of its size ([`HugeMap::kept_or_new`]) when it
    /// holds at least [`KEPT_MIN`] bytes, mappings are being kept ([`keep_mappings`]), it can
    /// still serve ([`HugeMap::usable`]) and the pagemap says which of its pages hold
    /// anything; else unmaps it. The least recently kept goes beyond [`KEPT_MAPS`].
    pub(crate) fn keep(self) {
        if self.size < KEPT_MIN || !private_map::keeping() || !self.usable() {
            return;
        }
        let Some(resident) = self.resident() else {
            return;
        };
        let kept = Kept {
            map: self,
            resident,
            request: REQUEST.load(Ordering::Acquire),
        };
        let dropped = {
            let mut all = lock();
            all.push(kept);
            (all.len() > KEPT_MAPS).then(|| all.remove(0))
        };
        drop(dropped);
    }

    /// Whether another task may be handed this mapping: made readable and writable again
    /// ([`private_map::restore_access`]), and still one mapping of its own
    /// ([`private_map::one_anonymous_line`]). A task may have `mprotect`ed it or installed
    /// guard markers in it (the next task would crash at its first touch), unmapped part of it
    /// (where this process may since have mapped memory it uses: the next task would zero and
    /// write it), or mapped a file or shared memory over it (the next task's writes would go
    /// there).
    fn usable(&self) -> bool {
        let (base, size) = (self.base.as_ptr() as usize, self.size);
        // Removing guard markers from anonymous memory in huge pages costs next to nothing.
        private_map::restore_access(base, size, true) && private_map::one_anonymous_line(base, size)
    }

    /// The runs of its pages that hold anything ([`private_map::resident_pages`]), as page
    /// indices from `base`; `None` when the pagemap cannot be read.
    fn resident(&self) -> Option<Vec<(usize, usize, Held)>> {
        let page = private_map::page_size();
        private_map::resident_pages(self.base.as_ptr() as usize, self.size / page)
    }

    /// Zeroes the pages of `resident` (runs from `base`) that may hold anything but zeros, so
    /// that the whole mapping reads as fresh pages do, and advises it into huge pages again (a
    /// task may have advised otherwise). A page shared with others is zeroed only where it
    /// holds something (the zero page a read faulted in does not: writing it would take a page
    /// of memory for nothing).
    fn zero(&self, resident: &[(usize, usize, Held)]) {
        let page = private_map::page_size();
        for &(first, end, held) in resident {
            let spans = match held {
                Held::Own => vec![(first * page, (end - first) * page)],
                Held::Shared => (first..end).map(|p| (p * page, page)).collect(),
            };
            for (at, bytes) in spans {
                // SAFETY: `at + bytes <= size` (pagemap runs of this mapping's `size` bytes
                // from `base`), readable and writable (`usable`), owned by this value, and no
                // slice of it is live.
                let span =
                    unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(at), bytes) };
                if held == Held::Own || span.iter().any(|&b| b != 0) {
                    span.fill(0);
                }
            }
        }
        self.advise_huge();
    }

    /// Advises the mapping into huge pages again (a task may have advised otherwise).
    fn advise_huge(&self) {
        // SAFETY: `size` bytes from `base` lie inside the mapping; the advice only changes how
        // they are backed.
        unsafe { libc::madvise(self.base.as_ptr().cast(), self.size, libc::MADV_HUGEPAGE) };
    }

    /// `size` bytes (a multiple of [`HUGE_PAGE`]) of zeros on a huge-page boundary; `None`
    /// when the mapping fails (out of memory or address space).
    fn new(size: usize) -> Option<HugeMap> {
        let mapped = size.checked_add(HUGE_PAGE)?;
        // Advised `MADV_DONTDUMP`, and its body `MADV_HUGEPAGE` below: what tells the body from
        // anonymous memory of this process mapped into a hole a task made in it (held outputs
        // are advised into huge pages too, copy-on-write inputs' guard zones `MADV_DONTDUMP`):
        // memory of other flags is a line of its own in `/proc/self/maps` ([`HugeMap::usable`]).
        let start = private_map::reserve(mapped)?;
        let offset = start.as_ptr().align_offset(HUGE_PAGE);
        // SAFETY: `offset < HUGE_PAGE`, so `offset + size <= mapped`: inside the mapping.
        let base = unsafe { start.add(offset) };
        // SAFETY: `size` bytes from `base` lie inside the mapping just made; the advice only
        // changes how they are backed, and failing (no THP in this kernel) is harmless.
        unsafe { libc::madvise(base.as_ptr().cast(), size, libc::MADV_HUGEPAGE) };
        Some(HugeMap {
            start,
            mapped,
            base,
            size,
        })
    }
}

impl Drop for HugeMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped only here (a kept one is moved into
        // [`KEPT`], not dropped); the tensor that pointed into it is gone.
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.mapped) };
    }
}
