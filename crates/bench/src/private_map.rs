//! A caller's shared buffer mapped copy-on-write (`MAP_PRIVATE`) into this process: the pages
//! are the caller's until the process writes one, which then gets a private copy; the caller's
//! stays as it was. Which pages were written is read from `/proc/self/pagemap` (a written page
//! is anonymous, an unwritten one the buffer's), so that checking and restoring an input costs
//! the pages a kernel wrote, not the whole tensor. A buffer that ends within a page (most
//! tensors' sizes) has its whole pages mapped so and its last part page copied into anonymous
//! memory of its own (the tail), which is checked and restored by copying: less than a page.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::RawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use tunebox_protocol::SharedData;

/// Most mappings a process keeps between requests ([`PrivateMap::keep`]).
const KEPT_MAPS: usize = 8;

/// Mappings kept for a later request of the same buffers, least recently kept first.
static KEPT: Mutex<Vec<PrivateMap>> = Mutex::new(Vec::new());

/// How many kernel calls this process has made ([`note_kernel_call`]): a kernel writes through
/// the pointers it was given, which no method of a tensor sees.
static KERNEL_CALLS: AtomicU64 = AtomicU64::new(0);

/// Notes that a kernel is about to be called with the tensors' pointers: what a look at a
/// tensor found before ([`crate::HostTensor::is_pristine`]) no longer tells what it holds, and
/// keeping its mapping for the next request looks again.
pub fn note_kernel_call() {
    KERNEL_CALLS.fetch_add(1, Ordering::AcqRel);
}

fn kernel_calls() -> u64 {
    KERNEL_CALLS.load(Ordering::Acquire)
}

/// `madvise` advice that faults pages in for reading without writing them (Linux 5.14).
const MADV_POPULATE_READ: libc::c_int = 22;

/// Bits of a `/proc/self/pagemap` entry (Documentation/admin-guide/mm/pagemap.rst).
const PAGE_PRESENT: u64 = 1 << 63;
const PAGE_SWAPPED: u64 = 1 << 62;
const PAGE_FILE_OR_SHARED: u64 = 1 << 61;
const PAGE_EXCLUSIVE: u64 = 1 << 56;
const PAGE_GUARD: u64 = 1 << 58;

/// `madvise` advice that removes guard markers (`MADV_GUARD_INSTALL`, Linux 6.13).
const MADV_GUARD_REMOVE: libc::c_int = 103;

/// Pagemap entries read at a time (512 KiB: 1 GiB of 4 KiB pages in four reads).
const ENTRIES_PER_READ: usize = 1 << 16;

/// `madvise` advice that installs guard markers (Linux 6.13).
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// Which guard markers making a mapping usable again removes ([`PrivateMap::usable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unguard {
    None,
    /// Those of its guard zones and tail, not of its whole pages (a look found none there).
    OutsidePages,
    All,
}

/// Removes the guard markers of `size` bytes from `start` (page-aligned, a mapping of the
/// caller's own); harmless where there are none or the kernel has none.
fn remove_guard_markers(start: usize, size: usize) {
    // SAFETY: a mapping the caller owns; only guard markers go, no contents change.
    unsafe { libc::madvise(start as *mut libc::c_void, size, MADV_GUARD_REMOVE) };
}

/// Whether a look for written pages ([`PrivateMap::written_pages`]) finds a guard marker too:
/// a marker reads in `/proc/self/pagemap` as a swapped page (and, from Linux 6.15, with its
/// own bit), which the look counts as written; or this process cannot install one at all (a
/// kernel without them, a filter refusing the advice). Probed once, on a page of its own.
fn looks_find_guard_markers() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let page = page_size();
        let Some(at) = reserve(page) else {
            return false;
        };
        let at = at.as_ptr().cast::<libc::c_void>();
        // SAFETY: the page mapped just above, of this function alone.
        let installed = unsafe { libc::madvise(at, page, MADV_GUARD_INSTALL) } == 0;
        let found = !installed
            || page_runs(at as usize, 1, |entry| {
                (entry & (PAGE_SWAPPED | PAGE_GUARD) != 0).then_some(())
            })
            .is_some_and(|runs| !runs.is_empty());
        // SAFETY: as above; nothing refers to the page.
        unsafe { libc::munmap(at, page) };
        found
    })
}

/// The size of a page of this machine.
pub(crate) fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// `len` bytes of a caller's buffer mapped copy-on-write (its whole pages; the tail, past the
/// last whole page, copied), after `guard` bytes of anonymous memory and before as many (the
/// guard zones of a tensor), in one reservation that this value unmaps on drop.
#[derive(Debug)]
pub(crate) struct PrivateMap {
    /// The reservation's start (the front guard).
    base: NonNull<u8>,
    /// The reservation's size: `guard + len` rounded up to a page, `+ guard`.
    size: usize,
    guard: usize,
    len: usize,
    /// The caller's buffer: what unwritten pages read, and what written ones are compared
    /// with. Also keeps the descriptor behind the mapping open.
    source: SharedData,
    page: usize,
    /// The pages are anonymous memory holding a copy of `source`: mapping a buffer over them
    /// failed and so did mapping `source` back ([`PrivateMap::remap`]). Checked and restored
    /// by comparing and copying all of them, and never kept.
    anonymous: bool,
    /// The count of kernel calls ([`note_kernel_call`]) when a look found no page written and
    /// the tail as the caller's ([`PrivateMap::unchanged`]); [`NO_LOOK`] once the process may
    /// have written it otherwise. While the count has not moved, keeping the mapping needs no
    /// second look ([`PrivateMap::keep`]). Atomic rather than a `Cell` only so that tensors
    /// stay `RefUnwindSafe`.
    unwritten_at: AtomicU64,
}

