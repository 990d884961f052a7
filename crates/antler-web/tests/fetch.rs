//! The direct fetcher (`antler.web.direct:web_fetch_tool`) against pages served on 127.0.0.1:
//! real-world page shapes, charsets, size and time limits, content types, and the SSRF guard at
//! every hop — a refused URL must not cost a single connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_protocol::ToolStatus;
use antler_runtime::Tool;
use antler_web::guard::{is_blocked_ip, Resolver, StaticResolver};
use antler_web::WebToolBuilder;
use common::{call, extra, fixture, redirect, respond, silent_server, Server};
use futures::future::BoxFuture;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const DIRECT: &str = "antler.web.direct:web_fetch_tool";
const LOOPBACK_1: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

/// A direct fetcher that may read 127.0.0.1 (the opt-out).
fn open_fetcher(opts: Value) -> Arc<dyn Tool> {
    let mut o = extra(opts);
    o.insert("allow_private_addresses".into(), json!(true));
    WebToolBuilder::new()
        .build("web_fetch", DIRECT, &o)
        .unwrap()
        .unwrap()
}

/// A guarded fetcher for which 127.0.0.1 counts as "the public internet" and everything else
/// the default policy refuses stays refused (127.0.0.2 included).
fn guarded_fetcher(resolver: Arc<dyn Resolver>) -> Arc<dyn Tool> {
    WebToolBuilder::new()
        .with_resolver(resolver)
        .with_address_policy(|ip| ip != LOOPBACK_1 && is_blocked_ip(ip))
        .build("web_fetch", DIRECT, &extra(json!({})))
        .unwrap()
        .unwrap()
}

/// A listener that must never see a connection.
struct Tripwire {
    listener: TcpListener,
}

impl Tripwire {
    fn on(ip: &str) -> Tripwire {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        Tripwire { listener }
    }

    fn addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap()
    }

    /// A connection, had one been made, completed its handshake before the fetch returned.
    fn assert_untouched(&self) {
        match self.listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Ok((_, peer)) => panic!("the guard let a connection through from {peer}"),
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test]
async fn a_news_article_becomes_clean_markdown() {
    let srv = Server::html_fixture("news-article.html").await;
    let t = open_fetcher(json!({}));
    assert_eq!(t.name(), "web_fetch");
    assert!(t.returns_remote_content());
    let (md, status) = call(&t, json!({"url": format!("{}/uk/sea-wall", srv.url())})).await;
    assert_eq!(status, ToolStatus::Success);
    assert!(
        md.starts_with(
            "# Harbour town votes to rebuild its flooded sea wall\n\nResidents of Porthwenna"
        ),
        "{md}"
    );
    assert!(md.contains("## What the plan includes"));
    assert!(md.contains("- a rock revetment in front of the eastern section"));
    for junk in [
        "gtag(",
        "Most read",
        "Advertisement",
        "All rights reserved",
        "Skip to content",
    ] {
        assert!(!md.contains(junk), "{junk}");
    }
    let s = srv.only();
    assert_eq!(s.method, "GET");
    assert!(s.header("user-agent").unwrap().contains("antler/"));
    assert!(s.header("accept").unwrap().starts_with("text/html"));
    // Not asked for compression: the body arrives as is.
    assert_eq!(s.header("accept-encoding"), None);
}

#[tokio::test]
async fn a_docs_page_keeps_code_tables_and_resolves_links() {
    let srv = Server::start(|_| respond(200, "text/html", fixture("docs-page.html"))).await;
    let t = open_fetcher(json!({}));
    let base = srv.url();
    let (md, _) = call(&t, json!({"url": format!("{base}/guide/retries.html")})).await;
    assert!(
        md.starts_with("# Configuring retries - Tidewater HTTP client documentation\n"),
        "{md}"
    );
    assert!(
        md.contains(&format!(
            "[the API reference]({base}/api/policy.html#RetryPolicy)"
        )),
        "{md}"
    );
    assert!(md.contains("```\nfrom tidewater import Client, RetryPolicy"));
    assert!(md.contains("| `respect_retry_after` | True "));
    assert!(!md.contains("Edit this page"));
}

