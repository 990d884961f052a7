//! [`MockOpenAi`]: an OpenAI-compatible Chat Completions server on `127.0.0.1:0`.
//!
//! Answers come from a queue of [`MockReply`]s, then from a fallback (default: the text `ok`).
//! Every request is recorded; every chat request's history is checked with
//! [`tool_call_violations`] and a broken one is answered `400` the way a strict provider does.

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

pub use invariants::tool_call_violations;
pub use reply::{openai_error, MockReply, MockToolCall};

use crate::sse::{sse_frame, SSE_DONE};
use reply::{Render, ReplyBody};

/// One request the server received.
#[derive(Clone, Debug, PartialEq)]
pub struct MockRequest {
    pub method: String,
    /// Path and query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Null` when empty; a JSON string holding the raw text when not JSON).
    pub body: Value,
}

impl MockRequest {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body's `messages` (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Whether the request asked for SSE.
    pub fn is_stream(&self) -> bool {
        self.body
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

type Fallback = Arc<dyn Fn(&Value) -> MockReply + Send + Sync>;

struct Inner {
    queue: VecDeque<MockReply>,
    fallback: Option<Fallback>,
    requests: Vec<MockRequest>,
    violations: Vec<String>,
    api_key: Option<String>,
    strict_order: bool,
    reject_violations: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    served: AtomicU64,
    in_flight: AtomicUsize,
    shutdown: watch::Receiver<bool>,
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

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Runner {
    Task(tokio::task::JoinHandle<()>),
    Thread(Option<std::thread::JoinHandle<()>>),
}

/// A mock OpenAI-compatible server; stops when dropped.
pub struct MockOpenAi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    runner: Runner,
}

impl std::fmt::Debug for MockOpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockOpenAi")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockOpenAi {
    fn shared() -> (Arc<Shared>, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                fallback: None,
                requests: Vec::new(),
                violations: Vec::new(),
                api_key: None,
                strict_order: false,
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
    pub async fn start() -> MockOpenAi {
        let (shared, shutdown) = Self::shared();
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("mock OpenAI server: cannot bind 127.0.0.1:0: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("mock OpenAI server: no local address: {e}"),
        };
        let task = tokio::spawn(serve(listener, shared.clone()));
        MockOpenAi {
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
    pub fn start_on_thread() -> MockOpenAi {
        let (shared, shutdown) = Self::shared();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("mock-openai".into())
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
            Err(e) => panic!("mock OpenAI server: cannot spawn thread: {e}"),
        };
        let addr = match addr_rx.recv() {
            Ok(Ok(addr)) => addr,
            Ok(Err(e)) => panic!("mock OpenAI server: {e}"),
            Err(_) => panic!("mock OpenAI server: thread exited during start-up"),
        };
        MockOpenAi {
            shared,
            addr,
            shutdown,
            runner: Runner::Thread(Some(handle)),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`, what a model's `base_url` should be.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queue `reply` after the ones already queued.
    pub fn push(&self, reply: MockReply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Queue `replies` (builder form of [`MockOpenAi::push`]).
    pub fn with_replies(self, replies: impl IntoIterator<Item = MockReply>) -> Self {
        self.shared.lock().queue.extend(replies);
        self
    }

    /// Answer with `f(request body)` once the queue is empty (default: `MockReply::text("ok")`).
    pub fn with_fallback(self, f: impl Fn(&Value) -> MockReply + Send + Sync + 'static) -> Self {
        self.set_fallback(f);
        self
    }

    pub fn set_fallback(&self, f: impl Fn(&Value) -> MockReply + Send + Sync + 'static) {
        self.shared.lock().fallback = Some(Arc::new(f));
    }

    /// Answer 401 unless the request carries `Authorization: Bearer <key>`.
    pub fn require_api_key(self, key: impl Into<String>) -> Self {
        self.shared.lock().api_key = Some(key.into());
        self
    }

    /// Also require tool results to directly follow their assistant message (OpenAI's rule).
    pub fn strict_tool_message_order(self) -> Self {
        self.shared.lock().strict_order = true;
        self
    }

    /// Record pairing violations but answer normally instead of 400.
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

    /// Pairing violations found so far, each prefixed with `request #n:`.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// # Panics
    /// When any request broke the tool-call pairing invariant.
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "mock OpenAI server saw invalid histories:\n  {}",
            v.join("\n  ")
        );
    }
}

impl Drop for MockOpenAi {
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
                tracing::debug!(error = %e, "mock OpenAI server stopped");
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
    let n;
    {
        let mut inner = shared.lock();
        auth_ok = match &inner.api_key {
            None => true,
            Some(key) => record.header("authorization") == Some(&format!("Bearer {key}")),
        };
        inner.requests.push(record);
        n = inner.requests.len();
    }
    if !auth_ok {
        return json_response(
            401,
            &openai_error(
                "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            &[],
        );
    }
    let uri_path = uri.path().trim_end_matches('/');
    if method == Method::GET && uri_path.ends_with("/models") {
        return json_response(
            200,
            &json!({"object": "list", "data": [{"id": "mock-model", "object": "model", "created": 1_700_000_000, "owned_by": "antler"}]}),
            &[],
        );
    }
    if !(method == Method::POST && uri_path.ends_with("/chat/completions")) {
        return json_response(
            404,
            &openai_error(
                &format!("Invalid URL ({method} {path})"),
                "invalid_request_error",
                None,
            ),
            &[],
        );
    }
    if !body_json.is_object() {
        return json_response(
            400,
            &openai_error(
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                None,
            ),
            &[],
        );
    }

    let reply = {
        let mut inner = shared.lock();
        let found = tool_call_violations(&body_json, inner.strict_order);
        if !found.is_empty() {
            let reject = inner.reject_violations;
            inner
                .violations
                .extend(found.iter().map(|v| format!("request #{n}: {v}")));
            if reject {
                drop(inner);
                return json_response(
                    400,
                    &openai_error(&found.join("; "), "invalid_request_error", None),
                    &[],
                );
            }
        }
        match inner.queue.pop_front() {
            Some(r) => r,
            None => match inner.fallback.clone() {
                Some(f) => {
                    drop(inner);
                    f(&body_json)
                }
                None => MockReply::text("ok"),
            },
        }
    };
    let _in_flight = InFlight::enter(&shared.in_flight);
    answer(&shared, reply, &body_json).await
}

async fn answer(shared: &Shared, reply: MockReply, request: &Value) -> Response {
    let stop = shared.shutdown.clone();
    if !sleep_or_stop(reply.delay, &stop).await {
        return json_response(
            503,
            &openai_error("server shutting down", "server_error", None),
            &[],
        );
    }
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match &reply.body {
        ReplyBody::Hang => {
            stopped(stop).await;
            json_response(
                503,
                &openai_error("server shutting down", "server_error", None),
                &[],
            )
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
        ReplyBody::Message { .. } => {
            let n = shared.served.fetch_add(1, Ordering::Relaxed) + 1;
            let render = Render {
                id: format!("chatcmpl-mock-{n}"),
                model: request
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or("mock-model")
                    .to_owned(),
                created: 1_700_000_000,
                prompt_bytes: request.get("messages").map_or(0, |m| m.to_string().len()),
            };
            if stream {
                let include_usage = request
                    .pointer("/stream_options/include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let events = reply
                    .chunks_json(&render, include_usage)
                    .unwrap_or_default();
                sse_response(&reply, events, stop)
            } else {
                let body = reply.completion_json(&render).unwrap_or(Value::Null);
                json_response(200, &body, &reply.headers)
            }
        }
    }
}

/// The SSE body: events paced by `chunk_delay`, cut short by `stall_after` / `drop_after` /
/// `error_after`, optionally re-cut into `fragment_size` byte pieces.
fn sse_response(reply: &MockReply, events: Vec<Value>, stop: watch::Receiver<bool>) -> Response {
    let mut frames: Vec<String> = Vec::new();
    let mut cut = None;
    for (i, event) in events.iter().enumerate() {
        if let Some((at, err)) = &reply.error_after {
            if *at == i {
                frames.push(sse_frame(&json!({"error": err})));
                cut = Some(Cut::End);
                break;
            }
        }
        if reply.drop_after == Some(i) {
            cut = Some(Cut::End);
            break;
        }
        if reply.stall_after == Some(i) {
            cut = Some(Cut::Stall);
            break;
        }
        frames.push(sse_frame(event));
    }
    if cut.is_none() {
        if let Some((at, err)) = &reply.error_after {
            if *at >= events.len() {
                frames.push(sse_frame(&json!({"error": err})));
                cut = Some(Cut::End);
            }
        }
    }
    if cut.is_none() {
        if reply.stall_after.is_some_and(|n| n >= events.len()) {
            cut = Some(Cut::Stall);
        } else if reply.drop_after.is_none() {
            frames.push(SSE_DONE.to_owned());
        }
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
    let stall = matches!(cut, Some(Cut::Stall));
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
                        Ok(Bytes::from_static(": ping\n\n".as_bytes())),
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

enum Cut {
    Stall,
    End,
}
