//! Files a manifest names, held in memory ([`ManifestFiles`]): what a caller that has the
//! kernel source and the arrays in hand (Python's `tune_kernel`) gives instead of writing them
//! to disk for the manifest to name.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use tunebox_protocol::SharedData;

/// The contents of files a manifest names, given in memory, for [`Manifest::parse`]: a tensor's
/// data (`init = { file = "x.bin" }`), an expected output (`answer`, `verify.reference.outputs`)
/// or a kernel source (`kernel.source`, `verify.reference.source`). Each is found by the path as
/// the manifest writes it (`"x.bin"` matches `"x.bin"`, not `"./x.bin"`), before the disk is
/// looked at; a path not given here is read from disk, relative to the manifest's folder, as
/// for a file.
///
/// Data files are held as [`SharedData`]: a tensor initialised from one carries the same
/// shared-memory handle into every worker, with no copy per choice (as a file read once would).
///
/// ```
/// use tunebox_protocol::SharedBuffer;
/// use tunebox_tune::{Manifest, ManifestFiles};
///
/// let mut files = ManifestFiles::new();
/// files.insert("scale.c", SharedBuffer::from_slice(
///     b"void scale(float *x, long n) { for (long i = 0; i < n; i++) x[i] *= 2; }")?.share());
/// files.insert("x.bin", SharedBuffer::from_slice(&[0u8; 16])?.share());
/// let manifest = Manifest::parse(
///     r#"
///     kernel_name = "scale"
///     kernel_source = "scale.c"
///     tune_params = { UNROLL = [1, 2] }
///     [[arguments]]
///     name = "x"
///     dtype = "f32"
///     shape = [4]
///     init = { file = "x.bin" }
///     [[arguments]]
///     name = "n"
///     value = 4
///     "#,
///     std::path::Path::new("in-memory.toml"),
///     "cc",
///     &files,
/// )?;
/// assert_eq!(manifest.name(), "in-memory");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Manifest::parse`]: crate::Manifest::parse
#[derive(Debug, Clone, Default)]
pub struct ManifestFiles {
    files: IndexMap<PathBuf, SharedData>,
}

impl ManifestFiles {
    /// No files: every path a manifest names is read from disk.
    pub fn new() -> ManifestFiles {
        ManifestFiles::default()
    }

    /// Gives `contents` (bytes: a raw array in native byte order, or UTF-8 source text) as the
    /// file `path`; returns what `path` held before, if anything.
    pub fn insert(&mut self, path: impl Into<PathBuf>, contents: SharedData) -> Option<SharedData> {
        self.files.insert(path.into(), contents)
    }

    /// The contents given for `path` (as the manifest writes it), if any.
    pub(crate) fn get(&self, path: &Path) -> Option<&SharedData> {
        self.files.get(path)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tunebox_protocol::{Init, SharedBuffer};

    use super::ManifestFiles;
    use crate::Manifest;
    use crate::manifest::Reference;

    fn shared(bytes: &[u8]) -> tunebox_protocol::SharedData {
        SharedBuffer::from_slice(bytes).unwrap().share()
    }

    const KERNEL_TUNER: &str = r#"
kernel_name = "add"
kernel_source = "add.c"
tune_params = { U = [1, 2] }
answer = ["c.bin", "", ""]
[[arguments]]
name = "c"
dtype = "f32"
shape = [2]
init = "zeros"
[[arguments]]
name = "a"
dtype = "f32"
shape = [2]
init = { file = "a.bin" }
[[arguments]]
name = "n"
value = 2
"#;

    #[test]
    fn files_given_in_memory_are_the_source_the_data_and_the_answer_and_no_disk_is_read() {
        // The manifest's folder does not exist: every file it names comes from `files`.
        let path = Path::new("/nonexistent-tunebox-folder/kt.toml");
        let a: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let c: Vec<u8> = [2.0f32, 4.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut files = ManifestFiles::new();
        files.insert("add.c", shared(b"void add(float *c, float *a, long n) {}"));
        files.insert("a.bin", shared(&a));
        files.insert("c.bin", shared(&c));
        let m = Manifest::parse(KERNEL_TUNER, path, "cc", &files).unwrap();
        assert_eq!(m.name(), "kt");
        assert_eq!(m.kernel.text, "void add(float *c, float *a, long n) {}");
        assert!(!m.kernel.outside);
        let Init::Data(data) = &m.tensors[1].init else {
            panic!("a's init is {:?}", m.tensors[1].init)
        };
        assert_eq!(&data[..], &a[..]);
        let verify = m.verify.as_ref().expect("answer verifies");
        let Reference::Outputs(outputs) = &verify.reference else {
            panic!("answer is the expected outputs")
        };
        assert_eq!(outputs.len(), 1);
        assert_eq!(
            (outputs[0].name.as_str(), &outputs[0].bytes[..]),
            ("c", &c[..])
        );
    }

    #[test]
    fn a_file_in_memory_of_the_wrong_size_or_one_not_given_is_named() {
        let path = Path::new("/nonexistent-tunebox-folder/kt.toml");
        let mut files = ManifestFiles::new();
        files.insert("add.c", shared(b"void add(float *c, float *a, long n) {}"));
        files.insert("a.bin", shared(&[0u8; 4]));
        files.insert("c.bin", shared(&[0u8; 8]));
        let short = Manifest::parse(KERNEL_TUNER, path, "cc", &files).unwrap_err();
        assert!(
            format!("{short:#}")
                .contains("a.bin (given in memory) has 4 bytes, but f32 × [2] needs 8"),
            "{short:#}"
        );
        let mut missing = ManifestFiles::new();
        missing.insert("a.bin", shared(&[0u8; 8]));
        let error = Manifest::parse(KERNEL_TUNER, path, "cc", &missing).unwrap_err();
        assert!(
            format!("{error:#}").contains("cannot read /nonexistent-tunebox-folder/add.c"),
            "{error:#}"
        );
    }
}
