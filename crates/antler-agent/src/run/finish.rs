//! Finishing a run: its status (a graceful model-failure answer and a lost delivery receipt are
//! `error`; a rollback cancel restores the thread and is `error` "Rolled back by user"), its token
//! usage, the terminal write through the coordinator (only while the lease is held), and the
//! thread's status and title — all persisted before the `error`/`end` events are published
//! (spec 70 §5.1), so a client that refetches on `end` sees the final state.

use antler_protocol::checkpoint::{CheckpointError, CheckpointWrite, Checkpointer};
use antler_protocol::{StreamEvent, ThreadState};
use antler_runtime::{EventSink, RunOutcome, RunStatus};
use antler_store::{RunFinish, RunUsage, SqliteStore, ThreadRecord};
use serde_json::{json, Value};

use super::coordinator::{CancelAction, RunCoordinator, RunSignal};
use super::journal::JournalReport;
use super::TurnOutcome;

/// How a run ended, before it is persisted.
pub(crate) struct Ending {
    pub status: RunStatus,
    /// Stored on the run record.
    pub error: Option<String>,
    /// LangGraph error name when an `error` event is published (failures the agent did not
    /// answer itself; never cancels, never graceful fallbacks).
    pub error_name: Option<String>,
    pub stop_reason: Option<String>,
    pub usage: Option<RunUsage>,
    pub title: Option<String>,
    pub state: std::sync::Arc<ThreadState>,
    /// `state` is the state the agent loop ended with (not a placeholder).
    pub ran: bool,
}

impl Ending {
    /// A run that ends without running the agent (cancelled while queued, a resume with nothing
    /// pending, an agent task that died).
    pub fn bare(status: RunStatus) -> Ending {
        Ending {
            status,
            error: None,
            error_name: None,
            stop_reason: None,
            usage: None,
            title: None,
            state: Default::default(),
            ran: false,
        }
    }

    pub fn failed(name: &str, message: String) -> Ending {
        Ending {
            error: Some(message),
            error_name: Some(name.to_owned()),
            ..Ending::bare(RunStatus::Error)
        }
    }

    /// What the loop's outcome and the journal's report mean for the run.
    pub fn of(outcome: RunOutcome, report: &JournalReport, run_id: &str) -> Ending {
        let mut error = outcome.error.as_ref().map(|e| e.to_string());
        let mut error_name = outcome.error.as_ref().map(|e| e.name().to_owned());
        let mut status = outcome.status;
        if status == RunStatus::Error && error.is_none() {
            error = Some("The run failed".into());
            error_name = Some("RunError".into());
        }
        // A model failure the agent answered gracefully (LLMErrorHandling's fallback message)
        // still marks the run `error`, as DeerFlow's run worker does; no `error` event follows.
        if status == RunStatus::Success {
            if let Some(detail) = fallback_error(&outcome.state, run_id) {
                status = RunStatus::Error;
                error = Some(detail);
            }
        }
        if report.delivery_failed && status == RunStatus::Success {
            status = RunStatus::Error;
            error =
                Some("the run presented files but its delivery receipt could not be stored".into());
        }
        let usage = if report.usage.llm_call_count > 0 {
            report.usage.run_usage()
        } else {
            run_usage(&outcome.state, run_id)
        };
        Ending {
            status,
            error,
            error_name,
            stop_reason: outcome.stop_reason,
            usage: Some(usage),
            title: outcome.state.title.clone(),
            state: outcome.state,
            ran: true,
        }
    }
}

/// Persist the ending, then publish `error` (failures only) and `end`. `base` is the state a
/// rollback cancel restores.
pub(crate) async fn finish(
    store: &SqliteStore,
    coordinator: &dyn RunCoordinator,
    signal: &RunSignal,
    sink: &dyn EventSink,
    mut end: Ending,
    base: Option<String>,
) -> TurnOutcome {
    let run_id = signal.run_id().to_owned();
    let thread_id = signal.thread_id().to_owned();
    if end.status == RunStatus::Interrupted && signal.action() == Some(CancelAction::Rollback) {
        match restore(store, &thread_id, &run_id, base).await {
            Ok(title) => {
                end.title = title;
                end.status = RunStatus::Error;
                end.error = Some(antler_store::runs::ROLLED_BACK.into());
            }
            Err(e) => {
                tracing::error!(run = %run_id, error = %e, "rollback failed");
                end.status = RunStatus::Error;
                end.error = Some(format!("Rollback failed: {e}"));
            }
        }
    }
    let finish = RunFinish {
        error: end.error.clone(),
        stop_reason: end.stop_reason.clone(),
        usage: end.usage,
    };
    // Bookkeeping failures must not hide the run's own outcome; they are logged. A run that
    // lost its lease (interrupted or reclaimed elsewhere) leaves the records to the new owner.
    // The run's end and the thread's status after it are one transaction.
    let status = antler_store::RunStatus::from(end.status);
    let thread_status = match end.status {
        RunStatus::Success => ThreadRecord::IDLE,
        RunStatus::Error => ThreadRecord::ERROR,
        RunStatus::Interrupted => ThreadRecord::INTERRUPTED,
    };
    let held = match coordinator
        .release_with_thread(&run_id, status, finish, thread_status, end.title.clone())
        .await
    {
        Ok(r) => r.is_some(),
        Err(e) => {
            tracing::error!(run = %run_id, thread = %thread_id, error = %e, "could not record the run's end and the thread's status");
            true
        }
    };
    if !held {
        tracing::warn!(run = %run_id, "the run was taken over; its final status stays as recorded");
    }
    coordinator.forget(&run_id);
    // A success's state is the thread's latest checkpoint (the loop wrote it before ending); a
    // waiter may take it instead of reading it back. Not after a takeover (the records are the
    // new owner's) and not for other endings (a rollback restored an older state; a failure's
    // state may hold what could not be written).
    if held && end.ran && end.status == RunStatus::Success {
        signal.offer_final_state(&end.state);
    }
    signal.mark_done(status);
    if let (Some(name), Some(message)) = (&end.error_name, &end.error) {
        sink.emit(StreamEvent::Error {
            name: name.clone(),
            message: message.clone(),
        });
    }
    sink.emit(StreamEvent::End);
    TurnOutcome {
        thread_id,
        run_id,
        status: end.status,
        state: end.state,
        error: end.error,
        error_name: end.error_name,
        stop_reason: end.stop_reason,
    }
}

