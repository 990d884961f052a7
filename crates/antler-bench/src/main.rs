//! `antler-bench`: in-process figures for the harness.
//!
//! - **step**: CPU time per agent step (one model call + one no-op tool call, scripted model,
//!   no middlewares) starting from 10 / 100 / 1,000 messages of history, with in-memory and
//!   SQLite checkpoints. Measured as process CPU time (all threads: the runtime and the SQLite writer), so the
//!   figure is the harness's own work, not waiting.
//! - **bytes**: SQLite checkpoint payload bytes written per step at each history length.
//! - **cold** (`--cold [--antler PATH] [--trigger-tokens N]`): a fresh `antler run` process per sample — start to first
//!   model request, the whole 0-step run, peak RSS (see `cold.rs`).
//!
//! Per-step figures are marginal: the CPU of a run with N tool rounds minus that of a run with
//! none, divided by N, so one-time run setup (loading the thread) is reported apart as
//! "run base". Prints medians with min–max over repeated samples. Usage:
//! `cargo run --release -p antler-bench -- [--samples N] [--steps N]`
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::Duration;

use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{
    AiMessage, Message, Object, StateUpdate, ThreadState, ToolCall, ToolMessage, ToolSpec,
};
use antler_runtime::{
    Agent, Checkpointer, MemoryCheckpointer, NullSink, RunContext, RunInput, RunOptions, RunStatus,
    Tool, ToolContext, ToolError, ToolOutput, ToolRegistry,
};
use async_trait::async_trait;
use serde_json::json;

mod cold;

struct Noop(Arc<ToolSpec>);

