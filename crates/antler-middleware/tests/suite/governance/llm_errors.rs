//! LLMErrorHandling: spec 30's expectations (retries, classification, jitter, burst rate,
//! circuit breaker, limiter) with a scripted model and a manual clock.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_middleware::llm_error_handling::*;
use antler_models::{ModelError, ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, Message};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::common::*;

struct Fixture {
    chain: Chain,
    breaker: Arc<CircuitBreaker>,
    clock: Arc<ManualClock>,
}

fn fixture(settings: LlmCallConfig, breaker: CircuitBreakerConfig) -> Fixture {
    let clock = Arc::new(ManualClock::new());
    let breaker = Arc::new(CircuitBreaker::with_clock(breaker, clock.clone()));
    let mw = LlmErrorHandlingMiddleware::new(settings, breaker.clone())
        .with_limiter(None)
        .with_clock(clock.clone());
    Fixture {
        chain: Chain::new(vec![Arc::new(mw)]).unwrap(),
        breaker,
        clock,
    }
}

fn fast(attempts: u32, delay_ms: u64) -> LlmCallConfig {
    LlmCallConfig {
        retry_max_attempts: attempts,
        retry_base_delay_ms: delay_ms,
        retry_cap_delay_ms: delay_ms,
        ..Default::default()
    }
}

impl Fixture {
    async fn call(&self, model: &Arc<ScriptedModel>) -> (AiMessage, Vec<Value>) {
        let (run, sink) = run_ctx();
        let req = model_request(model.clone(), run, vec![Message::human("hi")]);
        let resp = self.chain.call_model(req).await.expect("never an error");
        (resp.message, custom_events(&sink))
    }

    fn sleeps_ms(&self) -> Vec<u128> {
        self.clock
            .sleeps()
            .iter()
            .map(Duration::as_millis)
            .collect()
    }
}

fn script(replies: Vec<Result<&str, ModelError>>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(replies.into_iter().map(|r| match r {
        Ok(t) => ScriptedReply::text(t),
        Err(e) => ScriptedReply::Error(e),
    })))
}

fn kw<'a>(m: &'a AiMessage, key: &str) -> &'a Value {
    &m.additional_kwargs[key]
}

// ------------------------------------------------------------------------ retries

#[tokio::test]
async fn a_busy_provider_is_retried_until_it_answers() {
    let f = fixture(fast(3, 25), Default::default());
    let busy = || {
        http(
            400,
            "当前服务集群负载较高，请稍后重试，感谢您的耐心等待。 (2064)",
            None,
        )
    };
    let model = script(vec![Err(busy()), Err(busy()), Ok("ok")]);
    let (msg, events) = f.call(&model).await;
    assert_eq!(msg.content.text(), "ok");
    assert!(!is_error_fallback(&msg));
    assert_eq!(model.requests().len(), 3);
    assert_eq!(f.sleeps_ms(), [25, 25]);
    assert_eq!(
        events,
        [
            json!({"type": "llm_retry", "attempt": 1, "max_attempts": 3, "wait_ms": 25, "reason": "busy",
                   "message": "LLM request retry 1/3: provider is busy. Retrying in 1s."}),
            json!({"type": "llm_retry", "attempt": 2, "max_attempts": 3, "wait_ms": 25, "reason": "busy",
                   "message": "LLM request retry 2/3: provider is busy. Retrying in 1s."}),
        ]
    );
    assert_eq!(f.breaker.failure_count(), 0);
}

#[tokio::test]
async fn a_quota_error_becomes_an_out_of_quota_message_without_retry() {
    let f = fixture(fast(3, 10), Default::default());
    let model = script(vec![Err(http(
        429,
        "insufficient_quota: account balance is empty",
        Some("insufficient_quota"),
    ))]);
    let (msg, events) = f.call(&model).await;
    assert_eq!(model.requests().len(), 1);
    assert!(events.is_empty());
    assert!(msg.content.text().contains("out of quota"));
    assert_eq!(kw(&msg, "deerflow_error_fallback"), &json!(true));
    assert_eq!(kw(&msg, "error_reason"), &json!("quota"));
    assert_eq!(kw(&msg, "error_type"), &json!("RateLimitError"));
    assert_eq!(msg.id.as_deref(), Some("msg-1"));
}

#[tokio::test]
async fn transient_exhaustion_is_an_error_fallback_with_the_detail() {
    let f = fixture(fast(2, 25), Default::default());
    let model = script(vec![
        Err(http(503, "Connection error.", None)),
        Err(http(503, "Connection error.", None)),
    ]);
    let (msg, events) = f.call(&model).await;
    assert_eq!(model.requests().len(), 2);
    assert_eq!(events.len(), 1);
    assert!(msg.content.text().contains("temporarily unavailable"));
    assert_eq!(kw(&msg, "deerflow_error_fallback"), &json!(true));
    assert_eq!(kw(&msg, "error_reason"), &json!("transient"));
    assert_eq!(kw(&msg, "error_type"), &json!("InternalServerError"));
    assert_eq!(
        kw(&msg, "error_detail"),
        &json!("provider returned HTTP 503: Connection error.")
    );
}

