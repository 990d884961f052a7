//! LLMErrorHandling through the loop: a real OpenAI-compatible provider against a loopback
//! server (HTTP 429 with `Retry-After`, HTTP 401), and a scripted model for the breaker shared
//! across runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_middleware::dangling_tool_call::DanglingToolCallMiddleware;
use antler_middleware::llm_error_handling::*;
use antler_models::providers::openai_compat::{OpenAiCompatConfig, OpenAiCompatModel};
use antler_models::{ChatModel, ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::Message;
use antler_runtime::*;
use antler_test_support::{openai_error, MockOpenAi, MockReply};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::common::*;
use crate::common::run_ok;

/// One canned HTTP answer.
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Value,
}

/// A loopback HTTP/1.1 server answering each request with the next canned response and
/// recording request bodies.
struct Loopback {
    base_url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Loopback {
    async fn start(replies: Vec<Canned>) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let queue = Arc::new(Mutex::new(std::collections::VecDeque::from(replies)));
        let seen = bodies.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let Some(body) = read_request(&mut sock).await else {
                    continue;
                };
                seen.lock().unwrap().push(body);
                let reply = queue.lock().unwrap().pop_front().unwrap_or(Canned {
                    status: 500,
                    headers: Vec::new(),
                    body: json!({"error": {"message": "no reply left"}}),
                });
                let payload = reply.body.to_string();
                let mut head = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                    reply.status,
                    payload.len()
                );
                for (k, v) in &reply.headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(payload.as_bytes()).await;
                let _ = sock.shutdown().await;
            }
        });
        Loopback {
            base_url: format!("http://{addr}/v1"),
            bodies,
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            let n = sock.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return serde_json::from_slice(&buf[end + 4..end + 4 + len]).ok();
    }
}

fn completion(text: &str) -> Canned {
    Canned {
        status: 200,
        headers: Vec::new(),
        body: json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        }),
    }
}

fn provider(url: &str) -> Arc<dyn ChatModel> {
    Arc::new(OpenAiCompatModel::new(OpenAiCompatConfig::new("m").with_base_url(url)).unwrap())
}

/// A manual clock and a default breaker reading it.
fn clocked_breaker() -> (Arc<ManualClock>, Arc<CircuitBreaker>) {
    let clock = Arc::new(ManualClock::new());
    let breaker = Arc::new(CircuitBreaker::with_clock(
        Default::default(),
        clock.clone(),
    ));
    (clock, breaker)
}

/// A run whose sink keeps the custom stream events.
fn custom_events_run() -> (Arc<CollectingSink>, Arc<RunContext>) {
    let sink = Arc::new(CollectingSink::with_modes(antler_protocol::StreamModes {
        custom: true,
        ..antler_protocol::StreamModes::NONE
    }));
    let run = Arc::new(RunContext::new("t1", "r1", sink.clone()));
    (sink, run)
}

fn agent(
    model: Arc<dyn ChatModel>,
    breaker: Arc<CircuitBreaker>,
    clock: Arc<ManualClock>,
) -> Agent {
    let mw = LlmErrorHandlingMiddleware::new(LlmCallConfig::default(), breaker)
        .with_limiter(None)
        .with_clock(clock);
    Agent::new(model).with_chain(
        Chain::new(vec![
            Arc::new(DanglingToolCallMiddleware::new()),
            Arc::new(mw),
        ])
        .unwrap(),
    )
}

#[tokio::test]
async fn an_http_429_with_retry_after_is_retried_after_exactly_that_wait() {
    let server = Loopback::start(vec![
        Canned {
            status: 429,
            headers: vec![("retry-after", "7".into())],
            body: json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
        },
        completion("hello after the wait"),
    ])
    .await;
    let (clock, breaker) = clocked_breaker();
    let (sink, run) = custom_events_run();
    let out = agent(provider(&server.base_url), breaker.clone(), clock.clone())
        .run(RunInput::message(Message::human("hi")), run)
        .await;

    assert_eq!(out.status, RunStatus::Success);
    assert_eq!(
        out.state.messages.last().unwrap().text(),
        "hello after the wait"
    );
    assert_eq!(server.requests().len(), 2);
    assert_eq!(clock.sleeps(), [Duration::from_secs(7)]);
    assert_eq!(
        custom_events(&sink),
        [json!({
            "type": "llm_retry", "attempt": 1, "max_attempts": 3, "wait_ms": 7000, "reason": "transient",
            "message": "LLM request retry 1/3: provider request failed temporarily. Retrying in 7s."
        })]
    );
    assert_eq!(breaker.failure_count(), 0);
}

fn rate_limited() -> MockReply {
    MockReply::error(
        429,
        openai_error(
            "Rate limit reached for requests",
            "requests",
            Some("rate_limit_exceeded"),
        ),
    )
}