/// Write a new head equal to checkpoint `base` (or an empty state); returns its title.
async fn restore(
    store: &SqliteStore,
    thread_id: &str,
    run_id: &str,
    base: Option<String>,
) -> Result<Option<String>, CheckpointError> {
    let head = Checkpointer::list(store, thread_id, 1, None)
        .await?
        .into_iter()
        .next();
    let base_title = match &base {
        Some(b) => Checkpointer::get(store, thread_id, b)
            .await?
            .and_then(|c| c.state.title),
        None => None,
    };
    if head.as_ref().map(|h| &h.checkpoint_id) == base.as_ref() {
        // Nothing was committed since.
        return Ok(base_title);
    }
    let fields = match &base {
        Some(_) => None,
        None => Some(ThreadState::default().fields_value()),
    };
    let step = head.map_or(0, |h| h.step + 1);
    let write = CheckpointWrite::new(
        thread_id,
        base,
        step,
        json!({
            "source": "update",
            "step": step,
            "writer": "rollback",
            "run_id": run_id,
            "thread_id": thread_id,
        }),
        Vec::new(),
        fields,
    );
    store.put(write).await?;
    Ok(base_title)
}

/// Where this run's messages start: its own human message (stamped with its run id).
fn run_start(state: &ThreadState, run_id: &str) -> Option<usize> {
    state.messages.iter().rposition(|m| {
        m.as_human().is_some_and(|h| {
            h.additional_kwargs.get("run_id").and_then(Value::as_str) == Some(run_id)
        })
    })
}

/// The error detail of this run's LLM error-fallback answer, if its last AI message is one.
pub fn fallback_error(state: &ThreadState, run_id: &str) -> Option<String> {
    let start = run_start(state, run_id).unwrap_or(0);
    let ai = state
        .messages
        .iter()
        .skip(start)
        .rev()
        .find_map(|m| m.as_ai())?;
    if !antler_middleware::llm_error_handling::is_error_fallback(ai) {
        return None;
    }
    let kw = &ai.additional_kwargs;
    Some(
        kw.get("error_detail")
            .or_else(|| kw.get("error_reason"))
            .and_then(Value::as_str)
            .unwrap_or("the model call failed")
            .to_owned(),
    )
}

/// Token usage of the AI messages this run produced (those after its human message; none when
/// the run has no message of its own).
pub fn run_usage(state: &ThreadState, run_id: &str) -> RunUsage {
    let mut usage = RunUsage::default();
    let Some(start) = run_start(state, run_id) else {
        return usage;
    };
    for m in state.messages.iter().skip(start) {
        if let Some(ai) = m.as_ai() {
            usage.llm_call_count += 1;
            if let Some(u) = &ai.usage_metadata {
                usage.total_input_tokens += u.input_tokens as i64;
                usage.total_output_tokens += u.output_tokens as i64;
                usage.total_tokens += u.total_tokens as i64;
            }
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_protocol::Message;

    #[test]
    fn usage_counts_only_this_runs_messages() {
        let mut state = ThreadState::default();
        let old = antler_protocol::AiMessage {
            usage_metadata: Some(antler_protocol::UsageMetadata::new(100, 1)),
            ..Default::default()
        };
        state.messages.push(Message::human("old"));
        state.messages.push(Message::Ai(old));
        let mut h = antler_protocol::HumanMessage::default();
        h.additional_kwargs.insert("run_id".into(), json!("r2"));
        state.messages.push(Message::Human(h));
        let new = antler_protocol::AiMessage {
            usage_metadata: Some(antler_protocol::UsageMetadata::new(10, 2)),
            ..Default::default()
        };
        state.messages.push(Message::Ai(new));
        let u = run_usage(&state, "r2");
        assert_eq!(u.total_tokens, 12);
        assert_eq!(u.llm_call_count, 1);
        assert_eq!(run_usage(&state, "zzz"), RunUsage::default());
    }
}