#[tokio::test]
async fn retry_after_is_waited_verbatim() {
    let f = fixture(fast(2, 10), Default::default());
    let model = script(vec![
        Err(ModelError::Http {
            status: 503,
            retry_after: Some(Duration::from_secs(2)),
            message: "server busy".into(),
            code: None,
            body: String::new(),
        }),
        Ok("ok"),
    ]);
    let (msg, events) = f.call(&model).await;
    assert_eq!(msg.content.text(), "ok");
    assert_eq!(f.sleeps_ms(), [2000]);
    assert_eq!(events[0]["wait_ms"], 2000);
    assert_eq!(
        events[0]["message"],
        "LLM request retry 1/2: provider request failed temporarily. Retrying in 2s."
    );
}

#[tokio::test]
async fn broken_streams_timeouts_and_malformed_answers_are_retried() {
    for e in [
        ModelError::Stream("connection closed before the response completed".into()),
        ModelError::Timeout(Duration::from_secs(1)),
        ModelError::Connect("connection refused".into()),
        ModelError::Decode("response has no choices".into()),
        ModelError::Decode("provider answered 2xx with an error: upstream hiccup".into()),
    ] {
        let f = fixture(fast(3, 10), Default::default());
        let model = script(vec![Err(e.clone()), Ok("ok")]);
        let (msg, events) = f.call(&model).await;
        assert_eq!(msg.content.text(), "ok", "{e}");
        assert_eq!(events[0]["reason"], "transient", "{e}");
    }
    // All three attempts failing on a dropped stream: the generic transient copy.
    let f = fixture(fast(3, 10), Default::default());
    let drop = || {
        Err(ModelError::Stream(
            "reading the stream failed: reset".into(),
        ))
    };
    let model = script(vec![drop(), drop(), drop()]);
    let (msg, _) = f.call(&model).await;
    assert_eq!(model.requests().len(), 3);
    assert_eq!(f.clock.sleeps().len(), 2);
    assert!(msg.content.text().contains("temporarily unavailable"));
    assert!(!msg
        .content
        .text()
        .contains("streaming response was interrupted"));
}

#[tokio::test]
async fn a_2xx_error_body_with_quota_text_is_still_quota() {
    let f = fixture(fast(3, 10), Default::default());
    let model = script(vec![Err(ModelError::Decode(
        "provider answered 2xx with an error: 余额不足".into(),
    ))]);
    let (msg, _) = f.call(&model).await;
    assert_eq!(model.requests().len(), 1);
    assert_eq!(kw(&msg, "error_reason"), &json!("quota"));
}

#[tokio::test]
async fn auth_failures_are_not_retried() {
    for e in [
        http(401, "Incorrect API key provided", Some("invalid_api_key")),
        http(403, "nope", None),
        http(400, "Unauthorized: token expired", None),
    ] {
        let f = fixture(fast(3, 10), Default::default());
        let model = script(vec![Err(e.clone())]);
        let (msg, events) = f.call(&model).await;
        assert_eq!(model.requests().len(), 1, "{e}");
        assert!(events.is_empty());
        assert_eq!(kw(&msg, "error_reason"), &json!("auth"), "{e}");
        assert!(msg.content.text().contains("authentication"));
    }
}

#[tokio::test]
async fn other_failures_say_what_failed() {
    let f = fixture(fast(3, 10), Default::default());
    let model = script(vec![Err(http(400, "Invalid model name", None))]);
    let (msg, _) = f.call(&model).await;
    assert_eq!(model.requests().len(), 1);
    assert_eq!(
        msg.content.text(),
        "LLM request failed: provider returned HTTP 400: Invalid model name"
    );
    assert_eq!(kw(&msg, "error_reason"), &json!("generic"));
    assert_eq!(kw(&msg, "error_type"), &json!("BadRequestError"));
}

// ------------------------------------------------------------------- classification

fn facts(status: Option<u16>, detail: &str, code: Option<&str>) -> ErrorFacts {
    ErrorFacts {
        class: "APIStatusError".into(),
        detail: detail.into(),
        code: code.map(str::to_owned),
        status,
        ..Default::default()
    }
}

