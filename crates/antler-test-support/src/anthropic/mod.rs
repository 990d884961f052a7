//! [`MockAnthropic`]: an Anthropic Messages API server on `127.0.0.1:0`, the twin of
//! [`crate::MockOpenAi`] for the Anthropic provider's tests.
//!
//! `POST /v1/messages` answers from a queue of [`AnthropicReply`]s, then from a fallback
//! (default: the text `ok`), as one JSON `message` or as Anthropic's SSE event sequence depending
//! on the request's `stream` flag. Every request is recorded ([`MockRequest`]). Like the real API it
//! answers `401` without the expected `x-api-key`, `400` without `anthropic-version` or
//! `max_tokens`, and `400` when [`tool_use_violations`] finds a broken history (recorded either
//! way; [`MockAnthropic::allow_violations`] answers normally instead).
//!
//! ```no_run
//! # async fn demo() {
//! use antler_test_support::{AnthropicReply, MockAnthropic};
//! let mock = MockAnthropic::start().await.with_replies([
//!     AnthropicReply::tool_use("toolu_1", "bash", serde_json::json!({"command": "ls"})),
//!     AnthropicReply::text("done").usage(10, 2),
//! ]);
//! // point a model at mock.base_url() …
//! mock.assert_no_violations();
//! # }
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;

mod invariants;
mod reply;

pub use invariants::tool_use_violations;
pub use reply::{anthropic_error, anthropic_sse_frame, AnthropicBlock, AnthropicReply};

use crate::openai::MockRequest;
use reply::{Render, ReplyBody};

type Fallback = Arc<dyn Fn(&Value) -> AnthropicReply + Send + Sync>;

struct Inner {
    queue: VecDeque<AnthropicReply>,
    fallback: Option<Fallback>,
    requests: Vec<MockRequest>,
    violations: Vec<String>,
    api_key: Option<String>,
    reject_violations: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    served: AtomicU64,
    in_flight: AtomicUsize,
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Counts a request as in flight until its handler finishes or is dropped (client gone).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Runner {
    Task(tokio::task::JoinHandle<()>),
    Thread(Option<std::thread::JoinHandle<()>>),
}

/// A mock Anthropic Messages server; stops when dropped.
pub struct MockAnthropic {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    runner: Runner,
}

impl std::fmt::Debug for MockAnthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockAnthropic")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockAnthropic {
    fn shared() -> (Arc<Shared>, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                fallback: None,
                requests: Vec::new(),
                violations: Vec::new(),
                api_key: None,
                reject_violations: true,
            }),
            served: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            shutdown: rx,
        });
        (shared, tx)
    }

    /// Serve on a task of the current tokio runtime.
    ///
    /// # Panics
    /// When no port on 127.0.0.1 can be bound.
    pub async fn start() -> MockAnthropic {
        let (shared, shutdown) = Self::shared();
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("mock Anthropic server: cannot bind 127.0.0.1:0: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("mock Anthropic server: no local address: {e}"),
        };
        let task = tokio::spawn(serve(listener, shared.clone()));
        MockAnthropic {
            shared,
            addr,
            shutdown,
            runner: Runner::Task(task),
        }
    }

    /// Serve from a runtime on its own thread, for synchronous tests (e.g. ones that run the
    /// `antler` binary as a subprocess).
    ///
    /// # Panics
    /// When the thread, its runtime or the listener cannot be set up.
    pub fn start_on_thread() -> MockAnthropic {
        let (shared, shutdown) = Self::shared();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("mock-anthropic".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let bound = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                        Ok(l) => l.local_addr().map(|a| (l, a)),
                        Err(e) => Err(e),
                    };
                    match bound {
                        Ok((listener, addr)) => {
                            let _ = addr_tx.send(Ok(addr));
                            serve(listener, thread_shared).await;
                        }
                        Err(e) => {
                            let _ = addr_tx.send(Err(e.to_string()));
                        }
                    }
                });
            });
        let handle = match spawned {
            Ok(h) => h,
            Err(e) => panic!("mock Anthropic server: cannot spawn thread: {e}"),
        };
        let addr = match addr_rx.recv() {
            Ok(Ok(addr)) => addr,
            Ok(Err(e)) => panic!("mock Anthropic server: {e}"),
            Err(_) => panic!("mock Anthropic server: thread exited during start-up"),
        };
        MockAnthropic {
            shared,
            addr,
            shutdown,
            runner: Runner::Thread(Some(handle)),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, what a model's `base_url` should be (requests go to
    /// `{base_url}/v1/messages`, as with `https://api.anthropic.com`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queue `reply` after the ones already queued.
    pub fn push(&self, reply: AnthropicReply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Queue `replies` (builder form of [`MockAnthropic::push`]).
    pub fn with_replies(self, replies: impl IntoIterator<Item = AnthropicReply>) -> Self {
        self.shared.lock().queue.extend(replies);
        self
    }

    /// Answer with `f(request body)` once the queue is empty (default: `AnthropicReply::text("ok")`).
    pub fn with_fallback(
        self,
        f: impl Fn(&Value) -> AnthropicReply + Send + Sync + 'static,
    ) -> Self {
        self.set_fallback(f);
        self
    }

    pub fn set_fallback(&self, f: impl Fn(&Value) -> AnthropicReply + Send + Sync + 'static) {
        self.shared.lock().fallback = Some(Arc::new(f));
    }

    /// Answer 401 unless the request carries `x-api-key: <key>`.
    pub fn require_api_key(self, key: impl Into<String>) -> Self {
        self.shared.lock().api_key = Some(key.into());
        self
    }

    /// Record history violations but answer normally instead of 400.
    pub fn allow_violations(self) -> Self {
        self.shared.lock().reject_violations = false;
        self
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<MockRequest> {
        self.shared.lock().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    pub fn last_request(&self) -> Option<MockRequest> {
        self.shared.lock().requests.last().cloned()
    }

    /// Scripted replies not yet used.
    pub fn remaining(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Requests whose answer is still being produced (a hanging or delayed reply counts until
    /// the client disconnects; a streamed body is not counted once the headers are sent).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// History violations found so far, each prefixed with `request #n:`.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// # Panics
    /// When any request broke a history invariant.
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "mock Anthropic server saw invalid histories:\n  {}",
            v.join("\n  ")
        );
    }
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        match &mut self.runner {
            Runner::Task(task) => task.abort(),
            Runner::Thread(handle) => {
                if let Some(h) = handle.take() {
                    let _ = h.join();
                }
            }
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let mut stop = shared.shutdown.clone();
    let app = Router::new().fallback(handle).with_state(shared);
    tokio::select! {
        res = axum::serve(listener, app) => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "mock Anthropic server stopped");
            }
        }
        _ = stop.wait_for(|s| *s) => {}
    }
}

/// Resolves when the server is dropped.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Sleep unless the server is dropped first; `false` when it was.
async fn sleep_or_stop(d: Duration, rx: &watch::Receiver<bool>) -> bool {
    if d.is_zero() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stopped(rx.clone()) => false,
    }
}

