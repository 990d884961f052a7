//! A context still over the model's window after summarization is re-measured and reported as
//! an explicit error — never a pretend success, never a request the provider must reject.

use std::sync::Arc;

use antler_middleware::summarization::{
    ContextSize, DeerFlowSummarizationMiddleware, SummarizationConfig,
};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Message, StateUpdate, ThreadState};
use antler_runtime::*;

fn big(i: usize) -> String {
    format!("message {i}: {}", "many words of context ".repeat(120))
}

#[tokio::test]
async fn over_the_window_after_compaction_is_an_explicit_error() {
    let model = Arc::new(ScriptedModel::new([ScriptedReply::text("a short summary")]));
    let settings = SummarizationConfig {
        enabled: true,
        trigger: vec![ContextSize::Messages(5)],
        keep: ContextSize::Messages(4),
        ..SummarizationConfig::default()
    };
    let mw =
        DeerFlowSummarizationMiddleware::new(settings, model.clone(), None, Some(1_000), vec![])
            .unwrap();
    let mut state = ThreadState::default();
    let history: Vec<Message> = (0..8)
        .map(|i| {
            if i % 2 == 0 {
                Message::human(big(i))
            } else {
                Message::ai(big(i))
            }
        })
        .collect();
    state.apply(StateUpdate::messages(history)).unwrap();
    let agent = Agent::new(model.clone()).with_chain(Chain::new(vec![Arc::new(mw)]).unwrap());
    let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)));
    let out = agent
        .run(
            RunInput {
                messages: vec![Message::human(big(9))],
                initial_state: Some(state),
                ..Default::default()
            },
            run,
        )
        .await;
    assert_eq!(out.status, RunStatus::Error);
    let err = out.error.unwrap().to_string();
    assert!(err.contains("context window of 1000"), "{err}");
    // Only the summary call was made; the doomed request was never sent.
    assert_eq!(model.requests().len(), 1);
    assert!(model.requests()[0].tools.is_empty());
}