#[test]
fn burst_rate_is_detected_by_code_and_by_message_and_beats_the_status() {
    assert_eq!(
        classify(&facts(
            Some(429),
            "Too many requests",
            Some("limit_burst_rate")
        )),
        (true, ErrorReason::BurstRate)
    );
    assert_eq!(
        classify(&facts(
            Some(429),
            "Request rate increased too quickly, slow down",
            None
        )),
        (true, ErrorReason::BurstRate)
    );
    assert_eq!(
        classify(&facts(Some(429), "请求速率增长过快", None)),
        (true, ErrorReason::BurstRate)
    );
    assert_eq!(
        classify(&facts(
            Some(429),
            "Rate limit reached",
            Some("rate_limit_exceeded")
        )),
        (true, ErrorReason::Transient)
    );
    assert_eq!(
        classify(&facts(None, "IndexError: list index out of range", None)),
        (false, ErrorReason::Generic)
    );
    let index = ErrorFacts::from_model_error(&ModelError::Decode("response has no choices".into()));
    assert_eq!(classify(&index), (true, ErrorReason::Transient));
    assert_eq!(
        classify(&facts(Some(404), "model not found", None)),
        (false, ErrorReason::Generic)
    );
    assert_eq!(
        classify(&facts(
            None,
            "The server is overloaded, please try again",
            None
        )),
        (true, ErrorReason::Busy)
    );
}

#[test]
fn burst_rate_budget_is_two_or_the_lower_user_cap() {
    let burst = facts(Some(429), "x", Some("limit_burst_rate"));
    assert_eq!(
        max_attempts(&LlmCallConfig::default(), &burst, ErrorReason::BurstRate),
        2
    );
    let high = LlmCallConfig {
        retry_max_attempts: 9,
        ..Default::default()
    };
    assert_eq!(max_attempts(&high, &burst, ErrorReason::BurstRate), 2);
    let one = LlmCallConfig {
        retry_max_attempts: 1,
        ..Default::default()
    };
    assert_eq!(max_attempts(&one, &burst, ErrorReason::BurstRate), 1);
    assert_eq!(max_attempts(&high, &burst, ErrorReason::Transient), 9);
    let zero = LlmCallConfig {
        retry_max_attempts: 0,
        ..Default::default()
    };
    assert_eq!(max_attempts(&zero, &burst, ErrorReason::Transient), 1);
}

// ---------------------------------------------------------------------------- jitter

/// Draws with the given pick, recording the window asked for.
fn delay(
    s: &LlmCallConfig,
    prev: Option<u64>,
    f: &ErrorFacts,
    reason: ErrorReason,
    pick_high: bool,
) -> (u64, Option<(u64, u64)>) {
    let window = Mutex::new(None);
    let d = retry_delay_ms(s, prev, f, reason, &mut |lo, hi| {
        *window.lock().unwrap() = Some((lo, hi));
        if pick_high {
            hi
        } else {
            lo
        }
    });
    (d, window.into_inner().unwrap())
}

#[test]
fn jitter_windows_follow_decorrelated_jitter() {
    let s = LlmCallConfig::default();
    let f = facts(Some(503), "x", None);
    // First retry: [base, min(cap, 3 × base)].
    assert_eq!(
        delay(&s, None, &f, ErrorReason::Transient, true),
        (3000, Some((1000, 3000)))
    );
    // Grows from the previous delay.
    assert_eq!(
        delay(&s, Some(2000), &f, ErrorReason::Transient, true),
        (6000, Some((1000, 6000)))
    );
    // Capped.
    assert_eq!(
        delay(&s, Some(5000), &f, ErrorReason::Transient, true),
        (8000, Some((1000, 8000)))
    );
    // base == cap: deterministic, no draw needed beyond the single point.
    let flat = fast(3, 25);
    assert_eq!(delay(&flat, None, &f, ErrorReason::Transient, true).0, 25);
    // Base above the cap (misconfiguration): the cap wins, no draw.
    let odd = LlmCallConfig {
        retry_base_delay_ms: 9000,
        ..Default::default()
    };
    assert_eq!(
        delay(&odd, None, &f, ErrorReason::Transient, true),
        (8000, None)
    );
    // Retry-After bypasses jitter and the cap.
    let after = ErrorFacts {
        retry_after: Some(Duration::from_secs(20)),
        ..f.clone()
    };
    assert_eq!(
        delay(&s, Some(3000), &after, ErrorReason::Transient, true),
        (20_000, None)
    );
}

