//! Where compiled kernels are kept, and how the headers a cached kernel read are tracked.
//!
//! One compilation is found in two steps, as in ccache's "direct mode". The *base key* hashes
//! everything known before compiling (source, defines, flags, compiler, CPU, trampoline). Its
//! *dependency manifest* `<base>.deps` lists the files the compiler read (from `-MD -MF`) the last
//! few times that base key was compiled. An artifact is `<base>-<deps>.so`, where `<deps>` hashes
//! those files' paths and contents. A lookup hashes the listed files as they are now and hits when
//! that artifact exists.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read as _, Write as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

use tunebox_bench::CacheDir;

use crate::CpuError;

/// The backend's name in the cache root: compiled C kernels live in `<root>/cpu`.
pub(crate) const BACKEND: &str = "cpu";

/// The default directory of compiled C kernels: [`CacheDir::from_env`]`("cpu")`, i.e.
/// `$TUNEBOX_CACHE_DIR/cpu`, else `$XDG_CACHE_HOME/tunebox/cpu`, else `~/.cache/tunebox/cpu`.
/// In it, per base key, a dependency manifest `<base>.deps` and one `<base>-<deps>.so` per
/// variant of the headers it includes (see [`compile`](crate::compile())). Share it between the
/// parent, which precompiles, and its workers, which then only load.
///
/// # Errors
///
/// [`CpuError::NoCacheDir`] when none of the three variables is usable.
pub fn default_cache_dir() -> Result<CacheDir, CpuError> {
    CacheDir::from_env(BACKEND).ok_or(CpuError::NoCacheDir)
}

/// [`CacheDir::ensure`], its error a [`CpuError::CacheDir`].
pub(crate) fn ensure(cache: &CacheDir) -> Result<&Path, CpuError> {
    cache.ensure().map_err(|source| CpuError::CacheDir {
        path: cache.path().to_owned(),
        source,
    })
}

/// Feeds length-prefixed fields to blake3, so that no two different field lists hash alike.
pub(crate) struct KeyHasher(blake3::Hasher);

impl KeyHasher {
    pub(crate) fn new() -> Self {
        Self(blake3::Hasher::new())
    }

    pub(crate) fn field(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        let bytes = bytes.as_ref();
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub(crate) fn list<'a>(&mut self, items: impl ExactSizeIterator<Item = &'a str>) -> &mut Self {
        self.field((items.len() as u64).to_le_bytes());
        for item in items {
            self.field(item);
        }
        self
    }

    /// 64 hex digits.
    pub(crate) fn finish(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

/// Bump when the meaning of the dependency hash changes.
const DEPS_VERSION: &str = "tunebox-cpu deps hash v1";

/// blake3 of `path`'s bytes as they are now. Only regular files are read: a path in a damaged
/// manifest could name a device or a FIFO, which would never end (or never open).
pub(crate) fn file_digest(path: &Path) -> io::Result<blake3::Hash> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(std::fs::File::open(path)?)?;
    Ok(hasher.finalize())
}

/// The hash naming one variant of a base key: the dependencies' paths and content digests, in
/// order (64 hex digits).
pub(crate) fn deps_hash<'a>(
    deps: impl ExactSizeIterator<Item = (&'a Path, blake3::Hash)>,
) -> String {
    let mut h = KeyHasher::new();
    h.field(DEPS_VERSION)
        .field((deps.len() as u64).to_le_bytes());
    for (path, digest) in deps {
        h.field(path.as_os_str().as_bytes())
            .field(digest.as_bytes());
    }
    h.finish()
}

/// The key of one artifact, `<base>-<deps>`; the artifact is `<dir>/<key>.so`.
pub(crate) fn artifact_key(base: &str, deps: &str) -> String {
    format!("{base}-{deps}")
}

/// The artifact of `key` in `dir`.
pub(crate) fn artifact_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.so"))
}

