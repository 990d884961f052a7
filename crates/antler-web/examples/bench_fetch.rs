//! What the direct fetcher costs: milliseconds per MB of HTML for the HTML → Markdown step
//! (readability + conversion) and for a whole fetch from a server on 127.0.0.1, medians.
//!
//! `cargo run --release -p antler-web --example bench_fetch -- [samples]`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use antler_web::fetch::{DirectFetcher, FetchLimits};
use antler_web::guard::UrlGuard;
use antler_web::markdown::html_to_page;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A long news page of about `bytes`: the fixture's chrome around an article grown by
/// repeating (and numbering) its body, as a long read or a live blog would be.
fn page_of(bytes: usize) -> String {
    let base = fixture("news-article.html");
    let start = base.find("<div class=\"story__body\">").unwrap();
    let end = start + base[start..].find("</div>").unwrap();
    let body = &base[start + "<div class=\"story__body\">".len()..end];
    let mut grown = String::new();
    let mut i = 0;
    while base.len() + grown.len() < bytes {
        i += 1;
        grown.push_str(&format!("<h2>Update {i}</h2>"));
        grown.push_str(body);
    }
    format!(
        "{}<div class=\"story__body\">{grown}{}",
        &base[..start],
        &base[end..]
    )
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Building DeerFlow's three default web tools, as every run does.
fn construction(samples: usize) -> Duration {
    let entries = [
        (
            "web_search",
            "deerflow.community.ddg_search.tools:web_search_tool",
        ),
        (
            "web_fetch",
            "deerflow.community.jina_ai.tools:web_fetch_tool",
        ),
        (
            "image_search",
            "deerflow.community.image_search.tools:image_search_tool",
        ),
    ];
    let extra = serde_json::Map::new();
    median(
        (0..samples.max(20))
            .map(|_| {
                let t = Instant::now();
                for (name, use_) in entries {
                    antler_web::build_tool(name, use_, &extra).unwrap().unwrap();
                }
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let samples: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    println!(
        "building the three default web tools: {:.2} ms (median)\n",
        construction(samples).as_secs_f64() * 1000.0
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("| page | size | HTML → Markdown, median | per MB | whole fetch (127.0.0.1), median | per MB |");
    println!("|---|---|---|---|---|---|");
    let mut pages: Vec<(String, String)> =
        ["news-article.html", "docs-page.html", "cookie-banner.html"]
            .iter()
            .map(|n| (n.to_string(), fixture(n)))
            .collect();
    for mb in [0.25, 1.0, 2.0, 5.0] {
        pages.push((
            format!("long news page {mb} MB"),
            page_of((mb * 1048576.0) as usize),
        ));
    }
    for (name, html) in pages {
        let mb = html.len() as f64 / 1048576.0;
        let convert: Vec<Duration> = (0..samples)
            .map(|_| {
                let t = Instant::now();
                let p = html_to_page(&html, Some("https://news.example.org/a"));
                assert!(!p.markdown.is_empty());
                t.elapsed()
            })
            .collect();
        let fetch = rt.block_on(async {
            let body = html.clone();
            let app = axum::Router::new().fallback(move || {
                let b = body.clone();
                async move { ([("content-type", "text/html; charset=utf-8")], b) }
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await.ok() });
            let f = DirectFetcher::new(
                UrlGuard::new(true),
                FetchLimits {
                    timeout: Duration::from_secs(120),
                    max_bytes: 64 << 20,
                    ..Default::default()
                },
            )
            .unwrap();
            let mut out = Vec::new();
            for _ in 0..samples {
                let t = Instant::now();
                let r = f.web_fetch(&format!("http://{addr}/page")).await;
                assert!(!r.error, "{}", r.text);
                out.push(t.elapsed());
            }
            out
        });
        let (c, w) = (median(convert), median(fetch));
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "| {name} | {:.0} KB | {:.2} ms | {:.1} ms/MB | {:.2} ms | {:.1} ms/MB |",
            html.len() as f64 / 1024.0,
            ms(c),
            ms(c) / mb,
            ms(w),
            ms(w) / mb
        );
    }
}