#[async_trait]
impl Tool for Noop {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.0
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

fn noop_tool() -> Arc<dyn Tool> {
    Arc::new(Noop(Arc::new(ToolSpec {
        name: "bash".into(),
        description: "no-op".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    })))
}

/// A realistic history: rounds of human → ai(tool call) → tool → ai, ~300 bytes each.
fn history(n: usize) -> Vec<Message> {
    let filler = "lorem ipsum dolor sit amet ".repeat(10);
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while out.len() < n {
        let k = out.len() % 4;
        let m = match k {
            0 => Message::human(format!("question {i}: {filler}")),
            1 => {
                let mut args = Object::new();
                args.insert("command".into(), json!(format!("echo {i}")));
                Message::Ai(AiMessage {
                    tool_calls: vec![ToolCall::new(format!("h{i}"), "bash", args)],
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
fn model(steps: usize) -> Arc<ScriptedModel> {
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn one_run(
    hist: usize,
    steps: usize,
    cp: Option<Arc<dyn Checkpointer>>,
    thread: &str,
) -> anyhow::Result<()> {
    let mut agent = Agent::new(model(steps)).with_tools(ToolRegistry::new().with(noop_tool()));
    if let Some(cp) = cp {
        agent = agent.with_checkpointer(cp);
    }
    let run = Arc::new(
        RunContext::new(thread, "run", Arc::new(NullSink)).with_options(RunOptions {
            recursion_limit: 10_000,
            ..Default::default()
        }),
    );
    let mut state = ThreadState::default();
    state.apply(StateUpdate::messages(history(hist)))?;
    let input = RunInput {
        messages: vec![Message::human("go")],
        initial_state: Some(state),
        ..Default::default()
    };
    let out = agent.run(input, run).await;
    anyhow::ensure!(
        out.status == RunStatus::Success,
        "run failed: {:?}",
        out.error.map(|e| e.to_string())
    );
    Ok(())
}

struct Sample {
    /// Marginal CPU per step: (run with N steps − run with 0 steps) / N.
    cpu_per_step: Duration,
    /// CPU of a run with no tool step (load the thread, one model call, checkpoint).
    cpu_run_base: Duration,
    bytes_per_step: Option<f64>,
}

type Backend = (
    Option<Arc<dyn Checkpointer>>,
    Option<antler_store::SqliteStore>,
);

fn backend(name: &str, dir: &std::path::Path, tag: &str) -> anyhow::Result<Backend> {
    Ok(match name {
        "memory" => (Some(Arc::new(MemoryCheckpointer::new())), None),
        "sqlite" => {
            let s = antler_store::SqliteStore::open(&dir.join(format!("bench-{tag}.db")))?;
            (Some(Arc::new(s.clone())), Some(s))
        }
        _ => (None, None),
    })
}

/// CPU time of one run of `steps` tool rounds on a thread that already holds `hist` messages.
fn timed_run(
    rt: &tokio::runtime::Runtime,
    hist: usize,
    steps: usize,
    be: &Backend,
    thread: &str,
) -> anyhow::Result<(Duration, Option<(u64, u64)>)> {
    let (cp, store) = be;
    if cp.is_some() {
        // Seed the thread so the measured run resumes a checkpointed history.
        rt.block_on(one_run(hist, 0, cp.clone(), thread))?;
    }
    let before = store
        .as_ref()
        .map(|s| (s.stats().checkpoint_bytes, s.stats().checkpoints));
    let start = cpu_time::ProcessTime::now();
    rt.block_on(one_run(
        if cp.is_some() { 0 } else { hist },
        steps,
        cp.clone(),
        thread,
    ))?;
    let cpu = start.elapsed();
    let after = store
        .as_ref()
        .map(|s| (s.stats().checkpoint_bytes, s.stats().checkpoints));
    let bytes = match (before, after) {
        (Some(b), Some(a)) => Some((a.0 - b.0, a.1 - b.1)),
        _ => None,
    };
    Ok((cpu, bytes))
}

fn sample(
    hist: usize,
    steps: usize,
    backend_name: &str,
    dir: &std::path::Path,
    n: usize,
) -> anyhow::Result<Sample> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let be = backend(backend_name, dir, &format!("{hist}-{n}"))?;
    let (base, base_bytes) = timed_run(&rt, hist, 0, &be, &format!("base{n}"))?;
    let (full, full_bytes) = timed_run(&rt, hist, steps, &be, &format!("full{n}"))?;
    let bytes_per_step = match (base_bytes, full_bytes) {
        (Some(b), Some(f)) => Some((f.0 as f64 - b.0 as f64) / steps as f64),
        _ => None,
    };
    Ok(Sample {
        cpu_per_step: full.saturating_sub(base) / steps as u32,
        cpu_run_base: base,
        bytes_per_step,
    })
}

/// The full lead chain (DeerFlow's middleware order, summarization and token budget on) over a
/// scripted model: the agent `App` builds, with the thread's history seeded in memory.
fn chain_agent(steps: usize, dir: &std::path::Path) -> anyhow::Result<Agent> {
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

/// Marginal CPU per step of the full chain at a history length.
fn chain_sample(hist: usize, steps: usize, dir: &std::path::Path) -> anyhow::Result<Duration> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut times = Vec::new();
    for s in [0, steps] {
        let agent = chain_agent(s, dir)?;
        let mut state = ThreadState::default();
        state.apply(StateUpdate::messages(history(hist)))?;
        let run = Arc::new(
            RunContext::new("bench", "run", Arc::new(NullSink)).with_options(RunOptions {
                recursion_limit: 100_000,
                ..Default::default()
            }),
        );
        let input = RunInput {
            messages: vec![Message::human("go")],
            initial_state: Some(state),
            ..Default::default()
        };
        let start = cpu_time::ProcessTime::now();
        let out = rt.block_on(agent.run(input, run));
        times.push(start.elapsed());
        anyhow::ensure!(
            out.status == RunStatus::Success,
            "run failed: {:?}",
            out.error.map(|e| e.to_string())
        );
    }
    Ok(times[1].saturating_sub(times[0]) / steps as u32)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--reap") {
        std::process::exit(cold::reap(&args[2..])?);
    }
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let samples = flag("--samples", 15);
    let steps = flag("--steps", 20);
    if args.iter().any(|a| a == "--cold") {
        let antler = args
            .iter()
            .position(|a| a == "--antler")
            .and_then(|i| args.get(i + 1))
            .map(std::path::PathBuf::from);
        return cold::run(
            antler,
            flag("--samples", 21),
            flag("--trigger-tokens", 32000),
        );
    }
    let dir = tempfile::tempdir()?;
    if args.iter().any(|a| a == "--chain") {
        let dir = tempfile::tempdir()?;
        println!("antler-bench --chain: the full lead chain (summarization + token budget on), {steps} steps per sample, {samples} samples, no checkpoints");
        println!(
            "{:>8} {:>20} {:>18}",
            "history", "CPU µs/step median", "(min–max)"
        );
        for hist in [100usize, 1000] {
            let mut cpu: Vec<f64> = Vec::new();
            for _ in 0..samples {
                cpu.push(chain_sample(hist, steps, dir.path())?.as_secs_f64() * 1e6);
            }
            let (lo, hi) = (
                cpu.iter().cloned().fold(f64::INFINITY, f64::min),
                cpu.iter().cloned().fold(0.0, f64::max),
            );
            println!(
                "{hist:>8} {:>20.1} {:>18}",
                median(&mut cpu),
                format!("({lo:.1}–{hi:.1})")
            );
        }
        return Ok(());
    }
    println!("antler-bench: {steps} steps per sample (model call + no-op tool call), {samples} samples, no-op chain");
    println!(
        "{:<8} {:>8} {:>20} {:>18} {:>16} {:>16}",
        "backend", "history", "CPU µs/step median", "(min–max)", "run base µs", "ckpt bytes/step"
    );
    // `--only sqlite:1000` restricts to one cell (profiling).
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    for backend in ["none", "memory", "sqlite"] {
        for hist in [10usize, 100, 1000] {
            if only
                .as_ref()
                .is_some_and(|o| o != &format!("{backend}:{hist}"))
            {
                continue;
            }
            let mut cpu = Vec::new();
            let mut base = Vec::new();
            let mut bytes = Vec::new();
            for n in 0..samples {
                let s = sample(hist, steps, backend, dir.path(), n)?;
                cpu.push(s.cpu_per_step.as_secs_f64() * 1e6);
                base.push(s.cpu_run_base.as_secs_f64() * 1e6);
                if let Some(b) = s.bytes_per_step {
                    bytes.push(b);
                }
            }
            let (lo, hi) = (
                cpu.iter().cloned().fold(f64::INFINITY, f64::min),
                cpu.iter().cloned().fold(0.0, f64::max),
            );
            let med = median(&mut cpu);
            let bytes_note = if bytes.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.0}", median(&mut bytes))
            };
            println!(
                "{backend:<8} {hist:>8} {med:>20.1} {:>18} {:>16.0} {bytes_note:>16}",
                format!("({lo:.1}–{hi:.1})"),
                median(&mut base)
            );
        }
    }
    Ok(())
}
