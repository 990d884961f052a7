//! `antler threads list|show`.

use antler_agent::App;
use antler_protocol::{Message, ThreadState, ToolStatus};
use antler_runtime::Checkpointer;
use antler_store::ThreadQuery;
use serde_json::json;

use crate::render::{listed_without_table, OutputFormat};
use crate::{exit, Failure, ThreadsCmd};

fn store_failure(e: impl std::fmt::Display) -> Failure {
    Failure {
        code: exit::STORE,
        message: e.to_string(),
    }
}

/// First line of a text, cut to `max` chars.
fn headline(s: &str, max: usize) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max - 1).collect::<String>())
    } else {
        line.to_owned()
    }
}

#[allow(clippy::print_stdout)]
pub(crate) async fn run(app: &App, cmd: ThreadsCmd) -> Result<u8, Failure> {
    match cmd {
        ThreadsCmd::List { limit, output } => {
            let threads = app
                .store
                .list_threads(ThreadQuery {
                    limit,
                    ..Default::default()
                })
                .await
                .map_err(store_failure)?;
            let thread_json = |t: &antler_store::ThreadRecord| {
                json!({
                    "thread_id": t.thread_id, "created_at": t.created_at,
                    "updated_at": t.updated_at, "status": t.status,
                    "title": t.title, "metadata": t.metadata,
                })
            };
            let empty = "no threads yet — start one with `antler run \"…\"`";
            if listed_without_table(output, &threads, thread_json, empty) {
                return Ok(exit::OK);
            }
            println!(
                "{:<36}  {:<20}  {:<11}  title",
                "thread", "updated", "status"
            );
            for t in threads {
                let title = match &t.title {
                    Some(title) => title.clone(),
                    None => first_user_text(app, &t.thread_id).await.unwrap_or_default(),
                };
                let updated: String = t.updated_at.chars().take(19).collect();
                println!(
                    "{:<36}  {:<20}  {:<11}  {}",
                    t.thread_id,
                    updated.replace('T', " "),
                    t.status,
                    headline(&title, 60)
                );
            }
            Ok(exit::OK)
        }
        ThreadsCmd::Show { id, full, output } => {
            let Some(cp) = app.store.latest(&id).await.map_err(store_failure)? else {
                return Err(Failure::usage(format!("no thread '{id}'")));
            };
            if output != OutputFormat::Text {
                println!(
                    "{}",
                    json!({"thread_id": id, "checkpoint_id": cp.meta.checkpoint_id, "values": cp.state})
                );
                return Ok(exit::OK);
            }
            if full {
                let all = full_transcript(app, &id).await?;
                print_transcript(&all, true);
            } else {
                print_transcript(&cp.state, false);
            }
            Ok(exit::OK)
        }
    }
}

/// Every message the thread ever held, in the order they first appeared — including those a
/// summary replaced (earlier checkpoints keep them). The title and other channels are the latest.
async fn full_transcript(app: &App, id: &str) -> Result<ThreadState, Failure> {
    let metas = app
        .store
        .list(id, usize::MAX, None)
        .await
        .map_err(store_failure)?;
    let mut seen = std::collections::HashSet::new();
    let mut all = Vec::new();
    let mut latest = None;
    for meta in metas.iter().rev() {
        let Some(cp) = app
            .store
            .get(id, &meta.checkpoint_id)
            .await
            .map_err(store_failure)?
        else {
            continue;
        };
        for m in cp.state.messages.iter() {
            if let Some(mid) = m.id() {
                if seen.insert(mid.to_owned()) {
                    all.push(m.clone());
                }
            }
        }
        latest = Some(cp.state);
    }
    let mut state = latest.unwrap_or_default();
    state.messages = antler_protocol::Messages::from_messages(all);
    Ok(state)
}

async fn first_user_text(app: &App, thread_id: &str) -> Option<String> {
    let cp = app.store.latest(thread_id).await.ok()??;
    let text = cp
        .state
        .messages
        .iter()
        .find(|m| m.is_real_user_message())
        .map(|m| m.text());
    text
}

#[allow(clippy::print_stdout)]
fn print_transcript(state: &ThreadState, full: bool) {
    if let Some(t) = &state.title {
        println!("# {t}\n");
    }
    for m in state.messages.iter() {
        if m.is_hidden() && !full {
            continue;
        }
        match m {
            Message::Human(h) => {
                let who = if h.name.as_deref() == Some(antler_protocol::markers::SUMMARY) {
                    "summary"
                } else {
                    "user"
                };
                println!("[{who}] {}\n", m.text());
            }
            Message::Ai(ai) => {
                let text = m.text();
                if !text.is_empty() {
                    println!("[assistant] {text}\n");
                }
                for c in &ai.tool_calls {
                    println!(
                        "[tool call] {}({})",
                        c.name,
                        serde_json::Value::Object(c.args.clone())
                    );
                }
                if !ai.tool_calls.is_empty() {
                    println!();
                }
            }
            Message::Tool(t) => {
                let mark = match t.status {
                    ToolStatus::Success => "",
                    ToolStatus::Error => " (error)",
                };
                println!(
                    "[{}{mark}] {}\n",
                    t.name.as_deref().unwrap_or("tool"),
                    headline(&m.text(), 400)
                );
            }
            Message::System(_) => {
                if full {
                    println!("[system] {}\n", m.text());
                }
            }
            Message::Remove(_) => {}
        }
    }
}