/// [`PrivateMap::unwritten_at`] when no look stands (no count of calls reaches it).
const NO_LOOK: u64 = u64::MAX;

// SAFETY: the reservation is owned by this value alone (as a `Vec<u8>` owns its buffer); the
// shared buffer is only read through `source`, which is `Send`.
unsafe impl Send for PrivateMap {}

impl PrivateMap {
    /// Maps `source` copy-on-write between two `guard`-byte anonymous zones (a multiple of
    /// the page size): its whole pages mapped, its tail copied; faults the pages in for
    /// reading. `None` when the buffer is shorter than a page, its descriptor cannot be found
    /// (`/proc/self/maps` and `/proc/self/fd`), or a mapping fails.
    pub(crate) fn new(source: &SharedData, guard: usize) -> Option<PrivateMap> {
        let page = page_size();
        let len = source.len();
        if len < page || !guard.is_multiple_of(page) {
            return None;
        }
        let fd = descriptor_of(source.as_ptr() as usize)?;
        let size = len
            .checked_next_multiple_of(page)?
            .checked_add(guard.checked_mul(2)?)?;
        let base = reserve(size)?;
        let whole = len - len % page;
        // SAFETY: `guard + whole <= size`: the data range lies inside the reservation made
        // just above, which only this function knows of, so `MAP_FIXED` replaces nothing else.
        // `fd` is the open descriptor of the buffer `source` maps, at least `whole` bytes
        // long, kept open by `source` (stored below) for as long as the mapping lives; a
        // private mapping never writes to it.
        let data = unsafe {
            libc::mmap(
                base.as_ptr().add(guard).cast(),
                whole,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                fd,
                0,
            )
        };
        let map = PrivateMap {
            base,
            size,
            guard,
            len,
            source: source.clone(),
            page,
            anonymous: false,
            unwritten_at: AtomicU64::new(NO_LOOK),
        };
        if data == libc::MAP_FAILED {
            return None; // `map` unmaps the reservation.
        }
        map.populate(0, whole);
        map.copy_tail();
        Some(map)
    }

    /// A mapping of `source` kept from an earlier request ([`PrivateMap::keep`]) when there is
    /// one with `guard`-byte zones, else a new one ([`PrivateMap::new`]). A worker that serves
    /// many requests (a reused worker measuring window after window) then maps a large input
    /// once: a new mapping faults in every page of it again (some 135 ms per GiB of 4 KiB
    /// pages), a kept one reads as it did. Its tail is copied again: the caller may have
    /// written the buffer in place since (a `SharedBuffer` sent again under its id), which the
    /// mapped pages read through to and a copy does not.
    pub(crate) fn kept_or_new(source: &SharedData, guard: usize) -> Option<PrivateMap> {
        let found = {
            let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
            let at = kept.iter().position(|m| {
                m.source.id() == source.id() && m.len == source.len() && m.guard == guard
            });
            at.map(|at| kept.remove(at))
        };
        match found {
            // Checked when kept (guard markers removed then) and again now, cheaply: another
            // task of this worker may have changed it since. One that fails is unmapped.
            Some(map) if map.usable(Unguard::None) => {
                // A look belongs to the request that made it.
                map.forget_look();
                map.copy_tail();
                Some(map)
            }
            _ => PrivateMap::new(source, guard),
        }
    }

    /// Keeps this mapping for a later request of the same buffer ([`PrivateMap::kept_or_new`]),
    /// the pages the process wrote dropped first, so that it reads as the caller's buffer again;
    /// the least recently kept mapping goes beyond [`KEPT_MAPS`].
    ///
    /// A look made in this request since the kernel was last called that found no page
    /// written ([`PrivateMap::unchanged`]) spares the second walk of its page tables that
    /// finding the written pages takes, and, where a look sees guard markers
    /// ([`looks_find_guard_markers`]), the one that removing them from its pages takes (those
    /// of its guard zones and tail are removed all the same).
    pub(crate) fn keep(self) {
        let looked = self.unwritten_at.load(Ordering::Acquire) == kernel_calls();
        let unguard = if looked && looks_find_guard_markers() {
            Unguard::OutsidePages
        } else {
            Unguard::All
        };
        if self.anonymous || !keeping() || !self.usable(unguard) {
            return; // Dropped: a later request maps the buffer afresh.
        }
        if looked {
            // Reads as the caller's buffer already but for the tail, which is copied back.
            self.copy_tail();
        } else {
            self.drop_written();
        }
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push(self);
        if kept.len() > KEPT_MAPS {
            kept.remove(0);
        }
    }

    /// Whether this mapping can serve another request: its protection made readable and
    /// writable again, the guard markers `unguard` says removed too (from all of it, which
    /// walks its page tables: ~4 ms per GiB of 4 KiB pages) ([`restore_access`]) and its layout as
    /// [`PrivateMap::new`] made it ([`reservation_intact`]). A task may have changed either
    /// (an `mprotect` in a library's destructor; a `MAP_FIXED` mapping over its input), and a
    /// kept mapping left so would crash the next task, an innocent one, or hand it another
    /// input, or write its writes into the caller's buffer.
    fn usable(&self, unguard: Unguard) -> bool {
        let (base, data) = (self.base.as_ptr() as usize, self.data().as_ptr() as usize);
        if unguard == Unguard::OutsidePages {
            let pages_end = data + self.whole();
            remove_guard_markers(base, data - base);
            remove_guard_markers(pages_end, base + self.size - pages_end);
        }
        restore_access(base, self.size, unguard == Unguard::All)
            && reservation_intact(
                (self.base.as_ptr() as usize, self.size),
                (self.data().as_ptr() as usize, self.whole()),
                self.source.as_ptr() as usize,
            )
    }

