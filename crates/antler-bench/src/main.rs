//! `antler-bench`: in-process figures for the harness.
//!
//! - **step**: CPU time per agent step (one model call + one no-op tool call, scripted model,
//!   no middlewares) starting from 10 / 100 / 1,000 messages of history, with in-memory and
//!   SQLite checkpoints. Measured as process CPU time (all threads: the runtime and the SQLite writer), so the
//!   figure is the harness's own work, not waiting.
//! - **bytes**: SQLite checkpoint payload bytes written per step at each history length.
//! - **cold** (`--cold [--antler PATH] [--trigger-tokens N] [--existing-home]`): a fresh `antler run` process per sample — start to first
//!   model request, the whole 0-step run, peak RSS (see `cold.rs`).
//! - **serve** (`--serve [--antler PATH] [--workloads a1,a2,b,c,e] [--samples N] [--steps N]
//!   [--runs N] [--history N] [--threads N] [--thread-steps N] [--concurrency N] [--c-samples N]
//!   [--e-steps N] [--retention-secs N] [--mode wait|stream]`): a real `antler serve` against a scripted model on
//!   127.0.0.1 — harness CPU per step (A1), by history and peak RSS (B), many threads at once
//!   (C), SQLite bytes per step (E); and `antler run` processes, bash included (A2); see
//!   `serve.rs`.
//!
//! Per-step figures are marginal: the CPU of a run with N tool rounds minus that of a run with
//! none, divided by N, so one-time run setup (loading the thread) is reported apart as
//! "run base". Prints medians with min–max over repeated samples. Usage:
//! `cargo run --release -p antler-bench -- [--samples N] [--steps N]`
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::Duration;

use antler_bench::{chain_agent, history, model, noop_tool};
use antler_protocol::{Message, StateUpdate, ThreadState};
use antler_runtime::{
    Agent, Checkpointer, MemoryCheckpointer, NullSink, RunContext, RunInput, RunOptions, RunStatus,
    ToolRegistry,
};

mod cold;
mod serve;

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
            args.iter().any(|a| a == "--existing-home"),
        );
    }
    if args.iter().any(|a| a == "--serve") {
        let value = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        let antler = match value("--antler") {
            Some(p) => std::path::PathBuf::from(p),
            None => std::env::current_exe()?
                .parent()
                .ok_or_else(|| anyhow::anyhow!("no folder beside the bench"))?
                .join("antler"),
        };
        let threads = flag("--threads", 1000);
        return serve::run_all(serve::Opts {
            antler,
            workloads: value("--workloads")
                .unwrap_or_else(|| "a1,a2,b,c,e".to_owned())
                .split(',')
                .map(|w| w.trim().to_ascii_lowercase())
                .filter(|w| !w.is_empty())
                .collect(),
            samples: flag("--samples", 7),
            steps: flag("--steps", 10),
            runs: flag("--runs", 10),
            history: flag("--history", 1000),
            threads,
            thread_steps: flag("--thread-steps", 10),
            concurrency: flag("--concurrency", threads),
            c_samples: flag("--c-samples", 3),
            e_steps: flag("--e-steps", 500),
            retention_secs: flag("--retention-secs", 60) as u64,
            stream: match value("--mode").as_deref() {
                None | Some("wait") => false,
                Some("stream") => true,
                Some(other) => anyhow::bail!("--mode {other}: wait or stream"),
            },
        });
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