#[test]
fn no_retry_wait_exceeds_max_retry_after() {
    let s = LlmCallConfig {
        retry_base_delay_ms: 300_000,
        retry_cap_delay_ms: 600_000,
        max_retry_after: 5.0,
        ..Default::default()
    };
    let f = facts(Some(503), "x", None);
    // Backoff configured beyond the ceiling is held to it.
    assert_eq!(delay(&s, None, &f, ErrorReason::Transient, true).0, 5000);
    assert_eq!(
        delay(&s, Some(600_000), &f, ErrorReason::Transient, true).0,
        5000
    );
    // A Retry-After up to the ceiling is honoured; beyond it the wait is refused.
    for (after, too_long) in [(4_000, false), (5_000, false), (5_001, true)] {
        let hinted = ErrorFacts {
            retry_after: Some(Duration::from_millis(after)),
            ..f.clone()
        };
        assert_eq!(retry_after_too_long(&s, &hinted), too_long, "{after}");
        if !too_long {
            assert_eq!(
                delay(&s, None, &hinted, ErrorReason::Transient, true).0,
                after
            );
        }
    }
    assert!(!retry_after_too_long(&s, &f));
    assert_eq!(
        LlmCallConfig::default().max_retry_after_duration(),
        Duration::from_secs(60)
    );
}

#[tokio::test]
async fn a_retry_after_beyond_the_ceiling_falls_back_like_exhausted_retries() {
    let f = fixture(fast(3, 10), Default::default());
    let model = script(vec![
        Err(ModelError::Http {
            status: 503,
            retry_after: Some(Duration::from_secs(99_999_999)),
            message: "server busy".into(),
            code: None,
            body: String::new(),
        }),
        Ok("never asked"),
    ]);
    let (msg, events) = f.call(&model).await;
    assert!(is_error_fallback(&msg));
    assert_eq!(kw(&msg, "error_reason"), &json!("transient"));
    assert!(f.sleeps_ms().is_empty());
    assert!(events.is_empty());
    assert_eq!(model.requests().len(), 1);
    assert_eq!(f.breaker.failure_count(), 1);
}

#[test]
fn burst_delays_use_the_longer_base_and_prefer_retry_after() {
    let s = LlmCallConfig::default();
    let burst = facts(Some(429), "x", Some("limit_burst_rate"));
    assert_eq!(
        delay(&s, None, &burst, ErrorReason::BurstRate, false),
        (5000, Some((5000, 8000)))
    );
    let normal = facts(Some(429), "x", None);
    assert_eq!(
        delay(&s, None, &normal, ErrorReason::Transient, false),
        (1000, Some((1000, 3000)))
    );
    let after = ErrorFacts {
        retry_after: Some(Duration::from_millis(1500)),
        ..burst
    };
    assert_eq!(
        delay(&s, None, &after, ErrorReason::BurstRate, false),
        (1500, None)
    );
}

#[tokio::test]
async fn real_jitter_is_random_within_its_window() {
    // Concurrent burst failures spread over [5000, 8000] instead of realigning on one tick.
    let s = LlmCallConfig::default();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..40 {
        let f = fixture(s.clone(), Default::default());
        let model = script(vec![
            Err(http(429, "x", Some("limit_burst_rate"))),
            Ok("ok"),
        ]);
        f.call(&model).await;
        let ms = f.sleeps_ms()[0];
        assert!((5000..=8000).contains(&ms), "{ms}");
        seen.insert(ms);
    }
    assert!(seen.len() > 5, "{seen:?}");
}

// ------------------------------------------------------------------------ burst rate

#[tokio::test]
async fn burst_rate_gets_one_retry_its_own_message_and_never_trips_the_breaker() {
    let f = fixture(
        LlmCallConfig::default(),
        CircuitBreakerConfig {
            failure_threshold: 1,
            ..Default::default()
        },
    );
    let burst = || {
        Err(http(
            429,
            "Request rate increased too quickly",
            Some("limit_burst_rate"),
        ))
    };
    let model = script(vec![burst(), burst(), burst()]);
    let (msg, events) = f.call(&model).await;
    assert_eq!(model.requests().len(), 2);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["attempt"], 1);
    assert_eq!(events[0]["max_attempts"], 2);
    assert_eq!(events[0]["reason"], "burst_rate");
    assert!(events[0]["message"].as_str().unwrap().starts_with(
        "LLM request retry 1/2: provider is throttling request burst rate. Retrying in "
    ));
    let wait = f.sleeps_ms()[0];
    assert!((5000..=8000).contains(&wait));
    assert_eq!(kw(&msg, "error_reason"), &json!("burst_rate"));
    assert!(msg.content.text().contains("burst"));
    assert!(!msg.content.text().contains("temporarily unavailable"));
    assert_eq!(f.breaker.failure_count(), 0);
    assert_eq!(f.breaker.state(), CircuitState::Closed);
}

// -------------------------------------------------------------------- circuit breaker