/// An artifact of `base` in `dir` built from the current contents of one of the dependency lists
/// in its manifest, as `(key, path, list)`; `None` (a miss) when the manifest is missing or corrupt, a
/// listed file is gone or unreadable, or no such artifact exists. Lists are tried most recent
/// first and each file is hashed at most once.
pub(crate) fn lookup(dir: &Path, base: &str) -> Option<(String, PathBuf, Vec<PathBuf>)> {
    let manifest = Manifest::read(dir, base)?;
    let mut digests: HashMap<&Path, Option<blake3::Hash>> = HashMap::new();
    'lists: for list in &manifest.lists {
        let mut deps = Vec::with_capacity(list.len());
        for path in list {
            let digest = *digests
                .entry(path)
                .or_insert_with(|| match file_digest(path) {
                    Ok(digest) => Some(digest),
                    Err(e) => {
                        log::debug!("cpu: dependency `{}` of {base}: {e}", path.display());
                        None
                    }
                });
            match digest {
                Some(digest) => deps.push((path.as_path(), digest)),
                None => continue 'lists,
            }
        }
        let key = artifact_key(base, &deps_hash(deps.into_iter()));
        let path = artifact_path(dir, &key);
        if path.is_file() {
            // A mismatch may be a writer between its two renames (see `publish`): look again
            // once no writer is.
            if digest_matches(&path) || {
                let _settled = DirLock::shared(dir);
                digest_matches(&path)
            } {
                return Some((key, path, list.clone()));
            }
            log::warn!(
                "cpu: `{}` does not match its recorded hash (truncated or tampered); rebuilding",
                path.display()
            );
        }
    }
    None
}

/// Puts a freshly compiled `object` in place as the artifact `path` of `base` in `dir`, with its
/// hash record, then makes `deps` (the files it was built from) the first list of `base`'s
/// manifest.
///
/// The artifact and its record are two files replaced by two renames, and concurrent builds of
/// one kernel produce objects that differ in a few bytes (the compiler records the temporary
/// source's name), so two writers interleaving their renames would leave one's object under the
/// other's record: a mismatch that every later lookup takes for a damaged object and rebuilds.
/// So all of this runs under an exclusive lock on the cache directory ([`DirLock`]), and an
/// artifact already there and matching its record (another thread or process built the same
/// kernel from the same headers) is kept, `object` dropped. The manifest's read, update and
/// write are thereby serialized too, so no concurrent writer's list is lost.
pub(crate) fn publish(
    dir: &Path,
    base: &str,
    path: &Path,
    object: tempfile::TempPath,
    deps: Vec<PathBuf>,
) -> Result<(), CpuError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| CpuError::Io {
            action,
            path,
            source,
        }
    };
    let digest = file_digest(&object).map_err(io("hash the compiled kernel", &object))?;
    let _lock = DirLock::exclusive(dir);
    if path.is_file() && digest_matches(path) {
        log::debug!(
            "cpu: `{}` was built concurrently; keeping that copy",
            path.display()
        );
    } else {
        // The object first: a manifest never names a list without its artifact.
        object
            .persist(path)
            .map_err(|e| io("move the compiled kernel to", path)(e.error))?;
        record_digest(dir, path, &digest)?;
    }
    Manifest::read(dir, base)
        .unwrap_or_default()
        .with_first(deps)
        .write(dir, base)
}

/// An advisory lock (`flock`) on the cache directory itself, released when dropped: exclusive
/// while [`publish`] replaces an artifact, its record and the manifest, shared while a lookup
/// checks an artifact against its record a second time. Every call opens the directory anew, so
/// threads of one process exclude each other as processes do.
///
/// Best effort: where the directory cannot be opened or locked (a file system without `flock`),
/// the work goes on unlocked, and a race costs at worst a recompilation.
pub(crate) struct DirLock {
    _file: Option<std::fs::File>,
}

impl DirLock {
    pub(crate) fn exclusive(dir: &Path) -> Self {
        Self::lock(dir, rustix::fs::FlockOperation::LockExclusive)
    }

    pub(crate) fn shared(dir: &Path) -> Self {
        Self::lock(dir, rustix::fs::FlockOperation::LockShared)
    }

    fn lock(dir: &Path, operation: rustix::fs::FlockOperation) -> Self {
        let locked = std::fs::File::open(dir).and_then(|file| {
            loop {
                match rustix::fs::flock(&file, operation) {
                    Ok(()) => break Ok(file),
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => break Err(e.into()),
                }
            }
        });
        match locked {
            Ok(file) => Self { _file: Some(file) },
            Err(e) => {
                log::debug!(
                    "cpu: cannot lock `{}`: {e}; going on unlocked",
                    dir.display()
                );
                Self { _file: None }
            }
        }
    }
}

/// The file recording the blake3 hash of an artifact: `<artifact>.blake3`.
fn digest_path(artifact: &Path) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(".blake3");
    PathBuf::from(name)
}

