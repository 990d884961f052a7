//! One run lifecycle across front ends: an `antler run` process and an `antler serve` process on
//! one SQLite file obey the multitask strategy against each other, as two runs of one process
//! do — `reject` refuses in both directions, `interrupt` from the server stops the CLI's run
//! (which ends `interrupted`) and the server's run proceeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use antler_test_support::{MockOpenAi, MockReply};
use common::{wait_until, Project};
use serde_json::{json, Value};

fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Lead-agent requests whose newest user message says `hang` never get an answer.
fn mock() -> MockOpenAi {
    MockOpenAi::start_on_thread().with_fallback(|body| {
        let text = last_user_text(body);
        let lead = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        if lead && text.contains("hang") {
            MockReply::hang()
        } else {
            MockReply::text("ok")
        }
    })
}

/// `POST path` with a JSON body.
fn post(port: u16, path: &str, body: Value) -> (u16, Value) {
    http(port, "POST", path, Some(body))
}

/// One HTTP/1.1 request on a fresh connection: (status, JSON body or Null).
fn http(port: u16, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, payload) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // Small JSON answers may come chunked; take the JSON between the chunk-size lines.
    let payload = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        payload
            .split("\r\n")
            .filter(|l| !l.is_empty() && usize::from_str_radix(l, 16).is_err())
            .collect::<String>()
    } else {
        payload.to_owned()
    };
    (
        status,
        serde_json::from_str(&payload).unwrap_or(Value::Null),
    )
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn say(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

#[test]
fn cli_and_server_runs_on_one_thread_obey_the_multitask_strategy() {
    let mock = mock();
    let p = Project::new(&mock, "");
    let port = free_port();
    let port_arg = port.to_string();
    let serve = Serve(
        p.cmd(&["serve", "--port", &port_arg])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("the server", Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
            && http(port, "GET", "/health", None).0 == 200
    });

    // A CLI run holds the thread (its model call hangs).
    let cli = p.spawn_run("shared", "json", "cli: hang", Stdio::piped());
    wait_until("the CLI run's model call", Duration::from_secs(30), || {
        mock.in_flight() >= 1
    });

    // reject (the default): the server refuses, and records no run.
    let (code, e) = post(
        port,
        "/api/threads/shared/runs/wait",
        json!({"input": say("server: rejected")}),
    );
    assert_eq!(code, 409, "{e}");
    assert_eq!(e["detail"], "Thread shared already has an active run");

    // interrupt: the server's run starts; the CLI run stops and ends interrupted.
    let (code, values) = post(
        port,
        "/api/threads/shared/runs/wait",
        json!({"input": say("server: takes over"), "multitask_strategy": "interrupt"}),
    );
    assert_eq!(code, 200, "{values}");
    let out = cli.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cli_out: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli_out["status"], "interrupted", "{cli_out}");
    let (_, runs) = http(port, "GET", "/api/threads/shared/runs", None);
    let statuses: Vec<(&str, &str)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["multitask_strategy"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [("interrupt", "success"), ("reject", "interrupted")],
        "newest first: the server's run, then the CLI's"
    );

    // A server run holds the thread: the CLI is refused (reject), naming the busy thread.
    let (code, run) = post(
        port,
        "/api/threads/shared/runs",
        json!({"input": say("server: hang")}),
    );
    assert_eq!(code, 200, "{run}");
    wait_until(
        "the server run's model call",
        Duration::from_secs(30),
        || mock.in_flight() >= 1,
    );
    let out = p.run(&["run", "--thread-id", "shared", "cli: refused"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("thread 'shared' is busy"), "{stderr}");
    drop(serve);
}
