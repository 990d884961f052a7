//! ToolOutputBudget (spec 40 part 2 §5.3; seed 002 experiment C: the model sees a bounded,
//! explicitly marked result while a receipt locates the full output).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_middleware::tool_output_budget::*;
use antler_protocol::{
    Content, Message, Object, StateUpdate, ThreadData, ThreadState, ToolCall, ToolMessage,
    ToolStatus,
};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::*;
use crate::common::first_tool;

fn sha(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The outputs folder the budget saves to for thread `t` under the data home `home`.
/// How many files the budget saved under the data home `home`.
fn saved_results(home: &Path) -> usize {
    std::fs::read_dir(outputs_of(home).join(".tool-results"))
        .unwrap()
        .count()
}

fn outputs_of(home: &Path) -> PathBuf {
    home.join("threads/t/user-data/outputs")
}

fn budget(home: Option<&Path>) -> ToolOutputBudgetMiddleware {
    let mw = ToolOutputBudgetMiddleware::new(ToolOutputConfig::default());
    match home {
        Some(h) => mw.with_home(h),
        None => mw,
    }
}

/// One tool call on thread `t` through a chain holding only the budget.
async fn call_through(tool: Arc<Fixed>, home: Option<&Path>, state: ThreadState) -> ToolOutcome {
    let chain = Chain::new(vec![Arc::new(budget(home)) as Arc<dyn Middleware>]).unwrap();
    let name = tool.spec.name.clone();
    chain
        .call_tool(ToolCallRequest {
            call: ToolCall::new("c1", name.clone(), Object::new()),
            tool: Some(tool),
            state: Arc::new(state),
            run: run_ctx("t", "r"),
            tool_names: Arc::from(vec![name]),
        })
        .await
        .unwrap()
}

fn text_of(o: &ToolOutcome) -> String {
    match o {
        ToolOutcome::Message(m) => m.content.text(),
        ToolOutcome::Command(c) => c.update.messages.as_ref().unwrap()[0].text(),
    }
}

/// `lines` numbered lines (`line 000001 …`).
fn numbered(lines: usize, width: usize) -> String {
    (0..lines)
        .map(|i| format!("line {i:06} {}\n", "x".repeat(width)))
        .collect()
}

#[tokio::test]
async fn a_5_mb_output_reaches_the_next_request_bounded_marked_and_receipted() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = outputs_of(dir.path());
    let full = numbered(5 * 1024 * 1024 / 80, 67);
    assert!(full.len() >= 5 * 1024 * 1024 - 100);
    let tool = Fixed::new("bash", ToolOutput::text(full.clone()));
    let model = scripted(vec![ai("x", 1, 1, &[("c1", "bash")]), ai("x", 1, 1, &[])]);
    let rec = Arc::new(Recorder::default());
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(tool))
        .with_chain(Chain::new(vec![Arc::new(budget(Some(dir.path())))]).unwrap())
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()));
    let input = RunInput::message(Message::human("dump the logs"));
    let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)).with_observer(rec.clone()));
    let out = agent.run(input, run).await;
    assert_eq!(out.status, RunStatus::Success);

    // The next model request: bounded and marked.
    let sent = &model.requests()[1].messages;
    let Some(Message::Tool(tm)) = sent.iter().find(|m| matches!(m, Message::Tool(_))) else {
        panic!("the tool result must be in the request")
    };
    let text = tm.content.text();
    assert!(
        text.chars().count() < 4_000,
        "{} chars",
        text.chars().count()
    );
    let first = text.lines().next().unwrap();
    let prefix = "[Full bash output saved to /mnt/user-data/outputs/.tool-results/bash-";
    assert!(first.starts_with(prefix), "{first}");
    assert!(first.ends_with(&format!(
        ".log ({} chars, ~{} tokens).]",
        full.len(),
        full.len() / 4
    )));
    assert!(text.contains("Use read_file on /mnt/user-data/outputs/.tool-results/bash-"));
    assert!(text.contains("line 000000"), "head sample");
    assert!(
        text.contains(&format!("line {:06}", full.lines().count() - 1)),
        "tail sample"
    );

    // The receipt: the file holds the whole output, and the stored message says where it is.
    let virtual_path = first[first.find("/mnt/").unwrap()..first.find(" (").unwrap()].to_owned();
    let host = outputs.join(virtual_path.trim_start_matches("/mnt/user-data/outputs/"));
    assert_eq!(std::fs::read_to_string(&host).unwrap(), full);
    let stored = first_tool(&out.state);
    assert_eq!(
        stored.content.text(),
        text,
        "the checkpoint keeps the bounded version"
    );
    let receipt = stored.additional_kwargs.get(RECEIPT_KEY).unwrap();
    assert_eq!(
        receipt,
        &json!({
            "mode": "externalized",
            "path": virtual_path,
            "original_chars": full.len(),
            "original_sha256": sha(&full),
        })
    );
    let events = rec.0.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "tool_output_budget");
    assert_eq!(events[0].1["receipt"], *receipt);
}

