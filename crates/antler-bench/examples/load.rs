//! Load test of `antler serve`: N concurrent streamed runs against a mock model with fixed
//! latency, all on 127.0.0.1, repeated for several rounds. Checks that no event is lost (every
//! stream: `metadata` first, ids 0…n-1 without a hole, `end` last, the streamed text equal to the
//! final AI message, the run `success`) and reports time to first event (p50/p99), time to first
//! token, and the server's RSS after each round (flat = no leak).
//!
//! ```sh
//! cargo build --release -p antler-cli
//! cargo run --release -p antler-bench --example load -- \
//!     --antler target/release/antler --runs 200 --latency-ms 100 --rounds 3
//! ```
// A measuring harness: it prints its report and stops at the first broken precondition.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::expect_used,
    clippy::unwrap_used
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use antler_bench::server::{content_text, ServeProcess, SseReader};
use antler_test_support::{MockOpenAi, MockReply};
use serde_json::{json, Value};

struct Args {
    antler: PathBuf,
    runs: usize,
    latency: Duration,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args {
        antler: PathBuf::from("target/release/antler"),
        runs: 200,
        latency: Duration::from_millis(100),
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_default();
        match flag.as_str() {
            "--antler" => a.antler = PathBuf::from(v),
            "--runs" => a.runs = v.parse().unwrap_or(a.runs),
            "--latency-ms" => a.latency = Duration::from_millis(v.parse().unwrap_or(100)),
            "--rounds" => a.rounds = v.parse().unwrap_or(a.rounds),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

struct Outcome {
    first_event: Duration,
    first_token: Option<Duration>,
    events: usize,
}

/// One streamed run, checked for completeness.
async fn one_run(
    client: reqwest::Client,
    base: String,
    thread: String,
    i: usize,
) -> Result<Outcome, String> {
    let started = Instant::now();
    let mut resp = client
        .post(format!("{base}/api/threads/{thread}/runs/stream"))
        .json(&json!({
            "input": {"messages": [{"type": "human", "content": format!("load test message {i}")}]},
            "stream_mode": ["values", "messages-tuple", "updates"],
            "on_disconnect": "continue",
        }))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() != 200 {
        return Err(format!("status {}", resp.status()));
    }
    let run_id = resp
        .headers()
        .get("content-location")
        .and_then(|v| v.to_str().ok())
        .and_then(|l| l.rsplit('/').next())
        .map(str::to_owned)
        .ok_or("no Content-Location")?;
    let mut reader = SseReader::default();
    let mut first_event = None;
    let mut first_token = None;
    let mut events = Vec::new();
    while let Some(batch) = reader
        .next_events(&mut resp)
        .await
        .map_err(|e| e.to_string())?
    {
        first_event.get_or_insert_with(|| started.elapsed());
        for e in batch {
            if e.event == "messages" && first_token.is_none() {
                first_token = Some(started.elapsed());
            }
            events.push(e);
        }
    }
    // Completeness: metadata first, end last, ids 0..n-1, text = final message.
    if events.first().map(|e| e.event.as_str()) != Some("metadata") {
        return Err("metadata is not first".into());
    }
    if events.last().map(|e| e.event.as_str()) != Some("end") {
        return Err(format!("no end ({} events)", events.len()));
    }
    for (n, e) in events[..events.len() - 1].iter().enumerate() {
        let seq =
            e.id.as_deref()
                .and_then(|id| id.split_once('-'))
                .and_then(|(_, s)| s.parse::<usize>().ok());
        if seq != Some(n) {
            return Err(format!("event {n} has id {:?}: lost or reordered", e.id));
        }
    }
    let streamed: String = events
        .iter()
        .filter(|e| e.event == "messages" && e.data[0]["type"] == "AIMessageChunk")
        .filter_map(|e| e.data[0]["content"].as_str().map(str::to_owned))
        .collect();
    let last_values = events
        .iter()
        .rev()
        .find(|e| e.event == "values")
        .ok_or("no values")?;
    let final_text = last_values.data["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["type"] == "ai"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    if streamed != final_text || !final_text.contains(&format!("load test message {i}")) {
        return Err(format!("streamed {streamed:?} != final {final_text:?}"));
    }
    let run: Value = client
        .get(format!("{base}/api/threads/{thread}/runs/{run_id}"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    if run["status"] != "success" {
        return Err(format!("run status {}", run["status"]));
    }
    Ok(Outcome {
        first_event: first_event.unwrap_or_default(),
        first_token,
        events: events.len(),
    })
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let a = args();
    let latency = a.latency;
    let mock = MockOpenAi::start().await.with_fallback(move |body| {
        let said = body["messages"]
            .as_array()
            .and_then(|m| {
                m.iter().rev().find(|m| {
                    m["role"] == "user" && !m["content"].to_string().contains("<system-reminder>")
                })
            })
            .map(|m| content_text(&m["content"]))
            .unwrap_or_default();
        MockReply::text(format!("Echoing your words back to you: {said}"))
            .usage(50, 12)
            .delay(latency)
    });
    let work = tempfile::tempdir().expect("tempdir");
    let config = work.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: mock-model\n    base_url: {}\n    api_key: sk-test\n    streaming: true\nsandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\nmemory:\n  enabled: false\n",
            mock.base_url()
        ),
    )
    .expect("config");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(a.runs)
        .build()
        .expect("client");
    let home = work.path().join("home");
    let server = ServeProcess::start(&a.antler, &config, work.path(), &home, 1, &client)
        .await
        .expect("start antler serve");
    let (pid, base) = (server.pid, server.origin.clone());
    println!(
        "antler serve (pid {pid}); {} concurrent streamed runs per round, mock latency {} ms, {} rounds",
        a.runs,
        a.latency.as_millis(),
        a.rounds
    );
    println!("RSS at start: {:.1} MiB", server.status_mib("VmRSS:"));
    let mut failures = 0;
    for round in 1..=a.rounds {
        let mut threads = Vec::with_capacity(a.runs);
        for i in 0..a.runs {
            let id = format!("load-{round}-{i}");
            client
                .post(format!("{base}/api/threads"))
                .json(&json!({"thread_id": id}))
                .send()
                .await
                .expect("create thread");
            threads.push(id);
        }
        let wall = Instant::now();
        let barrier = Arc::new(tokio::sync::Barrier::new(a.runs));
        let tasks: Vec<_> = threads
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let (c, b, bar) = (client.clone(), base.clone(), barrier.clone());
                tokio::spawn(async move {
                    bar.wait().await;
                    one_run(c, b, t, i).await
                })
            })
            .collect();
        let mut firsts = Vec::new();
        let mut tokens = Vec::new();
        let mut events = 0;
        let mut lost = 0;
        for t in tasks {
            match t.await.expect("task") {
                Ok(o) => {
                    firsts.push(o.first_event);
                    tokens.extend(o.first_token);
                    events += o.events;
                }
                Err(e) => {
                    failures += 1;
                    lost += 1;
                    eprintln!("run failed: {e}");
                }
            }
        }
        let wall = wall.elapsed();
        firsts.sort();
        tokens.sort();
        // Let finished runs' buffers expire (retention 1 s) before sampling memory.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (rss, hwm) = (server.status_mib("VmRSS:"), server.peak_rss_mib());
        println!(
            "round {round}: {}/{} runs complete, {events} events, {lost} incomplete; wall {:.2} s; first event p50 {:.1} ms p99 {:.1} ms; first token p50 {:.1} ms p99 {:.1} ms; RSS {:.1} MiB (peak {:.1} MiB)",
            firsts.len(),
            a.runs,
            wall.as_secs_f64(),
            pct(&firsts, 0.5).as_secs_f64() * 1e3,
            pct(&firsts, 0.99).as_secs_f64() * 1e3,
            pct(&tokens, 0.5).as_secs_f64() * 1e3,
            pct(&tokens, 0.99).as_secs_f64() * 1e3,
            rss,
            hwm,
        );
    }
    drop(server);
    mock.assert_no_violations();
    if failures > 0 {
        eprintln!("{failures} run(s) failed");
        std::process::exit(1);
    }
}
