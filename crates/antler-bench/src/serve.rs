//! Server workloads (issue 15, PERFORMANCE.md): a real `antler serve` process on 127.0.0.1 with
//! a temp data home (SQLite), a scripted OpenAI-compatible model in this process, and a bounded
//! loopback client: on `/runs/wait`, or with `--mode stream` on `/runs/stream` reading every
//! event (`values`, `updates`, `messages-tuple`), so the figures include the SSE path.
//!
//! A *step* is one model call that answers with one real `bash` tool call (`echo hi N`), and the
//! tool's execution; a run of `s` steps ends with one more model call that answers text. Each
//! run's first human message says how many steps it wants (`bench-steps=s`), so the model is
//! stateless: it counts the tool results after that message.
//!
//! - **A1** harness CPU per step, fresh thread: the server process's CPU (its process CPU clock,
//!   `clock_getcpuclockid`; the bash children are not included) of `runs` runs of `steps` steps minus
//!   that of `runs` runs of 0 steps, divided by the steps.
//! - **A2** `antler run` marginal CPU per step, bash children included: `antler run` processes
//!   (one new thread each, one data home) through the bench's reaper, which waits for the whole
//!   process tree and reads `RUSAGE_CHILDREN`; `runs` runs of `2 × steps` steps minus `runs` runs
//!   of `steps` steps, divided by the steps — and beside it what the first bash call of a run
//!   costs on top (the sandbox's start) and a whole 0-step run.
//! - **B** the same on threads seeded (through `POST /threads/{id}/state`) with 10 and with
//!   `history` messages, and the server's peak RSS (VmHWM) after the long-history samples.
//! - **C** `threads` threads × `thread-steps` steps at once (one run per thread, all in flight
//!   over one connection pool, bounded by `concurrency`): wall time, steps/s, peak RSS.
//! - **E** SQLite bytes per step: one thread, `e-steps` steps in runs of `steps`; the growth of
//!   the data home's database files (db, wal, shm) from before the steps (the schema and the
//!   empty thread, after a clean stop) to after them (live, and after a clean stop), / steps.
//!
//! Every workload gets a fresh server, so peak RSS is that workload's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use antler_bench::server::{content_text, ServeProcess as Server, SseReader};

/// What `--serve` runs and how big.
pub struct Opts {
    pub antler: PathBuf,
    pub workloads: Vec<String>,
    pub samples: usize,
    /// Steps per run in A1, B and E.
    pub steps: usize,
    /// Runs per A1/B sample (per side: with steps and without).
    pub runs: usize,
    /// B's long history, in messages.
    pub history: usize,
    /// C: threads, steps per thread, client requests in flight, samples.
    pub threads: usize,
    pub thread_steps: usize,
    pub concurrency: usize,
    pub c_samples: usize,
    /// E: steps in the one thread.
    pub e_steps: usize,
    /// `antler serve --retention-secs` (finished runs' replay buffers).
    pub retention_secs: u64,
    /// `--mode stream`: runs through `/runs/stream`, every event read; else `/runs/wait`.
    pub stream: bool,
}

// ---------------------------------------------------------------------------------------------
// The scripted model.

#[derive(Default)]
struct Model {
    calls: AtomicU64,
    ids: AtomicU64,
}

/// What the scripted model reads of a request: each message's role, and the content of user
/// messages. Borrowed, everything else skipped: the requests carry the system prompt, the tool
/// schemas and the history, and building a `Value` tree of each cost the bench ~0.5 ms of CPU
/// per model call — CPU that C's server and bash share on a small machine.
#[derive(serde::Deserialize)]
struct ChatBody<'a> {
    #[serde(default)]
    stream: bool,
    #[serde(borrow)]
    messages: Vec<WireMessage<'a>>,
}

#[derive(serde::Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow)]
    role: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    content: Option<&'a serde_json::value::RawValue>,
}

