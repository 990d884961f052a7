//! A recording HTTP server on 127.0.0.1 for provider and fetcher tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use antler_protocol::{Content, Object, ThreadState, ToolStatus};
use antler_runtime::{CollectingSink, RunContext, Tool, ToolContext, ToolOutput};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::{Map, Value};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// Decoded query (or form) pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.query.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect()
    }

    pub fn form(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(&self.body)
            .into_owned()
            .collect()
    }

    pub fn param(&self, key: &str) -> Option<String> {
        self.pairs()
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Response<Body> + Send + Sync>;

/// A server whose every answer comes from one closure.
pub struct Server {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub async fn start(
        handler: impl Fn(&Seen) -> Response<Body> + Send + Sync + 'static,
    ) -> Server {
        Self::start_on("127.0.0.1:0", handler).await
    }

    /// A server answering every request with the HTML fixture `name`.
    pub async fn html_fixture(name: &'static str) -> Server {
        Self::start(move |_| respond(200, "text/html; charset=utf-8", fixture(name))).await
    }

    pub async fn start_on(
        bind: &str,
        handler: impl Fn(&Seen) -> Response<Body> + Send + Sync + 'static,
    ) -> Server {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let handler: Handler = Arc::new(handler);
        let (s, h) = (seen.clone(), handler.clone());
        let app = axum::Router::new().fallback(move |req: Request<Body>| {
            let (s, h) = (s.clone(), h.clone());
            async move {
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, 64 << 20)
                    .await
                    .unwrap_or_default();
                let rec = Seen {
                    method: parts.method,
                    path: parts.uri.path().to_owned(),
                    query: parts.uri.query().map(str::to_owned),
                    headers: parts.headers,
                    body,
                };
                s.lock().unwrap().push(rec.clone());
                h(&rec)
            }
        });
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        Server { addr, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn only(&self) -> Seen {
        let seen = self.seen();
        assert_eq!(seen.len(), 1, "{seen:#?}");
        seen.into_iter().next().unwrap()
    }
}

/// A server that accepts connections and never answers (for timeouts); its address.
pub async fn silent_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut keep = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            keep.push(s);
        }
    });
    addr
}

pub fn respond(status: u16, content_type: &str, body: impl Into<Body>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", content_type)
        .body(body.into())
        .unwrap()
}

pub fn json(status: u16, v: &Value) -> Response<Body> {
    respond(status, "application/json", v.to_string())
}

pub fn redirect(status: u16, to: &str) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("location", to)
        .body(Body::empty())
        .unwrap()
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

pub fn extra(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

/// Call a tool once, as the runtime would.
pub async fn call(tool: &Arc<dyn Tool>, args: Value) -> (String, ToolStatus) {
    let run = RunContext::new("t", "r", Arc::new(CollectingSink::new()));
    let state = ThreadState::default();
    let ctx = ToolContext::new("call_1", &state, &run);
    let args: Object = args.as_object().cloned().unwrap();
    match tool.call(args, ctx).await.unwrap() {
        ToolOutput::Content {
            content: Content::Text(t),
            status,
            ..
        } => (t, status),
        other => panic!("{other:?}"),
    }
}
