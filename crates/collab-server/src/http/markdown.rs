//! Markdown to HTML for READMEs, issue bodies and comments (pulldown-cmark),
//! made safe for a page anyone can write into: raw HTML is shown as text,
//! never passed through, and link and image targets with a scheme other
//! than http, https or mailto (`javascript:`, `data:`, ...) are dropped.
//! Relative targets can be pointed into the repository ([`LinkBase`]).
//! Fenced code blocks that name a language are highlighted
//! ([`super::highlight`]); the HTML for them is built here, from escaped
//! text, never from the document's own HTML.

use pulldown_cmark::{html, CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd};

use crate::highlight;

/// Where relative link and image targets of a document point.
pub struct LinkBase {
    /// The tree's root for links, e.g. `/r/-/blob/main/`.
    pub links: String,
    /// The tree's root for images, e.g. `/r/-/raw/main/`.
    pub images: String,
    /// The document's directory inside the tree (URL-encoded, ending in
    /// `/`, or empty): relative targets start here, and `..` climbs from
    /// here but never above the root.
    pub dir: String,
}

/// Render `source` to HTML that is safe to embed as is.
pub fn render(source: &str, base: Option<&LinkBase>) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(source, options).map(|event| match event {
        // Raw HTML, block or inline, becomes text: escaped on output.
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: safe_url(dest_url, base.map(|b| (b.links.as_str(), b.dir.as_str()))),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Image {
            link_type,
            dest_url: safe_url(dest_url, base.map(|b| (b.images.as_str(), b.dir.as_str()))),
            title,
            id,
        }),
        other => other,
    });
    let mut out = String::with_capacity(source.len() * 3 / 2);
    html::push_html(&mut out, highlight_code_blocks(events).into_iter());
    out
}

/// Replace each fenced code block whose language has a grammar by one
/// HTML event holding the highlighted block. Runs after raw HTML was
/// turned into text, so the only HTML events left are these.
fn highlight_code_blocks<'a>(events: impl Iterator<Item = Event<'a>>) -> Vec<Event<'a>> {
    let deadline = highlight::Deadline::start();
    let mut out = Vec::new();
    let mut block: Option<(String, Vec<Event<'a>>, String)> = None;
    for event in events {
        match (&mut block, event) {
            (None, Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(lang))))
                if !lang.is_empty() =>
            {
                let start = Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(lang.clone())));
                block = Some((lang.to_string(), vec![start], String::new()));
            }
            (Some((_, held, code)), Event::Text(text)) => {
                code.push_str(&text);
                held.push(Event::Text(text));
            }
            (Some(_), Event::End(TagEnd::CodeBlock)) => {
                let (lang, mut held, code) = block.take().unwrap_or_default();
                match highlight::code_block(&lang, &code, deadline) {
                    Some(html) => out.push(Event::Html(CowStr::Boxed(
                        format!(
                            "<pre><code class=\"language-{}\">{html}</code></pre>\n",
                            highlight::escape(lang.split([',', ' ']).next().unwrap_or(""))
                        )
                        .into_boxed_str(),
                    ))),
                    None => {
                        held.push(Event::End(TagEnd::CodeBlock));
                        out.append(&mut held);
                    }
                }
            }
            (Some((_, held, _)), other) => held.push(other),
            (None, other) => out.push(other),
        }
    }
    if let Some((_, mut held, _)) = block {
        out.append(&mut held);
    }
    out
}

/// `url` if its scheme is harmless, rebased when relative (onto `root` +
/// `dir`, with `.` and `..` resolved); `#` otherwise.
fn safe_url<'a>(url: CowStr<'a>, base: Option<(&str, &str)>) -> CowStr<'a> {
    // Browsers ignore tabs and newlines inside URLs ("java\tscript:"), so
    // judge the URL with every whitespace and control character removed.
    let squeezed: String = url
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .collect();
    let scheme_end = squeezed.find(':');
    let first_delimiter = squeezed.find(['/', '?', '#']);
    let has_scheme = match (scheme_end, first_delimiter) {
        (Some(colon), Some(delim)) => colon < delim,
        (Some(_), None) => true,
        _ => false,
    };
    if has_scheme {
        let scheme = squeezed[..scheme_end.unwrap_or(0)].to_ascii_lowercase();
        return if matches!(scheme.as_str(), "http" | "https" | "mailto") {
            url
        } else {
            CowStr::Borrowed("#")
        };
    }
    if squeezed.len() != url.len() {
        // Control characters in a relative URL: not worth guessing.
        return CowStr::Borrowed("#");
    }
    match base {
        Some((root, dir))
            if !url.starts_with('/') && !url.starts_with('#') && !url.starts_with('?') =>
        {
            let split = url.find(['?', '#']).unwrap_or(url.len());
            let (path, rest) = url.split_at(split);
            let joined = normalise(&format!("{dir}{path}"));
            CowStr::Boxed(format!("{root}{joined}{rest}").into_boxed_str())
        }
        _ => url,
    }
}