#[tokio::test]
async fn the_breaker_trips_fast_fails_half_opens_and_recovers() {
    let f = fixture(
        fast(3, 10),
        CircuitBreakerConfig {
            failure_threshold: 3,
            recovery_timeout_sec: 10.0,
        },
    );
    let failing = || script(vec![Err(http(502, "Server Error", None)); 3]);

    let (msg, _) = f.call(&script(vec![Ok("fine")])).await;
    assert_eq!(msg.content.text(), "fine");
    assert_eq!(f.breaker.failure_count(), 0);

    for n in 1..=3 {
        let model = failing();
        f.call(&model).await;
        assert_eq!(
            model.requests().len(),
            3,
            "each failed call used its retries"
        );
        assert_eq!(f.breaker.failure_count(), n);
    }
    assert_eq!(f.breaker.state(), CircuitState::Open);
    let opened_at = f.clock.now();
    assert_eq!(
        f.breaker.open_until(),
        Some(opened_at + Duration::from_secs(10))
    );

    // Open: fast-fail without calling the model; the count does not move.
    let untouched = script(vec![Ok("never")]);
    let (msg, events) = f.call(&untouched).await;
    assert!(untouched.requests().is_empty());
    assert!(events.is_empty());
    assert!(msg.content.text().contains("circuit breaker"));
    assert_eq!(kw(&msg, "error_type"), &json!("CircuitBreakerOpen"));
    assert_eq!(kw(&msg, "error_reason"), &json!("circuit_open"));
    assert_eq!(kw(&msg, "deerflow_error_fallback"), &json!(true));
    assert_eq!(f.breaker.failure_count(), 3);

    // After the timeout a probe goes through; it fails: open again for another timeout.
    f.clock.advance(Duration::from_secs(11));
    let model = failing();
    f.call(&model).await;
    assert_eq!(model.requests().len(), 3);
    assert_eq!(f.breaker.state(), CircuitState::Open);
    assert_eq!(f.breaker.failure_count(), 3);
    assert_eq!(
        f.breaker.open_until(),
        Some(f.clock.now() + Duration::from_secs(10))
    );

    // Next probe succeeds: closed and reset.
    f.clock.advance(Duration::from_secs(11));
    let (msg, _) = f.call(&script(vec![Ok("Success")])).await;
    assert_eq!(msg.content.text(), "Success");
    assert_eq!(f.breaker.failure_count(), 0);
    assert_eq!(f.breaker.state(), CircuitState::Closed);
    assert_eq!(f.breaker.admit(), Admission::Allowed);
}

#[tokio::test]
async fn non_retriable_errors_never_trip_the_breaker() {
    let f = fixture(
        fast(3, 10),
        CircuitBreakerConfig {
            failure_threshold: 3,
            ..Default::default()
        },
    );
    for _ in 0..5 {
        f.call(&script(vec![Err(http(400, "Quota exceeded", None))]))
            .await;
    }
    assert_eq!(f.breaker.failure_count(), 0);
    assert_eq!(f.breaker.state(), CircuitState::Closed);
}

fn half_open_fixture() -> Fixture {
    let f = fixture(
        fast(3, 10),
        CircuitBreakerConfig {
            failure_threshold: 1,
            recovery_timeout_sec: 5.0,
        },
    );
    f.breaker.record_failure();
    f.clock.advance(Duration::from_secs(6));
    f
}

#[tokio::test]
async fn a_non_retriable_error_during_half_open_releases_the_probe() {
    let f = half_open_fixture();
    let (msg, _) = f
        .call(&script(vec![Err(http(
            429,
            "insufficient_quota",
            Some("insufficient_quota"),
        ))]))
        .await;
    assert_eq!(kw(&msg, "error_reason"), &json!("quota"));
    assert_eq!(f.breaker.state(), CircuitState::HalfOpen);
    assert!(!f.breaker.probe_in_flight());
    // The next caller can probe.
    assert_eq!(f.breaker.admit(), Admission::Probe);
}

#[tokio::test]
async fn a_probe_abandoned_by_cancellation_is_released() {
    // antler's analogue of "a control-flow signal during half-open releases the probe": the
    // probing call is dropped mid-flight.
    let f = half_open_fixture();
    let model = GateModel::new();
    let (run, _) = run_ctx();
    let req = model_request(model.clone(), run, vec![Message::human("hi")]);
    {
        let call = f.chain.call_model(req);
        tokio::pin!(call);
        tokio::select! {
            _ = &mut call => panic!("the gate is closed"),
            _ = tokio::task::yield_now() => {}
        }
        assert!(f.breaker.probe_in_flight());
    }
    assert!(!f.breaker.probe_in_flight());
    assert_eq!(f.breaker.state(), CircuitState::HalfOpen);
    assert_eq!(f.breaker.admit(), Admission::Probe);
}