    /// The reservation's start: the front guard zone.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// The first byte of the mapped buffer.
    pub(crate) fn data(&self) -> NonNull<u8> {
        // SAFETY: `guard < size`: inside the reservation.
        unsafe { self.base.add(self.guard) }
    }

    /// Whether every page still reads as the caller's buffer: the pages the process wrote
    /// (from the pagemap) and the tail are compared with it; without a readable pagemap, all
    /// of them.
    /// A look that finds no page written notes it for [`PrivateMap::keep`].
    pub(crate) fn unchanged(&self) -> bool {
        let data = self.bytes();
        let whole = self.whole();
        let calls = kernel_calls();
        match self.written_pages() {
            Some(pages) => {
                let tail = data[whole..] == self.source[whole..];
                let look = if pages.is_empty() && tail {
                    calls
                } else {
                    NO_LOOK
                };
                self.unwritten_at.store(look, Ordering::Release);
                tail && pages.iter().all(|&(start, end)| {
                    let (start, end) = (start * self.page, end * self.page);
                    data[start..end] == self.source[start..end]
                })
            }
            None => data == &self.source[..],
        }
    }

    /// Forgets what the last look found: the process is about to write the mapping.
    pub(crate) fn forget_look(&self) {
        self.unwritten_at.store(NO_LOOK, Ordering::Release);
    }

    /// The bytes of the buffer's whole pages, which are mapped; the rest, the tail, is copied.
    fn whole(&self) -> usize {
        self.len - self.len % self.page
    }

    /// Copies the caller's tail (the bytes past the buffer's last whole page) over this
    /// mapping's: what restores it, as dropping the copies restores the pages.
    fn copy_tail(&self) {
        let whole = self.whole();
        self.copy_back(whole, self.len - whole);
    }

    /// Drops the private copies of every page the process wrote (all pages, without a
    /// readable pagemap), so that they read the caller's buffer again, and faults them back
    /// in for reading; where the kernel refuses the advice, copies the caller's bytes over
    /// them instead. The tail is copied again.
    pub(crate) fn drop_written(&self) {
        self.copy_tail();
        let pages = self
            .written_pages()
            .unwrap_or_else(|| vec![(0, self.len / self.page)]);
        for (start, end) in pages {
            let (offset, bytes) = (start * self.page, (end - start) * self.page);
            // SAFETY: the range lies inside the private mapping (whole pages); for a
            // private file mapping `MADV_DONTNEED` drops the process's copies, and the pages
            // read the file's contents again. No reference into these bytes is live while
            // `&self` is only shared: the tensor hands out slices only through borrows of
            // itself, and the caller holds none across `reset`.
            let dropped = !self.anonymous
                && unsafe {
                    libc::madvise(
                        self.data().as_ptr().add(offset).cast(),
                        bytes,
                        libc::MADV_DONTNEED,
                    )
                } == 0;
            if dropped {
                self.populate(offset, bytes);
            } else {
                // Advice refused (a filter, another kernel), or anonymous pages (which it
                // would zero): write the caller's bytes back.
                self.copy_back(offset, bytes);
            }
        }
    }

