//! A caller's shared buffer mapped copy-on-write (`MAP_PRIVATE`) into this process: the pages
//! are the caller's until the process writes one, which then gets a private copy; the caller's
//! stays as it was. Which pages were written is read from `/proc/self/pagemap` (a written page
//! is anonymous, an unwritten one the buffer's), so that checking and restoring an input costs
//! the pages a kernel wrote, not the whole tensor.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::RawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use tunebox_protocol::SharedData;

/// Most mappings a process keeps between requests ([`PrivateMap::keep`]).
const KEPT_MAPS: usize = 8;

/// Mappings kept for a later request of the same buffers, least recently kept first.
static KEPT: Mutex<Vec<PrivateMap>> = Mutex::new(Vec::new());

/// `madvise` advice that faults pages in for reading without writing them (Linux 5.14).
const MADV_POPULATE_READ: libc::c_int = 22;

/// Bits of a `/proc/self/pagemap` entry (Documentation/admin-guide/mm/pagemap.rst).
const PAGE_PRESENT: u64 = 1 << 63;
const PAGE_SWAPPED: u64 = 1 << 62;
const PAGE_FILE_OR_SHARED: u64 = 1 << 61;

/// Pagemap entries read at a time (512 KiB: 1 GiB of 4 KiB pages in four reads).
const ENTRIES_PER_READ: usize = 1 << 16;

/// The size of a page of this machine.
pub(crate) fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// `len` bytes of a caller's buffer mapped copy-on-write, after `guard` bytes of anonymous
/// memory and before as many (the guard zones of a tensor), in one reservation that this
/// value unmaps on drop.
#[derive(Debug)]
pub(crate) struct PrivateMap {
    /// The reservation's start (the front guard).
    base: NonNull<u8>,
    /// The reservation's size: `guard + len + guard`.
    size: usize,
    guard: usize,
    len: usize,
    /// The caller's buffer: what unwritten pages read, and what written ones are compared
    /// with. Also keeps the descriptor behind the mapping open.
    source: SharedData,
    page: usize,
}

// SAFETY: the reservation is owned by this value alone (as a `Vec<u8>` owns its buffer); the
// shared buffer is only read through `source`, which is `Send`.
unsafe impl Send for PrivateMap {}

impl PrivateMap {
    /// Maps all of `source` copy-on-write between two `guard`-byte anonymous zones (a
    /// multiple of the page size), and faults its pages in for reading. `None` when the
    /// buffer is empty or not a whole number of pages, its descriptor cannot be found
    /// (`/proc/self/maps` and `/proc/self/fd`), or a mapping fails.
    pub(crate) fn new(source: &SharedData, guard: usize) -> Option<PrivateMap> {
        let page = page_size();
        let len = source.len();
        if len == 0 || !len.is_multiple_of(page) || !guard.is_multiple_of(page) {
            return None;
        }
        let fd = descriptor_of(source.as_ptr() as usize)?;
        let size = len.checked_add(guard.checked_mul(2)?)?;
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
        // SAFETY: `guard + len <= size`: the data range lies inside the reservation made just
        // above, which only this function knows of, so `MAP_FIXED` replaces nothing else. `fd`
        // is the open descriptor of the buffer `source` maps, `len` bytes long, kept open by
        // `source` (stored below) for as long as the mapping lives; a private mapping never
        // writes to it.
        let data = unsafe {
            libc::mmap(
                base.cast::<u8>().add(guard).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                fd,
                0,
            )
        };
        let map = PrivateMap {
            base: NonNull::new(base.cast())?,
            size,
            guard,
            len,
            source: source.clone(),
            page,
        };
        if data == libc::MAP_FAILED {
            return None; // `map` unmaps the reservation.
        }
        map.populate(0, len);
        Some(map)
    }

    /// A mapping of `source` kept from an earlier request ([`PrivateMap::keep`]) when there is
    /// one with `guard`-byte zones, else a new one ([`PrivateMap::new`]). A worker that serves
    /// many requests (a reused worker measuring window after window) then maps a large input
    /// once: a new mapping faults in every page of it again (some 135 ms per GiB of 4 KiB
    /// pages), a kept one reads as it did.
    pub(crate) fn kept_or_new(source: &SharedData, guard: usize) -> Option<PrivateMap> {
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        let found = kept.iter().position(|m| {
            m.source.id() == source.id() && m.len == source.len() && m.guard == guard
        });
        match found {
            Some(position) => Some(kept.remove(position)),
            None => {
                drop(kept);
                PrivateMap::new(source, guard)
            }
        }
    }