#[tokio::test]
async fn without_storage_the_output_is_cut_inline_with_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    // The outputs "folder" is a file: nothing can be saved under it.
    let blocked = outputs_of(dir.path());
    std::fs::create_dir_all(blocked.parent().unwrap()).unwrap();
    std::fs::write(&blocked, "not a dir").unwrap();
    let full = numbered(2000, 40);
    // A blocked folder, or no data home at all.
    for home in [Some(dir.path()), None] {
        let out = call_through(
            Fixed::new("bash", ToolOutput::text(full.clone())),
            home,
            ThreadState::default(),
        )
        .await;
        let text = text_of(&out);
        assert!(text.chars().count() <= 30_000);
        assert!(text.starts_with("line 000000"));
        assert!(text.ends_with(&format!("line 001999 {}\n", "x".repeat(40))));
        assert!(text.contains("chars omitted from bash output. Persistent storage unavailable."));
        let ToolOutcome::Message(m) = &out else {
            panic!()
        };
        assert_eq!(m.additional_kwargs[RECEIPT_KEY]["mode"], "truncated");
        assert_eq!(
            m.additional_kwargs[RECEIPT_KEY]["original_sha256"],
            json!(sha(&full))
        );
    }
}

#[tokio::test]
async fn small_exempt_and_multimodal_results_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let big = "y".repeat(50_000);
    let image = ToolOutput::Content {
        content: Content::Blocks(vec![
            json!({"type": "text", "text": big.clone()}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}),
        ]),
        status: ToolStatus::Success,
        artifact: Value::Null,
        additional_kwargs: Object::new(),
    };
    for (name, output) in [
        ("bash", ToolOutput::text("short")),
        ("read_file", ToolOutput::text(big.clone())),
        ("view_image", image.clone()),
    ] {
        let out = call_through(
            Fixed::new(name, output.clone()),
            Some(dir.path()),
            ThreadState::default(),
        )
        .await;
        let ToolOutcome::Message(m) = out else {
            panic!()
        };
        let ToolOutput::Content { content, .. } = output else {
            panic!()
        };
        assert_eq!(m.content, content, "{name}");
        assert!(!m.additional_kwargs.contains_key(RECEIPT_KEY));
    }
    assert!(!outputs_of(dir.path()).join(".tool-results").exists());
}

#[tokio::test]
async fn command_results_are_budgeted_message_by_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut tm = ToolMessage::new("c1", "z".repeat(20_000)).with_name("fetch");
    tm.id = Some("keep-me".into());
    tm.additional_kwargs.insert("source".into(), json!("web"));
    let cmd = Command {
        update: StateUpdate {
            title: Some(Some("kept".into())),
            messages: Some(vec![Message::Tool(tm)]),
            ..Default::default()
        },
        goto: None,
    };
    let out = call_through(
        Fixed::new("fetch", ToolOutput::Command(cmd)),
        Some(dir.path()),
        ThreadState::default(),
    )
    .await;
    let ToolOutcome::Command(c) = out else {
        panic!("a command stays a command")
    };
    assert_eq!(c.update.title, Some(Some("kept".into())));
    let Message::Tool(m) = &c.update.messages.unwrap()[0] else {
        panic!()
    };
    assert_eq!(m.id.as_deref(), Some("keep-me"));
    assert_eq!(m.additional_kwargs["source"], "web", "metadata copied");
    assert!(m
        .content
        .text()
        .starts_with("[Full fetch output saved to /mnt/user-data/outputs/.tool-results/fetch-"));
    assert_eq!(saved_results(dir.path()), 1);
}

