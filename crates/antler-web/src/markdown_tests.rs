#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use pretty_assertions::assert_eq;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

/// The fixture `name` converted as if fetched from `url`.
fn fixture_page(name: &str, url: &str) -> Page {
    html_to_page(&fixture(name), Some(url))
}

/// None of `junk` survives in the markdown.
fn assert_no_junk(md: &str, junk: &[&str]) {
    for junk in junk {
        assert!(!md.contains(junk), "{junk} in {md}");
    }
}

#[test]
fn selectors_parse() {
    for css in [NOISE, CHROME] {
        assert!(dom_query::Matcher::new(css).is_ok(), "{css}");
    }
}

#[test]
fn news_article_keeps_the_story_and_drops_the_chrome() {
    let page = fixture_page(
        "news-article.html",
        "https://news.example.org/uk/porthwenna-sea-wall-vote",
    );
    assert_eq!(
        page.title,
        "Harbour town votes to rebuild its flooded sea wall"
    );
    let md = &page.markdown;
    assert!(md.starts_with("Residents of Porthwenna have voted"), "{md}");
    assert!(md.contains("\n## What the plan includes\n"));
    assert!(
        md.contains("\n- a new reinforced-concrete wall, 0.9 metres higher than the old one;\n")
    );
    assert!(md.contains("> \"We have lived with this wall our whole lives."));
    assert!(md.contains("## Objections"));
    assert_no_junk(
        md,
        &[
            "gtag",
            "dataLayer",
            "Skip to content",
            "Breaking:",
            "Most read",
            "Sign up",
            "All rights reserved",
            "Advertisement",
            "ad-slot",
            "Share on Social",
            "Cookie settings",
        ],
    );
    let full = page.to_markdown();
    assert!(full.starts_with("# Harbour town votes to rebuild its flooded sea wall\n\nResidents"));
}

#[test]
fn docs_page_keeps_code_tables_lists_and_absolute_links() {
    let page = fixture_page(
        "docs-page.html",
        "https://docs.example.com/guide/retries.html",
    );
    let md = &page.markdown;
    assert!(
        md.contains("[the API reference](https://docs.example.com/api/policy.html#RetryPolicy)")
    );
    assert!(
        md.contains("```\nfrom tidewater import Client, RetryPolicy\n\nclient = Client("),
        "{md}"
    );
    assert!(md.contains("| `attempts` "), "{md}");
    assert!(md.contains("| Option "), "{md}");
    assert!(
        md.contains("\n1. The request is sent.\n2. On a connection error"),
        "{md}"
    );
    assert!(md.contains("## A basic policy\n"), "{md}");
    assert!(md.contains("### Order of checks"), "{md}");
    assert_no_junk(
        md,
        &[
            "¶",
            "Search docs",
            "Toggle dark mode",
            "Edit this page",
            "Quick start",
            "searchtools",
        ],
    );
}

#[test]
fn cookie_banners_are_dropped() {
    let page = fixture_page("cookie-banner.html", "https://lantern.example/blog/builds");
    let md = &page.markdown;
    assert_eq!(page.title, "How we cut our build times in half");
    assert!(md.contains("Six months ago a clean build"));
    assert!(md.contains("| Dependencies | 17 min "), "{md}");
    assert!(md.contains("[post about our nightly jobs](https://lantern.example/blog/nightly-jobs)"));
    assert_no_junk(
        md,
        &[
            "cookies",
            "Accept All",
            "We value your privacy",
            "Reject All",
            "OptanonWrapper",
        ],
    );
}

#[test]
fn pages_without_an_article_fall_back_to_the_body() {
    let html = "<html><head><title> Status </title></head><body><nav><a href=/>Home</a></nav>\
        <h2>All systems normal</h2><p>Updated <b>2 min</b> ago.</p><footer>(c) x</footer></body></html>";
    let page = html_to_page(html, None);
    assert_eq!(page.title, "Status");
    assert!(
        page.markdown.contains("All systems normal"),
        "{}",
        page.markdown
    );
    assert!(page.markdown.contains("**2 min**"));
    assert!(!page.markdown.contains("Home"));
    assert!(!page.markdown.contains("(c) x"));
    assert_eq!(
        html_to_page("", None).to_markdown(),
        "# Untitled\n\n*No content available*"
    );
}

#[test]
fn tidy_collapses_blank_runs() {
    assert_eq!(tidy("\n\na  \n\n\n\nb\nc\n\n"), "a\n\nb\nc");
}
