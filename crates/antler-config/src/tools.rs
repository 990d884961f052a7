//! Tool sections: `tool_groups`, `tools`, `tool_search`, `tool_output`, `loop_detection`,
//! `read_before_write`, `safety_finish_reason`, `tool_progress` (spec 60 §7–§11, §23).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::de::strings;

use crate::de::section;

/// `use:` of DeerFlow's sandbox bash tool.
pub const BASH_TOOL_USE: &str = "deerflow.sandbox.tools:bash_tool";

/// One `tool_groups:` entry; custom agents list the groups they may use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolGroupConfig {
    /// Group name, e.g. `file:read`.
    pub name: String,
    /// Other keys, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolGroupConfig {
    /// A group with only a name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            extra: Map::new(),
        }
    }
}

/// One `tools:` entry. Tool options (`max_results`, `api_key`, `timeout`, …) live in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolConfig {
    /// Tool name (the implementation's own name is what the model sees).
    pub name: String,
    /// Group, e.g. `file:read`, `bash`, `web`.
    pub group: String,
    /// Implementation, e.g. `deerflow.sandbox.tools:read_file_tool`.
    #[serde(rename = "use")]
    pub use_: String,
    /// Tool options read by the implementation.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolConfig {
    /// A tool entry without options.
    pub fn new(name: impl Into<String>, group: impl Into<String>, use_: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            group: group.into(),
            use_: use_.into(),
            extra: Map::new(),
        }
    }

    /// Whether this entry is host bash (group `bash` or the bash tool's `use`): dropped on the
    /// local sandbox unless `allow_host_bash` (applied by the tool loader).
    pub fn is_bash(&self) -> bool {
        self.group == "bash" || self.use_ == BASH_TOOL_USE
    }

    /// DeerFlow's sandbox tools (`ls read_file glob grep write_file str_replace bash`) with their
    /// standard groups, as `config.example.yaml` lists them.
    pub fn sandbox_defaults() -> Vec<ToolConfig> {
        [
            ("ls", "file:read"),
            ("read_file", "file:read"),
            ("glob", "file:read"),
            ("grep", "file:read"),
            ("write_file", "file:write"),
            ("str_replace", "file:write"),
            ("bash", "bash"),
        ]
        .into_iter()
        .map(|(name, group)| {
            ToolConfig::new(name, group, format!("deerflow.sandbox.tools:{name}_tool"))
        })
        .collect()
    }
}

section! {
    /// `tool_search`: defer MCP tool schemas behind a `tool_search` tool (§8).
    pub struct ToolSearchConfig {
        /// Off by default.
        pub enabled: bool = false,
        /// Tools promoted per search; clamped to 1–5 at load.
        #[serde(deserialize_with = "crate::de::clamp_top_k")]
        pub auto_promote_top_k: usize = 3,
    }
}

section! {
    /// `tool_output`: oversized tool results are saved to a file and replaced by a synopsis (§9).
    pub struct ToolOutputConfig {
        /// On by default.
        pub enabled: bool = true,
        /// Results longer than this are externalized; 0 disables externalization.
        pub externalize_min_chars: usize = 12_000,
        /// Head kept in the synopsis.
        pub preview_head_chars: usize = 2_000,
        /// Tail kept in the synopsis.
        pub preview_tail_chars: usize = 1_000,
        /// Head+tail truncation cap when saving fails; 0 disables.
        pub fallback_max_chars: usize = 30_000,
        /// Head kept by the fallback truncation.
        pub fallback_head_chars: usize = 8_000,
        /// Tail kept by the fallback truncation.
        pub fallback_tail_chars: usize = 3_000,
        /// Single directory name under the thread outputs dir.
        pub storage_subdir: String = ".tool-results".to_owned(),
        /// Tools never externalized (avoids persist→read→persist loops).
        pub exempt_tools: Vec<String> = strings(&["read_file", "read_file_tool"]),
        /// Per-tool threshold; 0 = never externalize that tool.
        pub tool_overrides: BTreeMap<String, usize> = BTreeMap::new(),
    }
}

/// Per-tool frequency thresholds in `loop_detection.tool_freq_overrides`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFreqOverride {
    /// Calls of this tool before a warning (≥ 1).
    pub warn: usize,
    /// Calls of this tool before the hard stop (≥ 1, ≥ `warn`).
    pub hard_limit: usize,
}

section! {
    /// `loop_detection` (§10): warn, then strip tool calls, on repetition.
    pub struct LoopDetectionConfig {
        /// On by default.
        pub enabled: bool = true,
        /// Identical tool-call sets before a warning.
        pub warn_threshold: usize = 3,
        /// Identical tool-call sets before a forced final answer (≥ `warn_threshold`).
        pub hard_limit: usize = 5,
        /// Sliding window of call hashes per thread.
        pub window_size: usize = 20,
        /// Threads tracked (LRU).
        pub max_tracked_threads: usize = 100,
        /// Calls of one tool type before a warning.
        pub tool_freq_warn: usize = 30,
        /// Calls of one tool type before the hard stop (≥ `tool_freq_warn`).
        pub tool_freq_hard_limit: usize = 50,
        /// Per-tool thresholds.
        #[serde(deserialize_with = "crate::de::null_default")]
        pub tool_freq_overrides: BTreeMap<String, ToolFreqOverride> = BTreeMap::new(),
    }
}

/// `read_before_write` (EXTRA): gate writes to existing files on a current read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadBeforeWriteConfig {
    /// On by default.
    pub enabled: bool,
}

impl Default for ReadBeforeWriteConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// A `{use, config}` plug-in reference (safety detectors, guardrail providers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginRef {
    /// Implementation class path.
    #[serde(rename = "use")]
    pub use_: String,
    /// Free-form options for the implementation.
    #[serde(default, deserialize_with = "crate::de::null_default")]
    pub config: Map<String, Value>,
}

section! {
    /// `safety_finish_reason` (EXTRA): drop tool calls from responses stopped for safety.
    pub struct SafetyFinishReasonConfig {
        /// On by default.
        pub enabled: bool = true,
        /// null = built-in detectors; a non-empty list replaces them.
        pub detectors: Option<Vec<PluginRef>> = None,
    }
}

section! {
    /// `tool_progress` (EXTRA): stagnation detection across tool calls.
    pub struct ToolProgressConfig {
        /// Off by default.
        pub enabled: bool = false,
        /// Stagnant steps before a warning.
        pub stagnation_threshold: usize = 3,
        /// Warnings before escalation.
        pub warn_escalation_count: usize = 2,
        /// Inject a self-assessment request.
        pub inject_assessment: bool = true,
        /// Similarity above which two results count as the same.
        pub jaccard_similarity_threshold: f64 = 0.8,
        /// Results shorter than this are not compared.
        pub min_word_count_for_similarity: usize = 10,
        /// Threads tracked (LRU).
        pub max_tracked_threads: usize = 100,
        /// Tools never counted.
        pub exempt_tools: Vec<String> = strings(&["ask_clarification", "write_todos", "present_files", "task"]),
    }
}
