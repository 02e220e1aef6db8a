//! Writing a report file whole: to a temporary file beside it, renamed over it once complete,
//! so that a write that fails (a full disk, a kill) leaves the file as it was, never cut.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Writes `bytes` to `path` whole. The file keeps its permissions, or gets 0644 when new (a
/// temporary file is 0600).
///
/// # Errors
///
/// The temporary file cannot be created, written or renamed over `path`; `path` is then as it
/// was.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".tunebox-")
        .tempfile_in(dir)?;
    file.write_all(bytes)?;
    let mode = std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode());
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_write_leaves_the_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        super::write(&path, b"one").unwrap();
        super::write(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // A folder that is not there: nothing is written anywhere.
        let missing = dir.path().join("no/r.json");
        assert!(super::write(&missing, b"x").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
