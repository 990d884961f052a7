//! ReadBeforeWriteMiddleware: DeerFlow's expectations (spec 30 §ReadBeforeWrite), run through
//! the agent loop over an in-memory file system whose tools behave like antler's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use antler_middleware::read_before_write::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::markers::READ_MARK;
use antler_protocol::tool_meta::ToolMeta;
use antler_protocol::{Message, Object, ToolMessage, ToolSpec, ToolStatus};
use antler_runtime::*;
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::common::object_spec;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Normal,
    /// Reads fail as `Error: …` text, as AIO/E2B sandboxes report them.
    ErrorStrings,
    /// The gate's reader fails outright.
    Broken,
}

#[derive(Clone)]
struct Fs {
    files: Arc<Mutex<HashMap<String, String>>>,
    mode: Mode,
}

impl Fs {
    fn new(mode: Mode) -> Fs {
        Fs {
            files: Arc::default(),
            mode,
        }
    }
    fn with(self, path: &str, content: &str) -> Fs {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_owned(), content.to_owned());
        self
    }
    fn get(&self, path: &str) -> Option<String> {
        self.files
            .lock()
            .unwrap()
            .get(&normalize_path(path))
            .cloned()
    }
}

impl ContentReader for Fs {
    fn read(&self, _run: &RunContext, path: &str) -> Result<String, ReadFailure> {
        match self.mode {
            Mode::Broken => Err(ReadFailure::Other("sandbox hiccup".into())),
            Mode::ErrorStrings => Ok(self
                .get(path)
                .unwrap_or_else(|| format!("Error: File not found: {path}"))),
            Mode::Normal => self.get(path).ok_or(ReadFailure::NotFound),
        }
    }
}

struct FsTool {
    spec: Arc<ToolSpec>,
    fs: Fs,
}

fn tool(name: &str, fs: &Fs) -> Arc<dyn Tool> {
    Arc::new(FsTool {
        spec: object_spec(name, ""),
        fs: fs.clone(),
    })
}

#[async_trait]
impl Tool for FsTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, args: Object, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let path = normalize_path(args["path"].as_str().unwrap_or(""));
        let mut files = self.fs.files.lock().unwrap();
        Ok(match self.spec.name.as_str() {
            "read_file" => match files.get(&path) {
                Some(c) => match (args.get("start_line"), args.get("end_line")) {
                    (Some(s), Some(e)) => {
                        let (s, e) = (s.as_u64().unwrap() as usize, e.as_u64().unwrap() as usize);
                        ToolOutput::text(
                            c.lines()
                                .skip(s - 1)
                                .take(e - s + 1)
                                .collect::<Vec<_>>()
                                .join("\n"),
                        )
                    }
                    _ => ToolOutput::text(c.clone()),
                },
                None => ToolOutput::error(format!("Error: File not found: {path}")),
            },
            "write_file" => {
                let content = args["content"].as_str().unwrap_or("").to_owned();
                let append = args.get("append").and_then(Value::as_bool).unwrap_or(false);
                let entry = files.entry(path).or_default();
                if append {
                    entry.push_str(&content);
                } else {
                    *entry = content;
                }
                ToolOutput::text("OK")
            }
            "str_replace" => match files.get_mut(&path) {
                Some(c) => {
                    *c = c.replace(
                        args["old_str"].as_str().unwrap(),
                        args["new_str"].as_str().unwrap(),
                    );
                    ToolOutput::text("OK")
                }
                None => ToolOutput::error(format!("Error: File not found: {path}")),
            },
            _ => ToolOutput::text("other"),
        })
    }
}

/// Run the scripted turns (then a final answer) and return the tool messages.
async fn run(fs: &Fs, reader_mode: Mode, turns: Vec<ScriptedReply>) -> Vec<ToolMessage> {
    let mut replies = turns;
    replies.push(ScriptedReply::text("done"));
    let model = Arc::new(ScriptedModel::new(replies));
    let reader = Fs {
        files: fs.files.clone(),
        mode: reader_mode,
    };
    let tools = ["read_file", "write_file", "str_replace", "ls"]
        .into_iter()
        .fold(ToolRegistry::new(), |r, n| r.with(tool(n, fs)));
    let agent = Agent::new(model).with_tools(tools).with_chain(
        Chain::new(vec![Arc::new(ReadBeforeWriteMiddleware::new(Arc::new(
            reader,
        )))])
        .unwrap(),
    );
    let run = Arc::new(RunContext::new(
        format!("t-{}", uuid::Uuid::new_v4()),
        "r",
        Arc::new(NullSink),
    ));
    let out = agent
        .run(RunInput::message(Message::human("go")), run)
        .await;
    assert_eq!(out.status, RunStatus::Success, "{:?}", out.error);
    out.state
        .messages
        .iter()
        .filter_map(Message::as_tool)
        .cloned()
        .collect()
}

