//! The mock model server core: [`MockServer<W>`] listens on `127.0.0.1:0`, records every
//! request, checks each chat request the way the real API would (auth, required fields, the
//! vendor's history invariants such as tool-call pairing — a broken request is answered `400`
//! and recorded as a violation), and answers from a queue of scripted [`Reply`]s, then from a
//! fallback (default: the text `ok`), as one JSON body or as a stream shaped by the reply
//! (delays, stalls, keep-alives, break-offs, status codes, headers).
//!
//! Everything vendor-specific — routes, auth, error shapes, invariants, how answers and stream
//! events look — comes from the wire module `W` ([`MockWire`]): [`crate::openai`] and
//! [`crate::anthropic`]. Adding a vendor is one such module; [`crate::MockOpenAi`] and
//! [`crate::MockAnthropic`] are aliases of this server.

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
use serde_json::Value;
use tokio::sync::watch;

mod checks;
mod reply;
mod wire;

#[cfg(test)]
pub(crate) use checks::assert_problems;
pub(crate) use checks::{
    array_items, message_at, prompt_bytes, request_messages, request_model, CallIds,
};
pub use reply::Reply;
pub(crate) use reply::{estimated_tokens, split_even, split_text, IdRender, MockUsage};
pub use wire::{Failure, MockAnswer, MockWire, Route};

use reply::ReplyBody;

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
    /// Whether the request asked for a stream, in the vendor's terms (a body flag, or the path
    /// for Gemini's `:streamGenerateContent`).
    pub stream: bool,
}

impl MockRequest {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the request carries `Authorization: Bearer <key>`.
    pub fn has_bearer(&self, key: &str) -> bool {
        self.header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            == Some(key)
    }

    /// The body's `messages` (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// Whether the request asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.stream
    }
}

type Fallback<W> = Arc<dyn Fn(&Value) -> Reply<W> + Send + Sync>;

struct Inner<W: MockWire> {
    queue: VecDeque<Reply<W>>,
    fallback: Option<Fallback<W>>,
    requests: Vec<MockRequest>,
    violations: Vec<String>,
    api_key: Option<String>,
    strict_order: bool,
    reject_violations: bool,
}

struct Shared<W: MockWire> {
    inner: Mutex<Inner<W>>,
    served: AtomicU64,
    in_flight: AtomicUsize,
    shutdown: watch::Receiver<bool>,
}

impl<W: MockWire> Shared<W> {
    fn lock(&self) -> MutexGuard<'_, Inner<W>> {
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

/// Declares a vendor's wire marker with its mock server and scripted reply types, documented
/// alike: `$wire` names the wire in the marker's doc, `$server` the server in the server's.
macro_rules! mock_wire {
    ($marker:ident, $server:ident, $reply:ident, $wire:literal, $what:literal) => {
        #[doc = concat!("The ", $wire, " wire of the mock server.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $marker;

        #[doc = concat!("A mock ", $what, " server on `127.0.0.1`; stops when dropped.")]
        pub type $server = $crate::mock::MockServer<$marker>;

        #[doc = concat!("One scripted answer of [`", stringify!($server), "`].")]
        pub type $reply = $crate::mock::Reply<$marker>;
    };
}
pub(crate) use mock_wire;

/// A mock server of vendor `W`'s API; stops when dropped.
pub struct MockServer<W: MockWire> {
    shared: Arc<Shared<W>>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    runner: Runner,
}

impl<W: MockWire> std::fmt::Debug for MockServer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("wire", &W::NAME)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl<W: MockWire> MockServer<W> {
    fn shared() -> (Arc<Shared<W>>, watch::Sender<bool>) {
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
    pub async fn start() -> Self {
        let (shared, shutdown) = Self::shared();
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("mock {} server: cannot bind 127.0.0.1:0: {e}", W::NAME),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("mock {} server: no local address: {e}", W::NAME),
        };
        let task = tokio::spawn(serve(listener, shared.clone()));
        MockServer {
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
    pub fn start_on_thread() -> Self {
        let (shared, shutdown) = Self::shared();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("mock-{}", W::NAME.to_lowercase()))
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
            Err(e) => panic!("mock {} server: cannot spawn thread: {e}", W::NAME),
        };
        let addr = match addr_rx.recv() {
            Ok(Ok(addr)) => addr,
            Ok(Err(e)) => panic!("mock {} server: {e}", W::NAME),
            Err(_) => panic!("mock {} server: thread exited during start-up", W::NAME),
        };
        MockServer {
            shared,
            addr,
            shutdown,
            runner: Runner::Thread(Some(handle)),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What a model's `base_url` should be: `http://127.0.0.1:PORT` plus the vendor's root path
    /// (`/v1` for OpenAI, as with `https://api.openai.com/v1`; none for Anthropic, whose client
    /// appends `/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.addr, W::BASE_PATH)
    }

    /// Queue `reply` after the ones already queued.
    pub fn push(&self, reply: Reply<W>) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Queue `replies` (builder form of [`MockServer::push`]).
    pub fn with_replies(self, replies: impl IntoIterator<Item = Reply<W>>) -> Self {
        self.shared.lock().queue.extend(replies);
        self
    }

    /// Answer with `f(request body)` once the queue is empty (default: the text `ok`).
    pub fn with_fallback(self, f: impl Fn(&Value) -> Reply<W> + Send + Sync + 'static) -> Self {
        self.set_fallback(f);
        self
    }

    pub fn set_fallback(&self, f: impl Fn(&Value) -> Reply<W> + Send + Sync + 'static) {
        self.shared.lock().fallback = Some(Arc::new(f));
    }

    /// Answer 401 unless the request carries API key `key` the way the vendor expects it
    /// (OpenAI: `Authorization: Bearer <key>`; Anthropic: `x-api-key: <key>`).
    pub fn require_api_key(self, key: impl Into<String>) -> Self {
        self.shared.lock().api_key = Some(key.into());
        self
    }

    /// Check histories with the vendor's strictest order rules (see [`MockWire::violations`]).
    pub(crate) fn strict_order(self) -> Self {
        self.shared.lock().strict_order = true;
        self
    }

    /// Record violations but answer normally instead of 400.
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

    /// Violations found so far, each prefixed with `request #n:`.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// # Panics
    /// When any request broke an invariant of the API.
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "mock {} server saw invalid histories:\n  {}",
            W::NAME,
            v.join("\n  ")
        );
    }
}

