//! Helpers to run the real `antler` binary against a mock OpenAI-compatible server.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use antler_test_support::{MockOpenAi, MockReply};
use serde_json::Value;

/// The local sandbox with `ls` and `write_file`, memory off.
pub const FILE_TOOLS: &str = "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\nmemory:\n  enabled: false\n";

/// A mock answering `replies` in order, and a project on it with `extra_yaml`.
pub fn scripted(
    replies: impl IntoIterator<Item = MockReply>,
    extra_yaml: &str,
) -> (MockOpenAi, Project) {
    let mock = MockOpenAi::start_on_thread().with_replies(replies);
    let p = Project::new(&mock, extra_yaml);
    (mock, p)
}

/// A temp project dir with a config.yaml pointing at `mock`.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new(mock: &MockOpenAi, extra_yaml: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: mock-model\n    base_url: {}\n    api_key: $MOCK_KEY\n{extra_yaml}{memory}",
            mock.base_url(),
            // Memory's model call at exit would take a scripted reply; tests that exercise
            // memory say `memory:` themselves.
            memory = if extra_yaml.contains("memory:") { "" } else { "memory:\n  enabled: false\n" }
        );
        std::fs::write(dir.path().join("config.yaml"), yaml).unwrap();
        Project { dir }
    }

    /// `models:` from `model_yaml` (any provider) with the local sandbox, `ls` and `write_file`,
    /// memory off.
    pub fn with_models(model_yaml: &str) -> Project {
        let p = Project::empty();
        std::fs::write(
            p.path().join("config.yaml"),
            format!("models:\n{model_yaml}{FILE_TOOLS}"),
        )
        .unwrap();
        p
    }

    pub fn empty() -> Project {
        Project {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `skills/public/{dir}/SKILL.md`; returns the skill's folder.
    pub fn public_skill(&self, dir: &str, skill_md: &str) -> PathBuf {
        let dir = self.path().join("skills/public").join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("SKILL.md"), skill_md).unwrap();
        dir
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join(".antler")
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_antler"));
        c.args(args)
            .current_dir(self.dir.path())
            .env("ANTLER_HOME", self.home())
            .env("MOCK_KEY", "sk-test")
            .env_remove("ANTLER_CONFIG")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    /// `antler ARGS` in the background, stdout piped, stderr to `stderr`.
    pub fn spawn(&self, args: &[&str], stderr: Stdio) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap()
    }

    /// `antler run --thread-id {thread} --output {output} {prompt}` in the background.
    pub fn spawn_run(&self, thread: &str, output: &str, prompt: &str, stderr: Stdio) -> Child {
        self.spawn(
            &["run", "--thread-id", thread, "--output", output, prompt],
            stderr,
        )
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `antler run --output json …` → (exit code, parsed object, stderr).
    pub fn run_json(&self, args: &[&str]) -> (i32, Value, String) {
        let mut full = vec!["run", "--output", "json"];
        full.extend_from_slice(args);
        let out = self.run(&full);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!("stdout is not one JSON object ({e}):\n{stdout}\nstderr:\n{stderr}")
        });
        (out.status.code().unwrap_or(-1), v, stderr)
    }
}

/// The first element of the array `list` whose `key` is `value`.
pub fn first_with<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e[key] == value)
        .unwrap()
}

/// The messages of a `values` object that a UI shows (hidden injected context left out).
pub fn visible(values: &Value) -> Vec<Value> {
    values["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["additional_kwargs"]["hide_from_ui"] != Value::Bool(true))
        .cloned()
        .collect()
}

/// Message `type`s of the visible messages of a `values` object.
pub fn kinds(values: &Value) -> Vec<String> {
    visible(values)
        .iter()
        .map(|m| m["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Roles of the messages of a recorded request body.
pub fn roles(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect()
}

/// Fails with the process's stderr unless it exited 0.
pub fn assert_exit0(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The one JSON value on stdout of a process that exited 0.
pub fn ok_json(out: &Output) -> Value {
    assert_exit0(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON lines on stdout (`--output jsonl`) of a process that exited 0.
pub fn ok_jsonl(out: &Output) -> Vec<Value> {
    assert_exit0(out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The first `custom` event of `events` whose payload `type` is `kind`.
pub fn custom_event<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["event"] == "custom" && e["data"]["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event"))
}

/// Names of the tools offered in a recorded OpenAI request body.
pub fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|x| x["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `ok` every 20 ms; fails naming `what` when it does not hold within `limit`.
pub fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `kill -SIGNAL pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// A scripted `bash` tool call.
pub fn bash_call(id: &str, description: &str, command: impl Into<String>) -> MockReply {
    let args = serde_json::json!({"description": description, "command": command.into()});
    MockReply::tool_call(id, "bash", args)
}

/// A scripted `ls` tool call.
pub fn ls_call(id: &str, description: &str, path: &str) -> MockReply {
    MockReply::tool_call(
        id,
        "ls",
        serde_json::json!({"description": description, "path": path}),
    )
}

/// A JSON string's text; fails when `v` is not a string.
pub fn as_text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// Whether Landlock confines tools here; tests of confinement skip without it (said on
/// stderr).
#[allow(clippy::print_stderr)]
pub fn landlock_available() -> bool {
    match antler_sandbox::confine::landlock_support() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipping: Landlock unavailable: {why}");
            false
        }
    }
}