    /// Keeps this mapping for a later request of the same buffer ([`PrivateMap::kept_or_new`]),
    /// the pages the process wrote dropped first, so that it reads as the caller's buffer again;
    /// the least recently kept mapping goes beyond [`KEPT_MAPS`].
    pub(crate) fn keep(self) {
        self.drop_written();
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push(self);
        if kept.len() > KEPT_MAPS {
            kept.remove(0);
        }
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
    /// (from the pagemap) are compared with it; without a readable pagemap, all of them.
    pub(crate) fn unchanged(&self) -> bool {
        let data = self.bytes();
        match self.written_pages() {
            Some(pages) => pages.iter().all(|&(start, end)| {
                let (start, end) = (start * self.page, (end * self.page).min(self.len));
                data[start..end] == self.source[start..end]
            }),
            None => data == &self.source[..],
        }
    }

    /// Drops the private copies of every page the process wrote (all pages, without a
    /// readable pagemap), so that they read the caller's buffer again, and faults them back
    /// in for reading; where the kernel refuses the advice, copies the caller's bytes over
    /// them instead.
    pub(crate) fn drop_written(&self) {
        let pages = self
            .written_pages()
            .unwrap_or_else(|| vec![(0, self.len / self.page)]);
        for (start, end) in pages {
            let (offset, bytes) = (start * self.page, (end - start) * self.page);
            // SAFETY: the range lies inside the private mapping (whole pages of `len`); for a
            // private file mapping `MADV_DONTNEED` drops the process's copies, and the pages
            // read the file's contents again. No reference into these bytes is live while
            // `&self` is only shared: the tensor hands out slices only through borrows of
            // itself, and the caller holds none across `reset`.
            let dropped = unsafe {
                libc::madvise(
                    self.data().as_ptr().add(offset).cast(),
                    bytes,
                    libc::MADV_DONTNEED,
                )
            } == 0;
            if dropped {
                self.populate(offset, bytes);
            } else {
                // Advice refused (a filter, another kernel): write the caller's bytes back.
                // SAFETY: `offset + bytes <= len`, inside both the mapping and `source` (of
                // the same length), which never overlap; no reference into the mapping is
                // live (as above).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.source.as_ptr().add(offset),
                        self.data().as_ptr().add(offset),
                        bytes,
                    );
                }
            }
        }
    }

    /// Maps `source` (of the same length) in place of the current buffer, at the same
    /// addresses, copy-on-write, and faults it in: the private copies of written pages go with
    /// the old mapping. Returns whether it did; on `false` nothing changed.
    pub(crate) fn remap(&mut self, source: &SharedData) -> bool {
        if source.len() != self.len {
            return false;
        }
        let Some(fd) = descriptor_of(source.as_ptr() as usize) else {
            return false;
        };
        // SAFETY: replaces exactly the data range of this reservation (owned by `self`, no
        // slice of it live: `&mut self`) with a private mapping of `fd`, the open descriptor
        // of `source` (`len` bytes), kept open by `source` stored below.
        let data = unsafe {
            libc::mmap(
                self.data().as_ptr().cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                fd,
                0,
            )
        };
        if data == libc::MAP_FAILED {
            // The old mapping may be gone: never read unmapped memory, read zeros instead.
            // SAFETY: as above, an anonymous mapping over the same range.
            unsafe {
                libc::mmap(
                    self.data().as_ptr().cast(),
                    self.len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
            }
            return false;
        }
        self.source = source.clone();
        self.populate(0, self.len);
        true
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

    /// The runs of pages the process wrote, as `(first, end)` page indices, from
    /// `/proc/self/pagemap`: a present page that is not the file's (a private copy), or one
    /// swapped out (only private copies are). `None` when the pagemap cannot be read.
    fn written_pages(&self) -> Option<Vec<(usize, usize)>> {
        let pagemap = File::open("/proc/self/pagemap").ok()?;
        let pages = self.len / self.page;
        let first = self.data().as_ptr() as usize / self.page;
        let mut runs: Vec<(usize, usize)> = Vec::new();
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
                let written = (entry & PAGE_PRESENT != 0 && entry & PAGE_FILE_OR_SHARED == 0)
                    || entry & PAGE_SWAPPED != 0;
                if written {
                    let page = done + i;
                    match runs.last_mut() {
                        Some((_, end)) if *end == page => *end += 1,
                        _ => runs.push((page, page + 1)),
                    }
                }
            }
            done += n;
        }
        Some(runs)
    }
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
    let maps = BufReader::new(File::open("/proc/self/maps").ok()?);
    let (dev, inode) = maps.lines().map_while(Result::ok).find_map(|line| {
        // start-end perms offset major:minor inode path
        let mut fields = line.split_whitespace();
        let (start, _) = fields.next()?.split_once('-')?;
        if usize::from_str_radix(start, 16).ok()? != address {
            return None;
        }
        let offset = u64::from_str_radix(fields.nth(1)?, 16).ok()?;
        let (major, minor) = fields.next()?.split_once(':')?;
        let inode: u64 = fields.next()?.parse().ok()?;
        let dev = (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        (offset == 0 && inode != 0).then_some((dev, inode))
    })?;
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

    #[test]
    fn buffers_of_part_pages_are_not_mapped() {
        let buffer = SharedBuffer::new(page_size() + 1).unwrap();
        assert!(PrivateMap::new(&buffer.share(), page_size()).is_none());
        let empty = SharedBuffer::new(0).unwrap();
        assert!(PrivateMap::new(&empty.share(), page_size()).is_none());
    }
}
