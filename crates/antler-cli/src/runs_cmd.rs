//! `antler runs list|show`: run records and the run journal.
//!
//! The journal is the audit trail of what a run did (model calls with usage and latency, tool
//! calls with arguments, status, duration and result size, errors, deliveries, memory outcomes);
//! it is read here and by the UI, never by a model.

use antler_agent::App;
use antler_store::{EventQuery, RunEventRecord, RunRecord};
use clap::Subcommand;
use serde_json::{json, Value};

use crate::render::{listed_without_table, OutputFormat};
use crate::{exit, Failure};

#[derive(Subcommand)]
pub(crate) enum RunsCmd {
    /// List a thread's runs, newest first.
    List {
        /// The thread.
        #[arg(long = "thread", visible_alias = "thread-id", value_name = "ID")]
        thread: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
    /// Print a run and its journal.
    Show {
        run_id: String,
        /// Print every event's full content and metadata.
        #[arg(long)]
        full: bool,
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
}

fn store_failure(e: impl std::fmt::Display) -> Failure {
    Failure {
        code: exit::STORE,
        message: e.to_string(),
    }
}

/// One line, at most `max` characters.
fn line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!(
            "{}…",
            flat.chars().take(max.saturating_sub(1)).collect::<String>()
        )
    } else {
        flat
    }
}

fn ts(s: &str) -> String {
    s.chars().take(19).collect::<String>().replace('T', " ")
}

/// Seconds since the epoch of a stored UTC timestamp (`YYYY-MM-DDTHH:MM:SS[.ffffff]Z`).
fn epoch_seconds(s: &str) -> Option<f64> {
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi) = (num(11..13)?, num(14..16)?);
    let sec: f64 = s.get(17..)?.trim_end_matches('Z').parse().ok()?;
    // Days from the civil date (proleptic Gregorian).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60) as f64 + sec)
}

fn seconds_between(a: &str, b: &str) -> Option<f64> {
    Some(epoch_seconds(b)? - epoch_seconds(a)?)
}

fn run_json(r: &RunRecord) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

fn event_json(e: &RunEventRecord) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

fn content_text(v: &Value) -> String {
    match v.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str).or_else(|| b.as_str()))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A one-line description of an event.
fn describe(e: &RunEventRecord) -> String {
    let m = &e.metadata;
    let c = &e.content;
    match e.event_type.as_str() {
        "run.start" => format!(
            "{} model={}",
            str_of(&c["chain"]),
            c["model"].as_str().unwrap_or("default")
        ),
        "llm.human.input" => line(&content_text(c), 100),
        "llm.ai.response" => {
            let mut parts = vec![format!("[{}]", str_of(&m["caller"]))];
            let text = content_text(c);
            if !text.is_empty() {
                parts.push(line(&text, 80));
            }
            if let Some(calls) = c["tool_calls"].as_array() {
                for call in calls {
                    parts.push(format!(
                        "→ {}({})",
                        str_of(&call["name"]),
                        line(&call["args"].to_string(), 60)
                    ));
                }
            }
            let usage = &m["usage"];
            if usage.is_object() {
                parts.push(format!(
                    "({} in / {} out tok)",
                    str_of(&usage["input_tokens"]),
                    str_of(&usage["output_tokens"])
                ));
            }
            parts.push(format!("{} ms", str_of(&m["latency_ms"])));
            parts.join(" ")
        }
        "llm.tool.result" => format!(
            "{}({}) {} in {} ms, {} bytes: {}",
            str_of(&m["tool"]),
            line(&m["args"].to_string(), 60),
            str_of(&m["status"]),
            str_of(&m["duration_ms"]),
            str_of(&m["result_bytes"]),
            line(&content_text(c), 60)
        ),
        "llm.error" => format!("[{}] {}", str_of(&m["caller"]), line(&str_of(c), 100)),
        "run.error" | "memory.error" => line(&str_of(c), 120),
        "run.end" => {
            let mut s = str_of(&c["status"]);
            if let Some(r) = c["stop_reason"].as_str() {
                s.push_str(&format!(" ({r})"));
            }
            if let Some(t) = c["usage"]["total_tokens"].as_u64() {
                s.push_str(&format!(", {t} tokens"));
            }
            s
        }
        "run.delivery" => match c["paths"].as_array() {
            Some(p) if !p.is_empty() => p.iter().map(str_of).collect::<Vec<_>>().join(", "),
            _ => "nothing presented".to_owned(),
        },
        "memory.update" => format!(
            "+{} facts, -{} facts, summaries: {}",
            c["facts_added"].as_array().map_or(0, Vec::len),
            c["facts_removed"].as_array().map_or(0, Vec::len),
            c["summaries_updated"]
                .as_array()
                .map(|a| a.iter().map(str_of).collect::<Vec<_>>().join(", "))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "none".to_owned())
        ),
        "state.messages_removed" => format!(
            "{} removed {} message(s)",
            str_of(&m["node"]),
            c["removed"].as_array().map_or(0, Vec::len)
        ),
        "checkpoint.recovered" => format!(
            "rebuilt from {} (+{} journaled messages, {} corrupt checkpoint(s) skipped)",
            c["from_checkpoint"].as_str().unwrap_or("nothing"),
            c["replayed"].as_array().map_or(0, Vec::len),
            c["skipped"].as_array().map_or(0, Vec::len)
        ),
        _ => line(&str_of(c), 100),
    }
}