/// Steps asked for by the run's human message, and tool results since then.
fn progress(messages: &[WireMessage<'_>]) -> Option<(usize, usize)> {
    let (at, wanted) = messages.iter().enumerate().rev().find_map(|(i, m)| {
        if m.role != "user" {
            return None;
        }
        let content: Value = serde_json::from_str(m.content?.get()).ok()?;
        let text = content_text(&content);
        let n = text.split("bench-steps=").nth(1)?;
        let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
        Some((i, digits.parse().ok()?))
    })?;
    let done = messages[at..].iter().filter(|m| m.role == "tool").count();
    Some((wanted, done))
}

async fn chat(State(model): State<Arc<Model>>, body: axum::body::Bytes) -> Response {
    model.calls.fetch_add(1, Ordering::Relaxed);
    let body: ChatBody<'_> = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("bad request body: {e}")).into_response()
        }
    };
    if body.stream {
        return (
            StatusCode::BAD_REQUEST,
            "the bench model answers stream: false only",
        )
            .into_response();
    }
    let Some((wanted, done)) = progress(&body.messages) else {
        return (StatusCode::BAD_REQUEST, "no bench-steps= in the request").into_response();
    };
    let message = if done < wanted {
        let id = model.ids.fetch_add(1, Ordering::Relaxed);
        // Distinct commands: identical repeated calls would trip loop detection.
        let args = json!({"description": "bench step", "command": format!("echo hi {done}")});
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{id}"), "type": "function",
            "function": {"name": "bash", "arguments": args.to_string()},
        }]})
    } else {
        json!({"role": "assistant", "content": "done"})
    };
    let finish = if done < wanted { "tool_calls" } else { "stop" };
    Json(json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "mock-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }))
    .into_response()
}

async fn start_model() -> anyhow::Result<(String, Arc<Model>)> {
    let model = Arc::new(Model::default());
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .with_state(model.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, model))
}

fn config(model_url: &str) -> String {
    // The bash tool on the host sandbox; summarization on with a trigger it never reaches (the
    // trigger is still evaluated every step); title and memory off: they call the model after
    // the answer, which is not part of a step. Loop detection's per-tool limits raised: E runs
    // hundreds of bash calls in one thread.
    format!(
        "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: mock-model\n    base_url: {model_url}\n    api_key: sk-bench\n    streaming: false\n\
         tools:\n  - {{name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}}\n\
         sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\n\
         summarization:\n  enabled: true\n  trigger:\n    - {{type: tokens, value: 100000000}}\n\
         loop_detection:\n  tool_freq_warn: 1000000\n  tool_freq_hard_limit: 1000000\n\
         title:\n  enabled: false\n\
         memory:\n  enabled: false\n"
    )
}

// ---------------------------------------------------------------------------------------------
// The client.

