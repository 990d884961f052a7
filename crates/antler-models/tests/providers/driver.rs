//! The HTTP driver's behaviour, the same for every wire format: streaming and folding, time
//! limits (request timeout, stall detection, call deadline), HTTP and transport errors,
//! break-offs, the mock's request checks, cancellation. Each test is generic over a
//! [`Vendor`] and runs once per provider (`driver::openai_compat::…`, `driver::anthropic::…`,
//! `driver::gemini::…`, `driver::ollama::…`, `driver::openai_responses::…`).

use std::time::Duration;

use antler_models::providers::{HttpChatModel, HttpModelConfig};
use antler_models::{ChatModel, ModelError};
use antler_protocol::Content;
use antler_test_support::{MockServer, MockWire, Reply};
use pretty_assertions::assert_eq;

use crate::common::{stream, text_of, without_provider_id, Call, Vendor};

/// Generous bound on tests that would hang if a limit did not fire.
const NEVER: Duration = Duration::from_secs(20);

async fn start<V: Vendor>(
    replies: impl IntoIterator<Item = Reply<V::Mock>>,
) -> MockServer<V::Mock> {
    MockServer::start().await.with_replies(replies)
}

fn with<V: Vendor>(
    mock: &MockServer<V::Mock>,
    f: impl FnOnce(HttpModelConfig<V::Wire>) -> HttpModelConfig<V::Wire>,
) -> HttpChatModel<V::Wire> {
    HttpChatModel::new(f(V::config(mock))).unwrap()
}

async fn streamed_text_concatenates_to_the_final_message<V: Vendor>() {
    let reply = || V::text("one two three four").usage(9, 5);
    let mock = start::<V>([reply(), reply()]).await;
    let model = V::model(&mock);
    let call = Call::user("count");
    let (res, chunks) = stream(&model, &call).await;
    let msg = res.unwrap();

    assert_eq!(msg.content, Content::Text("one two three four".into()));
    assert_eq!(text_of(&chunks), "one two three four");
    assert!(
        chunks.len() >= 5,
        "several deltas and a final chunk: {chunks:?}"
    );
    assert!(chunks
        .iter()
        .all(|c| c.id.as_deref() == Some(crate::common::MESSAGE_ID)));
    let (last, deltas) = chunks.split_last().unwrap();
    assert!(deltas
        .iter()
        .all(|c| c.chunk_position.is_none() && c.usage_metadata.is_none()));
    assert_eq!(last.chunk_position.as_deref(), Some("last"));
    assert_eq!(last.usage_metadata, Some(V::usage(9, 5)));
    assert_eq!(last.response_metadata, *msg.response_metadata);
    assert_eq!(msg.usage_metadata, Some(V::usage(9, 5)));
    assert_eq!(msg.finish_reason(), Some(V::STOP));
    assert!(mock.requests()[0].is_stream());

    // The same answer unstreamed folds into the same message.
    let unstreamed = model.invoke(call.req()).await.unwrap();
    assert!(!mock.requests()[1].is_stream());
    assert_eq!(without_provider_id(unstreamed), without_provider_id(msg));
}

async fn http_errors_carry_status_retry_after_message_and_code<V: Vendor>() {
    let cases = V::retry_cases();
    let mock = start::<V>(
        cases
            .iter()
            .flat_map(|c| [c.reply.clone(), c.reply.clone()]),
    )
    .await;
    let model = V::model(&mock);
    let call = Call::user("x");
    for case in &cases {
        for err in [
            model.invoke(call.req()).await.unwrap_err(),
            stream(&model, &call).await.0.unwrap_err(),
        ] {
            let ModelError::Http {
                status,
                retry_after,
                message,
                code,
                body,
            } = &err
            else {
                panic!("expected Http, got {err:?}")
            };
            assert_eq!(*status, case.status);
            assert_eq!(*retry_after, case.retry_after);
            assert_eq!(message, case.message);
            assert_eq!(code.as_deref(), case.code);
            assert!(body.contains(case.code.unwrap_or(case.message)));
            assert!(err.is_transient());
        }
    }
}

