//! `cargo xtask code-metrics [--max-fn N]`: the shape of the library code, as issue 25 measures
//! it.
//!
//! - Functions outside tests of the crates under `crates/`, counted from the line of `fn` to the line of its closing brace:
//!   how many are over 60, 100 and 150 lines, and the longest; the same counts for the other
//!   workspace members but the integration tests (the xtask, the benchmarks, the examples),
//!   which the limits below do not cover.
//! - Module circles per crate, in every member of the workspace (`members` of the root
//!   `Cargo.toml`: the library crates, the xtask, the benchmarks, the tests): modules (files)
//!   that import each other, directly or through others. An edge `a -> b` is a path in `a`'s
//!   non-test code (`use` or inline) that names an item defined in `b`; names re-exported by
//!   `pub use` are followed to the module that defines them, and `pub use` lines themselves are
//!   not edges (a facade is not a dependency).
//! - Upward imports between the areas of a layered crate ([`LAYERS`]): an edge from a module of
//!   one area to a module of an area above it, or a top-level module the table does not place.
//! - Public items of `tunebox-tune`: lines declaring `pub fn|struct|enum|trait|const|type|
//!   static|mod|use` under `crates/tune/src` (the count the issue gives, 265 before it).
//! - Lines of `README.md`.
//!
//! The scanner strips comments, strings and char literals and matches braces; it reads the
//! code the workspace writes (rustfmt-formatted), not every program Rust accepts.
//!
//! `--max-fn N` fails when a function outside tests is longer than N lines, `--max-over-60 N`
//! and `--max-over-100 N` when more than N functions are over 60 or 100 lines (all three count
//! all the Rust code: the library crates, the xtask, the benchmarks and the examples), and
//! `--no-circles` fails on a module circle or an upward import between areas, for CI; `--all`
//! lists every function over 60 lines (not only the 15 longest); `--edges CRATE` prints that
//! crate's module graph;
//! `--root DIR` measures another checkout (e.g. a `git worktree` of an older commit).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The areas of a layered crate, from the bottom up: a module of one area names items of its own
/// area and of the areas below it, never of one above. Every top-level module of the crate (but
/// the root, its facade) belongs to one. docs/architecture.md's code map says what each holds.
const LAYERS: &[(&str, &[&str])] = &[(
    "tunebox-tune",
    &[
        "base", "space", "manifest", "results", "search", "measure", "report", "run",
    ],
)];

/// `cargo xtask code-metrics [--max-fn N] [--max-over-60 N] [--max-over-100 N] [--no-circles]
/// [--all] [--edges CRATE] [--root DIR]`.
pub(crate) fn code_metrics(args: &[String]) -> Result<(), String> {
    let options = Options::parse(args)?;
    let scan = Scan::of(&options)?;
    scan.print(&options)?;
    scan.check(&options)
}

/// What `code-metrics` was asked.
struct Options {
    /// Fail when a function is longer than this many lines.
    max_fn: Option<usize>,
    /// Fail when more functions than this are over 60 lines (issue 35's limit).
    max_over_60: Option<usize>,
    /// Fail when more functions than this are over 100 lines (issue 35's limit).
    max_over_100: Option<usize>,
    /// Fail on a module circle or an import up the areas.
    no_circles: bool,
    /// Print that crate's module graph.
    edges_of: Option<String>,
    /// List every function over 60 lines, not only the 15 longest.
    all: bool,
    /// The checkout measured.
    root: PathBuf,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            max_fn: None,
            max_over_60: None,
            max_over_100: None,
            no_circles: false,
            edges_of: None,
            all: false,
            root: crate::workspace_root(),
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let mut number = |what: &str| {
                rest.next()
                    .and_then(|n| n.parse::<usize>().ok())
                    .map(Some)
                    .ok_or_else(|| format!("{arg} takes a number of {what}"))
            };
            match arg.as_str() {
                "--max-fn" => options.max_fn = number("lines")?,
                "--max-over-60" => options.max_over_60 = number("functions")?,
                "--max-over-100" => options.max_over_100 = number("functions")?,
                "--no-circles" => options.no_circles = true,
                "--all" => options.all = true,
                "--edges" => options.edges_of = rest.next().cloned(),
                "--root" => {
                    options.root = rest
                        .next()
                        .map(PathBuf::from)
                        .ok_or("--root takes a folder")?
                }
                other => {
                    return Err(format!(
                        "code-metrics: unknown argument `{other}`; usage: cargo xtask \
                         code-metrics [--max-fn N] [--max-over-60 N] [--max-over-100 N] \
                         [--no-circles] [--all] [--edges CRATE] [--root DIR]"
                    ));
                }
            }
        }
        Ok(options)
    }
}