fn call(id: &str, name: &str, args: Value) -> ScriptedReply {
    ScriptedReply::tool_call(id, name, args)
}

fn write(id: &str, path: &str, content: &str) -> ScriptedReply {
    call(id, "write_file", json!({"path": path, "content": content}))
}

fn read(id: &str, path: &str) -> ScriptedReply {
    call(id, "read_file", json!({"path": path}))
}

fn replace(id: &str, old: &str, new: &str) -> ScriptedReply {
    call(
        id,
        "str_replace",
        json!({"path": F, "old_str": old, "new_str": new}),
    )
}

/// Run `turns` with a reader that sees the same files as the tools.
async fn run_normal(fs: &Fs, turns: Vec<ScriptedReply>) -> Vec<ToolMessage> {
    run(fs, Mode::Normal, turns).await
}

/// [`run_normal`] over a workspace whose report (`F`) holds `initial`; the files and answers.
async fn run_normal_on(initial: &str, turns: Vec<ScriptedReply>) -> (Fs, Vec<ToolMessage>) {
    let fs = Fs::new(Mode::Normal).with(F, initial);
    let msgs = run_normal(&fs, turns).await;
    (fs, msgs)
}

fn is_blocked(m: &ToolMessage) -> bool {
    m.status == ToolStatus::Error
        && m.content
            .text()
            .contains("you have not read its current version")
}

const F: &str = "/mnt/user-data/workspace/report.md";

/// (case, file before, reader, turns, file after).
type WriteCase = (
    &'static str,
    Option<&'static str>,
    Mode,
    Vec<ScriptedReply>,
    &'static str,
);

/// Scripts whose last call is a write that must land.
#[tokio::test]
async fn the_closing_write_of_each_script_lands() {
    let cases: Vec<WriteCase> = vec![
        (
            "a new file needs no read",
            None,
            Mode::Normal,
            vec![write("w", F, "hello")],
            "hello",
        ),
        (
            "normalized paths match",
            Some("v1"),
            Mode::Normal,
            vec![
                read("r", "/mnt/user-data/workspace/../workspace//report.md"),
                write("w", F, "v2"),
            ],
            "v2",
        ),
        (
            // Read v1, the file changes behind the model's back, read again: the newer mark decides.
            "the newest mark wins",
            Some("v1"),
            Mode::Normal,
            vec![
                read("r1", F),
                replace("s", "v1", "v2"),
                read("r2", F),
                write("w", F, "v3"),
            ],
            "v3",
        ),
        (
            "a gate that cannot inspect the file fails open",
            Some("v1"),
            Mode::Broken,
            vec![write("w", F, "v2")],
            "v2",
        ),
    ];
    for (case, before, reader, turns, after) in cases {
        let fs = before
            .iter()
            .fold(Fs::new(Mode::Normal), |fs, c| fs.with(F, c));
        let msgs = run(&fs, reader, turns).await;
        assert_eq!(
            msgs.last().map(|m| m.content.text()).as_deref(),
            Some("OK"),
            "{case}"
        );
        assert_eq!(fs.get(F).as_deref(), Some(after), "{case}");
    }
}

#[tokio::test]
async fn overwrite_append_and_str_replace_of_an_unread_file_are_blocked() {
    let (fs, msgs) = run_normal_on(
        "v1",
        vec![
            write("w", F, "v2"),
            call(
                "a",
                "write_file",
                json!({"path": F, "content": "+", "append": true}),
            ),
            replace("s", "v1", "v3"),
        ],
    )
    .await;
    assert!(msgs.iter().all(is_blocked), "{msgs:#?}");
    assert!(msgs[0]
        .content
        .text()
        .starts_with("Error: write_file blocked — "));
    assert!(msgs[2]
        .content
        .text()
        .starts_with("Error: str_replace blocked — "));
    assert!(msgs[0].content.text().contains("read_file"));
    assert_eq!(fs.get(F).as_deref(), Some("v1"));
    // Refusals are classified for ToolProgress even though they skip ToolErrorHandling.
    let meta = ToolMeta::of(&msgs[0]).unwrap();
    assert_eq!(
        (meta.status.as_str(), meta.source.as_str()),
        ("error", "tool_return")
    );
    assert_eq!(msgs[0].name.as_deref(), Some("write_file"));
    assert_eq!(msgs[0].tool_call_id, "w");
}

#[tokio::test]
async fn str_replace_on_a_missing_file_reports_the_tools_own_error() {
    let fs = Fs::new(Mode::Normal);
    let msgs = run_normal(&fs, vec![replace("s", "a", "b")]).await;
    assert_eq!(
        msgs[0].content.text(),
        format!("Error: File not found: {F}")
    );
}

