//! Every provider against a local server that speaks its wire format: what antler sends (method,
//! path, headers, body) and what the model gets back, including DeerFlow's error shapes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use antler_protocol::ToolStatus;
use antler_runtime::Tool;
use antler_web::WebToolBuilder;
use common::{call, extra, fixture, json, respond, silent_server, Server};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn builder() -> WebToolBuilder {
    // No ambient keys: every test says which key it sets.
    WebToolBuilder::new().with_env(|_| None)
}

/// Tool `name` from `use_` configured with `opts`, the environment holding only `var=value`.
fn keyed_tool(
    (var, value): (&'static str, &'static str),
    name: &str,
    use_: &str,
    opts: Value,
) -> Arc<dyn Tool> {
    WebToolBuilder::new()
        .with_env(move |k| (k == var).then(|| value.to_owned()))
        .build(name, use_, &extra(opts))
        .unwrap()
        .unwrap()
}

fn tool(use_: &str, opts: Value) -> Arc<dyn Tool> {
    builder().build("t", use_, &extra(opts)).unwrap().unwrap()
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

// ------------------------------------------------------------------ DuckDuckGo

/// `template` with every `{{key}}` replaced by its value.
fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter().fold(template.to_owned(), |out, (key, value)| {
        out.replace(&format!("{{{{{key}}}}}"), value)
    })
}

fn fixture_text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// A result page of DuckDuckGo's HTML endpoint for `query`: the page chrome of
/// `ddg-html-page.html` around `results` (cards and the "Next" form, or the no-result card).
fn ddg_page(query: &str, results: &str) -> Vec<u8> {
    fill(
        &fixture_text("ddg-html-page.html"),
        &[("query", query), ("results", results)],
    )
    .into_bytes()
}

/// One `ddg-html-result.html` card: `(href, title, site, snippet)`; `href` on duckduckgo.com's
/// `y.js` makes it an ad card.
fn ddg_cards(cards: &[(&str, &str, &str, &str)]) -> String {
    let template = fixture_text("ddg-html-result.html");
    cards
        .iter()
        .map(|&(href, title, site, snippet)| {
            let ad = href.starts_with("https://duckduckgo.com/y.js");
            let (kind, badge) = if ad {
                (
                    "result--ad  result--ad--small",
                    "\n            <span class=\"badge--ad\">Ad</span>",
                )
            } else {
                ("web-result ", "")
            };
            fill(
                &template,
                &[
                    ("kind", kind),
                    ("href", href),
                    ("title", title),
                    ("badge", badge),
                    ("site", site),
                    ("snippet", snippet),
                ],
            )
        })
        .collect()
}

/// The "Next" form of a result page, asking for offset `s`.
fn ddg_next(query: &str, s: &str, dc: &str) -> String {
    fill(
        &fixture_text("ddg-html-next.html"),
        &[("query", query), ("s", s), ("dc", dc)],
    )
}

/// Page one of "rust async runtime": an ad, redirect and direct links, a "Next" form.
fn ddg_results_page1() -> Vec<u8> {
    let q = "rust async runtime";
    let cards = ddg_cards(&[
        (
            "https://duckduckgo.com/y.js?ad_domain=example.com&amp;ad_provider=bingv7aa&amp;ad_type=txad&amp;u3=https%3A%2F%2Fwww.bing.com%2Faclick",
            "Rust Training Courses - Learn Rust Fast",
            "example.com",
            "Official-looking ad copy.",
        ),
        (
            "//duckduckgo.com/l/?uddg=https%3A%2F%2Ftokio.rs%2F&amp;rut=8f2a4c",
            "Tokio - An asynchronous Rust runtime",
            "tokio.rs",
            "<b>Tokio</b> is an event-driven, non-blocking I/O platform for writing asynchronous applications with the <b>Rust</b> programming language.",
        ),
        (
            "https://rust-lang.github.io/async-book/",
            "Asynchronous Programming in Rust",
            "rust-lang.github.io/async-book",
            "This book aims to be a thorough guide to <b>asynchronous</b> programming in <b>Rust</b>, from beginner to advanced.",
        ),
        (
            "//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.rs%2Fasync-std%2Flatest%2Fasync_std%2F&amp;rut=8f2a4c",
            "async_std - Rust",
            "docs.rs/async-std/latest/async_std",
            "Async version of the <b>Rust</b> standard library. async-std is a foundation of portable <b>Rust</b> software.",
        ),
    ]);
    ddg_page(q, &format!("{cards}\n{}", ddg_next(q, "10", "11")))
}