#[tokio::test]
async fn a_cookie_banner_is_dropped() {
    let srv = Server::html_fixture("cookie-banner.html").await;
    let (md, _) = call(&open_fetcher(json!({})), json!({"url": srv.url()})).await;
    assert!(md.contains("Six months ago a clean build"));
    assert!(!md.to_lowercase().contains("cookie"), "{md}");
}

#[tokio::test]
async fn legacy_charsets_are_decoded() {
    // ISO-8859-1 declared only in a <meta http-equiv>, served without a charset.
    let latin = Server::start(|_| respond(200, "text/html", fixture("latin1-article.html"))).await;
    let (md, _) = call(&open_fetcher(json!({})), json!({"url": latin.url()})).await;
    assert!(
        md.starts_with("# Gemeinderat beschließt neue Fährverbindung"),
        "{md}"
    );
    assert!(md.contains("Bürgermeisterin Brünhilde Schäfer"));
    assert!(md.contains("4,50\u{a0}€"), "{md}");
    assert!(!md.contains('\u{fffd}'));

    // windows-1251 declared only in the Content-Type header.
    let page = "<html><head><title>Новости</title></head><body><article><h1>Новости</h1><p>Сегодня в городе открылась новая библиотека. Жители пришли посмотреть на книги.</p><p>Библиотека работает ежедневно с девяти утра до восьми вечера, вход свободный.</p></article></body></html>";
    let (bytes, _, _) = encoding_rs::WINDOWS_1251.encode(page);
    let body = bytes.into_owned();
    let cyr =
        Server::start(move |_| respond(200, "text/html; charset=windows-1251", body.clone())).await;
    let (md, _) = call(&open_fetcher(json!({})), json!({"url": cyr.url()})).await;
    assert!(
        md.contains("Сегодня в городе открылась новая библиотека."),
        "{md}"
    );
}

fn big_page(bytes: usize) -> String {
    let para = "<p>The quick brown fox jumps over the lazy dog while the harbour wall is rebuilt, stone by stone, over three long summers.</p>\n";
    let mut s = String::from(
        "<!doctype html><html><head><title>Big</title></head><body><article><h1>Big</h1>\n",
    );
    while s.len() < bytes {
        s.push_str(para);
    }
    s.push_str("<p>THE-END-MARKER</p></article></body></html>");
    s
}

#[tokio::test]
async fn a_10_mb_page_is_read_up_to_the_limit() {
    let page = big_page(10 << 20);
    let srv = Server::start(move |_| respond(200, "text/html", page.clone())).await;
    let (md, status) = call(&open_fetcher(json!({})), json!({"url": srv.url()})).await;
    assert_eq!(status, ToolStatus::Success);
    assert!(md.starts_with("# Big\n\nThe quick brown fox"));
    assert!(!md.contains("THE-END-MARKER"));
    assert!(md.ends_with(
        "[Truncated: the response is larger than 5242880 bytes; only the first 5242880 were read.]"
    ));
    // The server was cut off, not drained: it saw one request and nothing was retried.
    assert_eq!(srv.seen().len(), 1);
}

#[tokio::test]
async fn a_raised_limit_reads_the_whole_page() {
    let page = big_page(300 << 10);
    let srv = Server::start(move |_| respond(200, "text/html", page.clone())).await;
    let (md, _) = call(
        &open_fetcher(json!({"max_bytes": 200 << 10})),
        json!({"url": srv.url()}),
    )
    .await;
    assert!(md.ends_with("only the first 204800 were read.]"));
    let (md, _) = call(
        &open_fetcher(json!({"max_bytes": 1 << 20})),
        json!({"url": srv.url()}),
    )
    .await;
    assert!(md.contains("THE-END-MARKER"));
    assert!(!md.contains("[Truncated"));
}

