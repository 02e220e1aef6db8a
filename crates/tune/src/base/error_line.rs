//! One line of an error, for a table cell or a FAIR T4 file: a compiler's first `error:`
//! line, a timeout's first line, cut to a width.

/// The first meaningful line of an error, uncut.
pub(crate) fn short_error_line(error: &str) -> String {
    short_error(error, usize::MAX)
}

/// The first meaningful line of an error, cut to `width` characters: for compiler output the
/// first `error:` line, else the first line. A compile that timed out is said so by its first
/// line, whatever the compiler printed before it was killed.
pub fn short_error(error: &str, width: usize) -> String {
    let first = error.lines().next();
    let line = first
        .filter(|l| l.starts_with("compile timed out"))
        .or_else(|| {
            error
                .lines()
                .find(|l| l.contains("error:") || l.contains("#error"))
        })
        .or(first)
        .unwrap_or("")
        .trim();
    if line.chars().count() > width {
        let cut: String = line.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_errors() {
        let log =
            "compilation failed: `cc …`\nk.c: In function 'f':\nk.c:3:5: error: expected ';'\n";
        assert_eq!(short_error(log, 60), "k.c:3:5: error: expected ';'");
        assert_eq!(
            short_error(
                "the worker crashed: killed by signal 11 (SIGSEGV)\n--- tail",
                60
            ),
            "the worker crashed: killed by signal 11 (SIGSEGV)"
        );
        let timed_out = "compile timed out after 120 s (compile_timeout_s)\nthe compiler was \
                         killed: cc …\nthe compiler's last output:\nk.c:3:5: error: expected ';'";
        assert_eq!(
            short_error(timed_out, 60),
            "compile timed out after 120 s (compile_timeout_s)"
        );
        let long = "x".repeat(200);
        assert_eq!(short_error(&long, 60).chars().count(), 60);
        assert_eq!(short_error(&long, 20).chars().count(), 20);
    }
}
