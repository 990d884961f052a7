//! Test harness: an `antler serve` on 127.0.0.1:0 over a temporary data home, a scripted model
//! behind a gate (each model call waits for a permit, so tests decide when a run may progress —
//! no sleeps), and an SSE parser.

use std::sync::Arc;

use antler_agent::App;
use antler_config::{Config, ToolConfig};
use antler_models::{ChatModel, ChatRequest, ChunkSink, ModelError, ModelInfo, ScriptedModel};
use antler_protocol::AiMessage;
use antler_server::{AppState, Server, ServerConfig};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

pub use antler_models::ScriptedReply;

/// A model that takes a permit before each call (`open` hands them out).
pub struct GatedModel {
    inner: ScriptedModel,
    gate: Semaphore,
    calls: std::sync::atomic::AtomicUsize,
}

impl GatedModel {
    /// Open `n` more model calls.
    pub fn open(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// Model calls that have started (waiting or answered).
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn push(&self, r: ScriptedReply) {
        self.inner.push(r);
    }

    async fn pass(&self) -> Result<(), ModelError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.gate
            .acquire()
            .await
            .map(|p| p.forget())
            .map_err(|_| ModelError::InvalidRequest("gate closed".into()))
    }
}

#[async_trait]
impl ChatModel for GatedModel {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    async fn invoke(&self, req: ChatRequest<'_>) -> Result<AiMessage, ModelError> {
        self.pass().await?;
        self.inner.invoke(req).await
    }
    async fn stream(
        &self,
        req: ChatRequest<'_>,
        on_chunk: ChunkSink<'_>,
    ) -> Result<AiMessage, ModelError> {
        self.pass().await?;
        self.inner.stream(req, on_chunk).await
    }
}

pub struct Options {
    pub config: ServerConfig,
    pub open: bool,
    pub yaml_uploads: Option<(u64, u64, u64)>,
    pub hook: Option<antler_server::AgentHook>,
    /// Tools offered besides `ls` (config `tools:` entries).
    pub extra_tools: Vec<ToolConfig>,
    /// Stops the server when it fires (default: never).
    pub shutdown: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Where the MCP client looks for extensions_config.json (default: the process's).
    pub mcp_lookup: Option<antler_mcp::Lookup>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: ServerConfig {
                port: 0,
                ..ServerConfig::default()
            },
            open: true,
            yaml_uploads: None,
            hook: None,
            extra_tools: Vec::new(),
            shutdown: None,
            mcp_lookup: None,
        }
    }
}

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    pub model: Arc<GatedModel>,
    pub state: AppState,
    pub home: tempfile::TempDir,
    /// The serving task; it ends after a shutdown once every connection has closed.
    pub task: tokio::task::JoinHandle<()>,
}