/// Page two: a new result, a repeat of page one's tokio.rs, another new one.
fn ddg_results_page2() -> Vec<u8> {
    let q = "rust async runtime";
    let cards = ddg_cards(&[
        (
            "//duckduckgo.com/l/?uddg=https%3A%2F%2Fgithub.com%2Fsmol-rs%2Fsmol&amp;rut=8f2a4c",
            "GitHub - smol-rs/smol: A small and fast async runtime",
            "github.com/smol-rs/smol",
            "A small and fast <b>async runtime</b>. This crate simply re-exports other smaller async crates.",
        ),
        (
            "//duckduckgo.com/l/?uddg=https%3A%2F%2Ftokio.rs%2F&amp;rut=8f2a4c",
            "Tokio - An asynchronous Rust runtime",
            "tokio.rs",
            "duplicate of page one",
        ),
        (
            "//duckduckgo.com/l/?uddg=https%3A%2F%2Fwithout.boats%2Fblog%2Fwhy-async-rust%2F&amp;rut=8f2a4c",
            "Why async Rust?",
            "without.boats/blog/why-async-rust",
            "A history of the design of <b>async</b>/await in <b>Rust</b> &amp; its <b>runtime</b> model.",
        ),
    ]);
    ddg_page(q, &format!("{cards}\n{}", ddg_next(q, "25", "26")))
}

/// The page DuckDuckGo answers when nothing matches: the `result--no-result` card.
fn ddg_no_results_page() -> Vec<u8> {
    ddg_page(
        "zxqv nothing here",
        r#"            <div class="result results_links results_links_deep result--no-result">
          <div class="links_main links_deep result__body">
          <div class="no-results">No  results.</div>
          </div>
        </div>


"#,
    )
}