async fn wrong_api_key_is_a_401_with_message_and_code<V: Vendor>() {
    let mock = MockServer::<V::Mock>::start()
        .await
        .require_api_key("sk-right");
    let err = V::model(&mock)
        .invoke(Call::user("x").req())
        .await
        .unwrap_err();
    let (expected_status, expected_message, expected_code) = V::UNAUTHORIZED;
    assert_eq!(err.status(), Some(expected_status));
    let ModelError::Http { message, code, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(message, expected_message);
    assert_eq!(code.as_deref(), expected_code);
    assert!(!err.is_transient());

    let ok = with::<V>(&mock, |cfg| cfg.with_api_key(Some("sk-right".into())))
        .invoke(Call::user("x").req())
        .await
        .unwrap();
    assert_eq!(ok.content, Content::Text("ok".into()));
}

async fn undecodable_success_bodies_are_decode_errors<V: Vendor>() {
    let cases = V::undecodable();
    let mock = start::<V>(cases.iter().map(|(body, _)| Reply::raw_body(200, body))).await;
    let model = V::model(&mock);
    let call = Call::user("x");
    for (_, expected) in cases {
        match model.invoke(call.req()).await {
            Err(ModelError::Decode(msg)) => assert!(msg.contains(expected), "{msg}"),
            other => panic!("expected Decode, got {other:?}"),
        }
    }
}

async fn hang_hits_the_request_timeout<V: Vendor>() {
    let mock = start::<V>([Reply::hang(), Reply::hang()]).await;
    let model = with::<V>(&mock, |cfg| {
        cfg.with_request_timeout(Duration::from_millis(300))
    });
    let call = Call::user("x");
    assert_eq!(
        model.invoke(call.req()).await.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    // A stream waits `request_timeout` for the response head too.
    assert_eq!(
        stream(&model, &call).await.0.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
}

async fn stream_gap_hits_the_chunk_timeout<V: Vendor>() {
    // The answer's first two text deltas, then silence.
    let mock =
        start::<V>([V::text("never finishes this").stall_after_events(V::LEADING_EVENTS + 2)])
            .await;
    let model = with::<V>(&mock, |cfg| {
        cfg.with_stream_chunk_timeout(Duration::from_millis(300))
    });
    let (res, chunks) = stream(&model, &Call::user("x")).await;
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(
        text_of(&chunks),
        "never finishes ",
        "deltas before the stall were forwarded"
    );
}

async fn keepalives_do_not_reset_the_chunk_timeout<V: Vendor>() {
    // Two text deltas, then a keep-alive (`: ping` comment, `ping` event) every 50 ms and
    // nothing else.
    let mock = start::<V>([V::text("never finishes this")
        .stall_after_events(V::LEADING_EVENTS + 2)
        .keepalive_while_stalled(Duration::from_millis(50))])
    .await;
    let model = with::<V>(&mock, |cfg| {
        cfg.with_stream_chunk_timeout(Duration::from_millis(300))
    });
    let call = Call::user("x");
    let (res, chunks) = tokio::time::timeout(NEVER, stream(&model, &call))
        .await
        .expect("keep-alives kept a stalled stream alive");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(text_of(&chunks), "never finishes ");
}

async fn the_call_timeout_ends_a_stream_kept_alive<V: Vendor>() {
    let mock = start::<V>([V::text("x y")
        .stall_after_events(V::LEADING_EVENTS + 1)
        .keepalive_while_stalled(Duration::from_millis(50))])
    .await;
    // The stall detector alone would never fire here: only the call deadline can.
    let model = with::<V>(&mock, |cfg| {
        cfg.with_stream_chunk_timeout(Duration::from_secs(3600))
            .with_call_timeout(Duration::from_secs(1))
    });
    let call = Call::user("x");
    let (res, _) = tokio::time::timeout(NEVER, stream(&model, &call))
        .await
        .expect("the call deadline did not end the stream");
    let err = res.unwrap_err();
    assert_eq!(err, ModelError::Timeout(Duration::from_secs(1)));
    assert!(err.is_transient());
}

async fn the_call_timeout_ends_a_stream_that_trickles_real_events<V: Vendor>() {
    // Every event arrives well within the chunk timeout, but the whole answer takes ~4 s.
    let words = "w ".repeat(40);
    let mock = start::<V>([V::text(&words).chunk_delay(Duration::from_millis(100))]).await;
    let model = with::<V>(&mock, |cfg| {
        cfg.with_stream_chunk_timeout(Duration::from_secs(3600))
            .with_call_timeout(Duration::from_millis(700))
    });
    let call = Call::user("x");
    let (res, chunks) = tokio::time::timeout(NEVER, stream(&model, &call))
        .await
        .expect("the call deadline did not end the stream");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(700))
    );
    assert!(
        !chunks.is_empty(),
        "deltas before the deadline were forwarded"
    );
}

async fn the_call_timeout_bounds_a_non_streaming_call<V: Vendor>() {
    let mock = start::<V>([V::text("late").delay(Duration::from_secs(30))]).await;
    let model = with::<V>(&mock, |cfg| {
        cfg.with_call_timeout(Duration::from_millis(300))
    });
    let call = Call::user("x");
    let res = tokio::time::timeout(NEVER, model.invoke(call.req()))
        .await
        .expect("the call deadline did not end the request");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
}

async fn error_event_mid_stream<V: Vendor>() {
    let (error, expected) = V::stream_error();
    let mock =
        start::<V>([V::text("a b c").error_after_events(V::LEADING_EVENTS + 1, error)]).await;
    let (res, chunks) = stream(&V::model(&mock), &Call::user("x")).await;
    match res {
        Err(ModelError::Stream(msg)) => assert!(msg.contains(expected), "{msg}"),
        other => panic!("expected Stream, got {other:?}"),
    }
    assert_eq!(
        text_of(&chunks),
        "a ",
        "deltas before the error were forwarded"
    );
}

async fn connection_closed_before_the_answer_completed<V: Vendor>() {
    let mock = start::<V>([V::text("a b c").drop_after_events(V::LEADING_EVENTS + 1)]).await;
    let (res, _) = stream(&V::model(&mock), &Call::user("x")).await;
    assert!(matches!(res, Err(ModelError::Stream(_))), "{res:?}");
    assert!(res.unwrap_err().is_transient());
}

async fn an_answer_complete_before_a_break_off_or_stall_is_kept<V: Vendor>() {
    let reply = V::text("all done");
    let n = V::events_through_finish(&reply);
    let mock = start::<V>([
        // Everything up to and including the finish, then the body ends …
        reply.clone().drop_after_events(n),
        // … or stays open.
        reply.stall_after_events(n),
    ])
    .await;
    let model = with::<V>(&mock, |cfg| {
        cfg.with_stream_chunk_timeout(Duration::from_millis(200))
    });
    for _ in 0..2 {
        let (res, chunks) = stream(&model, &Call::user("x")).await;
        let msg = res.unwrap();
        assert_eq!(msg.content, Content::Text("all done".into()));
        assert_eq!(msg.finish_reason(), Some(V::STOP));
        assert_eq!(
            chunks.last().unwrap().chunk_position.as_deref(),
            Some("last")
        );
    }
}

async fn the_invariant_checker_rejects_a_broken_history<V: Vendor>() {
    let mock = start::<V>([V::text("kept")]).await;
    let (call, [first, second]) = V::broken_history();
    let err = V::model(&mock).invoke(call.req()).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    let violations = mock.violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[0].contains(first), "{violations:?}");
    assert!(violations[1].contains(second), "{violations:?}");
    assert_eq!(
        mock.remaining(),
        1,
        "a rejected request does not use up a reply"
    );
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mock.assert_no_violations()));
    assert!(caught.is_err());
}