fn scratch() -> tempfile::TempDir {
    // Outside /tmp when cargo's target dir is elsewhere (confined bash may write /tmp).
    let base = option_env!("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let _ = std::fs::create_dir_all(&base);
    tempfile::Builder::new()
        .prefix("antler-server-test-")
        .tempdir_in(base)
        .unwrap()
}

pub fn test_config(uploads: Option<(u64, u64, u64)>) -> Config {
    let mut config = Config {
        models: vec![
            serde_json::from_value(json!({"name": "main", "model": "scripted-1", "display_name": "Main", "api_key": "sk-secret", "base_url": "http://127.0.0.1:9/v1"})).unwrap(),
            serde_json::from_value(json!({"name": "thinker", "model": "scripted-2", "supports_thinking": true})).unwrap(),
        ],
        tools: vec![ToolConfig::new("ls", "file:read", "deerflow.sandbox.tools:ls_tool")],
        max_recursion_limit: 1000,
        ..Config::default()
    };
    if let Some((files, size, total)) = uploads {
        config.uploads.max_files = files;
        config.uploads.max_file_size = size;
        config.uploads.max_total_size = total;
    }
    config
}

impl TestServer {
    pub async fn start(replies: Vec<ScriptedReply>) -> TestServer {
        Self::start_with(replies, Options::default()).await
    }

    /// A server whose model answers only as [`GatedModel::open`] lets it.
    pub async fn gated(replies: Vec<ScriptedReply>) -> TestServer {
        let opts = Options {
            open: false,
            ..Options::default()
        };
        TestServer::start_with(replies, opts).await
    }

    pub async fn start_with(replies: Vec<ScriptedReply>, opts: Options) -> TestServer {
        let home = scratch();
        let model = Arc::new(GatedModel {
            inner: ScriptedModel::new(replies),
            gate: Semaphore::new(0),
            calls: Default::default(),
        });
        if opts.open {
            model.open(Semaphore::MAX_PERMITS / 2);
        }
        let mut config = test_config(opts.yaml_uploads);
        config.tools.extend(opts.extra_tools);
        let mut app = App::open(config, home.path())
            .unwrap()
            .with_model_override(model.clone());
        if let Some(lookup) = opts.mcp_lookup {
            app = app.with_mcp(antler_mcp::McpManager::new(home.path(), lookup));
        }
        let mut server = Server::new(Arc::new(app), opts.config);
        if let Some(h) = opts.hook {
            server = server.with_agent_hook(h);
        }
        let state = server.into_state();
        state.reconcile().await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let st = state.clone();
        let shutdown = opts.shutdown;
        let task = tokio::spawn(async move {
            let stop = async move {
                match shutdown {
                    Some(rx) => {
                        let _ = rx.await;
                    }
                    None => std::future::pending().await,
                }
            };
            let _ = st.serve(listener, stop).await;
        });
        TestServer {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            model,
            state,
            home,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Requests made with the bearer token `key`.
    pub fn with_key<'a>(&'a self, key: &'a str) -> Caller<'a> {
        Caller {
            s: self,
            key: Some(key),
        }
    }

    fn anonymous(&self) -> Caller<'_> {
        Caller { s: self, key: None }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.anonymous().get(path).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.anonymous().post(path, body).await
    }

    pub async fn wait_run(&self, thread: &str, body: Value) -> (u16, Value) {
        self.anonymous().wait_run(thread, body).await
    }

    pub async fn post_raw(&self, path: &str, body: &'static str) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        json_of(r).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.anonymous().patch(path, body).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.anonymous().delete(path).await
    }

    /// A bodiless `method` request with `headers`, the response unread.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = self.client.request(method.parse().unwrap(), self.url(path));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.send().await.unwrap()
    }

    /// Each `(method, path, body, status, needle)` answers `status` with a string `detail` that
    /// contains `needle` (a bad body names its field).
    pub async fn assert_bad_bodies(&self, cases: &[(&str, &str, Value, u16, &str)]) {
        for (method, path, body, status, needle) in cases {
            let (code, e) = self
                .anonymous()
                .send(method, path, Some(body.clone()))
                .await;
            assert_eq!(code, *status, "{method} {path}: {e}");
            let detail = e["detail"].as_str().unwrap_or_default();
            assert!(detail.contains(needle), "{method} {path}: {e}");
        }
    }

    /// `POST path` with a JSON body, the response unread.
    pub async fn post_req(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// `POST /threads/{thread}/runs/stream`, the response unread.
    pub async fn stream_req(&self, thread: &str, body: Value) -> reqwest::Response {
        self.post_req(&format!("/api/threads/{thread}/runs/stream"), body)
            .await
    }

    /// `POST /api/threads` with this id.
    pub async fn thread(&self, id: &str) {
        let (s, _) = self.post("/api/threads", json!({"thread_id": id})).await;
        assert_eq!(s, 200);
    }

    /// Stream a run to completion; returns the response headers and events.
    pub async fn stream_run(
        &self,
        thread: &str,
        body: Value,
    ) -> (reqwest::header::HeaderMap, Vec<Sse>) {
        let r = self.stream_req(thread, body).await;
        assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        (headers, parse_sse(&text))
    }
}

/// Starts a streamed run on `thread`: its id and its open event stream.
pub async fn start_stream(s: &TestServer, thread: &str, body: Value) -> (String, SseReader) {
    let r = s.stream_req(thread, body).await;
    assert_eq!(r.status().as_u16(), 200);
    let (_, run) = ids_from_location(r.headers());
    (run, SseReader::new(r))
}

/// Starts a run on `t1` that outlives its client (`on_disconnect: continue`) and reads up to its
/// first `values` event: the run's id and the rest of its stream.
pub async fn start_detached(s: &TestServer, text: &str) -> (String, SseReader) {
    let body = json!({"input": say(text), "on_disconnect": "continue"});
    let (run, mut r) = start_stream(s, "t1", body).await;
    r.until("values").await;
    (run, r)
}

/// `POST /api/threads/t1/runs/{run}/cancel?{query}`, the response unread.
pub async fn cancel_t1(s: &TestServer, run: &str, query: &str) -> reqwest::Response {
    s.raw(
        "POST",
        &format!("/api/threads/t1/runs/{run}/cancel?{query}"),
        &[],
    )
    .await
}

/// Requests to a [`TestServer`] with a bearer token, or none; each answers its status and JSON.
pub struct Caller<'a> {
    s: &'a TestServer,
    key: Option<&'a str>,
}

impl Caller<'_> {
    pub async fn send(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .s
            .client
            .request(method.parse().unwrap(), self.s.url(path));
        if let Some(k) = self.key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        json_of(req.send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send("POST", path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.send("PUT", path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send("PATCH", path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send("DELETE", path, None).await
    }

    /// `POST /api/threads` with this id.
    pub async fn create_thread(&self, id: &str) -> (u16, Value) {
        self.post("/api/threads", json!({"thread_id": id})).await
    }

    /// Creates thread `id`, which must succeed.
    pub async fn thread(&self, id: &str) {
        assert_eq!(self.create_thread(id).await.0, 200);
    }

    /// R3: a run on `thread`, waited for.
    pub async fn wait_run(&self, thread: &str, body: Value) -> (u16, Value) {
        self.post(&format!("/api/threads/{thread}/runs/wait"), body)
            .await
    }
}

pub async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (status, v)
}

/// One parsed SSE event (or comment).
#[derive(Clone, Debug, PartialEq)]
pub struct Sse {
    pub event: String,
    pub data: Value,
    pub id: Option<String>,
    /// The raw `data:` lines of the event.
    pub data_lines: usize,
}

/// Parse a complete SSE body; comments become events named `:comment`.
pub fn parse_sse(text: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.is_empty() {
            continue;
        }
        if block.starts_with(':') {
            out.push(Sse {
                event: ":comment".into(),
                data: Value::String(block.to_owned()),
                id: None,
                data_lines: 0,
            });
            continue;
        }
        let mut ev = Sse {
            event: String::new(),
            data: Value::Null,
            id: None,
            data_lines: 0,
        };
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                ev.event = v.to_owned();
            } else if let Some(v) = line.strip_prefix("data: ") {
                ev.data_lines += 1;
                ev.data = serde_json::from_str(v).unwrap_or_else(|e| panic!("bad data ({e}): {v}"));
            } else if let Some(v) = line.strip_prefix("id: ") {
                ev.id = Some(v.to_owned());
            } else {
                panic!("unexpected SSE line {line:?} in {block:?}");
            }
        }
        out.push(ev);
    }
    out
}