#[tokio::test]
async fn ddg_search_posts_the_html_form_and_follows_the_next_page() {
    let srv = Server::start(|seen| {
        let page = if seen.form().iter().any(|(k, v)| k == "s" && v == "10") {
            ddg_results_page2()
        } else {
            ddg_results_page1()
        };
        respond(200, "text/html; charset=UTF-8", page)
    })
    .await;
    let t = tool(
        "deerflow.community.ddg_search.tools:web_search_tool",
        json!({"base_url": srv.url(), "region": "uk-en", "safesearch": "off"}),
    );
    assert_eq!(t.name(), "web_search");
    assert!(t.returns_remote_content());
    assert_eq!(t.spec().parameters["required"], json!(["query"]));
    assert!(t.spec().parameters["properties"]
        .get("max_results")
        .is_some());

    let (text, status) = call(&t, json!({"query": "rust async runtime", "max_results": 4})).await;
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(
        parse(&text),
        json!({
            "query": "rust async runtime",
            "total_results": 4,
            "results": [
                {"title": "Tokio - An asynchronous Rust runtime", "url": "https://tokio.rs/",
                 "content": "Tokio is an event-driven, non-blocking I/O platform for writing asynchronous applications with the Rust programming language."},
                {"title": "Asynchronous Programming in Rust", "url": "https://rust-lang.github.io/async-book/",
                 "content": "This book aims to be a thorough guide to asynchronous programming in Rust, from beginner to advanced."},
                {"title": "async_std - Rust", "url": "https://docs.rs/async-std/latest/async_std/",
                 "content": "Async version of the Rust standard library. async-std is a foundation of portable Rust software."},
                {"title": "GitHub - smol-rs/smol: A small and fast async runtime", "url": "https://github.com/smol-rs/smol",
                 "content": "A small and fast async runtime. This crate simply re-exports other smaller async crates."},
            ]
        })
    );
    // Python's json.dumps(indent=2) layout.
    assert!(text.starts_with("{\n  \"query\": \"rust async runtime\",\n  \"total_results\": 4,"));

    let seen = srv.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path, "/html/");
    assert_eq!(
        seen[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert!(seen[0]
        .header("user-agent")
        .unwrap()
        .starts_with("Mozilla/5.0"));
    assert_eq!(
        seen[0].form(),
        vec![
            ("q".to_owned(), "rust async runtime".to_owned()),
            ("b".to_owned(), String::new()),
            ("kl".to_owned(), "uk-en".to_owned()),
            ("kp".to_owned(), "-2".to_owned()),
        ]
    );
    // Page two is the page's own "Next" form.
    let form2 = seen[1].form();
    assert!(form2.contains(&("s".to_owned(), "10".to_owned())));
    assert!(form2.contains(&(
        "vqd".to_owned(),
        "4-211148302463758227447624914357233045815".to_owned()
    )));
}

#[tokio::test]
async fn ddg_config_max_results_wins_and_one_page_is_enough() {
    let srv = Server::start(|_| respond(200, "text/html", ddg_results_page1())).await;
    let t = tool(
        "deerflow.community.ddg_search.tools:web_search_tool",
        json!({"base_url": srv.url(), "max_results": 2}),
    );
    let (text, _) = call(&t, json!({"query": "q", "max_results": 9})).await;
    let v = parse(&text);
    assert_eq!(v["total_results"], 2);
    assert_eq!(
        v["results"][1]["url"],
        "https://rust-lang.github.io/async-book/"
    );
    assert_eq!(srv.seen().len(), 1);
    assert_eq!(srv.only().form()[2], ("kl".to_owned(), "wt-wt".to_owned()));
}

#[tokio::test]
async fn ddg_no_results_bot_check_and_http_errors() {
    let srv = Server::start(|seen| match seen.form()[0].1.as_str() {
        "nothing" => respond(200, "text/html", ddg_no_results_page()),
        "bot" => respond(202, "text/html", fixture("ddg-html-anomaly.html")),
        _ => respond(503, "text/html", "<h1>Service Unavailable</h1>"),
    })
    .await;
    let t = tool(
        "deerflow.community.ddg_search.tools:web_search_tool",
        json!({"base_url": srv.url()}),
    );
    assert_eq!(
        call(&t, json!({"query": "nothing"})).await,
        (
            r#"{"error": "No results found", "query": "nothing"}"#.to_owned(),
            ToolStatus::Success
        )
    );
    assert_eq!(
        call(&t, json!({"query": "bot"})).await,
        (
            r#"{"error": "DuckDuckGo refused the request (bot check); try again later", "query": "bot"}"#.to_owned(),
            ToolStatus::Error
        )
    );
    assert_eq!(
        call(&t, json!({"query": "down"})).await,
        (
            r#"{"error": "DuckDuckGo search failed: HTTP 503 Service Unavailable", "query": "down"}"#.to_owned(),
            ToolStatus::Error
        )
    );
}

#[tokio::test]
async fn ddg_image_search_gets_a_token_then_the_json() {
    let srv = Server::start(|seen| match seen.path.as_str() {
        "/" => respond(
            200,
            "text/html; charset=utf-8",
            fixture("ddg-home-vqd.html"),
        ),
        "/i.js" => respond(200, "application/json", fixture("ddg-images.json")),
        _ => respond(404, "text/plain", "no"),
    })
    .await;
    let t = tool(
        "deerflow.community.image_search.tools:image_search_tool",
        json!({"base_url": srv.url(), "max_results": 2}),
    );
    assert_eq!(t.name(), "image_search");
    let props = &t.spec().parameters["properties"];
    assert_eq!(
        props["size"]["enum"],
        json!(["Small", "Medium", "Large", "Wallpaper"])
    );
    let (text, status) = call(
        &t,
        json!({"query": "red panda", "size": "Large", "type_image": "photo", "layout": "Wide"}),
    )
    .await;
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(
        parse(&text),
        json!({
            "query": "red panda",
            "total_results": 2,
            "results": [
                {"title": "Red panda in a tree", "image_url": "https://upload.example.org/wikipedia/commons/red-panda-1.jpg",
                 "thumbnail_url": "https://tse2.mm.bing.net/th?id=OIP.aaa&pid=Api"},
                {"title": "Red panda in the snow | City Zoo", "image_url": "https://zoo.example.com/img/red-panda-snow.jpg",
                 "thumbnail_url": "https://tse1.mm.bing.net/th?id=OIP.bbb&pid=Api"},
            ],
            "usage_hint": "Use the 'image_url' values as reference images in image generation. Download them first if needed."
        })
    );
    let seen = srv.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].param("q")),
        ("GET", Some("red panda".into()))
    );
    let js = &seen[1];
    assert_eq!(js.path, "/i.js");
    assert_eq!(
        js.param("vqd").as_deref(),
        Some("4-97381203398470123656813096201882373391")
    );
    assert_eq!(js.param("o").as_deref(), Some("json"));
    assert_eq!(js.param("l").as_deref(), Some("wt-wt"));
    assert_eq!(js.param("p").as_deref(), Some("1"));
    assert_eq!(
        js.param("f").as_deref(),
        Some(",size:Large,,type:photo,layout:Wide,")
    );
    assert_eq!(
        js.header("referer"),
        Some(format!("{}/", srv.url()).as_str())
    );
}

// ------------------------------------------------------------------ SearXNG

#[tokio::test]
async fn searxng_gets_json_and_returns_title_url_snippet() {
    let srv = Server::start(|_| {
        json(200, &json!({"query": "q", "number_of_results": 3, "results": [
            {"url": "https://a.example/", "title": "A", "content": "first", "engine": "bing", "score": 2.0},
            {"url": "https://b.example/", "title": "B", "content": "second", "engine": "brave"},
            {"url": "https://c.example/", "title": "C", "content": "third"},
        ]}))
    })
    .await;
    let t = tool(
        "deerflow.community.searxng.tools:web_search_tool",
        json!({"base_url": format!("{}/", srv.url()), "max_results": 2}),
    );
    assert!(t.spec().parameters["properties"]
        .get("max_results")
        .is_none());
    let (text, status) = call(&t, json!({"query": "rust"})).await;
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(
        parse(&text),
        json!([
            {"title": "A", "url": "https://a.example/", "snippet": "first"},
            {"title": "B", "url": "https://b.example/", "snippet": "second"},
        ])
    );
    let s = srv.only();
    assert_eq!((s.method.as_str(), s.path.as_str()), ("GET", "/search"));
    assert_eq!(
        s.pairs(),
        vec![
            ("q".into(), "rust".into()),
            ("format".into(), "json".into()),
            ("language".into(), "auto".into()),
            ("pageno".into(), "1".into()),
            ("limit".into(), "2".into()),
        ]
    );
    assert_eq!(s.header("accept"), Some("application/json"));
}

