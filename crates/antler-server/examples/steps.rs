//! Server CPU and memory per agent step: `antler serve` against a mock model that asks for
//! `--steps` `ls` tool calls per run, then answers. Each sample runs `--threads` runs at once
//! (each on its own thread, starting from `--history` messages), once with `--steps` tool rounds
//! and once with none; the server's CPU (utime + stime from `/proc/PID/stat`) of the difference,
//! per step, is the marginal cost of a step. Prints medians with min–max and the server's peak
//! RSS.
//!
//! ```sh
//! cargo build --release -p antler-cli -p antler-server --example steps
//! target/release/examples/steps --antler target/release/antler --threads 1 --steps 20 \
//!     --history 10 --mode stream --samples 7
//! ```
//!
//! `--mode stream` reads every run's SSE stream (`values`, `updates`, `messages-tuple`);
//! `--mode wait` uses `/runs/wait` (nobody reads the events).
// A measuring harness: it prints its report and stops at the first broken precondition.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::expect_used,
    clippy::unwrap_used
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use antler_test_support::{MockOpenAi, MockReply};
use futures::StreamExt;
use serde_json::{json, Value};

struct Args {
    antler: PathBuf,
    threads: usize,
    steps: usize,
    history: usize,
    samples: usize,
    wait: bool,
}

fn args() -> Args {
    let mut a = Args {
        antler: PathBuf::from("target/release/antler"),
        threads: 1,
        steps: 20,
        history: 10,
        samples: 7,
        wait: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_default();
        match flag.as_str() {
            "--antler" => a.antler = PathBuf::from(v),
            "--threads" => a.threads = v.parse().unwrap_or(a.threads),
            "--steps" => a.steps = v.parse().unwrap_or(a.steps),
            "--history" => a.history = v.parse().unwrap_or(a.history),
            "--samples" => a.samples = v.parse().unwrap_or(a.samples),
            "--mode" => a.wait = v == "wait",
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// utime + stime of a process.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`; utime and stime are the 14th and 15th of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY-free: the clock tick is 100 Hz on Linux.
    Duration::from_millis(ticks * 10)
}

fn hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn history(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                json!({"type": "human", "content": format!("history question {i}: {}", "lorem ipsum ".repeat(8))})
            } else {
                json!({"type": "ai", "content": format!("history answer {i}: {}", "dolor sit amet ".repeat(8))})
            }
        })
        .collect()
}

/// One run: its input asks for `steps` tool rounds (`steps=N` in the text).
async fn one_run(
    client: &reqwest::Client,
    base: &str,
    thread: &str,
    steps: usize,
    hist: &[Value],
    wait: bool,
) {
    let mut messages = hist.to_vec();
    messages.push(json!({"type": "human", "content": format!("steps={steps}")}));
    let body = json!({
        "input": {"messages": messages},
        "stream_mode": ["values", "messages-tuple", "updates"],
        "on_disconnect": "continue",
    });
    let url = if wait { "wait" } else { "stream" };
    let resp = client
        .post(format!("{base}/api/threads/{thread}/runs/{url}"))
        .json(&body)
        .send()
        .await
        .expect("run");
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("chunk");
        tail.extend_from_slice(&chunk);
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 4096);
        }
    }
    let text = String::from_utf8_lossy(&tail);
    if !wait {
        assert!(text.contains("event: end"), "no end: {text}");
    }
}

fn median(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[tokio::main]
async fn main() {
    let a = args();
    let mock = MockOpenAi::start().await.with_fallback(|body| {
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        // The last `steps=N` request and the tool results after it.
        let start = msgs
            .iter()
            .rposition(|m| m["role"] == "user" && m["content"].to_string().contains("steps="))
            .unwrap_or(0);
        // The content may be a string or a list of parts: read the digits after `steps=`.
        let want: usize = msgs
            .get(start)
            .map(|m| m["content"].to_string())
            .and_then(|s| {
                let tail = s.rsplit("steps=").next()?.to_owned();
                let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .unwrap_or(0);
        let done = msgs[start..].iter().filter(|m| m["role"] == "tool").count();
        if done < want {
            MockReply::tool_call(
                format!("call_{done}"),
                "ls",
                json!({"path": "/mnt/user-data"}),
            )
            .usage(50, 12)
        } else {
            MockReply::text("Done.").usage(50, 2)
        }
    });
    let work = tempfile::tempdir().expect("tempdir");
    let config = work.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: mock-model\n    base_url: {}\n    api_key: sk-test\n    streaming: true\nsandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\nmemory:\n  enabled: false\ntitle:\n  enabled: false\ntools:\n  - name: ls\n    group: file:read\n    use: deerflow.sandbox.tools:ls_tool\n",
            mock.base_url()
        ),
    )
    .expect("config");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = tokio::process::Command::new(&a.antler)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--port", &port.to_string(), "--retention-secs", "60"])
        .env("ANTLER_HOME", work.path().join("home"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start antler serve");
    let pid = child.id().expect("pid");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(a.threads.max(1))
        .build()
        .expect("client");
    for _ in 0..300 {
        if client.get(format!("{base}/health")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hist = history(a.history);
    let mut per_step = Vec::new();
    let mut walls = Vec::new();
    let mut n = 0usize;
    for sample in 0..=a.samples {
        let mut cost = [Duration::ZERO; 2];
        for (k, steps) in [0, a.steps].into_iter().enumerate() {
            let mut ids = Vec::new();
            for _ in 0..a.threads {
                n += 1;
                let id = format!("t{n}");
                client
                    .post(format!("{base}/api/threads"))
                    .json(&json!({"thread_id": id}))
                    .send()
                    .await
                    .expect("create thread");
                ids.push(id);
            }
            let before = cpu(pid);
            let wall = Instant::now();
            let runs = ids
                .iter()
                .map(|t| one_run(&client, &base, t, steps, &hist, a.wait));
            futures::future::join_all(runs).await;
            if k == 1 {
                walls.push(wall.elapsed().as_secs_f64());
            }
            cost[k] = cpu(pid).saturating_sub(before);
        }
        // The first sample warms up (allocator, caches).
        if sample > 0 {
            let marginal = cost[1].as_secs_f64() - cost[0].as_secs_f64();
            per_step.push(marginal * 1e3 / (a.steps * a.threads) as f64);
        }
    }
    let (m, lo, hi) = median(&mut per_step);
    let (w, wlo, whi) = median(&mut walls);
    println!(
        "{} mode, {} threads × {} steps, history {}: server CPU per step {m:.3} ms ({lo:.3}–{hi:.3}); wall of the {}-step round {w:.2} s ({wlo:.2}–{whi:.2}); peak RSS {:.1} MiB",
        if a.wait { "wait" } else { "stream" },
        a.threads,
        a.steps,
        a.history,
        a.steps,
        hwm_kib(pid) as f64 / 1024.0
    );
    let _ = child.kill().await;
}