/// What `code-metrics` found: `(lines, "file:line name")` of each function over 60 lines,
/// longest first.
struct Scan {
    /// In the crates under `crates/`, which the limits hold.
    functions: Vec<(usize, String)>,
    /// In the rest (the xtask, the benchmarks, the examples; not the integration tests under
    /// `tests/`): issue 35 counts them too.
    elsewhere: Vec<(usize, String)>,
    circles: Vec<String>,
    upward: Vec<String>,
}

impl Scan {
    /// Reads every member of the workspace at `options.root` (printing the module graph
    /// `options.edges_of` names).
    fn of(options: &Options) -> Result<Scan, String> {
        let root = &options.root;
        let mut scan = Scan {
            functions: Vec::new(),
            elsewhere: Vec::new(),
            circles: Vec::new(),
            upward: Vec::new(),
        };
        for (name, lib) in &crate_roots(root)? {
            let modules = module_tree(lib)?;
            for module in modules.values() {
                let file = module.file.strip_prefix(root).unwrap_or(&module.file);
                let tally = if file.starts_with("crates") {
                    &mut scan.functions
                } else if file.starts_with("tests") {
                    continue;
                } else {
                    &mut scan.elsewhere
                };
                let code = strip(&module.text);
                for (fn_name, start, lines) in long_functions(&code) {
                    tally.push((lines, format!("{}:{start} {fn_name}", file.display())));
                }
            }
            let (edges, found) = module_circles(&modules);
            if let Some((_, areas)) = LAYERS.iter().find(|(layered, _)| layered == name) {
                for what in upward_imports(&edges, areas) {
                    scan.upward.push(format!("{name}: {what}"));
                }
            }
            if options.edges_of.as_deref() == Some(name) {
                for (from, to) in &edges {
                    let to: Vec<String> = to.iter().map(|m| module_name(m)).collect();
                    println!("{} -> {}", module_name(from), to.join(", "));
                }
            }
            for circle in found {
                scan.circles
                    .push(format!("{name}: {}", circle.join(" <-> ")));
            }
        }
        for list in [&mut scan.functions, &mut scan.elsewhere] {
            list.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        }
        Ok(scan)
    }

    /// How many of the library crates' functions are over `lines` lines.
    fn over(&self, lines: usize) -> usize {
        over(&self.functions, lines)
    }

    /// Prints the figures (and the README's and `tunebox-tune`'s, read from `options.root`).
    /// How many functions of all the Rust code (the library crates, the xtask, the benchmarks
    /// and the examples) are over `lines` lines: what issue 35's limits count.
    fn over_anywhere(&self, lines: usize) -> usize {
        self.over(lines) + over(&self.elsewhere, lines)
    }