#[tokio::test]
async fn searxng_errors_are_deerflow_error_objects() {
    let srv = Server::start(|_| respond(200, "application/json", "{not json")).await;
    let t = tool(
        "deerflow.community.searxng.tools:web_search_tool",
        json!({"base_url": srv.url()}),
    );
    let (text, status) = call(&t, json!({"query": "x"})).await;
    assert_eq!(status, ToolStatus::Error);
    let v = parse(&text);
    assert_eq!(v["query"], "x");
    assert!(v["error"]
        .as_str()
        .unwrap()
        .starts_with("SearXNG search failed: response is not valid JSON"));
}

// ------------------------------------------------------------------ Tavily

#[tokio::test]
async fn tavily_search_and_extract() {
    let srv = Server::start(|seen| match seen.path.as_str() {
        "/search" => json(200, &json!({"query": "q", "response_time": 0.4, "images": [], "results": [
            {"title": "T1", "url": "https://t1.example/", "content": "c1", "score": 0.9, "raw_content": null},
            {"title": "T2", "url": "https://t2.example/", "content": "c2", "score": 0.5},
        ]})),
        "/extract" => {
            let url = seen.json()["urls"][0].as_str().unwrap().to_owned();
            if url.contains("fail") {
                json(200, &json!({"results": [], "failed_results": [{"url": url, "error": "Failed to fetch url"}]}))
            } else {
                json(200, &json!({"results": [{"url": url, "title": "Doc", "raw_content": "x".repeat(5000)}], "failed_results": []}))
            }
        }
        _ => json(404, &json!({"detail": {"error": "not found"}})),
    })
    .await;
    let search = keyed_tool(
        ("TAVILY_API_KEY", "tvly-env"),
        "web_search",
        "deerflow.community.tavily.tools:web_search_tool",
        json!({"base_url": srv.url(), "max_results": 3}),
    );
    let (text, status) = call(&search, json!({"query": "deer flow"})).await;
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(
        parse(&text),
        json!([
            {"title": "T1", "url": "https://t1.example/", "snippet": "c1"},
            {"title": "T2", "url": "https://t2.example/", "snippet": "c2"},
        ])
    );
    let s = &srv.seen()[0];
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/search"));
    assert_eq!(s.header("authorization"), Some("Bearer tvly-env"));
    assert_eq!(s.header("content-type"), Some("application/json"));
    assert_eq!(s.json(), json!({"query": "deer flow", "max_results": 3}));

    let fetch = tool(
        "deerflow.community.tavily.tools:web_fetch_tool",
        json!({"base_url": srv.url(), "api_key": "tvly-entry"}),
    );
    let (text, status) = call(&fetch, json!({"url": "https://93.184.216.34/doc"})).await;
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(text, format!("# Doc\n\n{}", "x".repeat(4096)));
    let s = srv.seen().pop().unwrap();
    assert_eq!(s.header("authorization"), Some("Bearer tvly-entry"));
    assert_eq!(s.json(), json!({"urls": ["https://93.184.216.34/doc"]}));
    assert_eq!(
        call(&fetch, json!({"url": "https://93.184.216.34/fail"})).await,
        ("Error: Failed to fetch url".to_owned(), ToolStatus::Error)
    );
}

#[tokio::test]
async fn tavily_http_errors_and_keyless_mode() {
    let srv = Server::start(|_| {
        json(
            401,
            &json!({"detail": {"error": "Unauthorized: missing or invalid API key."}}),
        )
    })
    .await;
    let t = tool(
        "deerflow.community.tavily.tools:web_search_tool",
        json!({"base_url": srv.url()}),
    );
    assert_eq!(
        call(&t, json!({"query": "x"})).await,
        (
            "Error: Tavily API error: HTTP 401 Unauthorized: Unauthorized: missing or invalid API key.".to_owned(),
            ToolStatus::Error
        )
    );
    let s = srv.only();
    assert_eq!(s.header("authorization"), None);
    assert_eq!(s.header("x-tavily-access-mode"), Some("keyless"));
}

// ------------------------------------------------------------------ Brave