#[tokio::test]
async fn a_fresh_read_allows_one_write_and_every_write_needs_a_new_read() {
    let (fs, msgs) = run_normal_on(
        "v1",
        vec![
            read("r1", F),
            write("w1", F, "v2"),
            write("w2", F, "v3"),
            read("r2", F),
            write("w3", F, "v4"),
        ],
    )
    .await;
    let mark = &msgs[0].additional_kwargs[READ_MARK];
    assert_eq!(mark["path"], json!(F));
    assert_eq!(mark["hash"], json!(content_hash("v1")));
    assert_eq!(msgs[1].content.text(), "OK");
    assert!(is_blocked(&msgs[2]), "stale mark must block: {:?}", msgs[2]);
    assert_eq!(
        msgs[3].additional_kwargs[READ_MARK]["hash"],
        json!(content_hash("v2"))
    );
    assert_eq!(msgs[4].content.text(), "OK");
    assert_eq!(fs.get(F).as_deref(), Some("v4"));
}

#[tokio::test]
async fn a_ranged_read_is_marked_with_the_whole_files_hash() {
    let (_, msgs) = run_normal_on(
        "a\nb\nc",
        vec![
            call(
                "r",
                "read_file",
                json!({"path": F, "start_line": 3, "end_line": 3}),
            ),
            write("w", F, "x"),
        ],
    )
    .await;
    assert_eq!(msgs[0].content.text(), "c");
    assert_eq!(
        msgs[0].additional_kwargs[READ_MARK]["hash"],
        json!(content_hash("a\nb\nc"))
    );
    assert_eq!(msgs[1].content.text(), "OK");
}

#[tokio::test]
async fn failed_reads_and_other_tools_get_no_mark() {
    let fs = Fs::new(Mode::Normal);
    let msgs = run_normal(&fs, vec![read("r", F), call("l", "ls", json!({"path": F}))]).await;
    assert!(msgs
        .iter()
        .all(|m| !m.additional_kwargs.contains_key(READ_MARK)));
}

#[tokio::test]
async fn error_string_sandboxes_create_freely_but_still_gate_existing_files() {
    let fs = Fs::new(Mode::Normal);
    let msgs = run(
        &fs,
        Mode::ErrorStrings,
        vec![
            write("w", F, "v1"),
            read("r0", "/nope"),
            write("w2", F, "v2"),
            read("r", F),
            write("w3", F, "v3"),
        ],
    )
    .await;
    assert_eq!(msgs[0].content.text(), "OK", "creation is not blocked");
    assert!(!msgs[1].additional_kwargs.contains_key(READ_MARK));
    assert!(is_blocked(&msgs[2]), "existing file stays gated");
    assert!(msgs[3].additional_kwargs.contains_key(READ_MARK));
    assert_eq!(msgs[4].content.text(), "OK");
}

#[tokio::test]
async fn two_parallel_appends_on_one_read_land_exactly_once() {
    let fs = Fs::new(Mode::Normal).with(F, "log\n");
    let append = |id: &str| {
        (
            id.to_owned(),
            "write_file".to_owned(),
            json!({"path": F, "content": "line\n", "append": true}),
        )
    };
    let msgs = run_normal(
        &fs,
        vec![
            read("r", F),
            ScriptedReply::tool_calls([append("a1"), append("a2")]),
        ],
    )
    .await;
    let landed = msgs[1..]
        .iter()
        .filter(|m| m.content.text() == "OK")
        .count();
    assert_eq!(landed, 1, "{msgs:#?}");
    assert_eq!(fs.get(F).as_deref(), Some("log\nline\n"));
}

#[tokio::test]
async fn a_summarized_away_read_no_longer_counts() {
    // A state without the read result (summarization dropped it) has no mark.
    let fs = Fs::new(Mode::Normal).with(F, "v1");
    let mw = ReadBeforeWriteMiddleware::new(Arc::new(fs.clone()));
    let chain = Chain::new(vec![Arc::new(mw)]).unwrap();
    let mut args = Object::new();
    args.insert("path".into(), json!(F));
    args.insert("content".into(), json!("v2"));
    let req = ToolCallRequest {
        call: antler_protocol::ToolCall::new("w", "write_file", args),
        tool: Some(tool("write_file", &fs)),
        state: Arc::new(antler_protocol::ThreadState::default()),
        run: Arc::new(RunContext::new("t-sum", "r", Arc::new(NullSink))),
        tool_names: Arc::from(vec!["write_file".to_owned()]),
    };
    let ToolOutcome::Message(m) = chain.call_tool(req).await.unwrap() else {
        panic!("expected a message");
    };
    assert!(is_blocked(&m));
}
