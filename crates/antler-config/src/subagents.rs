//! `subagents` (spec 60 §18): limits for the `task` tool and its delegated agents.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::context::TokenBudgetConfig;
use crate::de::strings;

use crate::de::section;

/// Per-type overrides in `subagents.agents.<name>` (built-in types such as `general-purpose`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubagentOverride {
    /// ≥ 1.
    pub timeout_seconds: Option<u64>,
    /// ≥ 1.
    pub max_turns: Option<u64>,
    /// Non-empty model name; null = inherit.
    pub model: Option<String>,
    /// null = all enabled skills, `[]` = none.
    pub skills: Option<Vec<String>>,
    /// Per-type budget.
    pub token_budget: Option<TokenBudgetConfig>,
}

section! {
    /// A config-defined subagent type in `subagents.custom_agents.<name>`.
    pub struct CustomSubagentConfig {
        /// Required: when the lead should delegate to it.
        pub description: String = String::new(),
        /// Required: its system prompt.
        pub system_prompt: String = String::new(),
        /// null = inherit all tools.
        pub tools: Option<Vec<String>> = None,
        /// Tools removed from its set.
        pub disallowed_tools: Vec<String> = strings(&["task", "ask_clarification", "present_files"]),
        /// null = all enabled skills, `[]` = none.
        pub skills: Option<Vec<String>> = None,
        /// Model name or `inherit`.
        pub model: String = "inherit".to_owned(),
        /// ≥ 1.
        pub max_turns: u64 = 50,
        /// ≥ 1.
        pub timeout_seconds: u64 = 900,
    }
}

section! {
    /// `subagents` section.
    pub struct SubagentsConfig {
        /// antler (CONTRACT): default for the per-run `subagent_enabled` switch (`--subagents` /
        /// `--no-subagents` override it). Off by default, as DeerFlow's run option.
        pub enabled: bool = false,
        /// Built-in types' timeout (≥ 1).
        pub timeout_seconds: u64 = 1800,
        /// When set, overrides built-in max turns (≥ 1).
        pub max_turns: Option<u64> = None,
        /// `task` delegations per lead run (1–50).
        pub max_total_per_run: u64 = 6,
        /// As written; null = the default that tracks `summarization.enabled`
        /// (use [`crate::Config::subagent_token_budget`]).
        pub token_budget: Option<TokenBudgetConfig> = None,
        /// Per-type overrides.
        #[serde(deserialize_with = "crate::de::null_default")]
        pub agents: BTreeMap<String, SubagentOverride> = BTreeMap::new(),
        /// Config-defined subagent types.
        #[serde(deserialize_with = "crate::de::null_default")]
        pub custom_agents: BTreeMap<String, CustomSubagentConfig> = BTreeMap::new(),
    }
}