    /// Copies the caller's `bytes` bytes from `offset` over the mapping's.
    fn copy_back(&self, offset: usize, bytes: usize) {
        // SAFETY: `offset + bytes <= len` (the callers' ranges are inside the data), inside both
        // the reservation and `source` (of the same length), which never overlap; no
        // reference into the reservation is live (as in `drop_written`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.source.as_ptr().add(offset),
                self.data().as_ptr().add(offset),
                bytes,
            );
        }
    }

    /// Maps `source` (of the same length) in place of the current buffer, at the same
    /// addresses, copy-on-write, and faults it in: the private copies of written pages go with
    /// the old mapping; its tail is copied. Returns whether it did. On `false` it reads as the
    /// current buffer: untouched when `source` cannot be mapped at all, else (the mapping
    /// failed midway, which may unmap the range) the current buffer mapped again, or, when that
    /// fails too, copied into anonymous memory (checked and restored by copying all of it).
    pub(crate) fn remap(&mut self, source: &SharedData) -> bool {
        if source.len() != self.len {
            return false;
        }
        let Some(fd) = descriptor_of(source.as_ptr() as usize) else {
            return false;
        };
        self.remap_fd(source, fd)
    }

    /// [`PrivateMap::remap`] with `fd`, the open descriptor of `source`.
    fn remap_fd(&mut self, source: &SharedData, fd: RawFd) -> bool {
        self.forget_look();
        if self.map_file(fd) {
            self.source = source.clone();
            self.populate(0, self.whole());
            self.copy_tail();
            return true;
        }
        let mapped_back =
            descriptor_of(self.source.as_ptr() as usize).is_some_and(|fd| self.map_file(fd));
        if mapped_back {
            self.populate(0, self.whole());
        } else {
            self.map_anonymous();
        }
        self.copy_tail();
        false
    }

    /// Maps the file `fd` (at least [`PrivateMap::whole`] bytes) copy-on-write over the mapped
    /// pages; whether it did (on `false` the range may be unmapped).
    fn map_file(&mut self, fd: RawFd) -> bool {
        // SAFETY: replaces exactly the mapped pages of this reservation (owned by `self`, no
        // slice of it live: `&mut self`) with a private mapping of `fd`, an open descriptor
        // the caller keeps open for as long as the mapping lives (the `SharedData` it belongs
        // to is, or becomes, `self.source`).
        let data = unsafe {
            libc::mmap(
                self.data().as_ptr().cast(),
                self.whole(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                fd,
                0,
            )
        };
        if data == libc::MAP_FAILED {
            return false;
        }
        self.anonymous = false;
        true
    }

    /// Anonymous memory over the mapped pages holding a copy of the current buffer: never
    /// unmapped memory, never zeros where the buffer holds data.
    fn map_anonymous(&mut self) {
        let whole = self.whole();
        // SAFETY: as `map_file`, an anonymous mapping over the same range.
        let data = unsafe {
            libc::mmap(
                self.data().as_ptr().cast(),
                whole,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(
            data != libc::MAP_FAILED,
            "cannot map memory over a tensor's own reservation"
        );
        self.anonymous = true;
        self.copy_back(0, whole);
    }

    /// Faults `bytes` bytes from `offset` in for reading (best effort: kernels before 5.14
    /// fault them in at the first touch instead).
    fn populate(&self, offset: usize, bytes: usize) {
        // SAFETY: a range of whole pages inside the mapping; the advice only maps pages.
        unsafe {
            libc::madvise(
                self.data().as_ptr().add(offset).cast(),
                bytes,
                MADV_POPULATE_READ,
            );
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` mapped, readable bytes at `data()`, alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.data().as_ptr(), self.len) }
    }

    /// The runs of the mapped pages the process wrote, as `(first, end)` page indices, from
    /// `/proc/self/pagemap`: a present page that is not the file's (a private copy), one
    /// swapped out (only private copies are), or one holding a guard marker (read as swapped,
    /// and from Linux 6.15 with a bit of its own); the tail's page is not the file's, and never
    /// among them. `None` when the pagemap cannot be read, or the pages are anonymous.
    fn written_pages(&self) -> Option<Vec<(usize, usize)>> {
        if self.anonymous {
            return None; // Every page is anonymous: the pagemap cannot tell the written.
        }
        let runs = page_runs(
            self.data().as_ptr() as usize,
            self.len / self.page,
            |entry| {
                ((entry & PAGE_PRESENT != 0 && entry & PAGE_FILE_OR_SHARED == 0)
                    || entry & (PAGE_SWAPPED | PAGE_GUARD) != 0)
                    .then_some(())
            },
        )?;
        Some(
            runs.into_iter()
                .map(|(first, end, ())| (first, end))
                .collect(),
        )
    }
}

/// `size` bytes of anonymous memory at an address the kernel picks, advised `MADV_DONTDUMP`:
/// what tells a reservation's guard zones (and tail) from anonymous memory mapped next to them
/// or into a hole a task made ([`reservation_intact`]), since mappings of other flags are never
/// merged with them (left out of core dumps, the advice's only other effect). `None` when the
/// mapping fails.
pub(crate) fn reserve(size: usize) -> Option<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping at an address the kernel picks; nothing else is
    // affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping just made; the advice changes no contents.
    unsafe { libc::madvise(base, size, libc::MADV_DONTDUMP) };
    NonNull::new(base.cast())
}

/// Whether the mappings of dropped tensors are kept for a later request of this process
/// (`tunebox_bench::keep_mappings`).
static KEEPING: AtomicBool = AtomicBool::new(true);

/// Whether dropped tensors' mappings are kept ([`KEEPING`]).
pub(crate) fn keeping() -> bool {
    KEEPING.load(Ordering::Acquire)
}

/// Sets [`KEEPING`]; `false` also unmaps the kept mappings.
pub(crate) fn set_keeping(keep: bool) {
    KEEPING.store(keep, Ordering::Release);
    if !keep {
        release_kept();
    }
}

/// Unmaps the kept mappings ([`PrivateMap::keep`]).
fn release_kept() {
    let released = std::mem::take(&mut *KEPT.lock().unwrap_or_else(PoisonError::into_inner));
    drop(released);
}

/// The runs of the `pages` pages from `start` (page-aligned) to which `/proc/self/pagemap`'s
/// entries give a kind by `pick` (`None`: left out), as `(first, end, kind)` with page indices
/// from `start`; `None` when the pagemap cannot be read.
fn page_runs<K: Copy + PartialEq>(
    start: usize,
    pages: usize,
    pick: impl Fn(u64) -> Option<K>,
) -> Option<Vec<(usize, usize, K)>> {
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    let page = page_size();
    let first = start / page;
    let mut runs: Vec<(usize, usize, K)> = Vec::new();
    let mut entries = vec![0u8; ENTRIES_PER_READ.min(pages) * 8];
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(ENTRIES_PER_READ);
        let chunk = &mut entries[..n * 8];
        pagemap
            .read_exact_at(chunk, ((first + done) * 8) as u64)
            .ok()?;
        for (i, entry) in chunk.chunks_exact(8).enumerate() {
            let entry = u64::from_ne_bytes(entry.try_into().expect("8-byte entries"));
            if let Some(kind) = pick(entry) {
                let page = done + i;
                match runs.last_mut() {
                    Some((_, end, k)) if *end == page && *k == kind => *end += 1,
                    _ => runs.push((page, page + 1, kind)),
                }
            }
        }
        done += n;
    }
    Some(runs)
}

/// How an anonymous page that holds something holds it ([`resident_pages`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// Present and mapped by this process alone, or swapped out: it may hold anything.
    Own,
    /// Present but mapped elsewhere too: the shared zero page a read faulted in (zeros), or a
    /// page a `fork` shares (anything).
    Shared,
}

/// The runs of the `pages` pages from `start` (page-aligned) of anonymous memory that hold
/// anything, as `(first, end, how)` with page indices from `start`: the pages that may not read
/// as zeros. `None` when the pagemap cannot be read.
pub(crate) fn resident_pages(start: usize, pages: usize) -> Option<Vec<(usize, usize, Held)>> {
    let own = PAGE_PRESENT | PAGE_EXCLUSIVE;
    page_runs(start, pages, |entry| {
        if entry & PAGE_SWAPPED != 0 || entry & own == own {
            Some(Held::Own)
        } else if entry & PAGE_PRESENT != 0 {
            Some(Held::Shared)
        } else {
            None
        }
    })
}

impl Drop for PrivateMap {
    fn drop(&mut self) {
        // SAFETY: the reservation made in `new`, `size` bytes, unmapped only here; the
        // private data mapping lies inside it and goes with it.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.size);
        }
    }
}

/// The open descriptor of the file mapped at `address` in this process: the mapping's device
/// and inode from `/proc/self/maps`, matched against `/proc/self/fd`. The mapping must start
/// at `address` and at offset 0 (as a shared buffer's does).
fn descriptor_of(address: usize) -> Option<RawFd> {
    let (dev, inode) = mappings()?
        .into_iter()
        .find(|m| m.start == address && m.offset == 0 && m.inode != 0)
        .map(|m| (m.dev, m.inode))?;
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .filter_map(Result::ok)
        .find_map(|entry| {
            let fd: RawFd = entry.file_name().to_str()?.parse().ok()?;
            let meta = std::fs::metadata(entry.path()).ok()?;
            let st_dev = meta.dev();
            (meta.ino() == inode && (libc::major(st_dev), libc::minor(st_dev)) == dev).then_some(fd)
        })
}

/// One line of `/proc/self/maps`: `start-end perms offset major:minor inode path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    /// `p` in its permissions (copy-on-write), not `s` (shared).
    private: bool,
    offset: u64,
    dev: (u32, u32),
    inode: u64,
}

impl Mapping {
    fn parse(line: &str) -> Option<Mapping> {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let private = fields.next()?.ends_with('p');
        let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
        let (major, minor) = fields.next()?.split_once(':')?;
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            private,
            offset,
            dev: (
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            ),
            inode: fields.next()?.parse().ok()?,
        })
    }
}

/// This process's mappings, in address order; `None` without a readable `/proc/self/maps`.
fn mappings() -> Option<Vec<Mapping>> {
    let maps = BufReader::new(File::open("/proc/self/maps").ok()?);
    Some(
        maps.lines()
            .map_while(Result::ok)
            .filter_map(|line| Mapping::parse(&line))
            .collect(),
    )
}

/// Whether the reservation (`start`, `size` bytes) is laid out as [`PrivateMap::new`] made it,
/// by `/proc/self/maps`: its `data` range (`bytes` from there) mapped private from the file
/// that `source` (a mapping of it from offset 0) maps, page for page from its start, and the
/// parts before and after it (the guard zones, the tail's page) each one line of private
/// anonymous memory (which may go on past the reservation, merged with a neighbour of the same
/// flags). A task may have mapped something else over its input (`MAP_FIXED`), or the caller's
/// own buffer shared (`MAP_SHARED`), whose writes would then reach the caller; or unmapped part
/// of a guard zone, where this process may since have mapped memory of its own (a line of its
/// own there, since its flags differ: `MADV_DONTDUMP`), which the next task would write.
fn reservation_intact(
    (start, size): (usize, usize),
    (data, bytes): (usize, usize),
    source: usize,
) -> bool {
    let Some(maps) = mappings() else {
        return false;
    };
    let Some(file) = maps.iter().find(|m| m.start == source && m.offset == 0) else {
        return false;
    };
    let (end, data_end) = (start + size, data + bytes);
    let mut at = data;
    for m in maps.iter().filter(|m| m.end > data && m.start < data_end) {
        let same = m.start == at
            && m.end <= data_end
            && m.private
            && m.inode != 0
            && (m.dev, m.inode) == (file.dev, file.inode)
            && m.start.checked_sub(data) == usize::try_from(m.offset).ok();
        if !same {
            return false;
        }
        at = m.end;
    }
    at == data_end
        && within_one_anonymous_line(&maps, start, data - start)
        && within_one_anonymous_line(&maps, data_end, end - data_end)
}

/// Makes `size` bytes from `start` (page-aligned, a mapping of the caller's own) readable and
/// writable again, as a task may have left them: with `unguard`, guard markers
/// (`MADV_GUARD_INSTALL`, Linux 6.13) removed; pages unlocked; then `PROT_READ | PROT_WRITE`,
/// which merges the pieces a task's `mprotect` split back into one mapping. `false` when the
/// protection cannot be set (part of it is unmapped).
pub(crate) fn restore_access(start: usize, size: usize, unguard: bool) -> bool {
    let at = start as *mut libc::c_void;
    // SAFETY: a mapping the caller owns; guard markers and locks go, no contents change.
    // Either may fail (an older kernel, nothing locked) without harm.
    unsafe {
        if unguard {
            libc::madvise(at, size, MADV_GUARD_REMOVE);
        }
        libc::munlock(at, size);
    }
    // SAFETY: as above; only its protection changes, to what it was made with.
    unsafe { libc::mprotect(at, size, libc::PROT_READ | libc::PROT_WRITE) == 0 }
}

/// Whether `size` bytes from `start` lie within one line of `/proc/self/maps`, private
/// anonymous memory: a mapping of the caller's own that a task may have changed is one line
/// again once [`restore_access`] merged the pieces its `mprotect` split, unless something else
/// lies inside it (a hole a task made, where this process may since have mapped memory of its
/// own, of other flags) or a task changed its flags. It may go on past `size` bytes, merged
/// with a neighbour of the same flags.
pub(crate) fn one_anonymous_line(start: usize, size: usize) -> bool {
    mappings().is_some_and(|maps| within_one_anonymous_line(&maps, start, size))
}

/// [`one_anonymous_line`] of `maps` (lines of `/proc/self/maps`, read once by the caller).
fn within_one_anonymous_line(maps: &[Mapping], start: usize, size: usize) -> bool {
    let end = start + size;
    let lines: Vec<&Mapping> = maps
        .iter()
        .filter(|m| m.end > start && m.start < end)
        .collect();
    matches!(lines[..], [m] if m.start <= start && m.end >= end && m.private && m.inode == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::SharedBuffer;

    fn buffer(pages: usize) -> SharedBuffer {
        let mut buffer = SharedBuffer::new(pages * page_size()).unwrap();
        for (i, b) in buffer.get_mut().unwrap().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        buffer
    }

    #[test]
    fn writes_are_private_found_and_dropped() {
        let buffer = buffer(64);
        let shared = buffer.share();
        let map = PrivateMap::new(&shared, page_size()).expect("a memfd maps");
        assert_eq!(map.bytes(), buffer.as_slice());
        assert_eq!(map.written_pages(), Some(vec![]));
        assert!(map.unchanged());
        let page = page_size();
        // SAFETY: inside the mapping; no slice of it is live.
        unsafe {
            *map.data().as_ptr().add(5 * page + 3) ^= 0xFF;
            *map.data().as_ptr().add(6 * page) ^= 0xFF;
            *map.data().as_ptr().add(40 * page + 1) ^= 0xFF;
        }
        assert_eq!(
            buffer.as_slice()[5 * page + 3],
            ((5 * page + 3) % 251) as u8
        );
        assert_eq!(map.written_pages(), Some(vec![(5, 7), (40, 41)]));
        assert!(!map.unchanged());
        map.drop_written();
        assert_eq!(map.written_pages(), Some(vec![]));
        assert_eq!(map.bytes(), buffer.as_slice());
        // A page written with the value it held is written, but unchanged.
        // SAFETY: as above.
        unsafe { *map.data().as_ptr().add(9 * page) = (9 * page % 251) as u8 };
        assert_eq!(map.written_pages(), Some(vec![(9, 10)]));
        assert!(map.unchanged());
        // Another buffer mapped in its place, at the same address.
        let mut map = map;
        let other = SharedBuffer::from_slice(&vec![7u8; 64 * page]).unwrap();
        let at = map.data();
        assert!(map.remap(&other.share()));
        assert_eq!(map.data(), at);
        assert_eq!(map.bytes(), other.as_slice());
        assert_eq!(map.written_pages(), Some(vec![]));
        assert!(
            !map.remap(&SharedBuffer::new(page).unwrap().share()),
            "another length"
        );
    }

    /// `len` bytes of a pattern that differs at every offset of a page, and a buffer of them.
    fn patterned(len: usize) -> (Vec<u8>, SharedBuffer) {
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let buffer = SharedBuffer::from_slice(&bytes).unwrap();
        (bytes, buffer)
    }

    /// Most tensors end within a page (a million floats: 976.56 pages): their whole pages
    /// are mapped, the tail is a copy that is checked and restored as the pages are.
    #[test]
    fn a_buffer_ending_within_a_page_is_mapped_and_its_tail_copied() {
        let page = page_size();
        let len = 3 * page + 100;
        let (bytes, buffer) = patterned(len);
        let mut map = PrivateMap::new(&buffer.share(), page).expect("a memfd maps");
        assert_eq!(map.bytes(), &bytes[..]);
        assert_eq!(
            map.written_pages(),
            Some(vec![]),
            "the tail is no mapped page"
        );
        assert!(map.unchanged());
        // The tail's last byte, then a mapped page.
        // SAFETY: inside the data range; no slice of it is live.
        unsafe { *map.data().as_ptr().add(len - 1) ^= 0xFF };
        assert_eq!(map.written_pages(), Some(vec![]));
        assert!(!map.unchanged(), "a write to the tail is found");
        map.drop_written();
        assert!(map.unchanged());
        assert_eq!(map.bytes(), &bytes[..]);
        // SAFETY: as above.
        unsafe { *map.data().as_ptr().add(page + 7) ^= 0xFF };
        assert_eq!(map.written_pages(), Some(vec![(1, 2)]));
        assert!(!map.unchanged());
        map.drop_written();
        assert_eq!(map.bytes(), &bytes[..]);
        // Another buffer of the same length: its tail comes with it.
        let other = SharedBuffer::from_slice(&vec![9u8; len]).unwrap();
        assert!(map.remap(&other.share()));
        assert_eq!(map.bytes(), other.as_slice());
        assert!(map.unchanged());
    }

    /// A remap whose mapping fails leaves the mapping reading the buffer it had (mapped back),
    /// and pages that could only be anonymous still read, check and restore as that buffer:
    /// never zeros, never unmapped memory.
    #[test]
    fn a_failed_remap_reads_the_buffer_it_had() {
        let page = page_size();
        let len = 4 * page + 33;
        let (bytes, buffer) = patterned(len);
        let mut map = PrivateMap::new(&buffer.share(), page).unwrap();
        let other = SharedBuffer::from_slice(&vec![3u8; len]).unwrap();
        // A descriptor that maps nothing: the new mapping fails.
        assert!(!map.remap_fd(&other.share(), -1));
        assert_eq!(map.bytes(), &bytes[..]);
        assert!(!map.anonymous, "the old buffer mapped back");
        assert!(map.unchanged());
        // Were that to fail too: anonymous pages holding a copy.
        map.map_anonymous();
        assert_eq!(map.bytes(), &bytes[..]);
        assert!(map.unchanged());
        // SAFETY: inside the data range; no slice of it is live.
        unsafe { *map.data().as_ptr().add(2 * page + 5) ^= 0xFF };
        assert!(!map.unchanged());
        map.drop_written();
        assert_eq!(map.bytes(), &bytes[..], "restored by copying, not zeroed");
        // A good remap maps a file again.
        assert!(map.remap(&other.share()));
        assert!(!map.anonymous);
        assert_eq!(map.bytes(), other.as_slice());
    }

    /// Keeping a mapping trusts a look that found nothing written only until a kernel is
    /// called, and only in the request that looked: a kernel's write after it is found and
    /// dropped (and guard markers a task put in the tail's page or the guard zones are removed,
    /// the pages' own having been looked at); without a call, the mapping is kept as the look
    /// found it, its pages not walked again; handed to the next request, it is looked at again
    /// when kept.
    #[test]
    fn keeping_trusts_a_look_until_a_kernel_is_called() {
        let page = page_size();
        let len = 8 * page + 10;
        let (bytes, buffer) = patterned(len);
        let shared = buffer.share();
        let poke = |map: &PrivateMap| {
            // SAFETY: inside the data range; no slice of it is live.
            unsafe { *map.data().as_ptr().add(3 * page + 1) ^= 0xFF };
        };

        let map = PrivateMap::new(&shared, page).expect("a memfd maps");
        assert!(map.unchanged());
        note_kernel_call();
        poke(&map);
        map.keep();
        let again = PrivateMap::kept_or_new(&shared, page).expect("maps");
        assert_eq!(again.bytes(), &bytes[..], "the kernel's write dropped");

        assert!(again.unchanged());
        let guard_marks = [
            again.data().as_ptr() as usize + 8 * page, // the tail's page
            again.data().as_ptr() as usize + 9 * page, // the back guard zone
            again.base.as_ptr() as usize,              // the front guard zone
        ];
        for at in guard_marks {
            // SAFETY: pages of this mapping's reservation outside its whole pages: a task
            // installs guard markers there (refused by kernels before 6.13).
            unsafe { libc::madvise(at as *mut libc::c_void, page, MADV_GUARD_INSTALL) };
        }
        // Not the kernel's doing, so not looked for: stays, as the look let it.
        poke(&again);
        again.keep();
        let third = PrivateMap::kept_or_new(&shared, page).expect("maps, its tail copied");
        assert_ne!(third.bytes(), &bytes[..], "kept without a second look");
        third.drop_written();
        assert_eq!(third.bytes(), &bytes[..]);

        // A look belongs to its request: kept after one, the mapping is handed to the next
        // without it, and a write there (a task's, no kernel called) is found when kept again.
        assert!(third.unchanged());
        third.keep();
        let fourth = PrivateMap::kept_or_new(&shared, page).expect("maps");
        assert_eq!(fourth.bytes(), &bytes[..]);
        poke(&fourth);
        fourth.keep();
        let fifth = PrivateMap::kept_or_new(&shared, page).expect("maps");
        assert_eq!(
            fifth.bytes(),
            &bytes[..],
            "the write in a request without a look dropped"
        );
    }

    #[test]
    fn buffers_shorter_than_a_page_are_not_mapped() {
        let buffer = SharedBuffer::new(page_size() - 1).unwrap();
        assert!(PrivateMap::new(&buffer.share(), page_size()).is_none());
        let empty = SharedBuffer::new(0).unwrap();
        assert!(PrivateMap::new(&empty.share(), page_size()).is_none());
    }

    /// A caller may write its shared buffer in place between requests (same id, as
    /// `SharedBuffer::get_mut` allows once no handle is left): a kept mapping must read it as
    /// it is now, its copied tail too (review of f9203db).
    #[test]
    fn a_kept_mapping_reads_a_buffer_written_in_place_tail_too() {
        let page = page_size();
        let len = 2 * page + 10;
        let buffer = SharedBuffer::from_slice(&vec![1u8; len]).unwrap();
        let shared = buffer.share();
        PrivateMap::new(&shared, page).expect("a memfd maps").keep();
        // The caller (another process; here through this process's shared mapping of the
        // buffer) writes it in place, then sends the same buffer again.
        // SAFETY: `len` bytes of the buffer's mapping; no slice of it is live.
        unsafe { std::ptr::write_bytes(shared.as_ptr().cast_mut(), 2, len) };
        let again = PrivateMap::kept_or_new(&shared, page).expect("maps");
        let stale = again.bytes().iter().filter(|&&b| b != 2).count();
        assert_eq!(stale, 0, "bytes still reading the old contents");
        assert!(again.unchanged());
    }

    /// Whether `address` is mapped in this process (`mincore` fails with `ENOMEM` where not).
    fn mapped(address: usize) -> bool {
        let mut vec = 0u8;
        // SAFETY: `mincore` only reports on the page at `address` into `vec`.
        unsafe { libc::mincore(address as *mut libc::c_void, 1, &mut vec) == 0 }
    }

    /// Maps `pages` pages of `fd` from `offset` over `at` (`MAP_FIXED`), as a hostile task
    /// could, shared (`MAP_SHARED`) or private.
    fn map_over(at: usize, pages: usize, fd: RawFd, offset: usize, shared: bool) {
        let flags = libc::MAP_FIXED
            | if shared {
                libc::MAP_SHARED
            } else {
                libc::MAP_PRIVATE
            };
        // SAFETY: `at` lies inside a reservation this test made and still holds; `fd` is the
        // open descriptor of a shared buffer at least `offset + pages` pages long.
        let m = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                pages * page_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
    }

    /// A task that unmaps the page after the tail's (the back guard), where this process then
    /// maps memory of its own: the mapping is not kept, and the next request's writes do not
    /// reach that memory.
    #[test]
    fn a_guard_zone_a_task_unmapped_is_not_handed_on() {
        let page = page_size();
        let len = 6 * page + 100;
        let (bytes, buffer) = patterned(len);
        let shared = buffer.share();
        let first = PrivateMap::new(&shared, page).expect("maps");
        let data = first.data().as_ptr() as usize;
        let guard = data + 7 * page;
        // SAFETY: the back guard page of the reservation this test made: a task unmaps it,
        // then the process maps memory of its own there and fills it.
        let own = unsafe {
            assert_eq!(libc::munmap(guard as *mut libc::c_void, page), 0);
            let own = libc::mmap(
                guard as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            assert_ne!(own, libc::MAP_FAILED);
            std::slice::from_raw_parts_mut(own.cast::<u8>(), page)
        };
        own.fill(0xAA);
        // Not kept: dropping it unmaps the whole reservation, the process's page with it, so
        // the page is mapped again for the check below.
        assert!(!first.usable(Unguard::All));
        std::mem::forget(first);
        let again = PrivateMap::kept_or_new(&shared, page).expect("maps");
        assert_eq!(again.bytes(), &bytes[..]);
        assert!(
            own.iter().all(|&b| b == 0xAA),
            "the process's own memory untouched"
        );
    }

    /// A task that maps the caller's own buffer shared over its input (the data, or the
    /// tail's page), or maps another part of the buffer there, or protects a mapping after it
    /// was kept: the next request still reads the buffer as it is, a write to it stays
    /// private, and nothing crashes.
    #[test]
    fn a_mapping_a_task_tampered_with_is_not_handed_on() {
        let page = page_size();
        let len = 12 * page + 100;
        for attack in 0..5 {
            let (bytes, buffer) = patterned(len);
            let shared = buffer.share();
            let fd = descriptor_of(shared.as_ptr() as usize).expect("a memfd");
            let first = PrivateMap::new(&shared, page).expect("maps");
            let data = first.data().as_ptr() as usize;
            match attack {
                // The buffer shared over four of its own pages, at their offset.
                0 => map_over(data + 4 * page, 4, fd, 4 * page, true),
                // Shared over the tail's page (the buffer's last page).
                1 => map_over(data + 12 * page, 1, fd, 12 * page, true),
                // Shared over the front guard.
                2 => map_over(data - page, 1, fd, 0, true),
                // Private, but the wrong part of the buffer.
                3 => map_over(data + 2 * page, 2, fd, 6 * page, false),
                // Protected after it was kept (by a later task of the worker).
                _ => {}
            }
            first.keep();
            if attack == 4 {
                assert!(mapped(data), "an untouched mapping is kept");
                // SAFETY: the kept reservation's data pages, which nothing borrows now.
                let done =
                    unsafe { libc::mprotect(data as *mut libc::c_void, 4 * page, libc::PROT_NONE) };
                assert_eq!(done, 0);
            } else {
                assert!(!mapped(data), "attack {attack}: not kept");
            }
            let again = PrivateMap::kept_or_new(&shared, page).expect("maps");
            assert_eq!(again.bytes(), &bytes[..], "attack {attack}");
            assert!(again.unchanged(), "attack {attack}");
            // SAFETY: inside the mapping's data and its tail; no slice of it is live.
            unsafe {
                *again.data().as_ptr().add(5 * page) ^= 1;
                *again.data().as_ptr().add(len - 1) ^= 1;
            }
            assert!(!again.unchanged(), "attack {attack}: the writes are seen");
            assert_eq!(
                buffer.as_slice(),
                &bytes[..],
                "attack {attack}: the caller's buffer"
            );
            again.drop_written();
            assert!(again.unchanged(), "attack {attack}");
        }
    }
}
