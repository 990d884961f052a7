//! Fixtures shared by the `antler-bench` binary and the allocation guard test
//! (`tests/alloc_guard.rs`): a no-op `bash` tool, a realistic history, a scripted model that
//! calls the tool a given number of times, and the full lead chain over that model; and
//! ([`server`]) a real `antler serve` process with an SSE reader for the server workloads.

use std::sync::Arc;

use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{AiMessage, Message, Object, ToolCall, ToolMessage, ToolSpec};
use antler_runtime::{Agent, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use async_trait::async_trait;
use serde_json::json;

pub mod server;

/// A tool named `bash` that does nothing.
pub struct Noop(Arc<ToolSpec>);

#[async_trait]
impl Tool for Noop {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.0
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

pub fn noop_tool() -> Arc<dyn Tool> {
    Arc::new(Noop(Arc::new(ToolSpec {
        name: "bash".into(),
        description: "no-op".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    })))
}

/// Where message `at` of an `n`-message history sits in its round of human → ai(tool call) →
/// tool → ai (0–3). A last round too short for all four is a question and an answer: 0, then
/// 3 (a text answer), so no tool call is left open (every model call would repair it: work a
/// real thread does not do per step).
pub fn round_position(at: usize, n: usize) -> usize {
    let k = at % 4;
    if at - k + 4 <= n {
        k
    } else if k.is_multiple_of(2) {
        0
    } else {
        3
    }
}

/// A realistic history: rounds of human → ai(tool call) → tool → ai, ~300 bytes each (a last
/// round too short for all four is a question and an answer, see [`round_position`]).
pub fn history(n: usize) -> Vec<Message> {
    let filler = "lorem ipsum dolor sit amet ".repeat(10);
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while out.len() < n {
        let k = round_position(out.len(), n);
        let m = match k {
            0 => Message::human(format!("question {i}: {filler}")),
            1 => {
                let mut args = Object::new();
                args.insert("command".into(), json!(format!("echo {i}")));
                Message::Ai(AiMessage {
                    tool_calls: vec![ToolCall::new(format!("h{i}"), "bash", args)].into(),
                    ..Default::default()
                })
            }
            2 => ToolMessage::new(format!("h{i}"), format!("{i} {filler}")).into(),
            _ => {
                i += 1;
                Message::ai(format!("answer {i}: {filler}"))
            }
        };
        out.push(m);
    }
    out
}

/// A model that calls the no-op tool `steps` times, then answers.
pub fn model(steps: usize) -> Arc<ScriptedModel> {
    let mut replies = Vec::with_capacity(steps + 1);
    for s in 0..steps {
        replies.push(ScriptedReply::tool_call(
            &format!("c{s}"),
            "bash",
            // Distinct arguments: repeated identical calls would trip loop detection.
            json!({"command": format!("echo {s}")}),
        ));
    }
    replies.push(ScriptedReply::text("done"));
    Arc::new(ScriptedModel::new(replies).without_recording())
}

/// The full lead chain (DeerFlow's middleware order, summarization and token budget on) over a
/// scripted model: the agent `App` builds, with the thread's history seeded in memory.
pub fn chain_agent(steps: usize, dir: &std::path::Path) -> anyhow::Result<Agent> {
    let env = |k: &str| match k {
        "OPENAI_API_KEY" => Some("sk-bench".to_owned()),
        _ => None,
    };
    let mut config = antler_config::Config::zero_config(&env)?;
    config.summarization.enabled = true;
    // Large enough never to fire: the trigger is still evaluated (token counting) every step.
    config.summarization.trigger = vec![antler_config::ContextSize::Tokens(10_000_000)];
    config.token_budget.enabled = true;
    config.token_budget.max_tokens = 100_000_000;
    config.loop_detection.tool_freq_warn = 10_000;
    config.loop_detection.tool_freq_hard_limit = 10_000;
    config.database.backend = antler_config::DatabaseBackend::Memory;
    let app = antler_agent::App::open(config, dir.join("home"))?.with_model_override(model(steps));
    let opts = app.run_options(&antler_agent::TurnRequest::default());
    let mut agent = app.lead_agent(&opts)?;
    agent.checkpointer = None;
    agent.tools = Arc::new(ToolRegistry::new().with(noop_tool()));
    Ok(agent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool call (position 1) is followed by its result (2) within the history.
    #[test]
    fn round_positions_leave_no_tool_call_open() {
        for n in 0..13 {
            let positions: Vec<usize> = (0..n).map(|at| round_position(at, n)).collect();
            for (at, &k) in positions.iter().enumerate() {
                if k == 1 {
                    assert_eq!(positions.get(at + 1), Some(&2), "n={n}: {positions:?}");
                }
            }
            let calls = positions.iter().filter(|&&k| k == 1).count();
            assert_eq!(calls, n / 4, "n={n}: {positions:?}");
            // A short last round alternates a question and an answer.
            if n % 4 != 0 {
                let tail = &positions[n - n % 4..];
                assert!(tail.iter().step_by(2).all(|&k| k == 0), "{positions:?}");
                assert!(
                    tail.iter().skip(1).step_by(2).all(|&k| k == 3),
                    "{positions:?}"
                );
            }
        }
    }
}
