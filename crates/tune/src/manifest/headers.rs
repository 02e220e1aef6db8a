//! The local headers a kernel source includes (`#include "name"`), followed recursively: what
//! the results cache's key hashes and what the default sandbox lets a compile read.

use std::path::{Path, PathBuf};

/// Most local headers followed from one source.
const MAX_HEADERS: usize = 256;

/// The paths of the local headers a source includes: [`local_headers`]'s, without contents.
pub(crate) fn local_header_paths(text: &str, dir: &Path, flags: &[String]) -> Vec<PathBuf> {
    local_headers(text, dir, flags)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

/// The local headers a source includes (`#include "name"`), followed recursively: looked up
/// beside the including file, then in the `-I` directories of `flags`. System headers
/// (`#include <…>`) belong to the compiler, whose version is hashed instead.
pub(crate) fn local_headers(text: &str, dir: &Path, flags: &[String]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut include_dirs: Vec<PathBuf> = Vec::new();
    let mut flags = flags.iter();
    while let Some(flag) = flags.next() {
        if flag == "-I" {
            if let Some(d) = flags.next() {
                include_dirs.push(PathBuf::from(d));
            }
        } else if let Some(d) = flag.strip_prefix("-I") {
            include_dirs.push(PathBuf::from(d));
        }
    }
    let mut found: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut pending: Vec<(String, PathBuf)> = included(text)
        .into_iter()
        .map(|name| (name, dir.to_owned()))
        .collect();
    while let Some((name, from)) = pending.pop() {
        if found.len() >= MAX_HEADERS {
            break;
        }
        let candidates =
            std::iter::once(from.join(&name)).chain(include_dirs.iter().map(|d| d.join(&name)));
        for path in candidates {
            let Ok(contents) = std::fs::read(&path) else {
                continue;
            };
            let path = path.canonicalize().unwrap_or(path);
            if !found.iter().any(|(p, _)| *p == path) {
                let parent = path.parent().map(Path::to_owned).unwrap_or_default();
                pending.extend(
                    included(&String::from_utf8_lossy(&contents))
                        .into_iter()
                        .map(|n| (n, parent.clone())),
                );
                found.push((path, contents));
            }
            break;
        }
    }
    found.sort();
    found
}

/// The names of `#include "name"` lines.
fn included(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix('#')?.trim_start();
            let rest = rest.strip_prefix("include")?.trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest[..rest.find('"')?].to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_headers_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("inc")).unwrap();
        std::fs::write(dir.path().join("a.h"), "#include \"inc/b.h\"\n").unwrap();
        std::fs::write(dir.path().join("inc/b.h"), "# include \"c.h\"\n").unwrap();
        std::fs::write(dir.path().join("inc/c.h"), "int c;\n").unwrap();
        let source = "#include <stdint.h>\n#include \"a.h\"\n#include \"missing.h\"\n";
        let headers = local_headers(source, dir.path(), &[]);
        let names: Vec<String> = headers
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for name in ["a.h", "b.h", "c.h"] {
            assert!(names.contains(&name.to_string()), "{names:?}");
        }
    }
}