#[allow(clippy::print_stdout)]
pub(crate) async fn run(app: &App, cmd: RunsCmd) -> Result<u8, Failure> {
    match cmd {
        RunsCmd::List {
            thread,
            limit,
            output,
        } => {
            let runs = app
                .store
                .list_runs(&thread, limit)
                .await
                .map_err(store_failure)?;
            let empty = format!("no runs on thread '{thread}'");
            if listed_without_table(output, &runs, run_json, &empty) {
                return Ok(exit::OK);
            }
            println!(
                "{:<36}  {:<11}  {:<19}  {:>8}  {:>8}  error",
                "run", "status", "created", "duration", "tokens"
            );
            for r in runs {
                let duration = r
                    .ended_at
                    .as_deref()
                    .and_then(|end| {
                        seconds_between(r.started_at.as_deref().unwrap_or(&r.created_at), end)
                    })
                    .map(|s| format!("{s:.1}s"))
                    .unwrap_or_else(|| "-".to_owned());
                println!(
                    "{:<36}  {:<11}  {:<19}  {:>8}  {:>8}  {}",
                    r.run_id,
                    r.status.as_str(),
                    ts(&r.created_at),
                    duration,
                    r.total_tokens,
                    line(r.error.as_deref().unwrap_or(""), 60)
                );
            }
            Ok(exit::OK)
        }
        RunsCmd::Show {
            run_id,
            full,
            output,
        } => {
            let record = app.store.get_run(&run_id).await.map_err(store_failure)?;
            let events = app
                .store
                .list_run_events(
                    &run_id,
                    EventQuery {
                        limit: 100_000,
                        ..Default::default()
                    },
                )
                .await
                .map_err(store_failure)?;
            if record.is_none() && events.is_empty() {
                return Err(Failure::usage(format!("no run '{run_id}'")));
            }
            match output {
                OutputFormat::Json => {
                    let v: Vec<Value> = events.iter().map(event_json).collect();
                    println!(
                        "{}",
                        json!({"run": record.as_ref().map(run_json), "events": v})
                    );
                }
                OutputFormat::Jsonl => {
                    for e in &events {
                        println!("{}", event_json(e));
                    }
                }
                OutputFormat::Text => {
                    if let Some(r) = &record {
                        println!("run       {}", r.run_id);
                        println!("thread    {}", r.thread_id);
                        println!("status    {}", r.status.as_str());
                        println!("created   {}", r.created_at);
                        if let Some(s) = &r.started_at {
                            println!("started   {s}");
                        }
                        if let Some(s) = &r.ended_at {
                            println!("ended     {s}");
                        }
                        println!("strategy  {}", r.multitask_strategy);
                        println!(
                            "tokens    {} ({} in / {} out, {} model calls)",
                            r.total_tokens,
                            r.total_input_tokens,
                            r.total_output_tokens,
                            r.llm_call_count
                        );
                        if let Some(s) = &r.stop_reason {
                            println!("stopped   {s}");
                        }
                        if let Some(e) = &r.error {
                            println!("error     {e}");
                        }
                        println!();
                    }
                    if events.is_empty() {
                        println!("(no journal events)");
                    }
                    for e in &events {
                        let time: String = e.created_at.chars().skip(11).take(12).collect();
                        println!(
                            "{:>5}  {time}  {:<22}  {}",
                            e.seq,
                            e.event_type,
                            describe(e)
                        );
                        if full {
                            println!("       content:  {}", e.content);
                            if !e.metadata.is_empty() {
                                println!("       metadata: {}", Value::Object(e.metadata.clone()));
                            }
                        }
                    }
                }
            }
            Ok(exit::OK)
        }
    }
}