#[tokio::test]
async fn brave_web_and_image_search() {
    let srv = Server::start(|seen| match seen.path.as_str() {
        "/res/v1/web/search" => json(200, &json!({"type": "search", "query": {"original": "q"}, "web": {"type": "search", "results": [
            {"title": "B1", "url": "https://b1.example/", "description": "d1", "language": "en"},
        ]}})),
        "/res/v1/images/search" => json(200, &json!({"type": "images", "results": [
            {"title": "ok", "url": "https://page.example/1", "source": "page.example",
             "thumbnail": {"src": "https://imgs.example/t1.jpg", "width": 200, "height": 100},
             "properties": {"url": "https://img.example/1.jpg", "width": 2000, "height": 1000}},
            {"title": "private image", "url": "https://page.example/2", "source": "x",
             "thumbnail": {"src": "https://imgs.example/t2.jpg", "width": 20, "height": 10},
             "properties": {"url": "http://169.254.169.254/latest", "width": 1, "height": 1}},
            {"title": "nothing safe", "url": "http://127.0.0.1/", "thumbnail": {"src": "http://10.0.0.1/t.jpg"}, "properties": {"url": "http://localhost/x.jpg"}},
        ]})),
        _ => json(404, &json!({})),
    })
    .await;
    let web = tool(
        "deerflow.community.brave.tools:web_search_tool",
        json!({"base_url": srv.url(), "api_key": "BSA-key"}),
    );
    let (text, status) = call(&web, json!({"query": "  brave  ", "max_results": 50})).await;
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(
        parse(&text),
        json!({"query": "brave", "total_results": 1, "results": [{"title": "B1", "url": "https://b1.example/", "content": "d1"}]})
    );
    let s = srv.only();
    assert_eq!(s.method, "GET");
    assert_eq!(s.header("x-subscription-token"), Some("BSA-key"));
    assert_eq!(s.header("accept"), Some("application/json"));
    assert_eq!(
        s.pairs(),
        vec![
            ("q".into(), "brave".into()),
            ("count".into(), "20".into()),
            ("text_decorations".into(), "false".into()),
        ]
    );

    let images = keyed_tool(
        ("BRAVE_SEARCH_API_KEY", "env-key"),
        "image_search",
        "deerflow.community.brave.tools:image_search_tool",
        json!({"base_url": srv.url(), "country": "DE", "safesearch": "strict"}),
    );
    let (text, _) = call(&images, json!({"query": "cats"})).await;
    let v = parse(&text);
    assert_eq!(v["total_results"], 2);
    assert_eq!(
        v["results"][0],
        json!({"title": "ok", "image_url": "https://img.example/1.jpg", "thumbnail_url": "https://imgs.example/t1.jpg",
               "source_url": "https://page.example/1", "source": "page.example", "width": 2000, "height": 1000})
    );
    // The refused full-size URL stays empty instead of borrowing the thumbnail.
    assert_eq!(v["results"][1]["image_url"], "");
    assert_eq!(
        v["results"][1]["thumbnail_url"],
        "https://imgs.example/t2.jpg"
    );
    // Dimensions describe the URL actually returned.
    assert_eq!(v["results"][1]["width"], 20);
    let s = srv.seen().pop().unwrap();
    assert_eq!(s.header("x-subscription-token"), Some("env-key"));
    assert_eq!(
        s.pairs(),
        vec![
            ("q".into(), "cats".into()),
            ("count".into(), "5".into()),
            ("country".into(), "DE".into()),
            ("safesearch".into(), "strict".into()),
        ]
    );
}

#[tokio::test]
async fn brave_without_a_key_sends_nothing() {
    let srv = Server::start(|_| json(200, &json!({}))).await;
    let t = tool(
        "deerflow.community.brave.tools:web_search_tool",
        json!({"base_url": srv.url()}),
    );
    assert_eq!(
        call(&t, json!({"query": "x"})).await,
        (
            r#"{"error": "BRAVE_SEARCH_API_KEY is not configured", "query": "x"}"#.to_owned(),
            ToolStatus::Error
        )
    );
    assert!(srv.seen().is_empty());
}

// ------------------------------------------------------------------ Serper