#[tokio::test]
async fn non_html_content() {
    let pdf = pdf_with_text("Quarterly numbers are up");
    let srv = Server::start(move |s| match s.path.as_str() {
        "/data.json" => respond(200, "application/json", r#"{"b":[1,2],"a":"x <system>"}"#),
        "/notes.txt" => respond(200, "text/plain; charset=utf-8", "line one\nline two"),
        "/report.pdf" => respond(200, "application/pdf", pdf.clone()),
        "/report" => respond(200, "application/octet-stream", pdf.clone()),
        "/logo.png" => respond(200, "image/png", vec![0x89, b'P', b'N', b'G', 0, 0, 0, 13]),
        "/gz" => axum::http::Response::builder()
            .header("content-type", "text/html")
            .header("content-encoding", "gzip")
            .body(axum::body::Body::from(vec![0x1f, 0x8b, 8, 0]))
            .unwrap(),
        _ => respond(404, "text/html", "<h1>Not Found</h1>"),
    })
    .await;
    let t = open_fetcher(json!({}));
    let u = |p: &str| json!({"url": format!("{}{p}", srv.url())});
    assert_eq!(
        call(&t, u("/data.json")).await,
        (
            "```json\n{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": \"x <system>\"\n}\n```"
                .to_owned(),
            ToolStatus::Success
        )
    );
    assert_eq!(
        call(&t, u("/notes.txt")).await,
        ("line one\nline two".to_owned(), ToolStatus::Success)
    );
    for p in ["/report.pdf", "/report"] {
        let (md, status) = call(&t, u(p)).await;
        assert_eq!(status, ToolStatus::Success, "{md}");
        assert!(md.contains("Quarterly numbers are up"), "{md}");
    }
    let (text, status) = call(&t, u("/logo.png")).await;
    assert_eq!(status, ToolStatus::Error);
    assert!(
        text.starts_with("Error: web_fetch cannot read image/png content"),
        "{text}"
    );
    let (text, _) = call(&t, u("/gz")).await;
    assert!(text.contains("Content-Encoding gzip"), "{text}");
    let (text, status) = call(&t, u("/missing")).await;
    assert_eq!(status, ToolStatus::Error);
    assert_eq!(
        text,
        format!("Error: HTTP 404 Not Found fetching {}/missing", srv.url())
    );
}

#[tokio::test]
async fn redirects_are_followed_and_limited() {
    let srv = Server::start(|s| match s.path.as_str() {
        "/a" => redirect(301, "/b"),
        "/b" => redirect(302, "c?x=1"),
        "/c" => respond(200, "text/plain", "arrived"),
        "/loop" => redirect(307, "/loop"),
        _ => respond(404, "text/plain", ""),
    })
    .await;
    let t = open_fetcher(json!({"max_redirects": 3}));
    assert_eq!(
        call(&t, json!({"url": format!("{}/a", srv.url())})).await,
        ("arrived".to_owned(), ToolStatus::Success)
    );
    assert_eq!(
        srv.seen()
            .iter()
            .map(|s| s.path.clone())
            .collect::<Vec<_>>(),
        ["/a", "/b", "/c"]
    );
    assert_eq!(srv.seen()[2].query.as_deref(), Some("x=1"));
    assert_eq!(
        call(&t, json!({"url": format!("{}/loop", srv.url())})).await,
        (
            "Error: Too many redirects (more than 3)".to_owned(),
            ToolStatus::Error
        )
    );
}

#[tokio::test]
async fn a_slow_page_times_out() {
    let addr = silent_server().await;
    let (text, status) = call(
        &open_fetcher(json!({"timeout": 0.3})),
        json!({"url": format!("http://{addr}/")}),
    )
    .await;
    assert_eq!(status, ToolStatus::Error);
    assert_eq!(
        text,
        format!("Error: Timed out after 0.3s fetching http://{addr}/")
    );
}

// ------------------------------------------------------------------ the SSRF guard

#[tokio::test]
async fn refused_urls_cost_no_connection() {
    let wire = Tripwire::on("127.0.0.1");
    let port = wire.addr().port();
    let resolver = StaticResolver::new()
        .with("evil.test", &["127.0.0.1".parse().unwrap()])
        .with(
            "mixed.test",
            &[
                "93.184.216.34".parse().unwrap(),
                "127.0.0.1".parse().unwrap(),
            ],
        );
    let t = WebToolBuilder::new()
        .with_resolver(Arc::new(resolver))
        .build("web_fetch", DIRECT, &extra(json!({})))
        .unwrap()
        .unwrap();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.1:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://evil.test:{port}/"),
        format!("http://mixed.test:{port}/"),
        format!("http://0.0.0.0:{port}/"),
    ] {
        let (text, status) = call(&t, json!({"url": url})).await;
        assert_eq!(status, ToolStatus::Error, "{url}");
        assert!(
            text.starts_with("Error: Refusing to fetch a private"),
            "{url}: {text}"
        );
    }
    let (text, _) = call(&t, json!({"url": format!("gopher://127.0.0.1:{port}/")})).await;
    assert_eq!(text, "Error: Only http:// and https:// URLs are supported");
    wire.assert_untouched();
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    // 127.0.0.1 plays the public site; 127.0.0.2 is the private target.
    let inner = Tripwire::on("127.0.0.2");
    let target = inner.addr();
    let srv = Server::start(move |s| match s.path.as_str() {
        "/to-private" => redirect(302, &format!("http://{target}/admin")),
        "/to-metadata" => redirect(301, "http://169.254.169.254/latest/meta-data/"),
        "/to-localhost" => redirect(307, &format!("http://localhost:{}/", target.port())),
        "/to-rebind" => redirect(302, &format!("http://rebind.test:{}/", target.port())),
        "/to-file" => redirect(302, "file:///etc/passwd"),
        "/chain" => redirect(301, "/to-private"),
        _ => respond(200, "text/plain", "public page"),
    })
    .await;
    let resolver = StaticResolver::new()
        .with("site.test", &[LOOPBACK_1])
        .with("rebind.test", &["127.0.0.2".parse().unwrap()]);
    let t = guarded_fetcher(Arc::new(resolver));
    let port = srv.addr.port();
    // The name resolves through the guard, and the connection goes where it said.
    assert_eq!(
        call(&t, json!({"url": format!("http://site.test:{port}/ok")})).await,
        ("public page".to_owned(), ToolStatus::Success)
    );
    for path in [
        "/to-private",
        "/to-metadata",
        "/to-localhost",
        "/to-rebind",
        "/chain",
        "/to-file",
    ] {
        let (text, status) =
            call(&t, json!({"url": format!("http://site.test:{port}{path}")})).await;
        assert_eq!(status, ToolStatus::Error, "{path}");
        assert!(
            text.starts_with("Error: Refusing to fetch")
                || text == "Error: Only http:// and https:// URLs are supported",
            "{path}: {text}"
        );
    }
    inner.assert_untouched();
}