/// Incremental SSE reader over a streaming response.
pub struct SseReader {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    pub events: Vec<Sse>,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        SseReader {
            stream: resp.bytes_stream().boxed(),
            buf: String::new(),
            events: Vec::new(),
        }
    }

    /// The next event, `None` at end of stream.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..pos + 2).collect();
                let ev = parse_sse(&block).pop()?;
                self.events.push(ev.clone());
                return Some(ev);
            }
            match self.stream.next().await {
                Some(Ok(b)) => self.buf.push_str(std::str::from_utf8(&b).unwrap()),
                _ => return None,
            }
        }
    }

    /// Read until an event named `name`; returns it.
    pub async fn until(&mut self, name: &str) -> Sse {
        loop {
            match self.next().await {
                Some(e) if e.event == name => return e,
                Some(_) => {}
                None => panic!("stream ended before `{name}`: {:?}", self.events),
            }
        }
    }

    /// Read to the end of the stream.
    pub async fn rest(&mut self) -> Vec<Sse> {
        let mut out = Vec::new();
        while let Some(e) = self.next().await {
            out.push(e);
        }
        out
    }
}

/// Names of the events, comments left out.
pub fn names(events: &[Sse]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e.event != ":comment")
        .map(|e| e.event.as_str())
        .collect()
}