#[tokio::test]
async fn serper_web_and_image_search() {
    let srv = Server::start(|seen| match seen.path.as_str() {
        "/search" => json(200, &json!({"searchParameters": {"q": "q", "type": "search"}, "organic": [
            {"title": "S1", "link": "https://s1.example/", "snippet": "one", "position": 1},
            {"title": "S2", "link": "https://s2.example/", "snippet": "two", "position": 2},
        ]})),
        "/images" => json(200, &json!({"images": [
            {"title": "I1", "imageUrl": "https://i.example/1.png", "thumbnailUrl": "https://t.example/1.png"},
            {"title": "I2", "imageUrl": "http://192.168.1.5/x.png"},
            {"title": "I3", "thumbnailUrl": "https://t.example/3.png"},
        ]})),
        _ => json(500, &json!({"message": "boom"})),
    })
    .await;
    let web = tool(
        "deerflow.community.serper.tools:web_search_tool",
        json!({"base_url": srv.url(), "api_key": "serper-key", "max_results": 25}),
    );
    let (text, _) = call(&web, json!({"query": "serper"})).await;
    assert_eq!(
        parse(&text),
        json!({"query": "serper", "total_results": 2, "results": [
            {"title": "S1", "url": "https://s1.example/", "content": "one"},
            {"title": "S2", "url": "https://s2.example/", "content": "two"},
        ]})
    );
    let s = srv.only();
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/search"));
    assert_eq!(s.header("x-api-key"), Some("serper-key"));
    assert_eq!(s.json(), json!({"q": "serper", "num": 10}));

    let img = tool(
        "deerflow.community.serper.tools:image_search_tool",
        json!({"base_url": srv.url(), "api_key": "serper-key"}),
    );
    let (text, _) = call(&img, json!({"query": "pics", "max_results": 3})).await;
    let v = parse(&text);
    assert_eq!(
        v["results"],
        json!([
            {"title": "I1", "image_url": "https://i.example/1.png", "thumbnail_url": "https://t.example/1.png"},
            {"title": "I3", "image_url": "https://t.example/3.png", "thumbnail_url": "https://t.example/3.png"},
        ])
    );
    assert_eq!(
        srv.seen().pop().unwrap().json(),
        json!({"q": "pics", "num": 3})
    );
}

#[tokio::test]
async fn serper_http_error_is_a_deerflow_error_object() {
    let srv = Server::start(|_| json(403, &json!({"message": "Forbidden"}))).await;
    let t = tool(
        "deerflow.community.serper.tools:web_search_tool",
        json!({"base_url": srv.url(), "api_key": "k"}),
    );
    assert_eq!(
        call(&t, json!({"query": "x"})).await,
        (
            r#"{"error": "Serper API error: HTTP 403 Forbidden", "query": "x"}"#.to_owned(),
            ToolStatus::Error
        )
    );
}

// ------------------------------------------------------------------ Exa

#[tokio::test]
async fn exa_search_and_contents() {
    let srv = Server::start(|seen| match seen.path.as_str() {
        "/search" => json(200, &json!({"requestId": "r1", "resolvedSearchType": "neural", "results": [
            {"id": "https://e1.example/", "title": "E1", "url": "https://e1.example/", "highlights": ["h1", "h2"], "highlightScores": [0.5, 0.4]},
            {"id": "https://e2.example/", "title": null, "url": "https://e2.example/"},
        ]})),
        "/contents" => json(200, &json!({"requestId": "r2", "results": [{"id": "x", "url": "https://93.184.216.34/", "title": "Page", "text": "body text"}],
            "statuses": [{"id": "https://93.184.216.34/", "status": "success"}]})),
        _ => json(404, &json!({})),
    })
    .await;
    let t = tool(
        "deerflow.community.exa.tools:web_search_tool",
        json!({"base_url": srv.url(), "api_key": "exa-key", "search_type": "neural", "contents_max_characters": 300}),
    );
    let (text, _) = call(&t, json!({"query": "exa"})).await;
    assert_eq!(
        parse(&text),
        json!([
            {"title": "E1", "url": "https://e1.example/", "snippet": "h1\nh2"},
            {"title": "", "url": "https://e2.example/", "snippet": ""},
        ])
    );
    let s = srv.only();
    assert_eq!(s.header("x-api-key"), Some("exa-key"));
    assert_eq!(
        s.json(),
        json!({"query": "exa", "type": "neural", "numResults": 5, "contents": {"highlights": {"maxCharacters": 300}}})
    );
    let f = keyed_tool(
        ("EXA_API_KEY", "exa-env"),
        "web_fetch",
        "deerflow.community.exa.tools:web_fetch_tool",
        json!({"base_url": srv.url()}),
    );
    assert_eq!(
        call(&f, json!({"url": "https://93.184.216.34/"})).await,
        ("# Page\n\nbody text".to_owned(), ToolStatus::Success)
    );
    let s = srv.seen().pop().unwrap();
    assert_eq!(s.header("x-api-key"), Some("exa-env"));
    assert_eq!(
        s.json(),
        json!({"urls": ["https://93.184.216.34/"], "text": {"maxCharacters": 4096}})
    );
}

// ------------------------------------------------------------------ Firecrawl

