//! The page itself: one HTML document with its style inline and a Content-Security-Policy that
//! forbids every fetch, so that it opens from disk (or an attachment) and reaches nothing.

use std::path::Path;

use anyhow::Context;

use super::plot::Figure;

/// What the page may load: nothing but its own inline style. No script, image, font, frame or
/// connection, from anywhere; no `<base>` or form target either.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'";

/// The page's style: readable in print and on a phone; figures scale to the width.
const STYLE: &str = "
body { font: 15px/1.45 system-ui, sans-serif; color: #111; background: #fff; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 1em 1.2em 3em; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.2em; }
h2 { font-size: 1.3em; margin: 1.8em 0 0.4em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.3em; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 0.4em 1.2em; }
figure { margin: 1em 0; }
figcaption { font-size: 0.92em; color: #333; margin-top: 0.2em; }
svg.plot { max-width: 100%; height: auto; display: block; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.best td { font-weight: 600; }
code, pre { font: 0.9em/1.35 ui-monospace, monospace; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }
details { margin: 0.3em 0; }
summary { cursor: pointer; }
.lede { font-size: 1.05em; }
.warn { background: #fff4e0; border-left: 4px solid #e69f00; padding: 0.3em 0.6em; }
.good { background: #e8f6f0; border-left: 4px solid #009e73; padding: 0.3em 0.6em; }
.muted { color: #555; }
";

/// `text` with `&`, `<`, `>`, `"` and `'` escaped: safe in element content and attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A cell of a table: text (escaped), or a number (right-aligned).
pub(crate) enum Cell {
    /// Text, left-aligned.
    Text(String),
    /// A number or a time, right-aligned.
    Num(String),
    /// Markup already escaped (a `<code>`).
    Html(String),
}

/// A page being written: sections of headings, paragraphs, tables and figures.
pub(crate) struct Page {
    html: String,
    /// The sections' ids and titles, for the navigation at the top.
    contents: Vec<(String, String)>,
    body: String,
}

impl Page {
    /// A page titled `title`.
    pub(crate) fn new(title: &str) -> Page {
        let mut html = String::with_capacity(1 << 16);
        html.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        html.push_str(&format!(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">\n"
        ));
        html.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
        html.push_str("<meta name=\"generator\" content=\"tunebox ");
        html.push_str(env!("CARGO_PKG_VERSION"));
        html.push_str("\">\n<title>");
        html.push_str(&esc(title));
        html.push_str("</title>\n<style>");
        html.push_str(STYLE);
        html.push_str("</style>\n</head>\n<body>\n<main>\n");
        Page {
            html,
            contents: Vec::new(),
            body: String::with_capacity(1 << 16),
        }
    }

    /// Markup as it is (the caller escaped what needs it).
    pub(crate) fn raw(&mut self, html: &str) {
        self.body.push_str(html);
    }

    /// The page's heading (before the navigation).
    pub(crate) fn title(&mut self, text: &str) {
        self.html.push_str(&format!("<h1>{}</h1>\n", esc(text)));
    }

    /// A line under the title.
    pub(crate) fn lede(&mut self, html: &str) {
        self.html
            .push_str(&format!("<p class=\"lede\">{html}</p>\n"));
    }

    /// A section's heading, listed in the navigation.
    pub(crate) fn section(&mut self, id: &str, title: &str) {
        self.contents.push((id.to_owned(), title.to_owned()));
        self.body
            .push_str(&format!("<h2 id=\"{}\">{}</h2>\n", esc(id), esc(title)));
    }

    /// A sub-heading.
    pub(crate) fn h3(&mut self, text: &str) {
        self.body.push_str(&format!("<h3>{}</h3>\n", esc(text)));
    }

    /// A paragraph of text (escaped).
    pub(crate) fn p(&mut self, text: &str) {
        self.body.push_str(&format!("<p>{}</p>\n", esc(text)));
    }

    /// A paragraph of markup, of `class` when given (`warn`, `good`, `muted`).
    pub(crate) fn p_html(&mut self, class: Option<&str>, html: &str) {
        match class {
            Some(class) => self
                .body
                .push_str(&format!("<p class=\"{class}\">{html}</p>\n")),
            None => self.body.push_str(&format!("<p>{html}</p>\n")),
        }
    }

    /// A figure with its caption; a figure that could not be drawn says so in its place.
    pub(crate) fn figure(&mut self, figure: &Figure) {
        let id = esc(figure.id());
        let svg = figure.svg().unwrap_or_else(|e| {
            format!(
                "<p class=\"warn\">this figure could not be drawn: {}</p>",
                esc(&e)
            )
        });
        self.body.push_str(&format!(
            "<figure id=\"{id}\" data-points=\"{}\">\n{svg}\n<figcaption id=\"{id}-caption\">{}\
             </figcaption>\n</figure>\n",
            figure.points(),
            esc(figure.caption())
        ));
    }

    /// A folded block: `summary` (markup) shows, `body` (markup) opens on a click.
    pub(crate) fn details(&mut self, summary: &str, body: &str) {
        self.body.push_str(&details(summary, body));
    }

    /// The whole document.
    pub(crate) fn finish(mut self) -> String {
        if !self.contents.is_empty() {
            self.html.push_str("<nav aria-label=\"sections\"><ul>\n");
            for (id, title) in &self.contents {
                self.html.push_str(&format!(
                    "<li><a href=\"#{}\">{}</a></li>\n",
                    esc(id),
                    esc(title)
                ));
            }
            self.html.push_str("</ul></nav>\n");
        }
        self.html.push_str(&self.body);
        self.html.push_str("</main>\n</body>\n</html>\n");
        self.html
    }
}

/// A table of `header` (none when every name is empty) and `rows`; a row is of class `best`
/// when `best(i)`.
pub(crate) fn table(
    header: &[&str],
    rows: impl IntoIterator<Item = Vec<Cell>>,
    best: impl Fn(usize) -> bool,
) -> String {
    let mut html = String::from("<table>\n");
    // A table of names and values has no header.
    if header.iter().any(|h| !h.is_empty()) {
        html.push_str("<thead><tr>");
        for h in header {
            html.push_str(&format!("<th scope=\"col\">{}</th>", esc(h)));
        }
        html.push_str("</tr></thead>\n");
    }
    html.push_str("<tbody>\n");
    for (i, row) in rows.into_iter().enumerate() {
        html.push_str(if best(i) {
            "<tr class=\"best\">"
        } else {
            "<tr>"
        });
        for cell in row {
            match cell {
                Cell::Text(t) => html.push_str(&format!("<td>{}</td>", esc(&t))),
                Cell::Num(t) => html.push_str(&format!("<td class=\"n\">{}</td>", esc(&t))),
                Cell::Html(h) => html.push_str(&format!("<td>{h}</td>")),
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n</table>\n");
    html
}

/// A folded block's markup (see [`Page::details`]).
pub(crate) fn details(summary: &str, body: &str) -> String {
    format!("<details>\n<summary>{summary}</summary>\n{body}\n</details>\n")
}

/// Writes `html` to `path` whole (through a temporary file: a reader never sees half a page).
pub(crate) fn write(html: &str, path: &Path) -> crate::Result<()> {
    crate::base::whole_file::write(path, html.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(crate::TuneError::report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_everywhere() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        let mut page = Page::new("a <title>");
        page.section("s", "R&D");
        page.p("1 < 2");
        page.raw(&table(&["x"], [vec![Cell::Text("<b>".into())]], |_| false));
        let html = page.finish();
        assert!(html.contains("<title>a &lt;title&gt;</title>"));
        assert!(html.contains("<a href=\"#s\">R&amp;D</a>"));
        assert!(html.contains("<p>1 &lt; 2</p>"));
        assert!(html.contains("<td>&lt;b&gt;</td>"));
        assert!(html.contains(CONTENT_SECURITY_POLICY));
    }
}