/// Records `digest` as the hash of `artifact`, atomically (a temporary file renamed into place).
pub(crate) fn record_digest(
    dir: &Path,
    artifact: &Path,
    digest: &blake3::Hash,
) -> Result<(), CpuError> {
    let path = digest_path(artifact);
    let io = |action: &'static str| {
        let path = path.clone();
        move |source| CpuError::Io {
            action,
            path,
            source,
        }
    };
    let mut file = tempfile::Builder::new()
        .prefix(".tunebox-")
        .suffix(".blake3")
        .tempfile_in(dir)
        .map_err(io("create a temporary hash file for"))?;
    file.write_all(digest.to_hex().as_bytes())
        .map_err(io("write the hash file"))?;
    file.persist(&path)
        .map_err(|e| io("move the hash file to")(e.error))?;
    Ok(())
}

/// Whether `artifact`'s contents hash to what was recorded when it was built. A missing or
/// unreadable record, or a different hash, is a mismatch.
fn digest_matches(artifact: &Path) -> bool {
    let Ok(recorded) = std::fs::read_to_string(digest_path(artifact)) else {
        return false;
    };
    file_digest(artifact).is_ok_and(|actual| actual.to_hex().as_str() == recorded.trim())
}

/// The dependency manifest `<dir>/<base>.deps` of one base key: the lists of files its
/// translation unit read, most recently compiled first, at most [`Manifest::MAX_LISTS`] of them.
///
/// The format is text, one item per line: `tunebox-cpu deps v1`, `base <key>`, then per list
/// `list <n>` and its `n` paths (bytes; `\\` and `\n` escape a backslash and a newline), then
/// `end`. Anything else, including any truncation, reads as no manifest (a miss).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Manifest {
    lists: Vec<Vec<PathBuf>>,
}

impl Manifest {
    /// Lists kept per manifest: enough for headers edited back and forth, or toggled `#include`s.
    pub(crate) const MAX_LISTS: usize = 8;
    /// A larger manifest is treated as corrupt rather than read into memory.
    const MAX_BYTES: u64 = 4 << 20;
    const MAGIC: &'static str = "tunebox-cpu deps v1";

    /// `<dir>/<base>.deps`.
    pub(crate) fn path(dir: &Path, base: &str) -> PathBuf {
        dir.join(format!("{base}.deps"))
    }

    /// The manifest of `base` in `dir`; `None` when it is missing, unreadable or corrupt.
    pub(crate) fn read(dir: &Path, base: &str) -> Option<Self> {
        let path = Self::path(dir, base);
        let mut bytes = Vec::new();
        let read = std::fs::File::open(&path)
            .and_then(|file| file.take(Self::MAX_BYTES + 1).read_to_end(&mut bytes));
        if let Err(e) = read {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("cpu: ignoring unreadable `{}`: {e}", path.display());
            }
            return None;
        }
        let manifest = (bytes.len() as u64 <= Self::MAX_BYTES)
            .then(|| Self::decode(&bytes, base))
            .flatten();
        if manifest.is_none() {
            log::warn!("cpu: ignoring corrupt `{}`", path.display());
        }
        manifest
    }

    /// This manifest with `list` first (and no other copy of it), at most [`Self::MAX_LISTS`]
    /// lists long.
    pub(crate) fn with_first(mut self, list: Vec<PathBuf>) -> Self {
        self.lists.retain(|l| *l != list);
        self.lists.insert(0, list);
        self.lists.truncate(Self::MAX_LISTS);
        self
    }

    /// Writes the manifest of `base` into `dir` atomically: a temporary file in `dir` renamed over
    /// `<base>.deps`, so readers see the old manifest or the new one, never a mix. Of concurrent
    /// writers the last rename wins, so [`publish`] reads, updates and writes it under the
    /// directory's lock.
    pub(crate) fn write(&self, dir: &Path, base: &str) -> Result<(), CpuError> {
        let path = Self::path(dir, base);
        let io_err = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| CpuError::Io {
                action,
                path,
                source,
            }
        };
        let mut file = tempfile::Builder::new()
            .prefix(".tunebox-")
            .suffix(".deps")
            .tempfile_in(dir)
            .map_err(io_err("create a temporary dependency manifest in", dir))?;
        file.write_all(&self.encode(base))
            .map_err(io_err("write the dependency manifest", file.path()))?;
        file.persist(&path)
            .map_err(|e| io_err("move the dependency manifest to", &path)(e.error))?;
        Ok(())
    }

    fn encode(&self, base: &str) -> Vec<u8> {
        let mut out = format!("{}\nbase {base}\n", Self::MAGIC).into_bytes();
        for list in &self.lists {
            out.extend_from_slice(format!("list {}\n", list.len()).as_bytes());
            for path in list {
                for &b in path.as_os_str().as_bytes() {
                    match b {
                        b'\\' => out.extend_from_slice(b"\\\\"),
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b => out.push(b),
                    }
                }
                out.push(b'\n');
            }
        }
        out.extend_from_slice(b"end\n");
        out
    }

    fn decode(bytes: &[u8], base: &str) -> Option<Self> {
        // Every line, the last included, ends with `\n`: a manifest cut anywhere is refused.
        let body = bytes.strip_suffix(b"\n")?;
        let mut lines = body.split(|&b| b == b'\n');
        if lines.next()? != Self::MAGIC.as_bytes()
            || lines.next()?.strip_prefix(b"base ")? != base.as_bytes()
        {
            return None;
        }
        let mut lists = Vec::new();
        loop {
            let line = lines.next()?;
            if line == b"end" {
                break;
            }
            let count: usize = std::str::from_utf8(line.strip_prefix(b"list ")?)
                .ok()?
                .parse()
                .ok()?;
            let mut list = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                list.push(unescape_path(lines.next()?)?);
            }
            lists.push(list);
        }
        if lines.next().is_some() || lists.is_empty() {
            return None;
        }
        lists.truncate(Self::MAX_LISTS);
        Some(Self { lists })
    }
}

