//! The disk cache of compiled kernels: `<dir>/<key>.cuda`, one file per compilation.
//!
//! The key hashes everything that decides NVRTC's output (see [`ArtifactKey`]); the file holds
//! the image (cubin or PTX) and the kernel's lowered name. Files are written to a temporary file
//! in the directory and renamed into place, so a reader sees a whole artifact or none; a file
//! that does not parse is a miss (and is overwritten by the next compilation).

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use tunebox_bench::CacheDir;

use tunebox_protocol::Define;

use crate::driver::ImageKind;

/// The backend's name in the cache root: compiled CUDA kernels live in `<root>/cuda`.
pub(crate) const BACKEND: &str = "cuda";

/// The file of `key` in `cache`.
pub(crate) fn artifact_path(cache: &CacheDir, key: &ArtifactKey) -> PathBuf {
    cache.path().join(format!("{}.cuda", key.0))
}

/// The artifact stored under `key`, or `None` (missing, unreadable or corrupt: a miss; a
/// directory that is not private: always a miss, with a warning).
pub(crate) fn load(cache: &CacheDir, key: &ArtifactKey) -> Option<Artifact> {
    if let Some(why) = cache.untrusted() {
        log::warn!("cuda: not using the kernel cache: {why}");
        return None;
    }
    let path = artifact_path(cache, key);
    let mut bytes = Vec::new();
    match std::fs::File::open(&path).and_then(|f| f.take(MAX_BYTES).read_to_end(&mut bytes)) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!("cuda: ignoring unreadable `{}`: {e}", path.display());
            return None;
        }
    }
    let artifact = Artifact::decode(&bytes);
    if artifact.is_none() {
        log::warn!("cuda: ignoring corrupt `{}`", path.display());
    }
    artifact
}

/// Stores `artifact` under `key` atomically (temporary file + rename). A failure is logged
/// and otherwise ignored: the kernel was compiled, only the next compile is not saved.
pub(crate) fn store(cache: &CacheDir, key: &ArtifactKey, artifact: &Artifact) {
    if let Err(e) = try_store(cache, key, artifact) {
        log::warn!(
            "cuda: could not cache a compiled kernel in `{}`: {e}",
            cache.path().display()
        );
    }
}

fn try_store(cache: &CacheDir, key: &ArtifactKey, artifact: &Artifact) -> std::io::Result<()> {
    let dir = cache.ensure()?;
    let mut file = tempfile::Builder::new()
        .prefix(".tunebox-")
        .suffix(".cuda")
        .tempfile_in(dir)?;
    file.write_all(&artifact.encode())?;
    file.persist(artifact_path(cache, key))
        .map_err(|e| e.error)?;
    Ok(())
}

/// A larger cache file is treated as corrupt rather than read.
const MAX_BYTES: u64 = 1 << 30;

/// Bump when the key's inputs or the file format change.
const FORMAT: &str = "tunebox-cuda artifact v1";

/// The cache key of one NVRTC compilation: 64 hex digits of blake3 over length-prefixed fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ArtifactKey(pub(crate) String);

/// Everything that decides what NVRTC produces for a source.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyInputs<'a> {
    /// The source text.
    pub(crate) source: &'a str,
    /// Its name (NVRTC's messages and `__FILE__` cite it).
    pub(crate) source_name: &'a str,
    /// The entry as written (the name expression NVRTC lowers).
    pub(crate) entry: &'a str,
    /// The choice's defines.
    pub(crate) defines: &'a [Define],
    /// The user's NVRTC options.
    pub(crate) options: &'a [String],
    /// NVRTC's version (major, minor).
    pub(crate) nvrtc_version: (i32, i32),
    /// The architecture compiled for, e.g. `sm_90` or `compute_90`.
    pub(crate) arch: &'a str,
}

impl ArtifactKey {
    /// The key of `inputs`.
    pub(crate) fn of(inputs: &KeyInputs<'_>) -> Self {
        let mut h = blake3::Hasher::new();
        let mut field = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(FORMAT.as_bytes());
        field(inputs.source.as_bytes());
        field(inputs.source_name.as_bytes());
        field(inputs.entry.as_bytes());
        field(&(inputs.defines.len() as u64).to_le_bytes());
        for define in inputs.defines {
            field(define.name.as_bytes());
            field(define.value.as_bytes());
        }
        field(&(inputs.options.len() as u64).to_le_bytes());
        for option in inputs.options {
            field(option.as_bytes());
        }
        field(&inputs.nvrtc_version.0.to_le_bytes());
        field(&inputs.nvrtc_version.1.to_le_bytes());
        field(inputs.arch.as_bytes());
        Self(h.finalize().to_hex().to_string())
    }
}

/// A compiled kernel: the module image and the name to look the kernel up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Artifact {
    pub(crate) kind: ImageKind,
    /// A cubin, or PTX text (without a trailing NUL).
    pub(crate) image: Vec<u8>,
    /// The kernel's lowered (mangled, or `extern "C"`) name.
    pub(crate) lowered_name: String,
}

