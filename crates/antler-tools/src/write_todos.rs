//! `write_todos` (spec 50 §4.13, plan mode only): replace the thread's todo list. The tool
//! answers with a command that writes `todos` (last write wins; an empty list is a real write)
//! together with its tool message, so the list and the message land in the same step. Parallel
//! calls are refused by the TodoMiddleware before any of them runs.

use std::sync::Arc;

use antler_protocol::{Message, StateUpdate, Todo, ToolMessage};
use antler_runtime::{Command, Tool, ToolContext, ToolError, ToolOutput, TypedSpec, TypedTool};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name.
pub const NAME: &str = "write_todos";

const DESCRIPTION: &str = "Create or update the todo list that plans and tracks your work on the current task. The user sees this list, so keep it accurate.

When to use it:
- the task needs three or more distinct steps, or real planning;
- the user gives you several things to do, or asks you to use a todo list;
- new requirements appear while you work — add them as items.
Skip it for a single simple step or a purely conversational answer; then just do the work.

How to use it:
- Each call replaces the whole list: pass every item with its `content` and `status` (`pending`, `in_progress`, `completed`).
- Mark the first item `in_progress` before you start on it, and keep exactly one item `in_progress` at a time.
- Mark an item `completed` right after you finish it; do not save completions for later.
- Only mark an item completed when it is fully done. If it is blocked, failing or partial, leave it `in_progress` and add an item for what is missing.
- Remove items that no longer apply, and split vague items into concrete ones.
- Call this tool at most once per response, never several times in parallel.";

/// `write_todos` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    /// The complete, updated todo list.
    #[schemars(with = "Vec<TodoItem>")]
    todos: Vec<Todo>,
}

// The schema of one `Todo` as the model is offered it (the list is parsed into `Todo`); a
// plain comment, since a doc comment would become the schema's description.
#[allow(dead_code)]
#[derive(JsonSchema)]
struct TodoItem {
    /// What this item is about.
    content: String,
    /// The item's current status.
    status: StatusSchema,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum StatusSchema {
    Pending,
    InProgress,
    Completed,
}

/// `write_todos` — register it only for plan-mode runs.
pub fn write_todos_tool() -> Arc<dyn Tool> {
    Arc::new(WriteTodosTool::new())
}

pub struct WriteTodosTool {
    spec: TypedSpec<Args>,
}

impl Default for WriteTodosTool {
    fn default() -> Self {
        Self::new()
    }
}

impl WriteTodosTool {
    pub fn new() -> Self {
        WriteTodosTool {
            spec: TypedSpec::new(NAME, DESCRIPTION),
        }
    }
}

#[async_trait]
impl TypedTool for WriteTodosTool {
    type Args = Args;

    antler_runtime::typed_spec!(spec);