fn unescape_path(line: &[u8]) -> Option<PathBuf> {
    let mut out = Vec::with_capacity(line.len());
    let mut bytes = line.iter();
    while let Some(&b) = bytes.next() {
        out.push(match b {
            b'\\' => match bytes.next()? {
                b'\\' => b'\\',
                b'n' => b'\n',
                _ => return None,
            },
            b => b,
        });
    }
    (!out.is_empty()).then(|| PathBuf::from(OsString::from_vec(out)))
}

/// `OsStr` bytes as a path (for tests and the dependency file parser).
pub(crate) fn path_from_bytes(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsString::from_vec(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "b4se";

    fn manifest() -> Manifest {
        let weird = path_from_bytes(b"/in c\\lude/new\nline/caf\xe9.h".to_vec());
        Manifest::default()
            .with_first(vec!["/usr/include/stdint.h".into(), "local.h".into()])
            .with_first(vec![weird, "/usr/include/stdint.h".into()])
    }

    #[test]
    fn manifest_round_trips_any_path() {
        let m = manifest();
        let bytes = m.encode(BASE);
        assert_eq!(Manifest::decode(&bytes, BASE), Some(m.clone()));
        assert!(
            bytes.starts_with(
                b"tunebox-cpu deps v1\nbase b4se\nlist 2\n/in c\\\\lude/new\\nline/caf"
            )
        );
        assert!(bytes.ends_with(b"\nlist 2\n/usr/include/stdint.h\nlocal.h\nend\n"));
        // Another base key's manifest is not this one's.
        assert_eq!(Manifest::decode(&bytes, "other"), None);
    }

    #[test]
    fn every_truncated_or_extended_manifest_is_refused() {
        let bytes = manifest().encode(BASE);
        for len in 0..bytes.len() {
            assert_eq!(Manifest::decode(&bytes[..len], BASE), None, "{len}");
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"list 0\n");
        assert_eq!(Manifest::decode(&longer, BASE), None);
        let empty = Manifest::default().encode(BASE);
        assert_eq!(Manifest::decode(&empty, BASE), None, "no list");
    }

    #[test]
    fn manifest_keeps_recent_distinct_lists() {
        let list = |i: usize| vec![PathBuf::from(format!("h{i}.h"))];
        let mut m = Manifest::default();
        for i in 0..20 {
            m = m.with_first(list(i % 10));
        }
        assert_eq!(m.lists.len(), Manifest::MAX_LISTS);
        assert_eq!(m.lists[0], list(9));
        assert_eq!(m.lists[7], list(2));
        let m = m.with_first(list(5));
        assert_eq!(m.lists[..3], [list(5), list(9), list(8)]);
        assert_eq!(m.lists.len(), Manifest::MAX_LISTS);
    }

    #[test]
    fn manifest_files_are_written_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::read(dir.path(), BASE), None);
        manifest().write(dir.path(), BASE).unwrap();
        assert_eq!(Manifest::read(dir.path(), BASE), Some(manifest()));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["b4se.deps"]);
    }

    #[test]
    fn lookup_hashes_paths_and_contents() {
        let dir = tempfile::tempdir().unwrap();
        let header = dir.path().join("h.h");
        std::fs::write(&header, "1").unwrap();
        let deps =
            |contents: &[u8]| deps_hash([(header.as_path(), blake3::hash(contents))].into_iter());
        assert_ne!(deps(b"1"), deps(b"2"));
        assert_ne!(
            deps(b"1"),
            deps_hash([(Path::new("other.h"), blake3::hash(b"1"))].into_iter())
        );
        Manifest::default()
            .with_first(vec![header.clone()])
            .write(dir.path(), BASE)
            .unwrap();
        assert_eq!(lookup(dir.path(), BASE), None, "no artifact yet");
        let key = artifact_key(BASE, &deps(b"1"));
        let artifact = artifact_path(dir.path(), &key);
        std::fs::write(&artifact, "").unwrap();
        assert_eq!(lookup(dir.path(), BASE), None, "no recorded hash yet");
        record_digest(dir.path(), &artifact, &blake3::hash(b"")).unwrap();
        assert_eq!(
            lookup(dir.path(), BASE),
            Some((
                key.clone(),
                dir.path().join(format!("{key}.so")),
                vec![header.clone()]
            ))
        );
        std::fs::write(&header, "2").unwrap();
        assert_eq!(lookup(dir.path(), BASE), None, "edited");
        std::fs::remove_file(&header).unwrap();
        assert_eq!(lookup(dir.path(), BASE), None, "deleted");
        // Never read a device (or a FIFO) named by a damaged manifest.
        Manifest::default()
            .with_first(vec!["/dev/zero".into()])
            .write(dir.path(), BASE)
            .unwrap();
        assert_eq!(lookup(dir.path(), BASE), None, "a device");
    }

    /// A temporary "object" with `contents` in `dir`, as `build` makes one.
    fn object(dir: &Path, contents: &str) -> tempfile::TempPath {
        let mut file = tempfile::Builder::new()
            .prefix(".tunebox-")
            .suffix(".so")
            .tempfile_in(dir)
            .unwrap();
        file.write_all(contents.as_bytes()).unwrap();
        file.into_temp_path()
    }

    #[test]
    fn publish_keeps_a_sound_artifact_and_replaces_a_damaged_one() {
        let dir = tempfile::tempdir().unwrap();
        let artifact = artifact_path(dir.path(), &artifact_key(BASE, "d"));
        let list = vec![PathBuf::from("h.h")];
        publish(
            dir.path(),
            BASE,
            &artifact,
            object(dir.path(), "one"),
            list.clone(),
        )
        .unwrap();
        assert!(digest_matches(&artifact));
        // Built again concurrently (a few bytes differ): the first copy stays, with its record.
        publish(
            dir.path(),
            BASE,
            &artifact,
            object(dir.path(), "two"),
            list.clone(),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&artifact).unwrap(), "one");
        assert!(digest_matches(&artifact));
        // A damaged copy is replaced.
        std::fs::write(&artifact, "on").unwrap();
        publish(
            dir.path(),
            BASE,
            &artifact,
            object(dir.path(), "three"),
            list.clone(),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&artifact).unwrap(), "three");
        assert!(digest_matches(&artifact));
        assert_eq!(
            Manifest::read(dir.path(), BASE),
            Some(Manifest::default().with_first(list))
        );
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["b4se-d.so", "b4se-d.so.blake3", "b4se.deps"]);
    }

    #[test]
    fn concurrent_publishers_leave_a_matching_record_and_every_list() {
        // Unserialized, one thread's object ends up under another's record (every later lookup
        // then rebuilds), and manifest lists are lost to the last writer.
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let artifact = artifact_path(dir.path(), &artifact_key(BASE, "d"));
            let list = |i: usize| vec![PathBuf::from(format!("h{i}.h"))];
            let start = std::sync::Barrier::new(Manifest::MAX_LISTS);
            std::thread::scope(|s| {
                for i in 0..Manifest::MAX_LISTS {
                    let (dir, artifact, start) = (dir.path(), &artifact, &start);
                    s.spawn(move || {
                        let object = object(dir, &format!("object {i}"));
                        start.wait();
                        publish(dir, BASE, artifact, object, list(i)).unwrap();
                    });
                }
            });
            assert!(digest_matches(&artifact));
            let mut lists = Manifest::read(dir.path(), BASE).unwrap().lists;
            lists.sort();
            assert_eq!(
                lists,
                (0..Manifest::MAX_LISTS).map(list).collect::<Vec<_>>()
            );
        }
    }
}