#[tokio::test]
async fn half_open_lets_exactly_one_probe_through() {
    let f = half_open_fixture();
    let model = GateModel::new();
    let (run, _) = run_ctx();
    let probe = f.chain.call_model(model_request(
        model.clone(),
        run.clone(),
        vec![Message::human("a")],
    ));
    tokio::pin!(probe);
    tokio::select! {
        _ = &mut probe => panic!("the gate is closed"),
        _ = async { while model.started.load(Ordering::SeqCst) == 0 { tokio::task::yield_now().await } } => {}
    }
    // A second caller while the probe is in flight fast-fails without reaching the model.
    let other = f
        .chain
        .call_model(model_request(model.clone(), run, vec![Message::human("b")]))
        .await
        .unwrap();
    assert_eq!(
        other.message.additional_kwargs["error_reason"],
        "circuit_open"
    );
    assert_eq!(model.started.load(Ordering::SeqCst), 1);
    model.release();
    let ok = probe.await.unwrap();
    assert_eq!(ok.message.content.text(), "ok");
    assert_eq!(f.breaker.state(), CircuitState::Closed);
}

// -------------------------------------------------------------------------- limiter

async fn run_many(chain: &Chain, model: &Arc<GateModel>, n: usize) -> Vec<ModelResponse> {
    let (run, _) = run_ctx();
    let calls: Vec<_> = (0..n)
        .map(|i| {
            chain.call_model(model_request(
                model.clone(),
                run.clone(),
                vec![Message::human(format!("{i}"))],
            ))
        })
        .collect();
    let all = futures::future::join_all(calls);
    tokio::pin!(all);
    // Let every call get as far as it can, then open the gate.
    for _ in 0..50 {
        tokio::select! {
            _ = &mut all => panic!("the gate is closed"),
            _ = tokio::task::yield_now() => {}
        }
    }
    model.release();
    all.await.into_iter().map(Result::unwrap).collect()
}

fn limited(limiter: Option<Arc<LlmCallLimiter>>) -> Chain {
    let mw = LlmErrorHandlingMiddleware::new(
        fast(3, 10),
        Arc::new(CircuitBreaker::new(Default::default())),
    )
    .with_limiter(limiter)
    .with_clock(Arc::new(ManualClock::new()));
    Chain::new(vec![Arc::new(mw)]).unwrap()
}

#[tokio::test]
async fn the_limiter_caps_concurrent_calls() {
    let model = GateModel::new();
    let limiter = LlmCallLimiter::new(2);
    let out = run_many(&limited(limiter.clone()), &model, 5).await;
    assert_eq!(out.len(), 5);
    assert_eq!(model.max_in_flight.load(Ordering::SeqCst), 2);
    assert_eq!(limiter.unwrap().in_flight(), 0);
}