fn error_response(status: u16, kind: &str, message: &str) -> Response {
    json_response(status, &anthropic_error(kind, message), &[])
}

fn json_response(status: u16, body: &Value, extra: &[(String, String)]) -> Response {
    bytes_response(
        status,
        "application/json",
        Body::from(body.to_string()),
        extra,
    )
}

fn bytes_response(
    status: u16,
    content_type: &str,
    body: Body,
    extra: &[(String, String)],
) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        headers.insert(axum::http::header::CONTENT_TYPE, v);
    }
    headers.insert("request-id", HeaderValue::from_static("req_mock"));
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            headers.append(k, v);
        }
    }
    resp
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body_json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned());
    let record = MockRequest {
        method: method.to_string(),
        path: path.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body_json.clone(),
    };
    let auth_ok;
    let has_version;
    let n;
    {
        let mut inner = shared.lock();
        auth_ok = match &inner.api_key {
            None => true,
            Some(key) => record.header("x-api-key") == Some(key.as_str()),
        };
        has_version = record.header("anthropic-version").is_some();
        inner.requests.push(record);
        n = inner.requests.len();
    }
    if !auth_ok {
        return error_response(401, "authentication_error", "invalid x-api-key");
    }
    if !(method == Method::POST && uri.path().trim_end_matches('/') == "/v1/messages") {
        return error_response(
            404,
            "not_found_error",
            &format!("Not found: {method} {path}"),
        );
    }
    if !has_version {
        return error_response(
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
        );
    }
    if !body_json.is_object() {
        return error_response(
            400,
            "invalid_request_error",
            "There was an error parsing the body of your request.",
        );
    }
    if body_json
        .get("max_tokens")
        .and_then(Value::as_u64)
        .is_none_or(|m| m == 0)
    {
        return error_response(400, "invalid_request_error", "max_tokens: Field required");
    }

    let reply = {
        let mut inner = shared.lock();
        let found = tool_use_violations(&body_json);
        if !found.is_empty() {
            let reject = inner.reject_violations;
            inner
                .violations
                .extend(found.iter().map(|v| format!("request #{n}: {v}")));
            if reject {
                drop(inner);
                return error_response(400, "invalid_request_error", &found.join("; "));
            }
        }
        match inner.queue.pop_front() {
            Some(r) => r,
            None => match inner.fallback.clone() {
                Some(f) => {
                    drop(inner);
                    f(&body_json)
                }
                None => AnthropicReply::text("ok"),
            },
        }
    };
    let _in_flight = InFlight::enter(&shared.in_flight);
    answer(&shared, reply, &body_json).await
}