async fn connection_refused_is_connect<V: Vendor>() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = HttpModelConfig::<V::Wire>::new("m")
        .with_base_url(format!("http://127.0.0.1:{port}{}", V::Mock::BASE_PATH));
    let err = HttpChatModel::new(cfg)
        .unwrap()
        .invoke(Call::user("x").req())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Connect(_)), "{err:?}");
    assert!(err.is_transient());
}

async fn dropping_the_call_future_aborts_the_request<V: Vendor>() {
    let mock = start::<V>([Reply::hang()]).await;
    let model = V::model(&mock);
    let call = Call::user("x");
    {
        let fut = model.invoke(call.req());
        tokio::pin!(fut);
        // Drive the call until the server holds it, then drop it.
        loop {
            tokio::select! {
                biased;
                res = &mut fut => panic!("a hanging reply cannot complete: {res:?}"),
                _ = tokio::task::yield_now() => {}
            }
            if mock.in_flight() == 1 {
                break;
            }
        }
    }
    // The server notices the closed connection and drops its handler.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while mock.in_flight() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "request still in flight after drop"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The model is still usable afterwards.
    let msg = model.invoke(call.req()).await.unwrap();
    assert_eq!(msg.content, Content::Text("ok".into()));
}

fn bad_base_url_is_rejected_and_debug_hides_the_key<V: Vendor>() {
    let err = HttpChatModel::new(HttpModelConfig::<V::Wire>::new("m").with_base_url(V::BARE_HOST))
        .unwrap_err();
    assert!(matches!(err, ModelError::InvalidRequest(_)), "{err:?}");
    let cfg = HttpModelConfig::<V::Wire>::new("m").with_api_key(Some("sk-secret".into()));
    assert_eq!(cfg.endpoint(), V::DEFAULT_ENDPOINT);
    let model = HttpChatModel::new(cfg.clone()).unwrap();
    assert!(!format!("{cfg:?} {model:?}").contains("sk-secret"));
}