    fn print(&self, options: &Options) -> Result<(), String> {
        println!("functions outside tests: {}", self.functions.len());
        println!(
            "  over 60 lines: {}, over 100: {}, over 150: {}",
            self.over(60),
            self.over(100),
            self.over(150)
        );
        println!(
            "  and in the xtask, benchmarks and examples: over 60 lines: {}, over 100: {}, \
             over 150: {} (longest: {})",
            over(&self.elsewhere, 60),
            over(&self.elsewhere, 100),
            over(&self.elsewhere, 150),
            self.elsewhere
                .first()
                .map_or("none".to_owned(), |(l, what)| format!("{l} lines, {what}"))
        );
        let shown = if options.all { self.over(60) } else { 15 };
        println!("  longest:");
        for (lines, what) in self.functions.iter().take(shown) {
            println!("    {lines:>4}  {what}");
        }
        if options.all {
            println!("  and elsewhere:");
            for (lines, what) in self.elsewhere.iter().take(over(&self.elsewhere, 60)) {
                println!("    {lines:>4}  {what}");
            }
        }
        println!("module circles: {}", self.circles.len());
        for circle in &self.circles {
            println!("  {circle}");
        }
        println!("upward imports between areas: {}", self.upward.len());
        for what in &self.upward {
            println!("  {what}");
        }
        println!(
            "tunebox-tune public items (pub fn/struct/enum/trait/const/type/static/mod/use \
             lines): {}",
            public_items(&options.root.join("crates/tune/src"))?
        );
        let readme =
            fs::read_to_string(options.root.join("README.md")).map_err(|e| e.to_string())?;
        println!("README.md lines: {}", readme.lines().count());
        Ok(())
    }

    /// Fails past the limits `options` sets, naming the first one passed.
    fn check(&self, options: &Options) -> Result<(), String> {
        if let Some(max) = options.max_fn
            && self.over_anywhere(max) > 0
        {
            return Err(format!(
                "{} functions are longer than {max} lines",
                self.over_anywhere(max)
            ));
        }
        for (limit, lines) in [(options.max_over_60, 60), (options.max_over_100, 100)] {
            if let Some(limit) = limit
                && self.over_anywhere(lines) > limit
            {
                return Err(format!(
                    "{} functions are over {lines} lines, more than the {limit} allowed: split \
                     one (`cargo xtask code-metrics --all` lists them)",
                    self.over_anywhere(lines)
                ));
            }
        }
        if options.no_circles && !(self.circles.is_empty() && self.upward.is_empty()) {
            return Err(format!(
                "{} module circles, {} upward imports between areas",
                self.circles.len(),
                self.upward.len()
            ));
        }
        Ok(())
    }
}

/// How many of `functions` are over `lines` lines.
fn over(functions: &[(usize, String)], lines: usize) -> usize {
    functions.iter().filter(|(l, _)| *l > lines).count()
}