/// A human input message body.
/// A model that answers `answers`, one a call.
pub fn texts(answers: &[&str]) -> Vec<ScriptedReply> {
    answers.iter().map(|a| ScriptedReply::text(*a)).collect()
}

/// A model that lists the workspace (call `id`, described as `description`), then answers
/// `text`.
pub fn ls_then(id: &str, description: &str, text: &str) -> Vec<ScriptedReply> {
    vec![
        ScriptedReply::tool_call(
            id,
            "ls",
            json!({"description": description, "path": "/mnt/user-data/workspace"}),
        ),
        ScriptedReply::text(text),
    ]
}

pub fn say(text: &str) -> Value {
    json!({"messages": [{"type": "human", "content": [{"type": "text", "text": text}]}]})
}

/// Poll the run until it reaches a terminal status (the run finalizes before `end`, so after a
/// stream ended this returns at once).
pub async fn run_status(s: &TestServer, thread: &str, run: &str) -> Value {
    let (code, r) = s.get(&format!("/api/threads/{thread}/runs/{run}")).await;
    assert_eq!(code, 200, "{r}");
    r
}

/// `Content-Location` → `(thread_id, run_id)`, parsed as both SDKs do.
pub fn ids_from_location(h: &reqwest::header::HeaderMap) -> (String, String) {
    assert!(h.get("location").is_none(), "never send Location");
    let loc = h
        .get("content-location")
        .expect("Content-Location")
        .to_str()
        .unwrap();
    let rest = loc.strip_prefix("/api/threads/").expect(loc);
    let (t, r) = rest.split_once("/runs/").expect(loc);
    assert!(!r.contains('/'), "the path ends at the run id: {loc}");
    (t.to_owned(), r.to_owned())
}

/// The conversation as a user sees it: server-injected hidden messages (date reminders, …) left
/// out; hidden answers to a clarification stay.
pub fn visible(messages: &Value) -> Vec<Value> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            let kw = &m["additional_kwargs"];
            kw["hide_from_ui"] != true || kw.get("human_input_response").is_some()
        })
        .cloned()
        .collect()
}

/// The data of the last `values` event.
pub fn last_values(events: &[Sse]) -> &Value {
    &events
        .iter()
        .rev()
        .find(|e| e.event == "values")
        .unwrap()
        .data
}

/// The text of each visible message.
pub fn visible_texts(messages: &Value) -> Vec<String> {
    visible(messages)
        .iter()
        .map(|m| {
            antler_protocol::Message::from_input(m.clone())
                .unwrap()
                .text()
        })
        .collect()
}

/// `type` of each visible message.
pub fn kinds(messages: &Value) -> Vec<String> {
    visible(messages)
        .iter()
        .map(|m| m["type"].as_str().unwrap().to_owned())
        .collect()
}

/// The string `field` of every object in the array `list`.
pub fn strs<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|x| x[field].as_str().unwrap())
        .collect()
}
