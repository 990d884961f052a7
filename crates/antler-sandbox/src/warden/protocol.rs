//! Frames between antler and the warden: one JSON object per line, requests on the warden's
//! stdin, replies on its stdout. Every call names an `id`; replies carry it back.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Guarantees;

/// antler → warden.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The environment every later [`Request::Exec`] starts from (the sandbox's scrubbed host
    /// environment), sent once rather than with every command; until it comes, commands get
    /// only their own variables.
    BaseEnv { env: Vec<(String, String)> },
    /// Run a program to completion (or timeout) and reply with [`Reply::Exit`].
    Exec {
        id: u64,
        program: PathBuf,
        args: Vec<String>,
        /// The call's own variables, on top of the base environment (a name here wins).
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
        timeout_ms: u64,
        capture_limit: usize,
        /// Also send each output line as [`Reply::Output`] while the program runs.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stream: bool,
    },
    /// Kill the process group of a running call (its tool call was cancelled).
    Kill { id: u64 },
}

/// Sent once, first, when the warden is ready (or instead, [`Reply::Fatal`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    pub guarantees: Guarantees,
    /// Landlock status line, e.g. `Landlock ABI v7 (partially enforced)`.
    pub landlock: String,
}

/// warden → antler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Reply {
    Ready(Ready),
    /// Setup failed; the warden exits.
    Fatal {
        message: String,
    },
    /// An output line of a running call that asked for `stream` (before its `Exit`).
    Output {
        id: u64,
        line: String,
    },
    /// A call finished.
    Exit {
        id: u64,
        stdout: String,
        stderr: String,
        exit_code: i32,
        timed_out: bool,
    },
    /// A call could not start.
    Failed {
        id: u64,
        message: String,
    },
}