#[tokio::test]
async fn a_retry_after_beyond_max_retry_after_is_not_waited_and_falls_back() {
    let mock = MockOpenAi::start().await.with_replies([
        rate_limited().retry_after(99_999_999),
        MockReply::text("only after three years"),
    ]);
    let (clock, breaker) = clocked_breaker();
    let (sink, run) = custom_events_run();
    let out = agent(provider(&mock.base_url()), breaker.clone(), clock.clone())
        .run(RunInput::message(Message::human("hi")), run)
        .await;

    assert_eq!(out.status, RunStatus::Success);
    // Not waited, not retried: the same fallback as exhausted retries.
    assert!(clock.sleeps().is_empty(), "{:?}", clock.sleeps());
    assert_eq!(mock.request_count(), 1);
    assert!(custom_events(&sink).is_empty());
    let last = out.state.last_ai().unwrap();
    assert!(is_error_fallback(last));
    assert_eq!(last.additional_kwargs["error_type"], "RateLimitError");
    assert_eq!(last.additional_kwargs["error_reason"], "transient");
    assert!(last.content.text().contains("temporarily unavailable"));
    // A provider that will not serve for ages counts as down.
    assert_eq!(breaker.failure_count(), 1);
}

#[tokio::test]
async fn huge_retry_hints_in_any_spelling_end_the_call_promptly() {
    // Real clock: the old behaviour would sleep for years, which the bound below catches.
    for (name, value) in [
        ("retry-after", "99999999".to_owned()),
        ("retry-after-ms", "99999999999".to_owned()),
        ("retry-after", "Fri, 01 Jan 2100 00:00:00 GMT".to_owned()),
    ] {
        let mock = MockOpenAi::start().await.with_replies([
            rate_limited().header(name, value.clone()),
            MockReply::text("too late"),
        ]);
        let mw = LlmErrorHandlingMiddleware::new(
            LlmCallConfig::default(),
            Arc::new(CircuitBreaker::new(Default::default())),
        )
        .with_limiter(None);
        let agent = Agent::new(provider(&mock.base_url()))
            .with_chain(Chain::new(vec![Arc::new(mw)]).unwrap());
        let run = Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)));
        let out = tokio::time::timeout(
            Duration::from_secs(20),
            agent.run(RunInput::message(Message::human("hi")), run),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: {value} was waited out"));
        let last = out.state.last_ai().unwrap();
        assert!(is_error_fallback(last), "{name}: {value}");
        assert_eq!(mock.request_count(), 1, "{name}: {value}");
    }
}

#[tokio::test]
async fn an_http_401_ends_the_run_successfully_with_a_marked_fallback() {
    let server = Loopback::start(vec![Canned {
        status: 401,
        headers: Vec::new(),
        body: json!({"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    }])
    .await;
    let (clock, breaker) = clocked_breaker();
    let run = Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink)));
    let out = agent(provider(&server.base_url), breaker.clone(), clock.clone())
        .run(RunInput::message(Message::human("hi")), run)
        .await;

    assert_eq!(out.status, RunStatus::Success);
    assert!(out.error.is_none());
    assert_eq!(server.requests().len(), 1);
    assert!(clock.sleeps().is_empty());
    let last = out.state.last_ai().unwrap();
    assert!(is_error_fallback(last));
    assert_eq!(last.additional_kwargs["error_type"], "AuthenticationError");
    assert_eq!(last.additional_kwargs["error_reason"], "auth");
    assert!(last.additional_kwargs["error_detail"]
        .as_str()
        .unwrap()
        .contains("Incorrect API key provided"));
    assert!(last.content.text().contains("authentication"));
    // A credentials problem is not the provider being down.
    assert_eq!(breaker.failure_count(), 0);
}

#[tokio::test]
async fn the_breaker_opens_across_runs_and_half_open_lets_one_probe_through() {
    let clock = Arc::new(ManualClock::new());
    let breaker = Arc::new(CircuitBreaker::with_clock(
        CircuitBreakerConfig {
            failure_threshold: 2,
            recovery_timeout_sec: 30.0,
        },
        clock.clone(),
    ));
    let down = || ScriptedReply::Error(ModelError::Connect("connection refused".into()));
    let model = Arc::new(ScriptedModel::new([
        down(),
        down(),
        down(), // run 1: three attempts
        down(),
        down(),
        down(),                      // run 2: three attempts → open
        ScriptedReply::text("back"), // the probe after the timeout
    ]));
    let a = agent(model.clone(), breaker.clone(), clock.clone());
    let run = |id: &str| Arc::new(RunContext::new("t1", id, Arc::new(NullSink)));

    for (i, id) in ["r1", "r2"].iter().enumerate() {
        let out = run_ok(&a, "hi", run(id)).await;
        let last = out.state.last_ai().unwrap();
        assert_eq!(last.additional_kwargs["error_reason"], "transient");
        assert_eq!(breaker.failure_count(), i as u32 + 1);
    }
    assert_eq!(breaker.state(), CircuitState::Open);
    assert_eq!(model.requests().len(), 6);

    // Open: the next run fast-fails without calling the model.
    let out = a
        .run(RunInput::message(Message::human("hi")), run("r3"))
        .await;
    assert_eq!(model.requests().len(), 6);
    assert_eq!(
        out.state.last_ai().unwrap().additional_kwargs["error_reason"],
        "circuit_open"
    );

    // After the recovery timeout one probe goes through and closes the breaker.
    clock.advance(Duration::from_secs(31));
    let out = a
        .run(RunInput::message(Message::human("hi")), run("r4"))
        .await;
    assert_eq!(model.requests().len(), 7);
    assert_eq!(out.state.last_ai().unwrap().content.text(), "back");
    assert_eq!(breaker.state(), CircuitState::Closed);
    assert_eq!(breaker.failure_count(), 0);
}