impl<W: MockWire> Drop for MockServer<W> {
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

async fn serve<W: MockWire>(listener: tokio::net::TcpListener, shared: Arc<Shared<W>>) {
    let mut stop = shared.shutdown.clone();
    let app = Router::new().fallback(handle::<W>).with_state(shared);
    tokio::select! {
        res = axum::serve(listener, app) => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "mock {} server stopped", W::NAME);
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

fn failure<W: MockWire>(f: Failure<'_>) -> Response {
    let (status, body) = W::failure(f);
    json_response::<W>(status, &body, &[])
}

fn json_response<W: MockWire>(status: u16, body: &Value, extra: &[(String, String)]) -> Response {
    bytes_response::<W>(
        status,
        "application/json",
        Body::from(body.to_string()),
        extra,
    )
}

fn bytes_response<W: MockWire>(
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
    for (k, v) in W::RESPONSE_HEADERS {
        headers.insert(*k, HeaderValue::from_static(v));
    }
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            headers.append(k, v);
        }
    }
    resp
}

async fn handle<W: MockWire>(
    State(shared): State<Arc<Shared<W>>>,
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
        stream: W::is_stream(&path, &body_json),
    };
    let stream = record.stream;
    let auth_ok;
    let rejected;
    let n;
    {
        let mut inner = shared.lock();
        auth_ok = inner
            .api_key
            .as_deref()
            .is_none_or(|key| W::authorized(&record, key));
        rejected = body_json.is_object().then(|| W::reject(&record)).flatten();
        inner.requests.push(record);
        n = inner.requests.len();
    }
    if !auth_ok {
        return failure::<W>(Failure::Unauthorized);
    }
    match W::route(&method, uri.path().trim_end_matches('/')) {
        Route::Chat => {}
        Route::Answer(status, body) => return json_response::<W>(status, &body, &[]),
        Route::NotFound => {
            return failure::<W>(Failure::NotFound {
                method: &method,
                path: &path,
            })
        }
    }
    if !body_json.is_object() {
        return failure::<W>(Failure::BadJson);
    }
    if let Some((status, body)) = rejected {
        return json_response::<W>(status, &body, &[]);
    }

    let reply = {
        let mut inner = shared.lock();
        let found = W::violations(&body_json, inner.strict_order);
        if !found.is_empty() {
            let reject = inner.reject_violations;
            inner
                .violations
                .extend(found.iter().map(|v| format!("request #{n}: {v}")));
            if reject {
                drop(inner);
                return failure::<W>(Failure::Invalid(&found.join("; ")));
            }
        }
        match inner.queue.pop_front() {
            Some(r) => r,
            None => match inner.fallback.clone() {
                Some(f) => {
                    drop(inner);
                    f(&body_json)
                }
                None => Reply::answer(W::text("ok")),
            },
        }
    };
    let _in_flight = InFlight::enter(&shared.in_flight);
    answer(&shared, reply, &body_json, stream).await
}

async fn answer<W: MockWire>(
    shared: &Shared<W>,
    reply: Reply<W>,
    request: &Value,
    stream: bool,
) -> Response {
    let stop = shared.shutdown.clone();
    if !sleep_or_stop(reply.delay, &stop).await {
        return failure::<W>(Failure::ShuttingDown);
    }
    match &reply.body {
        ReplyBody::Hang => {
            stopped(stop).await;
            failure::<W>(Failure::ShuttingDown)
        }
        ReplyBody::Error { status, body } => json_response::<W>(*status, body, &reply.headers),
        ReplyBody::Raw { status, body } => {
            let ct = if stream {
                W::STREAM_CONTENT_TYPE
            } else {
                "application/json"
            };
            bytes_response::<W>(*status, ct, Body::from(body.clone()), &reply.headers)
        }
        ReplyBody::Message(answer) => {
            let n = shared.served.fetch_add(1, Ordering::Relaxed) + 1;
            let render = W::render(n, request);
            if stream {
                let events = answer.events(&render);
                sse_response(&reply, &events, stop)
            } else {
                json_response::<W>(200, &answer.message(&render), &reply.headers)
            }
        }
    }
}

/// The stream of `events` as `reply` scripts it: paced by `chunk_delay`, cut short or stalled
/// (kept warm by the vendor's keep-alive), optionally re-cut into `fragment_size` byte pieces.
fn sse_response<W: MockWire>(
    reply: &Reply<W>,
    events: &[Value],
    stop: watch::Receiver<bool>,
) -> Response {
    let (frames, stall) = reply.frames(events);
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
                        Ok(Bytes::from_static(W::KEEPALIVE.as_bytes())),
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
    bytes_response::<W>(
        200,
        W::STREAM_CONTENT_TYPE,
        Body::from_stream(body),
        &headers,
    )
}