#[tokio::test]
async fn no_limiter_means_no_cap() {
    assert!(LlmCallLimiter::new(0).is_none());
    assert_eq!(LlmCallConfig::default().max_concurrent_calls, 0);
    let model = GateModel::new();
    run_many(&limited(None), &model, 5).await;
    assert_eq!(model.max_in_flight.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn the_limiter_is_shared_across_middleware_instances() {
    let limiter = LlmCallLimiter::new(2);
    let (a, b) = (limited(limiter.clone()), limited(limiter.clone()));
    let model = GateModel::new();
    let (run, _) = run_ctx();
    let req = |i: usize| {
        model_request(
            model.clone(),
            run.clone(),
            vec![Message::human(format!("{i}"))],
        )
    };
    let calls = futures::future::join_all(vec![
        a.call_model(req(0)),
        b.call_model(req(1)),
        a.call_model(req(2)),
        b.call_model(req(3)),
    ]);
    tokio::pin!(calls);
    for _ in 0..50 {
        tokio::select! {
            _ = &mut calls => panic!("the gate is closed"),
            _ = tokio::task::yield_now() => {}
        }
    }
    assert_eq!(model.in_flight.load(Ordering::SeqCst), 2);
    model.release();
    calls.await;
    assert_eq!(model.max_in_flight.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_limiter_slot_is_free_during_backoff() {
    /// A clock whose sleeps park until released, so a call can be caught mid-backoff.
    struct ParkedClock {
        entered: tokio::sync::Notify,
        release: tokio::sync::Notify,
    }
    impl Clock for ParkedClock {
        fn now(&self) -> std::time::Instant {
            std::time::Instant::now()
        }
        fn sleep(&self, _: Duration) -> futures::future::BoxFuture<'_, ()> {
            Box::pin(async move {
                self.entered.notify_one();
                self.release.notified().await;
            })
        }
    }
    let clock = Arc::new(ParkedClock {
        entered: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let limiter = LlmCallLimiter::new(1).unwrap();
    let mw = LlmErrorHandlingMiddleware::new(
        fast(3, 10),
        Arc::new(CircuitBreaker::new(Default::default())),
    )
    .with_limiter(Some(limiter.clone()))
    .with_clock(clock.clone());
    let chain = Chain::new(vec![Arc::new(mw)]).unwrap();

    let failing_then_ok = script(vec![Err(http(503, "busy", None)), Ok("first")]);
    let (run, _) = run_ctx();
    let first = chain.call_model(model_request(
        failing_then_ok.clone(),
        run.clone(),
        vec![Message::human("a")],
    ));
    tokio::pin!(first);
    tokio::select! {
        _ = &mut first => panic!("parked in backoff"),
        _ = clock.entered.notified() => {}
    }
    // The first call is sleeping: its permit is back, so another call goes through at once.
    assert_eq!(limiter.in_flight(), 0);
    let other = script(vec![Ok("second")]);
    let second = chain
        .call_model(model_request(other, run, vec![Message::human("b")]))
        .await
        .unwrap();
    assert_eq!(second.message.content.text(), "second");
    clock.release.notify_one();
    assert_eq!(first.await.unwrap().message.content.text(), "first");
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test]
async fn cancelled_waiters_never_leak_capacity() {
    let limiter = LlmCallLimiter::new(1);
    let chain = limited(limiter.clone());
    let model = GateModel::new();
    let (run, _) = run_ctx();
    let holder = chain.call_model(model_request(
        model.clone(),
        run.clone(),
        vec![Message::human("a")],
    ));
    tokio::pin!(holder);
    for _ in 0..5 {
        tokio::select! {
            _ = &mut holder => panic!("gate closed"),
            _ = tokio::task::yield_now() => {}
        }
    }
    // Two waiters queue behind the holder, then give up.
    {
        let w1 = chain.call_model(model_request(
            model.clone(),
            run.clone(),
            vec![Message::human("b")],
        ));
        let w2 = chain.call_model(model_request(
            model.clone(),
            run.clone(),
            vec![Message::human("c")],
        ));
        tokio::pin!(w1, w2);
        for _ in 0..5 {
            tokio::select! {
                _ = &mut w1 => panic!("no permit yet"),
                _ = &mut w2 => panic!("no permit yet"),
                _ = tokio::task::yield_now() => {}
            }
        }
        assert_eq!(model.started.load(Ordering::SeqCst), 1);
    }
    // The holder finishes; the dropped waiters hold nothing, so a new call runs.
    model.release();
    holder.await.unwrap();
    assert_eq!(limiter.as_ref().unwrap().in_flight(), 0);
    let again = chain
        .call_model(model_request(model.clone(), run, vec![Message::human("d")]))
        .await
        .unwrap();
    assert_eq!(again.message.content.text(), "ok");
}

#[tokio::test]
async fn a_waiter_cancelled_after_the_handoff_passes_its_permit_on() {
    let limiter = LlmCallLimiter::new(1);
    let chain = limited(limiter.clone());
    let model = GateModel::new();
    let (run, _) = run_ctx();
    let req = |s: &str| model_request(model.clone(), run.clone(), vec![Message::human(s)]);
    let holder = chain.call_model(req("a"));
    tokio::pin!(holder);
    tokio::select! {
        _ = &mut holder => panic!("gate closed"),
        _ = async { while model.started.load(Ordering::SeqCst) == 0 { tokio::task::yield_now().await } } => {}
    }
    // Boxed so that dropping it really drops the future; queued first, then `next`.
    let mut waiter = Box::pin(chain.call_model(req("b")));
    let next = chain.call_model(req("c"));
    tokio::pin!(next);
    for _ in 0..5 {
        tokio::select! {
            biased;
            _ = &mut waiter => panic!("queued"),
            _ = &mut next => panic!("queued"),
            _ = tokio::task::yield_now() => {}
        }
    }
    // The holder finishes; its permit is handed to the first waiter, which is not polled again.
    model.release();
    (&mut holder).await.unwrap();
    assert_eq!(model.started.load(Ordering::SeqCst), 1);
    // Dropping that waiter before it wakes must pass the permit on to the next one.
    drop(waiter);
    let done = tokio::time::timeout(Duration::from_secs(5), &mut next).await;
    assert_eq!(done.unwrap().unwrap().message.content.text(), "ok");
    assert_eq!(limiter.unwrap().in_flight(), 0);
}

#[test]
fn the_limiter_caps_calls_across_runtimes() {
    // One limiter, two runtimes (as the lead agent and a subagent pool might be): a call in the
    // second runtime waits while the first runtime holds the only permit.
    let limiter = LlmCallLimiter::new(1);
    let chain = Arc::new(limited(limiter.clone()));
    let model = GateModel::new();
    let (run, _) = run_ctx();

    let (c, m, r) = (chain.clone(), model.clone(), run.clone());
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(c.call_model(model_request(m, r, vec![Message::human("a")])))
            .unwrap()
    });
    while model.started.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let waiting = chain.call_model(model_request(
            model.clone(),
            run.clone(),
            vec![Message::human("b")],
        ));
        tokio::pin!(waiting);
        for _ in 0..20 {
            tokio::select! {
                biased;
                _ = &mut waiting => panic!("the other runtime holds the permit"),
                _ = tokio::task::yield_now() => {}
            }
        }
        assert_eq!(model.started.load(Ordering::SeqCst), 1);
        model.release();
        let resp = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.message.content.text(), "ok");
    });
    holder.join().unwrap();
    assert_eq!(model.started.load(Ordering::SeqCst), 2);
    assert_eq!(model.max_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(limiter.unwrap().in_flight(), 0);
}

// --------------------------------------------------------------------------- settings

#[test]
fn settings_default_to_deerflows_values() {
    assert_eq!(
        LlmCallConfig::default(),
        LlmCallConfig {
            max_concurrent_calls: 0,
            retry_max_attempts: 3,
            retry_base_delay_ms: 1000,
            retry_cap_delay_ms: 8000,
            burst_retry_base_delay_ms: 5000,
            max_retry_after: 60.0,
        }
    );
    assert_eq!(
        CircuitBreakerConfig::default(),
        CircuitBreakerConfig {
            failure_threshold: 5,
            recovery_timeout_sec: 60.0,
        }
    );
}

#[tokio::test]
async fn configured_retry_parameters_are_used() {
    let f = fixture(
        LlmCallConfig {
            retry_max_attempts: 4,
            retry_base_delay_ms: 300,
            retry_cap_delay_ms: 300,
            burst_retry_base_delay_ms: 700,
            max_concurrent_calls: 0,
            max_retry_after: 60.0,
        },
        Default::default(),
    );
    let model = script(vec![
        Err(http(503, "x", None)),
        Err(http(503, "x", None)),
        Err(http(503, "x", None)),
        Ok("ok"),
    ]);
    let (msg, events) = f.call(&model).await;
    assert_eq!(msg.content.text(), "ok");
    assert_eq!(f.sleeps_ms(), [300, 300, 300]);
    assert_eq!(events.last().unwrap()["max_attempts"], 4);

    // The burst base is configurable too (capped by retry_cap_delay_ms).
    let f = fixture(
        LlmCallConfig {
            burst_retry_base_delay_ms: 700,
            retry_cap_delay_ms: 700,
            ..Default::default()
        },
        Default::default(),
    );
    let model = script(vec![
        Err(http(429, "x", Some("limit_burst_rate"))),
        Ok("ok"),
    ]);
    f.call(&model).await;
    assert_eq!(f.sleeps_ms(), [700]);
}

#[test]
fn retry_messages_round_seconds_like_deerflow() {
    assert_eq!(
        retry_message(1, 3, 400, ErrorReason::Transient),
        "LLM request retry 1/3: provider request failed temporarily. Retrying in 1s."
    );
    assert_eq!(
        retry_message(2, 3, 2500, ErrorReason::Busy),
        "LLM request retry 2/3: provider is busy. Retrying in 2s."
    );
    assert_eq!(
        retry_message(1, 2, 7600, ErrorReason::BurstRate),
        "LLM request retry 1/2: provider is throttling request burst rate. Retrying in 8s."
    );
}

#[tokio::test]
async fn cancellation_stops_a_backoff_wait() {
    let mw = LlmErrorHandlingMiddleware::new(
        LlmCallConfig {
            retry_base_delay_ms: 3_600_000,
            retry_cap_delay_ms: 3_600_000,
            ..Default::default()
        },
        Arc::new(CircuitBreaker::new(Default::default())),
    )
    .with_limiter(None);
    let chain = Chain::new(vec![Arc::new(mw)]).unwrap();
    let model = script(vec![Err(http(503, "x", None)), Ok("never")]);
    let (run, sink) = run_ctx();
    let req = model_request(model.clone(), run.clone(), vec![Message::human("a")]);
    let call = chain.call_model(req);
    tokio::pin!(call);
    tokio::select! {
        _ = &mut call => panic!("waiting an hour"),
        _ = async { while custom_events(&sink).is_empty() { tokio::task::yield_now().await } } => {}
    }
    run.cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap();
    assert!(matches!(
        out,
        Err(ModelCallError::Model(ModelError::Http { status: 503, .. }))
    ));
    assert_eq!(model.requests().len(), 1);
}