#[tokio::test]
async fn firecrawl_search_and_scrape() {
    let srv = Server::start(|seen| match seen.path.as_str() {
        "/v2/search" => json(200, &json!({"success": true, "data": {"web": [
            {"url": "https://f1.example/", "title": "F1", "description": "fd1", "position": 1},
        ]}})),
        "/v2/scrape" => json(200, &json!({"success": true, "data": {"markdown": "# Heading\n\ntext", "metadata": {"title": "F page", "statusCode": 200}}})),
        _ => json(404, &json!({"success": false, "error": "nope"})),
    })
    .await;
    let t = tool(
        "deerflow.community.firecrawl.tools:web_search_tool",
        json!({"base_url": srv.url(), "api_key": "fc-key", "max_results": 7}),
    );
    let (text, _) = call(&t, json!({"query": "crawl"})).await;
    assert_eq!(
        parse(&text),
        json!([{"title": "F1", "url": "https://f1.example/", "snippet": "fd1"}])
    );
    let s = srv.only();
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/v2/search"));
    assert_eq!(s.header("authorization"), Some("Bearer fc-key"));
    assert_eq!(s.json(), json!({"query": "crawl", "limit": 7}));

    let f = tool(
        "deerflow.community.firecrawl.tools:web_fetch_tool",
        json!({"base_url": srv.url(), "api_key": "fc-key"}),
    );
    assert_eq!(
        call(&f, json!({"url": "https://93.184.216.34/a"})).await,
        (
            "# F page\n\n# Heading\n\ntext".to_owned(),
            ToolStatus::Success
        )
    );
    assert_eq!(
        srv.seen().pop().unwrap().json(),
        json!({"url": "https://93.184.216.34/a", "formats": ["markdown"]})
    );
}

#[tokio::test]
async fn firecrawl_without_a_key_and_with_errors() {
    let srv =
        Server::start(|_| json(402, &json!({"success": false, "error": "Payment required"}))).await;
    let nokey = tool(
        "deerflow.community.firecrawl.tools:web_search_tool",
        json!({"base_url": srv.url()}),
    );
    let (text, status) = call(&nokey, json!({"query": "x"})).await;
    assert_eq!(status, ToolStatus::Error);
    assert!(text.starts_with("Error: API key is required"));
    assert!(srv.seen().is_empty());
    let t = tool(
        "deerflow.community.firecrawl.tools:web_fetch_tool",
        json!({"base_url": srv.url(), "api_key": "k"}),
    );
    assert_eq!(
        call(&t, json!({"url": "https://93.184.216.34/"})).await,
        (
            "Error: Firecrawl API error: HTTP 402 Payment Required: Payment required".to_owned(),
            ToolStatus::Error
        )
    );
}

// ------------------------------------------------------------------ Jina

#[tokio::test]
async fn jina_posts_the_url_and_converts_the_html() {
    let srv = Server::html_fixture("news-article.html").await;
    let t = keyed_tool(
        ("JINA_API_KEY", "jina_key"),
        "web_fetch",
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        json!({"base_url": srv.url(), "timeout": 7}),
    );
    let (text, status) = call(&t, json!({"url": "https://93.184.216.34/uk/sea-wall"})).await;
    assert_eq!(status, ToolStatus::Success);
    assert!(text.starts_with(
        "# Harbour town votes to rebuild its flooded sea wall\n\nResidents of Porthwenna"
    ));
    assert!(!text.contains("Most read"));
    let s = srv.only();
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", "/"));
    assert_eq!(s.header("x-return-format"), Some("html"));
    assert_eq!(s.header("x-timeout"), Some("7"));
    assert_eq!(s.header("authorization"), Some("Bearer jina_key"));
    assert_eq!(
        s.json(),
        json!({"url": "https://93.184.216.34/uk/sea-wall"})
    );
}

#[tokio::test]
async fn jina_output_is_cut_at_4096_chars_and_errors_quote_the_status() {
    let long = format!(
        "<html><body><article><h1>Long</h1>{}</article></body></html>",
        "<p>word word word word.</p>".repeat(800)
    );
    let srv = Server::start(move |seen| {
        if seen.json()["url"].as_str().unwrap().ends_with("/down") {
            respond(422, "text/plain", "Invalid URL")
        } else {
            respond(200, "text/html", long.clone())
        }
    })
    .await;
    let t = tool(
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        json!({"base_url": srv.url()}),
    );
    let (text, _) = call(&t, json!({"url": "https://93.184.216.34/long"})).await;
    assert_eq!(text.chars().count(), 4096);
    assert_eq!(srv.only().header("authorization"), None);
    assert_eq!(
        call(&t, json!({"url": "https://93.184.216.34/down"})).await,
        (
            "Error: Jina API returned status 422: Invalid URL".to_owned(),
            ToolStatus::Error
        )
    );
}