async fn answer(shared: &Shared, reply: AnthropicReply, request: &Value) -> Response {
    let stop = shared.shutdown.clone();
    let shutting_down = || error_response(529, "overloaded_error", "server shutting down");
    if !sleep_or_stop(reply.delay, &stop).await {
        return shutting_down();
    }
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match &reply.body {
        ReplyBody::Hang => {
            stopped(stop).await;
            shutting_down()
        }
        ReplyBody::Error { status, body } => json_response(*status, body, &reply.headers),
        ReplyBody::Raw { status, body } => {
            let ct = if stream {
                "text/event-stream"
            } else {
                "application/json"
            };
            bytes_response(*status, ct, Body::from(body.clone()), &reply.headers)
        }
        ReplyBody::Message(_) => {
            let n = shared.served.fetch_add(1, Ordering::Relaxed) + 1;
            let render = Render {
                id: format!("msg_mock_{n}"),
                model: request
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or("mock-model")
                    .to_owned(),
                prompt_bytes: request.get("messages").map_or(0, |m| m.to_string().len())
                    + request.get("system").map_or(0, |s| s.to_string().len()),
            };
            if stream {
                let events = reply.events_json(&render).unwrap_or_default();
                sse_response(&reply, events, stop)
            } else {
                let body = reply.message_json(&render).unwrap_or(Value::Null);
                json_response(200, &body, &reply.headers)
            }
        }
    }
}

/// The SSE body: events paced by `chunk_delay`, cut short by `stall_after` / `drop_after` /
/// `error_after`, optionally re-cut into `fragment_size` byte pieces.
fn sse_response(
    reply: &AnthropicReply,
    events: Vec<Value>,
    stop: watch::Receiver<bool>,
) -> Response {
    let mut frames: Vec<String> = Vec::new();
    let mut stall = false;
    let mut cut = false;
    for (i, event) in events.iter().enumerate() {
        if let Some((at, err)) = &reply.error_after {
            if *at == i {
                frames.push(anthropic_sse_frame(&json!({"type": "error", "error": err})));
                cut = true;
                break;
            }
        }
        if reply.drop_after == Some(i) {
            cut = true;
            break;
        }
        if reply.stall_after == Some(i) {
            stall = true;
            break;
        }
        frames.push(anthropic_sse_frame(event));
    }
    if !(cut || stall) {
        if let Some((at, err)) = &reply.error_after {
            if *at >= events.len() {
                frames.push(anthropic_sse_frame(&json!({"type": "error", "error": err})));
            }
        }
        stall = reply.stall_after.is_some_and(|n| n >= events.len());
    }
    let pieces: Vec<(bool, Bytes)> = match reply.fragment_size {
        None => frames.into_iter().map(|f| (true, Bytes::from(f))).collect(),
        Some(size) => {
            let mut out = Vec::new();
            for f in frames {
                let bytes = Bytes::from(f);
                let mut start = 0;
                while start < bytes.len() {
                    let end = (start + size).min(bytes.len());
                    out.push((start == 0, bytes.slice(start..end)));
                    start = end;
                }
            }
            out
        }
    };
    let chunk_delay = reply.chunk_delay;
    let keepalive = reply.keepalive;
    let state = (pieces.into_iter(), 0usize, stop);
    let body = futures::stream::unfold(state, move |(mut it, sent, stop)| async move {
        match it.next() {
            Some((starts_event, bytes)) => {
                if starts_event && sent > 0 && !sleep_or_stop(chunk_delay, &stop).await {
                    return None;
                }
                let next = sent + usize::from(starts_event);
                Some((Ok::<Bytes, Infallible>(bytes), (it, next, stop)))
            }
            None => {
                if !stall {
                    return None;
                }
                match keepalive {
                    Some(every) if sleep_or_stop(every, &stop).await => Some((
                        Ok(Bytes::from_static(
                            "event: ping\ndata: {\"type\":\"ping\"}\n\n".as_bytes(),
                        )),
                        (it, sent, stop),
                    )),
                    Some(_) => None,
                    None => {
                        stopped(stop).await;
                        None
                    }
                }
            }
        }
    });
    let mut headers = reply.headers.clone();
    headers.push(("cache-control".into(), "no-cache".into()));
    bytes_response(200, "text/event-stream", Body::from_stream(body), &headers)
}