/// `a/./b/../c` → `a/c`; `..` above the start stays at the start. A
/// trailing `/` is kept.
fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    let mut out = parts.join("/");
    if path.ends_with('/') && !out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_is_escaped_not_passed_through() {
        let out = render(
            "# Hi\n\n<script>alert(1)</script>\n\ntext <b onclick=\"x()\">bold</b>\n",
            None,
        );
        assert!(out.contains("<h1>Hi</h1>"), "{out}");
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<b "), "{out}");
        assert!(
            out.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{out}"
        );
    }

    #[test]
    fn dangerous_link_schemes_are_dropped() {
        for src in [
            "[x](javascript:alert(1))",
            "[x](JavaScript:alert(1))",
            "[x](<java\tscript:alert(1)>)",
            "[x](&#106;avascript:alert(1))",
            "[x](data:text/html,<script>alert(1)</script>)",
            "![x](javascript:alert(1))",
            "<javascript:alert(1)>",
        ] {
            let out = render(src, None).to_ascii_lowercase();
            for attr in [
                "href=\"javascript",
                "src=\"javascript",
                "href=\"data",
                "<script",
            ] {
                assert!(!out.contains(attr), "{src} -> {out}");
            }
        }
        let out = render("[a](https://example.org/x) [m](mailto:a@b.c)", None);
        assert!(out.contains("href=\"https://example.org/x\""), "{out}");
        assert!(out.contains("href=\"mailto:a@b.c\""), "{out}");
    }

    #[test]
    fn fenced_code_is_highlighted_and_stays_escaped() {
        let out = render(
            "```rust\nfn main() { let s = \"<script>\"; }\n```\n\n```nosuch\n<b>x</b>\n```\n",
            None,
        );
        assert!(out.contains("<pre><code class=\"language-rust\">"), "{out}");
        assert!(out.contains("hl-string"), "{out}");
        assert!(out.contains("&lt;script&gt;"), "{out}");
        assert!(!out.contains("<script"), "{out}");
        assert!(out.contains("&lt;b&gt;x&lt;/b&gt;"), "{out}");
        assert!(!out.contains("<b>"), "{out}");
    }

    #[test]
    fn relative_targets_are_rebased() {
        let base = LinkBase {
            links: "/r/-/blob/main/".into(),
            images: "/r/-/raw/main/".into(),
            dir: String::new(),
        };
        let out = render(
            "[doc](docs/a.md) ![logo](./logo.png) [top](#x) [abs](/y)",
            Some(&base),
        );
        assert!(out.contains("href=\"/r/-/blob/main/docs/a.md\""), "{out}");
        assert!(out.contains("src=\"/r/-/raw/main/logo.png\""), "{out}");
        assert!(out.contains("href=\"#x\""), "{out}");
        assert!(out.contains("href=\"/y\""), "{out}");
    }

    /// A README in `lib/` linking `../doc/x.md` points at `doc/x.md`, not
    /// `lib/../doc/x.md` (issue 32); `..` never climbs above the tree.
    #[test]
    fn relative_targets_are_normalised() {
        let base = LinkBase {
            links: "/r/-/blob/main/".into(),
            images: "/r/-/raw/main/".into(),
            dir: "lib/sub/".into(),
        };
        let out = render(
            "[a](../../doc/x.md#part) [b](./c/../d.md?plain=1) [c](../../../../etc) ![i](../img.png)",
            Some(&base),
        );
        assert!(
            out.contains("href=\"/r/-/blob/main/doc/x.md#part\""),
            "{out}"
        );
        assert!(
            out.contains("href=\"/r/-/blob/main/lib/sub/d.md?plain=1\""),
            "{out}"
        );
        assert!(out.contains("href=\"/r/-/blob/main/etc\""), "{out}");
        assert!(out.contains("src=\"/r/-/raw/main/lib/img.png\""), "{out}");
        assert!(!out.contains(".."), "{out}");
    }
}