async fn post(client: &reqwest::Client, url: String, body: Value) -> anyhow::Result<Value> {
    let resp = client.post(&url).json(&body).send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    ensure!(status.is_success(), "POST {url}: {status}: {text}");
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn create_thread(client: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<()> {
    post(
        client,
        format!("{base}/api/threads"),
        json!({"thread_id": id}),
    )
    .await?;
    Ok(())
}

/// LangGraph message dicts for a realistic history: rounds of human → ai(tool call) → tool →
/// ai, ~300 bytes each (the shape `antler-bench`'s in-process figures use); a last round that
/// does not fit is a plain question and answer, so no tool call is left without its result
/// (which every model call would repair, and log).
fn history(n: usize) -> Vec<Value> {
    let filler = "lorem ipsum dolor sit amet ".repeat(10);
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while out.len() < n {
        out.push(match antler_bench::round_position(out.len(), n) {
            0 => json!({"type": "human", "content": format!("question {i}: {filler}")}),
            1 => json!({"type": "ai", "content": "", "tool_calls": [
                {"id": format!("h{i}"), "name": "bash", "args": {"command": format!("echo {i}")}}]}),
            2 => json!({"type": "tool", "tool_call_id": format!("h{i}"), "name": "bash",
                "content": format!("{i} {filler}")}),
            _ => {
                i += 1;
                json!({"type": "ai", "content": format!("answer {i}: {filler}")})
            }
        });
    }
    out
}

async fn seed(client: &reqwest::Client, base: &str, id: &str, n: usize) -> anyhow::Result<()> {
    create_thread(client, base, id).await?;
    if n > 0 {
        post(
            client,
            format!("{base}/api/threads/{id}/state"),
            json!({"values": {"messages": history(n)}}),
        )
        .await?;
    }
    Ok(())
}

/// One run of `steps` steps on a thread, through `/runs/wait`, or with `stream` through
/// `/runs/stream` reading every event (`values`, `updates`, `messages-tuple`); checks every step
/// ran.
async fn run(
    client: &reqwest::Client,
    base: &str,
    thread: &str,
    steps: usize,
    stream: bool,
) -> anyhow::Result<()> {
    let mut body = json!({
        "assistant_id": "lead_agent",
        "input": {"messages": [{"type": "human", "content": format!("bench-steps={steps}")}]},
        // Every hook node counts as a superstep (about a dozen per tool round).
        "config": {"recursion_limit": 16 * steps + 50},
    });
    let out = if stream {
        body["stream_mode"] = json!(["values", "messages-tuple", "updates"]);
        let url = format!("{base}/api/threads/{thread}/runs/stream");
        let mut resp = client.post(&url).json(&body).send().await?;
        ensure!(resp.status().is_success(), "POST {url}: {}", resp.status());
        let events = SseReader::read_all(&mut resp).await?;
        ensure!(
            events.last().is_some_and(|e| e.event == "end"),
            "run on {thread}: the stream has no end ({} events)",
            events.len()
        );
        events
            .into_iter()
            .rev()
            .find(|e| e.event == "values")
            .context("no values event in the stream")?
            .data
    } else {
        post(
            client,
            format!("{base}/api/threads/{thread}/runs/wait"),
            body,
        )
        .await?
    };
    let messages = out["messages"]
        .as_array()
        .context("no messages in the run's result")?;
    let start = messages
        .iter()
        .rposition(|m| m["type"] == "human" && content_text(&m["content"]).contains("bench-steps="))
        .context("the run's input is not in the result")?;
    let tail = &messages[start..];
    let tools: Vec<&Value> = tail.iter().filter(|m| m["type"] == "tool").collect();
    ensure!(
        tools.len() == steps && tail.last().is_some_and(|m| m["type"] == "ai"),
        "run on {thread}: {} of {steps} tool results; last message {:?}",
        tools.len(),
        tail.last()
    );
    if let Some(t) = tools.first() {
        let text = content_text(&t["content"]);
        ensure!(text.contains("hi 0"), "bash did not run: {text:?}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Workloads.

fn summary(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let lo = v.first().copied().unwrap_or(0.0);
    let hi = v.last().copied().unwrap_or(0.0);
    (crate::median(&mut v), lo, hi)
}

fn row(name: &str, unit: &str, values: &[f64]) {
    let (med, lo, hi) = summary(values);
    println!("{name:<34} {med:>10.3} {unit:<6} ({lo:.3}–{hi:.3})");
}

struct Bench {
    opts: Opts,
    work: tempfile::TempDir,
    client: reqwest::Client,
    serial: AtomicU64,
}

impl Bench {
    async fn server(&self, tag: &str) -> anyhow::Result<Server> {
        let work = self.work.path();
        let home = work.join(format!("home-{tag}"));
        let config = work.join("config.yaml");
        let retention = self.opts.retention_secs;
        Server::start(
            &self.opts.antler,
            &config,
            work,
            &home,
            retention,
            &self.client,
        )
        .await
    }

    fn thread_id(&self, tag: &str) -> String {
        format!("{tag}-{}", self.serial.fetch_add(1, Ordering::Relaxed))
    }

    /// Marginal server CPU per step (ms) on threads seeded with `hist` messages.
    async fn cpu_per_step(&self, server: &Server, hist: usize) -> anyhow::Result<f64> {
        let (runs, steps) = (self.opts.runs, self.opts.steps);
        let mut cost = [Duration::ZERO; 2];
        for (side, s) in [0, steps].into_iter().enumerate() {
            let mut threads = Vec::with_capacity(runs);
            for _ in 0..runs {
                let id = self.thread_id("t");
                seed(&self.client, &server.origin, &id, hist).await?;
                threads.push(id);
            }
            let before = server.cpu()?;
            for t in &threads {
                run(&self.client, &server.origin, t, s, self.opts.stream).await?;
            }
            cost[side] = server.cpu()?.saturating_sub(before);
        }
        Ok(cost[1].saturating_sub(cost[0]).as_secs_f64() * 1e3 / (runs * steps) as f64)
    }

    /// Unmeasured runs: the first request builds the agent's shared parts, the sandbox, the
    /// connection pools.
    async fn warm(&self, server: &Server) -> anyhow::Result<()> {
        for _ in 0..3 {
            let id = self.thread_id("warm");
            seed(&self.client, &server.origin, &id, 4).await?;
            run(&self.client, &server.origin, &id, 2, self.opts.stream).await?;
        }
        Ok(())
    }

    async fn a1(&self) -> anyhow::Result<()> {
        let server = self.server("a1").await?;
        self.warm(&server).await?;
        let mut v = Vec::new();
        for _ in 0..self.opts.samples {
            v.push(self.cpu_per_step(&server, 0).await?);
        }
        println!(
            "\nA1 harness CPU per step, fresh thread, SQLite (server process only; {} samples of {} runs × {} steps)",
            self.opts.samples, self.opts.runs, self.opts.steps
        );
        row("CPU per step", "ms", &v);
        row("peak RSS", "MiB", &[server.peak_rss_mib()]);
        server.stop().await
    }

    /// One `antler run` of `steps` steps through the reaper: the CPU time of its whole process
    /// tree (the sandbox's processes and bash included).
    async fn a2_run(&self, home: &Path, steps: usize) -> anyhow::Result<Duration> {
        let work = self.work.path();
        let dir = tempfile::tempdir_in(work)?;
        let out = tokio::process::Command::new(std::env::current_exe()?)
            .arg("--reap")
            .arg(&self.opts.antler)
            .args(["run", "--config"])
            .arg(work.join("config.yaml"))
            .args(["--output", "json", "--recursion-limit"])
            .arg((16 * steps + 50).to_string())
            .arg(format!("bench-steps={steps}"))
            .current_dir(dir.path())
            .env("ANTLER_HOME", home)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "antler run failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        ensure!(
            !stdout.contains("reaped-lingering"),
            "antler run left processes running after it ended"
        );
        let (json, tail) = stdout
            .split_once("\nreaped-")
            .context("the reaper did not report")?;
        let result: Value = serde_json::from_str(json.trim()).context("antler run's JSON")?;
        ensure!(
            result["status"] == "success",
            "antler run: {}",
            result["error"]
        );
        let messages = result["values"]["messages"]
            .as_array()
            .context("no messages in antler run's result")?;
        let tools = messages.iter().filter(|m| m["type"] == "tool").count();
        ensure!(
            tools == steps,
            "antler run: {tools} of {steps} tool results"
        );
        let micros: u64 = tail
            .lines()
            .find_map(|l| l.strip_prefix("reaped-cpu-us ")?.trim().parse().ok())
            .context("the reaper did not report CPU time")?;
        Ok(Duration::from_micros(micros))
    }

    async fn a2(&self) -> anyhow::Result<()> {
        let home = self.work.path().join("home-a2");
        // Unmeasured: creates and migrates the data home, warms the page cache.
        self.a2_run(&home, 1).await?;
        let (runs, steps) = (self.opts.runs, self.opts.steps.max(1));
        let (mut marginal, mut first, mut empty) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.opts.samples {
            // Runs of 0, s and 2s steps, interleaved so a change in the machine's load hits
            // every side alike. The marginal step is the slope between s and 2s: the first bash
            // call of a process also starts its sandbox (a launcher and a warden), a cost per
            // run that a 0-vs-s difference would spread over the steps.
            let mut cost = [Duration::ZERO; 3];
            for _ in 0..runs {
                for (side, n) in [0, steps, 2 * steps].into_iter().enumerate() {
                    cost[side] += self.a2_run(&home, n).await?;
                }
            }
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let per_step = ms(cost[2].saturating_sub(cost[1])) / (runs * steps) as f64;
            marginal.push(per_step);
            let with_steps = ms(cost[1].saturating_sub(cost[0])) / runs as f64;
            first.push(with_steps - per_step * steps as f64);
            empty.push(ms(cost[0]) / runs as f64);
        }
        println!(
            "\nA2 `antler run` CPU, bash and the sandbox's processes included ({} samples of {} runs each of 0, {} and {} steps, one process per run)",
            self.opts.samples,
            runs,
            steps,
            2 * steps
        );
        row("CPU per step (marginal)", "ms", &marginal);
        row("sandbox start (first bash call)", "ms", &first);
        row("whole 0-step run", "ms", &empty);
        Ok(())
    }

    async fn b(&self) -> anyhow::Result<()> {
        let server = self.server("b").await?;
        self.warm(&server).await?;
        let (mut short, mut long) = (Vec::new(), Vec::new());
        for _ in 0..self.opts.samples {
            short.push(self.cpu_per_step(&server, 10).await?);
        }
        let rss_short = server.peak_rss_mib();
        for _ in 0..self.opts.samples {
            long.push(self.cpu_per_step(&server, self.opts.history).await?);
        }
        let rss_long = server.peak_rss_mib();
        println!(
            "\nB CPU per step by history (server process only; {} samples of {} runs × {} steps)",
            self.opts.samples, self.opts.runs, self.opts.steps
        );
        row("CPU per step, 10 messages", "ms", &short);
        row(
            &format!("CPU per step, {} messages", self.opts.history),
            "ms",
            &long,
        );
        let ratio = summary(&long).0 / summary(&short).0.max(1e-9);
        println!("{:<34} {ratio:>10.2}×", "ratio (medians)");
        row("peak RSS after 10-message runs", "MiB", &[rss_short]);
        row(
            &format!("peak RSS after {}-message runs", self.opts.history),
            "MiB",
            &[rss_long],
        );
        server.stop().await
    }

    /// Wall, steps/s, server peak RSS, server CPU per step, and the bench's own CPU per step
    /// (the scripted model and the client share the machine with the server and bash).
    async fn c_sample(&self, n: usize) -> anyhow::Result<[f64; 5]> {
        let server = self.server(&format!("c{n}")).await?;
        self.warm(&server).await?;
        let threads: Vec<String> = (0..self.opts.threads)
            .map(|_| self.thread_id("c"))
            .collect();
        for t in &threads {
            create_thread(&self.client, &server.origin, t).await?;
        }
        let gate = Arc::new(tokio::sync::Semaphore::new(self.opts.concurrency.max(1)));
        let (steps, stream) = (self.opts.thread_steps, self.opts.stream);
        let cpu0 = server.cpu()?;
        let own0 = cpu_time::ProcessTime::now();
        let wall = Instant::now();
        let tasks: Vec<_> = threads
            .into_iter()
            .map(|t| {
                let (client, base, gate) =
                    (self.client.clone(), server.origin.clone(), gate.clone());
                tokio::spawn(async move {
                    let _permit = gate.acquire_owned().await?;
                    run(&client, &base, &t, steps, stream).await
                })
            })
            .collect();
        for t in tasks {
            t.await??;
        }
        let wall = wall.elapsed().as_secs_f64();
        let own = own0.elapsed().as_secs_f64();
        let cpu = server.cpu()?.saturating_sub(cpu0).as_secs_f64();
        let total = (self.opts.threads * steps) as f64;
        let rss = server.peak_rss_mib();
        server.stop().await?;
        Ok([
            wall,
            total / wall,
            rss,
            cpu * 1e3 / total,
            own * 1e3 / total,
        ])
    }

    async fn c(&self) -> anyhow::Result<()> {
        let mut figures: [Vec<f64>; 5] = Default::default();
        for n in 0..self.opts.c_samples {
            for (all, one) in figures.iter_mut().zip(self.c_sample(n).await?) {
                all.push(one);
            }
        }
        let [wall, rate, rss, cpu, own] = figures;
        println!(
            "\nC {} threads × {} steps at once ({} in flight; {} samples, a fresh server each)",
            self.opts.threads, self.opts.thread_steps, self.opts.concurrency, self.opts.c_samples
        );
        row("wall", "s", &wall);
        row("steps/s", "", &rate);
        row("server peak RSS", "MiB", &rss);
        row("server CPU per step", "ms", &cpu);
        row("bench CPU per step (model, client)", "ms", &own);
        Ok(())
    }

    async fn e(&self) -> anyhow::Result<()> {
        let home = self.work.path().join("home-e");
        let thread = self.thread_id("e");
        // Before: the schema and the empty thread, after a clean stop.
        let server = self.server("e").await?;
        create_thread(&self.client, &server.origin, &thread).await?;
        server.stop().await?;
        let before = db_bytes(&home)?;
        let server = self.server("e").await?;
        let steps = self.opts.steps.max(1);
        let runs = self.opts.e_steps.div_ceil(steps);
        for _ in 0..runs {
            run(
                &self.client,
                &server.origin,
                &thread,
                steps,
                self.opts.stream,
            )
            .await?;
        }
        let live = db_bytes(&home)?;
        server.stop().await?;
        let after = db_bytes(&home)?;
        let total = (runs * steps) as f64;
        println!(
            "\nE SQLite bytes per step: one thread, {} steps in runs of {steps} (db + wal + shm)",
            runs * steps
        );
        println!(
            "{:<34} {:>10.0} B",
            "growth per step after a clean stop",
            after.saturating_sub(before) as f64 / total
        );
        println!(
            "{:<34} {:>10.0} B",
            "growth per step while running",
            live.saturating_sub(before) as f64 / total
        );
        println!(
            "{:<34} {:>10.2} MiB",
            "database files",
            after as f64 / 1048576.0
        );
        Ok(())
    }
}

/// Bytes of every SQLite file under the data home (database, WAL, shared memory, journals).
fn db_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e?;
            let meta = e.metadata()?;
            let name = e.file_name().to_string_lossy().into_owned();
            if meta.is_dir() {
                stack.push(e.path());
            } else if [
                ".db",
                ".db-wal",
                ".db-shm",
                ".db-journal",
                ".sqlite",
                ".sqlite-wal",
            ]
            .iter()
            .any(|s| name.ends_with(s))
            {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

/// `--serve`: the workloads in `opts.workloads` (a1, a2, b, c, e), one table each.
pub fn run_all(opts: Opts) -> anyhow::Result<()> {
    if !opts.antler.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p antler-cli) or pass --antler PATH",
            opts.antler.display()
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let (model_url, model) = start_model().await?;
        let work = tempfile::tempdir()?;
        std::fs::write(work.path().join("config.yaml"), config(&model_url))?;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(opts.concurrency.max(opts.threads).max(1))
            .timeout(Duration::from_secs(600))
            .build()?;
        println!(
            "antler-bench --serve: {} (scripted model on 127.0.0.1, one bash call per step, SQLite, /runs/{})",
            opts.antler.display(),
            if opts.stream { "stream" } else { "wait" }
        );
        let bench = Bench {
            opts,
            work,
            client,
            serial: AtomicU64::new(0),
        };
        for w in bench.opts.workloads.clone() {
            match w.as_str() {
                "a1" => bench.a1().await?,
                "a2" => bench.a2().await?,
                "b" => bench.b().await?,
                "c" => bench.c().await?,
                "e" => bench.e().await?,
                other => bail!("unknown workload {other:?} (a1, a2, b, c, e)"),
            }
        }
        println!(
            "\n(model calls answered: {})",
            model.calls.load(Ordering::Relaxed)
        );
        if std::env::var_os("ANTLER_BENCH_KEEP").is_some() {
            // Profiling: leave the data homes behind to inspect with sqlite3.
            println!("data homes kept in {}", bench.work.keep().display());
        }
        Ok(())
    })
}