/// `(package name, root file)` of every member of the workspace (`members` in the root
/// `Cargo.toml`): its `src/lib.rs`, else `src/main.rs`, else a `main.rs` of its own folder (the
/// tests).
fn crate_roots(root: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let manifest = root.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut out = Vec::new();
    for member in workspace_members(&text) {
        let dir = root.join(&member);
        let Some(file) = ["src/lib.rs", "src/main.rs", "main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|f| f.is_file())
        else {
            continue;
        };
        let package = dir.join("Cargo.toml");
        let package =
            fs::read_to_string(&package).map_err(|e| format!("{}: {e}", package.display()))?;
        out.push((package_name(&package).unwrap_or(member), file));
    }
    Ok(out)
}

/// The paths in the `members = [ … ]` list of a workspace's `Cargo.toml`.
fn workspace_members(cargo_toml: &str) -> Vec<String> {
    let Some(start) = cargo_toml.find("members") else {
        return Vec::new();
    };
    let list = &cargo_toml[start..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The `name = "…"` of a package's `Cargo.toml`.
fn package_name(cargo_toml: &str) -> Option<String> {
    cargo_toml.lines().find_map(|line| {
        let value = line.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
        Some(value.trim().trim_matches('"').to_owned())
    })
}

/// One module of a crate: its file and source.
struct Module {
    file: PathBuf,
    text: String,
}

/// Every module of the crate rooted at `root_file`, by path (`""` for the root, `a::b`), found by
/// following `mod x;` declarations that are not `#[cfg(test)]`.
fn module_tree(root_file: &Path) -> Result<BTreeMap<String, Module>, String> {
    let mut modules = BTreeMap::new();
    let mut todo = vec![(String::new(), root_file.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let code = strip(&text);
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        let dir = match stem.as_ref() {
            "lib" | "main" | "mod" => file.parent().unwrap_or(Path::new("")).to_path_buf(),
            _ => file.with_extension(""),
        };
        for child in child_modules(&code) {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let child_file = if flat.is_file() { flat } else { nested };
            if child_file.is_file() {
                let child_path = if path.is_empty() {
                    child
                } else {
                    format!("{path}::{child}")
                };
                todo.push((child_path, child_file));
            }
        }
        modules.insert(path, Module { file, text });
    }
    Ok(modules)
}

/// The names of `mod x;` declarations in `code` (stripped), without `#[cfg(test)]` ones.
fn child_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut test_next = false;
    for line in code.lines() {
        let line = line.trim();
        if line.starts_with("#[cfg(test)]") {
            test_next = true;
            continue;
        }
        let decl = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .unwrap_or(line);
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
            && !std::mem::take(&mut test_next)
        {
            out.push(name.trim().to_owned());
        }
        if !line.starts_with("#[") {
            test_next = false;
        }
    }
    out
}

/// `text` with comments, string literals and char literals blanked out (newlines kept, so line
/// numbers stay).
fn strip(text: &str) -> String {
    let mut lexer = Stripper::new(text);
    while lexer.i < lexer.chars.len() {
        lexer.token();
    }
    lexer.out
}

/// [`strip`]'s lexer: the text's characters, the position reached, and the text written so far.
struct Stripper {
    chars: Vec<char>,
    i: usize,
    out: String,
}

impl Stripper {
    /// A lexer at the start of `text`.
    fn new(text: &str) -> Stripper {
        Stripper {
            chars: text.chars().collect(),
            i: 0,
            out: String::with_capacity(text.len()),
        }
    }

    /// The character at `j`, if the text goes that far.
    fn at(&self, j: usize) -> Option<char> {
        self.chars.get(j).copied()
    }

    /// Writes `c` blanked: a newline stays, anything else becomes a space.
    fn blank(&mut self, c: char) {
        self.out.push(if c == '\n' { '\n' } else { ' ' });
    }

    /// Reads the token at the position: a comment, a string, a char literal or a lifetime, or
    /// one character of code.
    fn token(&mut self) {
        let c = self.chars[self.i];
        let next = self.at(self.i + 1);
        if c == '/' && next == Some('/') {
            self.line_comment();
        } else if c == '/' && next == Some('*') {
            self.block_comment();
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident_before(&self.chars, self.i)
        {
            self.raw_string();
        } else if c == '"' {
            self.string();
        } else if c == '\'' {
            self.char_or_lifetime();
        } else {
            self.code();
        }
    }

    /// Copies one character of code.
    fn code(&mut self) {
        self.out.push(self.chars[self.i]);
        self.i += 1;
    }

    /// Skips a `//` comment, up to (not including) its newline.
    fn line_comment(&mut self) {
        while self.i < self.chars.len() && self.chars[self.i] != '\n' {
            self.i += 1;
        }
    }

    /// Blanks a `/* … */` comment, nested ones included; its delimiters are dropped.
    fn block_comment(&mut self) {
        let mut depth = 0;
        while self.i < self.chars.len() {
            if self.chars[self.i] == '/' && self.at(self.i + 1) == Some('*') {
                depth += 1;
                self.i += 2;
            } else if self.chars[self.i] == '*' && self.at(self.i + 1) == Some('/') {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    break;
                }
            } else {
                self.blank(self.chars[self.i]);
                self.i += 1;
            }
        }
    }

    /// A raw string (`r"…"`, `r#"…"#`) written as `""` with its contents blanked; an `r` that
    /// starts none (`r#ident`) is code.
    fn raw_string(&mut self) {
        let mut j = self.i + 1;
        let mut hashes = 0;
        while self.at(j) == Some('#') {
            hashes += 1;
            j += 1;
        }
        if self.at(j) != Some('"') {
            self.code();
            return;
        }
        self.out.push_str("\"\"");
        j += 1;
        while j < self.chars.len() {
            if self.chars[j] == '"' && (0..hashes).all(|h| self.at(j + 1 + h) == Some('#')) {
                j += 1 + hashes;
                break;
            }
            self.blank(self.chars[j]);
            j += 1;
        }
        self.i = j;
    }

    /// A string literal, its contents blanked (an escaped quote with them).
    fn string(&mut self) {
        self.out.push('"');
        self.i += 1;
        while self.i < self.chars.len() && self.chars[self.i] != '"' {
            if self.chars[self.i] == '\\' {
                self.blank(self.chars[self.i]);
                self.i += 1;
            }
            if self.i < self.chars.len() {
                self.blank(self.chars[self.i]);
            }
            self.i += 1;
        }
        self.out.push('"');
        self.i += 1;
    }

    /// A char literal (`'a'`, `'\n'`, `'\u{1F600}'`), written `' '`, or a lifetime (`'a`),
    /// which is code.
    fn char_or_lifetime(&mut self) {
        let i = self.i;
        let close = if self.at(i + 1) == Some('\\') {
            (i + 2..self.chars.len().min(i + 12)).find(|&j| self.chars[j] == '\'')
        } else if self.at(i + 2) == Some('\'') {
            Some(i + 2)
        } else {
            None
        };
        match close {
            Some(j) => {
                self.out.push_str("' '");
                self.i = j + 1;
            }
            None => self.code(),
        }
    }
}

/// Whether the character before `i` belongs to an identifier (so an `r` there is no raw
/// string's).
fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The byte ranges of `#[cfg(test)]` blocks and `#[test]` functions in `code` (stripped).
fn test_ranges(code: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // `cfg(all(test, …))` is test code too (a test for one architecture).
    for marker in ["#[cfg(test)]", "#[cfg(all(test,", "#[test]"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(marker) {
            let start = from + at;
            from = start + marker.len();
            // The item after the attribute: up to its `;` or the end of its `{ … }`.
            let rest = &code[from..];
            let semi = rest.find(';');
            let brace = rest.find('{');
            match (brace, semi) {
                (Some(b), s) if s.is_none_or(|s| b < s) => {
                    let end = matching_brace(code, from + b).unwrap_or(code.len());
                    out.push((start, end));
                }
                (_, Some(s)) => out.push((start, from + s)),
                _ => {}
            }
        }
    }
    out
}

/// The index of the `}` that closes the `{` at `open`.
fn matching_brace(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `(name, first line, lines)` of every function with a body in `code` (stripped), outside
/// tests.
fn long_functions(code: &str) -> Vec<(String, usize, usize)> {
    let tests = test_ranges(code);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ") {
        let start = from + at;
        from = start + 3;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        if tests.iter().any(|&(a, b)| a <= start && start <= b) {
            continue;
        }
        let name: String = code[from..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` outside parentheses and angle brackets, unless a `;` comes
        // first (a declaration in a trait).
        let mut depth = 0i32;
        let mut body = None;
        for (i, c) in code[from..].char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    body = Some(from + i);
                    break;
                }
                _ => {}
            }
        }
        if let Some(open) = body
            && let Some(close) = matching_brace(code, open)
        {
            let first = line_of(start);
            out.push((name, first, line_of(close) - first + 1));
        }
    }
    out
}

/// Every `use` tree of `code` (stripped, tests removed), expanded to paths, with whether it is
/// a re-export (`pub use`, `pub(crate) use`).
fn use_paths(code: &str) -> Vec<(Vec<String>, bool)> {
    use_statements(code)
        .into_iter()
        .flat_map(|(paths, reexport, _)| paths.into_iter().map(move |p| (p, reexport)))
        .collect()
}

/// `code` without its `use` statements (blanked).
fn without_uses(code: &str) -> String {
    let mut out = code.to_owned();
    for (_, _, (a, b)) in use_statements(code) {
        out.replace_range(a..b, &" ".repeat(b - a));
    }
    out
}

/// Every `use` statement of `code`: its paths, whether it is a re-export, its byte range.
#[allow(clippy::type_complexity)]
fn use_statements(code: &str) -> Vec<(Vec<Vec<String>>, bool, (usize, usize))> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ") {
        let start = from + at;
        from = start + 4;
        let before = code[..start].trim_end();
        let line_start = before.rfind(['\n', ';', '{', '}']).map_or(0, |i| i + 1);
        let prefix = before[line_start..].trim();
        if !(prefix.is_empty() || prefix.starts_with("pub")) {
            continue;
        }
        if start > 0 && !code.as_bytes()[start - 1].is_ascii_whitespace() {
            continue;
        }
        let Some(end) = code[from..].find(';') else {
            break;
        };
        let tree = code[from..from + end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut paths = Vec::new();
        expand(&tree, &mut Vec::new(), &mut paths);
        let reexport = prefix.starts_with("pub");
        out.push((paths, reexport, (start, from + end)));
        from += end;
    }
    out
}

/// Expands a use tree (`a::{b, c::{d as e}}`) into paths (`[a, b]`, `[a, c, d]`).
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        let mut depth = 0;
        let mut part = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if c == ',' && depth == 0 {
                expand(&part, prefix, out);
                part.clear();
            } else {
                part.push(c);
            }
        }
        if !part.is_empty() {
            expand(&part, prefix, out);
        }
        return;
    }
    match tree.split_once("::") {
        Some((head, rest)) if !head.contains('{') => {
            prefix.push(head.trim().to_owned());
            expand(rest, prefix, out);
            prefix.pop();
        }
        _ => {
            // `d as e`: the path names `d`.
            let name = tree.split_whitespace().next().unwrap_or(tree);
            let mut path = prefix.clone();
            path.push(name.to_owned());
            out.push(path);
        }
    }
}

/// The items a module defines at its top level (by name), and the names it re-exports (name ->
/// absolute path of the target).
struct Items {
    defined: BTreeSet<String>,
    reexports: BTreeMap<String, Vec<String>>,
}

/// Absolute module path (segments) of `path` as written in module `at`: `crate::`, `super::`,
/// `self::`, or a child of `at`. `None` for an external crate or std.
fn absolute(
    path: &[String],
    at: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut segments = path.iter();
    let mut base: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("self") => {
            segments.next();
            at.to_vec()
        }
        Some("super") => {
            let mut base = at.to_vec();
            while segments.as_slice().first().map(String::as_str) == Some("super") {
                segments.next();
                base.pop();
            }
            base
        }
        Some(first) => {
            let mut child = at.to_vec();
            child.push(first.to_owned());
            if !modules.contains(&child) {
                return None;
            }
            at.to_vec()
        }
        None => return None,
    };
    base.extend(segments.cloned());
    Some(base)
}

/// The module that defines what `path` (absolute) names: the longest module prefix, followed
/// through re-exports.
fn defining_module(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    items: &BTreeMap<Vec<String>, Items>,
    depth: usize,
) -> Option<Vec<String>> {
    let mut module: Vec<String> = Vec::new();
    for (i, segment) in path.iter().enumerate() {
        let mut child = module.clone();
        child.push(segment.clone());
        if modules.contains(&child) {
            module = child;
            continue;
        }
        if segment == "*" || segment == "self" {
            return Some(module);
        }
        let here = items.get(&module)?;
        if here.defined.contains(segment) || depth > 8 {
            return Some(module);
        }
        if let Some(target) = here.reexports.get(segment) {
            let mut target = target.clone();
            target.extend(path[i + 1..].iter().cloned());
            return defining_module(&target, modules, items, depth + 1);
        }
        return Some(module);
    }
    Some(module)
}

/// The items of every module: definitions and re-exports.
fn module_items(
    modules: &BTreeMap<String, Module>,
    set: &BTreeSet<Vec<String>>,
) -> BTreeMap<Vec<String>, Items> {
    let mut out = BTreeMap::new();
    for (path, module) in modules {
        let at = split(path);
        let code = without_tests(&strip(&module.text));
        let mut defined = BTreeSet::new();
        for line in code.lines() {
            if line.starts_with(' ') {
                continue;
            }
            let mut words = line
                .split_whitespace()
                .skip_while(|w| w.starts_with("pub") || matches!(*w, "unsafe" | "async"))
                .peekable();
            let mut kind = words.next();
            if kind == Some("const") && words.peek() == Some(&"fn") {
                kind = words.next();
            }
            if let (Some(kind), Some(name)) = (kind, words.next())
                && matches!(
                    kind,
                    "fn" | "struct"
                        | "enum"
                        | "trait"
                        | "const"
                        | "static"
                        | "type"
                        | "mod"
                        | "macro_rules!"
                )
            {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                defined.insert(name);
            }
        }
        let mut reexports = BTreeMap::new();
        for (use_path, _) in use_paths(&code) {
            if let Some(abs) = absolute(&use_path, &at, set) {
                let name = use_path.last().cloned().unwrap_or_default();
                reexports.insert(name, abs);
            }
        }
        out.insert(at, Items { defined, reexports });
    }
    out
}

fn split(path: &str) -> Vec<String> {
    if path.is_empty() {
        Vec::new()
    } else {
        path.split("::").map(str::to_owned).collect()
    }
}

/// `code` with its test blocks blanked out.
fn without_tests(code: &str) -> String {
    let mut out = code.to_owned();
    for (a, b) in test_ranges(code) {
        let blank: String = code[a..=b.min(code.len() - 1)]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(a..=b.min(code.len() - 1), &blank);
    }
    out
}

/// The module circles of a crate: its strongly connected components of more than one module
/// (and a module's import of itself is not an edge).
fn module_circles(modules: &BTreeMap<String, Module>) -> (Edges, Vec<Vec<String>>) {
    let set: BTreeSet<Vec<String>> = modules.keys().map(|p| split(p)).collect();
    let items = module_items(modules, &set);
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (path, module) in modules {
        let at = split(path);
        let code = without_tests(&strip(&module.text));
        let mut targets = BTreeSet::new();
        for (use_path, reexport) in use_paths(&code) {
            if reexport {
                continue;
            }
            if let Some(abs) = absolute(&use_path, &at, &set)
                && let Some(target) = defining_module(&abs, &set, &items, 0)
            {
                targets.insert(target);
            }
        }
        for path in inline_paths(&without_uses(&code)) {
            if let Some(abs) = absolute(&path, &at, &set)
                && let Some(target) = defining_module(&abs, &set, &items, 0)
            {
                targets.insert(target);
            }
        }
        targets.remove(&at);
        // The crate root is the facade: what it defines itself is not counted.
        targets.remove(&Vec::new());
        edges.insert(at, targets);
    }
    let circles = strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|m| module_name(m)).collect())
        .collect();
    (edges, circles)
}

/// A module's edges: the modules whose items it names.
type Edges = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

/// The imports of `edges` that run up `areas` (bottom first), as `from -> to (area imports the
/// area above it)`, and the top-level modules no area names.
fn upward_imports(edges: &Edges, areas: &[&str]) -> Vec<String> {
    let rank = |module: &[String]| {
        let area = module.first()?;
        areas.iter().position(|a| a == area)
    };
    let mut out = Vec::new();
    for (from, targets) in edges {
        let Some(area) = from.first() else {
            continue;
        };
        let Some(from_rank) = rank(from) else {
            if from.len() == 1 {
                out.push(format!(
                    "{area} is in no area of the layering table (xtask/src/code_metrics.rs)"
                ));
            }
            continue;
        };
        for to in targets {
            if rank(to).is_some_and(|to_rank| to_rank > from_rank) {
                out.push(format!(
                    "{} -> {} ({area} imports {}, above it)",
                    module_name(from),
                    module_name(to),
                    to[0]
                ));
            }
        }
    }
    out
}

fn module_name(path: &[String]) -> String {
    if path.is_empty() {
        "lib".to_owned()
    } else {
        path.join("::")
    }
}

/// Paths written inline in code (`crate::a::b(…)`, `super::x::Y`, `child::f()`), outside `use`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let starts = (c.is_ascii_alphabetic() || c == b'_')
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
            && (i < 2 || &bytes[i - 2..i] != b"::");
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut path = Vec::new();
        loop {
            let s = j;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                j += 1;
            }
            path.push(code[s..j].to_owned());
            if code[j..].starts_with("::")
                && code[j + 2..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
            {
                j += 2;
            } else {
                break;
            }
        }
        if path.len() > 1 {
            out.push(path);
        }
        i = j.max(i + 1);
    }
    out
}

/// Tarjan's strongly connected components.
fn strongly_connected(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.edges.get(v) {
            for w in targets {
                let Some((w, _)) = s.edges.get_key_value(w) else {
                    continue;
                };
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

/// Lines under `dir` declaring a `pub` item (not `pub(crate)`), as issue 25 counts them.
fn public_items(dir: &Path) -> Result<usize, String> {
    let mut count = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path).map_err(|e| e.to_string())?;
                count += text
                    .lines()
                    .filter(|line| {
                        let mut words = line.split_whitespace();
                        words.next() == Some("pub")
                            && words.next().is_some_and(|kind| {
                                matches!(
                                    kind,
                                    "fn" | "struct"
                                        | "enum"
                                        | "trait"
                                        | "const"
                                        | "type"
                                        | "static"
                                        | "mod"
                                        | "use"
                                )
                            })
                    })
                    .count();
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_counted_from_fn_to_their_brace_outside_tests() {
        let code = strip(
            "fn a() {\n    let s = \"}\";\n}\n\n/// doc { \nfn b(x: [u8; 2]) -> u8 {\n    x[0]\n}\n\
             #[cfg(test)]\nmod tests {\n    fn c() {\n    }\n}\n",
        );
        assert_eq!(
            long_functions(&code),
            [("a".to_owned(), 1, 3), ("b".to_owned(), 6, 3)]
        );
    }

    #[test]
    fn use_trees_expand() {
        let code = "use crate::a::{b, c::{d as e, f}};\npub use self::g::H;\n";
        assert_eq!(
            use_paths(code),
            [
                (vec!["crate".into(), "a".into(), "b".into()], false),
                (
                    vec!["crate".into(), "a".into(), "c".into(), "d".into()],
                    false
                ),
                (
                    vec!["crate".into(), "a".into(), "c".into(), "f".into()],
                    false
                ),
                (vec!["self".into(), "g".into(), "H".into()], true),
            ]
        );
    }

    #[test]
    fn an_import_up_the_layers_is_named_and_one_down_is_not() {
        let module = |path: &str| split(path);
        let mut edges = Edges::new();
        edges.insert(module("base"), BTreeSet::new());
        edges.insert(
            module("search::replay"),
            [module("base::error"), module("measure::workers")].into(),
        );
        edges.insert(module("measure"), [module("search")].into());
        edges.insert(module("stray"), BTreeSet::new());
        assert_eq!(
            upward_imports(&edges, &["base", "search", "measure"]),
            [
                "search::replay -> measure::workers (search imports measure, above it)",
                "stray is in no area of the layering table (xtask/src/code_metrics.rs)",
            ]
        );
    }

    #[test]
    fn workspace_members_and_package_names_are_read() {
        let toml = "[workspace]\nmembers = [\n    \"crates/a\",\n    \"xtask\", # the tasks\n]\n\
                    [workspace.package]\nversion = \"1\"\n";
        assert_eq!(workspace_members(toml), ["crates/a", "xtask"]);
        assert_eq!(
            package_name("[package]\nname = \"tunebox-a\"\nversion = \"1\"\n").as_deref(),
            Some("tunebox-a")
        );
    }

    #[test]
    fn a_test_module_for_one_architecture_is_test_code() {
        let code = strip(
            "fn a() {\n}\n#[cfg(all(test, target_arch = \"x86_64\"))]\nmod tests {\n    \
             use super::*;\n    fn c() {\n    }\n}\n",
        );
        assert_eq!(long_functions(&code), [("a".to_owned(), 1, 2)]);
        assert!(without_tests(&code).find("super").is_none());
    }
}
