//! The `task` tool (spec 50 §4.12): delegate a bounded task to a subagent and wait for its
//! answer. Offered to the lead agent only when the run enables subagents; never to a subagent.
//!
//! The call runs the delegation through the [`SubagentExecutor`] and answers with a `Command`
//! carrying the result message — DeerFlow's text (`Task Succeeded. Result: …`, `Task failed. …`)
//! plus the structured `subagent_*` `additional_kwargs` — and a `delegations` ledger entry for the
//! call (id = tool call id, tagged with the run id), which SubagentLimit counts against the
//! run's total and the durable context shows the model after compaction.

use std::sync::Arc;

use antler_protocol::{Delegation, Message, StateUpdate, ToolMessage};
use antler_runtime::{
    now_rfc3339, Command, Tool, ToolContext, ToolError, ToolOutput, TypedSpec, TypedTool,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::executor::{SubagentExecutor, TaskCall};
use super::types::{
    bound_text, sha256_hex, SubagentResult, SubagentStatus, METADATA_TEXT_MAX_CHARS,
};

/// Longest ledger description.
const DESCRIPTION_CAP: usize = 200;

const DESCRIPTION: &str = "\
Delegate a bounded task to a specialized subagent that works in its own context and returns its result.

Delegate only when the expected benefit clearly outweighs the cost of delegating. Real benefits:
- wall-clock time saved by independent work running in parallel
- specialist tools, skills, model or instructions
- keeping a bounded, unusually context-heavy investigation out of your own context

Use it for:
- independent tasks that finish materially sooner in parallel
- work a specialist subagent can do that you cannot do directly
- bounded exploration that would otherwise push important context out

Do NOT use it for:
- work that is merely complex, multi-step, verbose or touches a large repository
- dependent steps split across parallel subagents (keep a chain together; delegate it as one task only when specialist or isolation benefit clearly wins)
- parallel work with overlapping files, shared mutable state or external side effects
- anything that needs the user's input or clarification

Count these costs: repeating the same repository discovery in several contexts; coordinating, checking and merging results; tasks you can finish more cheaply with your own tools.

The call waits for the subagent and returns its final answer; there is nothing to poll.";

/// `task` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    /// A short (3-5 word) description of the task, for logs and display. ALWAYS PROVIDE THIS PARAMETER FIRST.
    #[schemars(with = "String")]
    description: Option<String>,
    /// The full task for the subagent: specific and self-contained, since it sees nothing of this conversation. ALWAYS PROVIDE THIS PARAMETER SECOND.
    prompt: String,
    /// The type of subagent to use (the list is filled in when the tool is built).
    subagent_type: String,
}

/// The `task` tool.
pub struct TaskTool {
    spec: TypedSpec<Args>,
    executor: Arc<SubagentExecutor>,
}

/// Build the `task` tool over an executor. Its description lists the types the executor offers.
pub fn task_tool(executor: Arc<SubagentExecutor>) -> Arc<dyn Tool> {
    Arc::new(TaskTool::new(executor))
}

impl TaskTool {
    pub fn new(executor: Arc<SubagentExecutor>) -> Self {
        let listing = executor
            .registry()
            .available_description(executor.bash_available());
        let types = executor.available_types();
        let description = format!("{DESCRIPTION}\n\nAvailable subagent types:\n{listing}");
        let spec = TypedSpec::new("task", description).describe(
            "subagent_type",
            format!(
                "The type of subagent to use ({}). ALWAYS PROVIDE THIS PARAMETER THIRD.",
                types.join(", ")
            ),
        );
        TaskTool { spec, executor }
    }
}

#[async_trait]
impl TypedTool for TaskTool {
    type Args = Args;

    fn typed_spec(&self) -> &TypedSpec<Args> {
        &self.spec
    }

    async fn invoke(&self, a: Args, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let call = TaskCall {
            id: ctx.call_id,
            description: a.description.as_deref().unwrap_or_default(),
            prompt: &a.prompt,
            subagent_type: &a.subagent_type,
        };
        let result = self.executor.execute(call, ctx.run, ctx.state).await;
        Ok(ToolOutput::Command(task_result_command(
            call,
            &result,
            &ctx.run.run_id,
        )))
    }
}

/// The result message of a delegation.
pub fn task_result_message(call_id: &str, result: &SubagentResult) -> ToolMessage {
    let (content, _) = result.message_text();
    let mut m = ToolMessage::new(call_id, content).with_name("task");
    m.id = Some(uuid::Uuid::new_v4().to_string());
    m.additional_kwargs = result.additional_kwargs().into();
    m
}

/// The brief a ledger entry keeps for a status without a result or error.
fn status_only_brief(status: SubagentStatus) -> Option<&'static str> {
    match status {
        SubagentStatus::Completed => None,
        SubagentStatus::Failed => Some("Task failed."),
        SubagentStatus::Cancelled => Some("Task cancelled by user."),
        SubagentStatus::TimedOut => Some("Task timed out."),
        SubagentStatus::PollingTimedOut => Some("Task polling timed out."),
    }
}

/// The `delegations` ledger entry of a finished delegation (the shape the durable context
/// derives from a task call and its result).
pub fn delegation_entry(
    call: TaskCall<'_>,
    result: &SubagentResult,
    message: &ToolMessage,
    run_id: &str,
) -> Delegation {
    let kwargs = &message.additional_kwargs;
    let text = |k: &str| kwargs.get(k).and_then(Value::as_str).map(str::to_owned);
    let brief = text(super::types::RESULT_BRIEF_KEY)
        .or_else(|| text(super::types::ERROR_KEY))
        .or_else(|| status_only_brief(result.status).map(str::to_owned));
    let sha = brief
        .as_ref()
        .map(|b| text(super::types::RESULT_SHA256_KEY).unwrap_or_else(|| sha256_hex(b)));
    let description = if call.description.is_empty() {
        call.prompt
    } else {
        call.description
    };
    Delegation {
        id: call.id.to_owned(),
        run_id: Some(run_id.to_owned()).filter(|r| !r.is_empty()),
        description: description.chars().take(DESCRIPTION_CAP).collect(),
        subagent_type: call.subagent_type.to_owned(),
        status: result.status.as_str().to_owned(),
        result_ref: brief
            .as_ref()
            .map(|_| message.id.clone().unwrap_or_else(|| call.id.to_owned())),
        result_brief: brief.map(|b| bound_text(&b, METADATA_TEXT_MAX_CHARS)),
        result_sha256: sha,
        stop_reason: result.stop_reason.map(|s| s.as_str().to_owned()),
        created_at: Some(now_rfc3339()),
    }
}

/// The `Command` a `task` call answers with: the result message and its ledger entry.
pub fn task_result_command(call: TaskCall<'_>, result: &SubagentResult, run_id: &str) -> Command {
    let message = task_result_message(call.id, result);
    let entry = delegation_entry(call, result, &message, run_id);
    Command {
        update: StateUpdate {
            messages: Some(vec![Message::Tool(message)]),
            delegations: Some(vec![entry]),
            ..Default::default()
        },
        goto: None,
    }
}