fn mock_on_its_own_thread_serves_synchronous_tests<V: Vendor>() {
    let mock = MockServer::<V::Mock>::start_on_thread().with_replies([V::text("from a thread")]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let msg = rt
        .block_on(V::model(&mock).invoke(Call::user("x").req()))
        .unwrap();
    assert_eq!(msg.content, Content::Text("from a thread".into()));
    assert_eq!(mock.request_count(), 1);
    drop(mock);
}

/// One `#[test]` per shared test in a module named after the vendor.
macro_rules! tests_for {
    ($module:ident: $vendor:ty; async: [$($async_test:ident),* $(,)?], sync: [$($sync_test:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $async_test() {
                    super::$async_test::<$vendor>().await;
                }
            )*
            $(
                #[test]
                fn $sync_test() {
                    super::$sync_test::<$vendor>();
                }
            )*
        }
    };
}

/// The shared tests, once per vendor.
macro_rules! per_vendor {
    ($($tests:tt)*) => {
        tests_for!(openai_compat: crate::common::OpenAi; $($tests)*);
        tests_for!(anthropic: crate::common::Anthropic; $($tests)*);
        tests_for!(gemini: crate::common::Gemini; $($tests)*);
        tests_for!(ollama: crate::common::Ollama; $($tests)*);
        tests_for!(openai_responses: crate::common::Responses; $($tests)*);
    };
}

per_vendor!(
    async: [
        streamed_text_concatenates_to_the_final_message,
        http_errors_carry_status_retry_after_message_and_code,
        wrong_api_key_is_a_401_with_message_and_code,
        undecodable_success_bodies_are_decode_errors,
        hang_hits_the_request_timeout,
        stream_gap_hits_the_chunk_timeout,
        keepalives_do_not_reset_the_chunk_timeout,
        the_call_timeout_ends_a_stream_kept_alive,
        the_call_timeout_ends_a_stream_that_trickles_real_events,
        the_call_timeout_bounds_a_non_streaming_call,
        error_event_mid_stream,
        connection_closed_before_the_answer_completed,
        an_answer_complete_before_a_break_off_or_stall_is_kept,
        the_invariant_checker_rejects_a_broken_history,
        connection_refused_is_connect,
        dropping_the_call_future_aborts_the_request,
    ],
    sync: [
        bad_base_url_is_rejected_and_debug_hides_the_key,
        mock_on_its_own_thread_serves_synchronous_tests,
    ]
);