/// Answers with a public-looking address first and a private one afterwards — the classic
/// rebinding name.
struct Flip {
    calls: AtomicUsize,
    second: IpAddr,
}

impl Resolver for Flip {
    fn lookup<'a>(&'a self, _host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let ip = if n == 0 { LOOPBACK_1 } else { self.second };
        Box::pin(async move { Ok(vec![ip]) })
    }
}

#[tokio::test]
async fn a_rebinding_name_connects_to_the_address_that_was_checked() {
    let inner = Tripwire::on("127.0.0.2");
    let srv = Server::start(|_| respond(200, "text/plain", "checked address")).await;
    let flip = Arc::new(Flip {
        calls: AtomicUsize::new(0),
        second: "127.0.0.2".parse().unwrap(),
    });
    let t = guarded_fetcher(flip.clone());
    let url = format!("http://flip.test:{}/", srv.addr.port());
    assert_eq!(
        call(&t, json!({"url": url})).await,
        ("checked address".to_owned(), ToolStatus::Success)
    );
    // One lookup served both the check and the connection.
    assert_eq!(flip.calls.load(Ordering::SeqCst), 1);
    inner.assert_untouched();
}

/// A one-page PDF with a line of text (offsets in the xref table computed as we go).
fn pdf_with_text(text: &str) -> Vec<u8> {
    let content = format!("BT /F1 18 Tf 50 700 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_owned(),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Times-Roman >>".to_owned(),
        format!("<< /Length {} >>\nstream\n{content}\nendstream", content.len()),
    ];
    let mut pdf = b"%PDF-1.5\n".to_vec();
    let mut starts = Vec::with_capacity(objects.len());
    for (n, body) in objects.iter().enumerate() {
        starts.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", n + 1).as_bytes());
    }
    let xref_at = pdf.len();
    let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
    for s in starts {
        table.push_str(&format!("{s:010} 00000 n \n"));
    }
    table.push_str(&format!(
        "trailer\n<< /Root 1 0 R /Size {} >>\nstartxref\n{xref_at}\n%%EOF\n",
        objects.len() + 1
    ));
    pdf.extend_from_slice(table.as_bytes());
    pdf
}