    async fn invoke(&self, args: Args, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let Args { todos } = args;
        let listed = serde_json::to_string(&todos)
            .map_err(|e| ToolError::Failed(format!("could not encode the todo list: {e}")))?;
        let msg =
            ToolMessage::new(ctx.call_id, format!("Updated todo list to {listed}")).with_name(NAME);
        Ok(ToolOutput::Command(Command {
            update: StateUpdate {
                todos: Some(Some(todos)),
                messages: Some(vec![Message::Tool(msg)]),
                ..Default::default()
            },
            goto: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use antler_protocol::{Object, ThreadState, TodoStatus};
    use antler_runtime::{NullSink, RunContext};
    use serde_json::json;

    async fn call(args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let state = ThreadState::default();
        let run = RunContext::new("t", "r", Arc::new(NullSink));
        let args = match args {
            serde_json::Value::Object(o) => o,
            _ => Object::new(),
        };
        WriteTodosTool::new()
            .call(args, ToolContext::new("c1", &state, &run))
            .await
    }

    #[tokio::test]
    async fn the_list_is_written_with_its_tool_message() {
        let out = call(json!({"todos": [
            {"content": "a", "status": "in_progress"},
            {"content": "b", "status": "pending"}
        ]}))
        .await
        .unwrap();
        let ToolOutput::Command(Command { update, goto }) = out else {
            panic!("expected a command")
        };
        assert_eq!(goto, None);
        assert_eq!(
            update.todos,
            Some(Some(vec![
                Todo {
                    content: "a".into(),
                    status: TodoStatus::InProgress
                },
                Todo {
                    content: "b".into(),
                    status: TodoStatus::Pending
                },
            ]))
        );
        let msgs = update.messages.unwrap();
        let Message::Tool(t) = &msgs[0] else {
            panic!("expected a tool message")
        };
        assert_eq!(t.tool_call_id, "c1");
        assert_eq!(t.name.as_deref(), Some(NAME));
        assert_eq!(
            t.content.text(),
            r#"Updated todo list to [{"content":"a","status":"in_progress"},{"content":"b","status":"pending"}]"#
        );
    }

    #[tokio::test]
    async fn an_empty_list_is_a_real_write() {
        let ToolOutput::Command(c) = call(json!({"todos": []})).await.unwrap() else {
            panic!("expected a command")
        };
        assert_eq!(c.update.todos, Some(Some(vec![])));
    }

    #[tokio::test]
    async fn bad_statuses_are_argument_errors() {
        let err = call(json!({"todos": [{"content": "a", "status": "done"}]}))
            .await
            .err()
            .unwrap();
        assert!(matches!(err, ToolError::InvalidArguments(_)));
        assert!(matches!(
            call(json!({})).await.err().unwrap(),
            ToolError::InvalidArguments(_)
        ));
    }

    #[test]
    fn the_schema_names_the_statuses() {
        let t = WriteTodosTool::new();
        assert_eq!(t.name(), NAME);
        let status = &t.spec().parameters["properties"]["todos"]["items"]["properties"]["status"];
        assert_eq!(
            status["enum"],
            json!(["pending", "in_progress", "completed"])
        );
    }

    // ---- plan mode through the loop, with the TodoMiddleware ------------------------------

    use antler_middleware::todo::{TodoMiddleware, TodoSettings, COMPLETION_REMINDER};
    use antler_models::{ScriptedModel, ScriptedReply};
    use antler_protocol::{AiMessage, ToolCall, ToolStatus};
    use antler_runtime::{
        Agent, Chain, MemoryCheckpointer, Middleware, RunInput, RunOutcome, RunStatus, ToolRegistry,
    };

    /// A todo list as the model writes it: `(content, status)` in order.
    fn todos(items: &[(&str, &str)]) -> serde_json::Value {
        items
            .iter()
            .map(|(content, status)| json!({"content": content, "status": status}))
            .collect()
    }

    /// One model turn calling `write_todos` once per id, each with the list `items`.
    fn write_call(ids: &[&str], items: &[(&str, &str)]) -> ScriptedReply {
        let args = json!({ "todos": todos(items) })
            .as_object()
            .unwrap()
            .clone();
        ScriptedReply::Message(AiMessage {
            tool_calls: ids
                .iter()
                .map(|id| ToolCall::new(*id, NAME, args.clone()))
                .collect(),
            ..Default::default()
        })
    }

    fn plan_agent(model: Arc<ScriptedModel>, todo: Arc<TodoMiddleware>) -> Agent {
        Agent::new(model)
            .with_system_prompt("static prompt")
            .with_tools(ToolRegistry::new().with(write_todos_tool()))
            .with_chain(Chain::new(vec![todo as Arc<dyn Middleware>]).unwrap())
            .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
    }

    /// One successful run `r` of a planning agent with the default todo middleware.
    async fn plan_run(model: Arc<ScriptedModel>, ask: &str) -> RunOutcome {
        let out = plan_agent(
            model,
            Arc::new(TodoMiddleware::new(TodoSettings::default())),
        )
        .run(RunInput::message(Message::human(ask)), run("r"))
        .await;
        assert_eq!(out.status, RunStatus::Success);
        out
    }

    fn run(id: &str) -> Arc<RunContext> {
        Arc::new(RunContext::new("t", id, Arc::new(NullSink)))
    }

    #[tokio::test]
    async fn plan_mode_updates_todos_and_finishes_when_all_are_done() {
        let model = Arc::new(ScriptedModel::new([
            write_call(&["c1"], &[("step 1", "in_progress"), ("step 2", "pending")]),
            write_call(&["c2"], &[("step 1", "completed"), ("step 2", "completed")]),
            ScriptedReply::text("finished"),
        ]));
        let out = plan_run(model.clone(), "do two steps").await;
        let done = |c: &str| Todo {
            content: c.into(),
            status: TodoStatus::Completed,
        };
        assert_eq!(out.state.todos, Some(vec![done("step 1"), done("step 2")]));
        assert_eq!(
            model.requests().len(),
            3,
            "all done: no completion reminder"
        );
    }

    #[tokio::test]
    async fn an_unfinished_plan_is_reminded_at_most_twice() {
        let model = Arc::new(ScriptedModel::new([
            write_call(
                &["c1"],
                &[("draft", "completed"), ("review", "in_progress")],
            ),
            ScriptedReply::text("Here you go."),
            ScriptedReply::text("Done, really."),
            ScriptedReply::text("I cannot finish the review."),
        ]));
        let out = plan_run(model.clone(), "write and review").await;
        let reqs = model.requests();
        assert_eq!(reqs.len(), 4);
        let reminded: Vec<bool> = reqs
            .iter()
            .map(|r| r.messages.last().unwrap().name().as_deref() == Some(COMPLETION_REMINDER))
            .collect();
        assert_eq!(reminded, [false, false, true, true]);
        assert!(out
            .state
            .messages
            .iter()
            .all(|m| m.name().as_deref() != Some(COMPLETION_REMINDER)));
    }

    #[tokio::test]
    async fn parallel_calls_are_refused_and_the_list_is_unchanged() {
        let model = Arc::new(ScriptedModel::new([
            write_call(&["c1", "c2"], &[("x", "pending")]),
            ScriptedReply::text("ok"),
        ]));
        let out = plan_run(model.clone(), "plan").await;
        assert_eq!(out.state.todos, None, "neither call ran");
        let errors: Vec<ToolStatus> = out
            .state
            .messages
            .iter()
            .filter_map(Message::as_tool)
            .map(|t| t.status)
            .collect();
        assert_eq!(errors, [ToolStatus::Error, ToolStatus::Error]);
        assert_eq!(model.requests().len(), 2);
    }
}
