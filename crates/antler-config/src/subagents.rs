//! `subagents` (spec 60 §18): limits for the `task` tool and its delegated agents.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::context::TokenBudgetConfig;
use crate::de::strings;

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

/// A config-defined subagent type in `subagents.custom_agents.<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomSubagentConfig {
    /// Required: when the lead should delegate to it.
    pub description: String,
    /// Required: its system prompt.
    pub system_prompt: String,
    /// null = inherit all tools.
    pub tools: Option<Vec<String>>,
    /// Tools removed from its set.
    pub disallowed_tools: Vec<String>,
    /// null = all enabled skills, `[]` = none.
    pub skills: Option<Vec<String>>,
    /// Model name or `inherit`.
    pub model: String,
    /// ≥ 1.
    pub max_turns: u64,
    /// ≥ 1.
    pub timeout_seconds: u64,
}

impl Default for CustomSubagentConfig {
    fn default() -> Self {
        Self {
            description: String::new(),
            system_prompt: String::new(),
            tools: None,
            disallowed_tools: strings(&["task", "ask_clarification", "present_files"]),
            skills: None,
            model: "inherit".to_owned(),
            max_turns: 50,
            timeout_seconds: 900,
        }
    }
}

/// `subagents` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubagentsConfig {
    /// antler (CONTRACT): default for the per-run `subagent_enabled` switch (`--subagents` /
    /// `--no-subagents` override it). Off by default, as DeerFlow's run option.
    pub enabled: bool,
    /// Built-in types' timeout (≥ 1).
    pub timeout_seconds: u64,
    /// When set, overrides built-in max turns (≥ 1).
    pub max_turns: Option<u64>,
    /// `task` delegations per lead run (1–50).
    pub max_total_per_run: u64,
    /// As written; null = the default that tracks `summarization.enabled`
    /// (use [`crate::Config::subagent_token_budget`]).
    pub token_budget: Option<TokenBudgetConfig>,
    /// Per-type overrides.
    #[serde(deserialize_with = "crate::de::null_default")]
    pub agents: BTreeMap<String, SubagentOverride>,
    /// Config-defined subagent types.
    #[serde(deserialize_with = "crate::de::null_default")]
    pub custom_agents: BTreeMap<String, CustomSubagentConfig>,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            timeout_seconds: 1800,
            max_turns: None,
            max_total_per_run: 6,
            token_budget: None,
            agents: BTreeMap::new(),
            custom_agents: BTreeMap::new(),
        }
    }
}
