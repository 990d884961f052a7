//! Helpers to run the real `antler` binary against a mock OpenAI-compatible server.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use antler_test_support::MockOpenAi;
use serde_json::Value;

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

    pub fn empty() -> Project {
        Project {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
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
