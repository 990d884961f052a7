//! `antler memory show|clear [--user U] [--agent A]`: a user's long-term memory.
//!
//! Memory is per user (`default` for runs without one): summaries shared by every agent, and
//! facts per agent (the lead agent's bucket unless `--agent` names a custom agent). Neither
//! command needs a model.

use antler_agent::memory::document::MemoryDocument;
use antler_agent::memory::{bucket_of, user_of, MemoryManager};
use antler_agent::App;
use clap::Subcommand;

use crate::render::OutputFormat;
use crate::{exit, Failure};

#[derive(Subcommand)]
pub(crate) enum MemoryCmd {
    /// Print a user's memory: summaries and facts.
    Show {
        /// The user (default: `default`, the user of runs without one).
        #[arg(long)]
        user: Option<String>,
        /// A custom agent's facts instead of the lead agent's.
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
    /// Forget a user's memory: everything, or only one agent's facts with `--agent`.
    Clear {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        agent: Option<String>,
    },
}

fn failure(code: u8, e: impl std::fmt::Display) -> Failure {
    Failure {
        code,
        message: e.to_string(),
    }
}

#[allow(clippy::print_stdout)]
fn print_text(user: &str, bucket: &str, doc: &MemoryDocument) {
    let sections = [
        ("Work", &doc.user.work_context),
        ("Personal", &doc.user.personal_context),
        ("Current focus", &doc.user.top_of_mind),
        ("Recent months", &doc.history.recent_months),
        ("Earlier", &doc.history.earlier_context),
        ("Background", &doc.history.long_term_background),
    ];
    let has_summaries = sections.iter().any(|(_, s)| !s.summary.is_empty());
    if !has_summaries && doc.facts.is_empty() {
        println!("no memory for user '{user}' (agent bucket {bucket})");
        return;
    }
    println!(
        "memory of user '{user}' (agent bucket {bucket}), updated {}",
        doc.last_updated.as_deref().unwrap_or("never")
    );
    for (label, s) in sections {
        if !s.summary.is_empty() {
            println!("\n{label}:\n  {}", s.summary);
        }
    }
    if !doc.facts.is_empty() {
        println!("\nFacts ({}):", doc.facts.len());
        for f in &doc.facts {
            let content = f.text().unwrap_or("");
            let category = f.category.as_deref().unwrap_or("context");
            let mut line = format!("  {}  [{category} | {:.2}] {content}", f.id, f.confidence());
            if let Some(e) = &f.source_error {
                line.push_str(&format!(" (avoid: {e})"));
            }
            if let Some(src) = f.source.as_str() {
                line.push_str(&format!("  — from {src}"));
            }
            println!("{line}");
        }
    }
}

#[allow(clippy::print_stdout)]
pub(crate) async fn run(app: &App, cmd: MemoryCmd) -> Result<u8, Failure> {
    let memory = MemoryManager::from_config(app.config.clone(), app.store.clone(), None)
        .map_err(|e| failure(exit::USAGE, e))?;
    match cmd {
        MemoryCmd::Show {
            user,
            agent,
            output,
        } => {
            let doc = memory
                .document(user.as_deref(), agent.as_deref())
                .await
                .map_err(|e| failure(exit::STORE, e))?;
            match output {
                OutputFormat::Text => print_text(
                    &user_of(user.as_deref()),
                    &bucket_of(agent.as_deref()),
                    &doc,
                ),
                OutputFormat::Json | OutputFormat::Jsonl => println!(
                    "{}",
                    serde_json::to_value(&doc).unwrap_or(serde_json::Value::Null)
                ),
            }
            Ok(exit::OK)
        }
        MemoryCmd::Clear { user, agent } => {
            let n = memory
                .clear(user.as_deref(), agent.as_deref())
                .await
                .map_err(|e| failure(exit::STORE, e))?;
            let who = user_of(user.as_deref());
            match agent {
                Some(a) => println!(
                    "cleared {n} fact(s) of agent '{}' for user '{who}'",
                    bucket_of(Some(&a))
                ),
                None => println!("cleared the memory of user '{who}' ({n} fact(s))"),
            }
            Ok(exit::OK)
        }
    }
}
