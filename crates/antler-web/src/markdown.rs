//! HTML → clean Markdown: the article is found with `dom_smoothie` (a port of Mozilla's
//! Readability) and converted with `htmd` (a turndown-style converter). Headings become `#`,
//! lists, links (absolute), tables and code blocks survive; scripts, styles, navigation, banners,
//! cookie dialogs and footers do not.
//!
//! Used by the direct fetcher and by the Jina reader provider (which returns raw HTML).

use dom_query::{Document, Selection};
use dom_smoothie::{Config, Readability};

/// A page turned into Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The article title (`Untitled` when the page has none).
    pub title: String,
    /// The article body as Markdown, without the title.
    pub markdown: String,
}

impl Page {
    /// DeerFlow's rendering: `# {title}`, a blank line, the body.
    pub fn to_markdown(&self) -> String {
        let body = if self.markdown.trim().is_empty() {
            "*No content available*"
        } else {
            self.markdown.as_str()
        };
        format!("# {}\n\n{body}", self.title)
    }
}

/// Elements never worth converting, dropped before the article is searched for: code, media
/// embeds, navigation, footers, dialogs and the consent banners of the common consent managers.
const NOISE: &str = "script, style, noscript, template, svg, canvas, iframe, object, embed, \
    nav, footer, [role=navigation], [role=contentinfo], \
    [role=dialog], [aria-modal=true], #onetrust-consent-sdk, #CybotCookiebotDialog, \
    #usercentrics-root, #truste-consent-track, .cc-window, .cookie-banner, #cookie-banner, \
    .cookie-consent, #cookie-consent, #gdpr-consent, .gdpr-banner, \
    a.headerlink, a.anchor-link, a.header-anchor";

/// Page chrome dropped when no article is found and the whole body is converted.
const CHROME: &str = "header, aside, form, button, select, [role=banner], [role=search], \
    [aria-hidden=true]";

fn select<'a>(doc: &'a Document, css: &str) -> Selection<'a> {
    doc.try_select(css).unwrap_or_default()
}

/// Remove noise and make every `<pre>` a `<pre><code>` so it becomes a fenced block.
fn clean(doc: &Document) {
    select(doc, NOISE).remove();
    for pre in select(doc, "pre").iter() {
        if pre.try_select("code").is_none() {
            let inner = pre.inner_html();
            pre.set_html(format!("<code>{inner}</code>"));
        }
    }
}

fn converter() -> htmd::HtmlToMarkdown {
    htmd::HtmlToMarkdown::builder()
        .options(htmd::options::Options {
            bullet_list_marker: htmd::options::BulletListMarker::Dash,
            ul_bullet_spacing: 1,
            ol_number_spacing: 1,
            hr_style: htmd::options::HrStyle::Dashes,
            ..Default::default()
        })
        .skip_tags(vec!["script", "style", "noscript", "template"])
        .build()
}

/// Collapse runs of blank lines and trim.
fn tidy(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut blank = 0;
    for line in md.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

fn html_title(doc: &Document) -> Option<String> {
    let t = select(doc, "title").first().text();
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    (!t.is_empty()).then_some(t)
}

/// Convert an HTML page. `url` (absolute) makes relative links absolute.
pub fn html_to_page(html: &str, url: Option<&str>) -> Page {
    let doc = Document::from(html);
    clean(&doc);
    let fallback_title = html_title(&doc);
    let url = url.filter(|u| u.starts_with("http://") || u.starts_with("https://"));
    let article =
        Readability::with_document(doc, url, Some(Config::default())).and_then(|mut r| r.parse());
    let conv = converter();
    match article {
        Ok(a) if !a.text_content.trim().is_empty() => {
            let title = Some(a.title.trim().to_owned())
                .filter(|t| !t.is_empty())
                .or(fallback_title)
                .unwrap_or_else(|| "Untitled".to_owned());
            let markdown = conv
                .convert(&a.content)
                .map(|m| tidy(&m))
                .unwrap_or_default();
            Page { title, markdown }
        }
        other => {
            if let Err(e) = other {
                tracing::debug!(error = %e, "no article found; converting the whole body");
            }
            whole_body(html, fallback_title, &conv)
        }
    }
}

/// The body without chrome, for pages Readability finds no article in.
fn whole_body(html: &str, title: Option<String>, conv: &htmd::HtmlToMarkdown) -> Page {
    let doc = Document::from(html);
    clean(&doc);
    select(&doc, CHROME).remove();
    let body = select(&doc, "body").first();
    let inner = if body.exists() {
        body.inner_html()
    } else {
        doc.html()
    };
    Page {
        title: title.unwrap_or_else(|| "Untitled".to_owned()),
        markdown: conv.convert(&inner).map(|m| tidy(&m)).unwrap_or_default(),
    }
}

#[cfg(test)]
#[path = "markdown_tests.rs"]
mod tests;