impl Artifact {
    /// `FORMAT\nkind <cubin|ptx>\nentry <name>\nbytes <n>\n` then the `n` bytes of the image.
    fn encode(&self) -> Vec<u8> {
        let kind = match self.kind {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        };
        let mut out = format!(
            "{FORMAT}\nkind {kind}\nentry {}\nbytes {}\n",
            self.lowered_name,
            self.image.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.image);
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let mut rest = bytes;
        let mut line = || -> Option<&str> {
            let end = rest.iter().position(|&b| b == b'\n')?;
            let text = std::str::from_utf8(&rest[..end]).ok()?;
            rest = &rest[end + 1..];
            Some(text)
        };
        if line()? != FORMAT {
            return None;
        }
        let kind = match line()?.strip_prefix("kind ")? {
            "cubin" => ImageKind::Cubin,
            "ptx" => ImageKind::Ptx,
            _ => return None,
        };
        let lowered_name = line()?.strip_prefix("entry ")?.to_owned();
        let len: usize = line()?.strip_prefix("bytes ")?.parse().ok()?;
        (rest.len() == len && !lowered_name.is_empty() && len > 0).then(|| Self {
            kind,
            image: rest.to_vec(),
            lowered_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> (Vec<Define>, Vec<String>) {
        (
            vec![Define::new("BM", "64"), Define::new("BN", "32")],
            vec!["--use_fast_math".to_owned()],
        )
    }

    fn key_with<'a>(change: impl FnOnce(&mut KeyInputs<'a>)) -> ArtifactKey {
        let (defines, options) = inputs();
        // Leaked so that a change may borrow shorter-lived values (a few bytes, in a test).
        let defines: &'static [Define] = Box::leak(defines.into_boxed_slice());
        let options: &'static [String] = Box::leak(options.into_boxed_slice());
        let mut k = KeyInputs {
            source: "extern \"C\" __global__ void k() {}",
            source_name: "k.cu",
            entry: "k",
            defines,
            options,
            nvrtc_version: (13, 0),
            arch: "sm_90",
        };
        change(&mut k);
        ArtifactKey::of(&k)
    }

    #[test]
    fn every_input_changes_the_key() {
        let base = key_with(|_| {});
        assert_eq!(base, key_with(|_| {}), "deterministic");
        assert_eq!(base.0.len(), 64);
        let other_defines = [Define::new("BM", "128"), Define::new("BN", "32")];
        let swapped = [Define::new("BN", "32"), Define::new("BM", "64")];
        let other_options = ["-lineinfo".to_owned()];
        let more_options = ["--use_fast_math".to_owned(), "-lineinfo".to_owned()];
        let variants = [
            key_with(|k| k.source = "extern \"C\" __global__ void k() { }"),
            key_with(|k| k.source_name = "other.cu"),
            key_with(|k| k.entry = "k2"),
            key_with(|k| k.defines = &other_defines),
            key_with(|k| k.defines = &swapped),
            key_with(|k| k.defines = &[]),
            key_with(|k| k.options = &other_options),
            key_with(|k| k.options = &more_options),
            key_with(|k| k.nvrtc_version = (13, 1)),
            key_with(|k| k.nvrtc_version = (12, 0)),
            key_with(|k| k.arch = "sm_80"),
            key_with(|k| k.arch = "compute_90"),
        ];
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(*v, base, "variant {i}");
            for (j, w) in variants[..i].iter().enumerate() {
                assert_ne!(v, w, "variants {j} and {i}");
            }
        }
    }

    #[test]
    fn fields_cannot_run_into_each_other() {
        // "ab" + "c" and "a" + "bc" must differ.
        let a = key_with(|k| {
            k.source = "ab";
            k.source_name = "c";
        });
        let b = key_with(|k| {
            k.source = "a";
            k.source_name = "bc";
        });
        assert_ne!(a, b);
    }

    #[test]
    fn artifacts_round_trip_and_truncation_is_a_miss() {
        let artifact = Artifact {
            kind: ImageKind::Cubin,
            image: b"\x7fELF\n\x00binary\nbytes".to_vec(),
            lowered_name: "_Z6matmulILi64EEvPKfS1_Pf".into(),
        };
        let bytes = artifact.encode();
        assert_eq!(Artifact::decode(&bytes), Some(artifact.clone()));
        for len in 0..bytes.len() {
            assert_eq!(Artifact::decode(&bytes[..len]), None, "{len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Artifact::decode(&longer), None);
    }

    #[test]
    fn store_then_load_in_a_private_directory() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let cache = CacheDir::new(root.path().join("nested").join("cuda"));
        let key = key_with(|_| {});
        assert_eq!(load(&cache, &key), None);
        let artifact = Artifact {
            kind: ImageKind::Ptx,
            image: b".version 8.0\n".to_vec(),
            lowered_name: "k".into(),
        };
        store(&cache, &key, &artifact);
        assert_eq!(load(&cache, &key), Some(artifact));
        let mode = std::fs::metadata(cache.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let names: Vec<_> = std::fs::read_dir(cache.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [format!("{}.cuda", key.0)], "no temporary file left");
        // A corrupt file is a miss.
        std::fs::write(artifact_path(&cache, &key), b"garbage").unwrap();
        assert_eq!(load(&cache, &key), None);
    }

    #[test]
    fn a_directory_others_can_write_is_neither_read_nor_written() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let cache = CacheDir::new(root.path().join("cuda"));
        let key = key_with(|_| {});
        let artifact = Artifact {
            kind: ImageKind::Ptx,
            image: b".version 8.0\n".to_vec(),
            lowered_name: "k".into(),
        };
        store(&cache, &key, &artifact);
        assert_eq!(load(&cache, &key), Some(artifact.clone()));
        let open = std::fs::Permissions::from_mode(0o777);
        std::fs::set_permissions(cache.path(), open).unwrap();
        assert_eq!(load(&cache, &key), None, "a world-writable cache is a miss");
        let other = key_with(|k| k.entry = "other");
        store(&cache, &other, &artifact);
        assert!(
            !artifact_path(&cache, &other).exists(),
            "nothing is stored there"
        );
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(load(&cache, &key), Some(artifact));
    }
}