/// `thread_data` is state a client or an old checkpoint could point at another thread's
/// folder: the budget saves in the run's own outputs folder regardless.
#[tokio::test]
async fn forged_thread_data_does_not_choose_where_outputs_are_saved() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("users/alice/threads/a1/user-data/outputs");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let forged = ThreadState {
        thread_data: Some(ThreadData {
            outputs_path: Some(elsewhere.to_string_lossy().into_owned()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = call_through(
        Fixed::new("bash", ToolOutput::text(numbered(2000, 40))),
        Some(dir.path()),
        forged,
    )
    .await;
    assert!(text_of(&out).starts_with("[Full bash output saved to /mnt/user-data/outputs/"));
    assert!(!elsewhere.join(".tool-results").exists());
    assert_eq!(saved_results(dir.path()), 1);
}

#[tokio::test]
async fn oversized_history_is_cut_in_requests_only() {
    let model = Arc::new(
        antler_models::ScriptedModel::new([])
            .with_fallback(|_| antler_models::ScriptedReply::text("ok")),
    );
    let chain =
        Chain::new(vec![
            Arc::new(ToolOutputBudgetMiddleware::new(ToolOutputConfig::default()))
                as Arc<dyn Middleware>,
        ])
        .unwrap();
    let old = numbered(1000, 60);
    let mut state = state_of(vec![
        human("u", "go"),
        Message::Ai(ai("a1", 1, 1, &[("c1", "bash")])),
        Message::Tool(ToolMessage::new("c1", old.clone()).with_name("bash")),
        Message::Ai(ai("a2", 1, 1, &[])),
        human("u2", "again"),
    ]);
    let run = run_ctx("t", "r");
    for round in 0..3 {
        let req = state_request(model.clone(), run.clone(), state.clone());
        chain.call_model(req).await.unwrap();
        let sent = model.requests().pop().unwrap().messages;
        let t = sent[2].text();
        assert!(t.chars().count() <= 30_000, "round {round}");
        assert!(
            t.contains("Persistent storage unavailable"),
            "round {round}"
        );
        assert_eq!(sent.len(), state.messages.len());
        // The state still holds the full text.
        assert_eq!(state.messages.get(2).unwrap().text(), old);
        state.messages.push(human(&format!("n{round}"), "more"));
    }
}

// ---- synopsis ------------------------------------------------------------------------------

fn preview(content: &str, tool: &str) -> String {
    render_preview(
        content,
        tool,
        "/mnt/user-data/outputs/.tool-results/x.txt",
        200,
        100,
    )
}

#[test]
fn json_synopsis_lists_keys_and_paths_without_offsets() {
    let doc = json!({
        "meta": {"total": 3, "source": "api"},
        "items": [{"id": 1, "tags": ["a"]}, {"id": 2, "tags": []}],
        "odd key": {"x": 1}
    });
    let text = serde_json::to_string_pretty(&doc).unwrap() + &" ".repeat(100);
    let s = build_synopsis(&text, "api");
    assert_eq!(s.kind, "json");
    assert!(s
        .summary
        .contains(&"JSON object with 3 top-level keys.".to_owned()));
    assert!(s
        .structure
        .iter()
        .any(|l| l == "$.meta: object keys 2; keys total, source"));
    assert!(s
        .structure
        .iter()
        .any(|l| l.starts_with("$.items: array length 2; first item object")));
    assert!(s
        .structure
        .iter()
        .any(|l| l.starts_with("$.items[].tags: array")));
    assert!(s
        .structure
        .iter()
        .any(|l| l.starts_with("$[\"odd key\"]: object")));
    assert!(s.notable.iter().any(|l| l == "$.meta.total: 3"));
    let all = format!("{s:?}");
    assert!(!all.contains("offset") && !all.contains("line "));
}

#[test]
fn table_yaml_xml_code_and_text_are_recognised() {
    let csv: String = "id,name,score\n".to_owned()
        + &(0..20)
            .map(|i| format!("{i},\"Doe, J{i}\",{}\n", i * 3))
            .collect::<String>();
    let s = build_synopsis(&csv, "");
    assert_eq!(s.kind, "csv");
    assert_eq!(s.structure[0], "columns: id, name, score");
    assert_eq!(
        s.structure[1],
        "first data row: id=0 | name=Doe, J0 | score=0"
    );
    assert!(s.summary[0].contains("20 data rows and 3 columns"));

    let tsv = "a\tb\n".to_owned() + &"1\t2\n".repeat(8);
    assert_eq!(build_synopsis(&tsv, "").kind, "tsv");

    let yaml = "server:\n  port: 8080\n  host: localhost\nreplicas: 3\nfeatures:\n  - auth\n  - cache\nname: demo\n";
    let s = build_synopsis(yaml, "");
    assert_eq!(s.kind, "yaml");
    assert_eq!(
        s.summary[1],
        "Top-level keys: server, replicas, features, name"
    );
    assert_eq!(
        s.structure,
        [
            "server: object",
            "replicas: number",
            "features: array",
            "name: string"
        ]
    );

    let logs = "INFO: starting service\nWARN: disk almost full\nERROR: request failed\nINFO: retrying\nDEBUG: ok\n";
    assert_ne!(
        build_synopsis(logs, "bash").kind,
        "yaml",
        "log lines are not YAML"
    );
    let flat = "status: ok\nmessage: all good\ndetail: nothing to report\n";
    assert_ne!(build_synopsis(flat, "").kind, "yaml");

    let xml = "<?xml version=\"1.0\"?>\n<!-- feed -->\n<feed lang=\"en\"><entry id=\"1\"><title>a</title></entry><entry id=\"2\"/><meta/></feed>";
    let s = build_synopsis(xml, "");
    assert_eq!(s.kind, "xml");
    assert_eq!(
        s.structure,
        [
            "root tag: feed",
            "root attributes: 1",
            "entry: 2",
            "meta: 1"
        ]
    );
    assert_eq!(
        build_synopsis("<a><b></a>", "").kind,
        "text",
        "malformed XML is text"
    );

    let code = "use std::io;\n\npub fn main() {\n}\n\nfn helper(x: u8) -> u8 { x }\nstruct S;\n";
    let s = build_synopsis(code, "");
    assert_eq!(s.kind, "code");
    assert_eq!(s.notable, ["pub fn main", "fn helper"]);
    let py = "import os\nfrom pathlib import Path\n\nclass A:\n    def run(self):\n        pass\n";
    let s = build_synopsis(py, "");
    assert!(s.structure.contains(&"imports: os, pathlib".to_owned()));
    assert_eq!(s.notable, ["class A", "def run"]);

    let text = "# Report\n\nSome words here.\n\nSUMMARY OF RESULTS\nmore words\n";
    let s = build_synopsis(text, "web_fetch");
    assert_eq!(s.kind, "text");
    assert!(s.summary[0].starts_with("Text output from web_fetch with"));
    assert!(s.summary[1].contains("# Report | SUMMARY OF RESULTS"));

    assert_eq!(build_synopsis("", "").title, "Empty output");
    assert_eq!(build_synopsis("a\0b\0c", "").title, "Binary-like output");
}

#[test]
fn the_preview_carries_the_receipt_kind_sample_and_access_line() {
    let content = numbered(500, 20);
    let p = preview(&content, "bash");
    let lines: Vec<&str> = p.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "[Full bash output saved to /mnt/user-data/outputs/.tool-results/x.txt ({} chars, ~{} tokens).]",
            content.len(),
            content.len() / 4
        )
    );
    assert_eq!(
        lines[1],
        "[Preview kind: text. This is a structured synopsis, not a raw head/tail truncation.]"
    );
    assert!(p.contains("line 000000"));
    assert!(p.contains("line 000499"));
    assert!(p.contains("\n...\n"));
    assert!(p.ends_with("- Use read_file on /mnt/user-data/outputs/.tool-results/x.txt with start_line and end_line to read any part of the full output."));
    // Opening/closing excerpts are not repeated when the raw sample shows them.
    assert!(!p.contains("Opening excerpt"));
}