#[tokio::test]
async fn reader_services_never_get_a_private_url() {
    let srv = Server::start(|_| respond(200, "text/html", "<p>secret</p>")).await;
    for use_ in [
        "deerflow.community.jina_ai.tools:web_fetch_tool",
        "deerflow.community.firecrawl.tools:web_fetch_tool",
        "deerflow.community.exa.tools:web_fetch_tool",
        "deerflow.community.tavily.tools:web_fetch_tool",
    ] {
        let t = tool(use_, json!({"base_url": srv.url(), "api_key": "k"}));
        for url in [
            "http://169.254.169.254/latest/meta-data/iam/",
            "http://localhost:8080/admin",
            "http://[::1]/",
            "file:///etc/passwd",
        ] {
            let (text, status) = call(&t, json!({"url": url})).await;
            assert_eq!(status, ToolStatus::Error, "{use_} {url}");
            assert!(
                text.starts_with("Error: Refusing to fetch")
                    || text.starts_with("Error: Only http://"),
                "{use_} {url}: {text}"
            );
        }
    }
    assert!(srv.seen().is_empty());
}

// ------------------------------------------------------------------ transport failures

#[tokio::test]
async fn timeouts_and_dead_endpoints_are_error_results() {
    // A server that accepts and never answers: the entry's timeout ends the call.
    let hang = Server::start(|_| respond(200, "text/plain", "unused")).await;
    let silent = silent_server().await;
    drop(hang);
    let t = tool(
        "deerflow.community.serper.tools:web_search_tool",
        json!({"base_url": format!("http://{silent}"), "api_key": "k", "timeout": 0.3}),
    );
    let (text, status) = call(&t, json!({"query": "x"})).await;
    assert_eq!(status, ToolStatus::Error);
    assert!(text.contains("request timed out"), "{text}");

    // Nothing listens on a port that was just closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let t = tool(
        "deerflow.community.searxng.tools:web_search_tool",
        json!({"base_url": format!("http://{closed}")}),
    );
    let (text, status) = call(&t, json!({"query": "x"})).await;
    assert_eq!(status, ToolStatus::Error);
    assert!(text.contains("connection failed"), "{text}");
}

// ------------------------------------------------------------------ config

#[test]
fn unknown_providers_and_bad_options_are_config_errors_naming_the_entry() {
    let b = builder();
    let e = b
        .build(
            "web_search",
            "deerflow.community.infoquest.tools:web_search_tool",
            &extra(json!({})),
        )
        .err()
        .unwrap();
    assert!(e.to_string().starts_with(
        "tools entry 'web_search': `use: deerflow.community.infoquest.tools:web_search_tool` is not a web provider antler has"
    ));
    let e = b
        .build("web_fetch", "my.company:fetcher", &extra(json!({})))
        .err()
        .unwrap();
    assert!(e.to_string().contains("tools entry 'web_fetch'"));
    let e = b
        .build(
            "web_fetch",
            "antler.web.direct:web_fetch_tool",
            &extra(json!({"timeout": "soon"})),
        )
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "tools entry 'web_fetch': `timeout` must be a positive number of seconds"
    );
    // Not a web entry: left to the other tool loaders.
    assert!(b
        .build("ls", "deerflow.sandbox.tools:ls_tool", &extra(json!({})))
        .unwrap()
        .is_none());
}

#[test]
fn describe_reports_provider_and_key() {
    let b = builder().with_env(|k| (k == "SERPER_API_KEY").then(|| "s".to_owned()));
    let d = |name: &str, use_: &str, o: Value| {
        b.describe(name, use_, &extra(o))
            .unwrap()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        d(
            "web_search",
            "deerflow.community.ddg_search.tools:web_search_tool",
            json!({})
        ),
        "web_search: DuckDuckGo; no key needed"
    );
    assert_eq!(
        d("web_fetch", "deerflow.community.jina_ai.tools:web_fetch_tool", json!({})),
        "web_fetch: Jina reader; key: not set (optional; set JINA_API_KEY or api_key for higher limits); private addresses refused"
    );
    assert_eq!(
        d("web_search", "deerflow.community.tavily.tools:web_search_tool", json!({})),
        "web_search: Tavily; key: not set (optional; set TAVILY_API_KEY or api_key for higher limits)"
    );
    assert_eq!(
        d(
            "image_search",
            "deerflow.community.serper.tools:image_search_tool",
            json!({})
        ),
        "image_search: Serper (Google); key: set ($SERPER_API_KEY)"
    );
    assert_eq!(
        d(
            "web_search",
            "deerflow.community.brave.tools:web_search_tool",
            json!({})
        ),
        "web_search: Brave Search; key: MISSING (set BRAVE_SEARCH_API_KEY or api_key)"
    );
    assert_eq!(
        d(
            "web_fetch",
            "antler.web.direct:web_fetch_tool",
            json!({"allow_private_addresses": true})
        ),
        "web_fetch: antler direct fetcher; no key needed; private addresses ALLOWED"
    );
    assert_eq!(
        d(
            "web_search",
            "deerflow.community.searxng.tools:web_search_tool",
            json!({"base_url": "http://searx:8080"})
        ),
        "web_search: SearXNG at http://searx:8080; no key needed"
    );
}
