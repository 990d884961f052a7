//! Subagent types and their effective configuration (spec 50 §4.12 "Built-in types" and
//! "Effective config resolution"; spec 60 §18).
//!
//! Built-ins: `general-purpose` (inherits the parent's tools, 150 turns) and `bash` (sandbox
//! tools only, 60 turns; hidden and refused when bash is not available). Custom types come from
//! `subagents.custom_agents`; a custom type with a built-in name is ignored. Resolution:
//! timeout = per-type override → global `subagents.timeout_seconds` (built-ins only) → the type's
//! own; max_turns = per-type override → global `subagents.max_turns` (built-ins only) → own;
//! model and skills = per-type override only. Every lookup builds a fresh value, so built-in
//! definitions are never mutated.

use std::time::Duration;

use antler_config::SubagentsConfig;

use super::prompts;

pub const GENERAL_PURPOSE: &str = "general-purpose";
pub const BASH: &str = "bash";
/// The model value meaning "the parent run's model".
pub const INHERIT: &str = "inherit";
/// Tools a subagent never gets: no nesting, nobody to ask, nothing to present.
pub const DEFAULT_DISALLOWED_TOOLS: [&str; 3] = ["task", "ask_clarification", "present_files"];
/// The `bash` type's tool allowlist.
pub const BASH_TOOLS: [&str; 5] = ["bash", "ls", "read_file", "write_file", "str_replace"];

/// Why a `bash` delegation is refused when bash is not available (DeerFlow's text).
pub const BASH_DISABLED_MESSAGE: &str = "Bash subagent is disabled for LocalSandboxProvider because host bash execution is not a secure sandbox boundary. Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: true only in a fully trusted local environment.";

/// A built-in's own timeout; the global `subagents.timeout_seconds` (1800) replaces it.
const DEFAULT_TIMEOUT_SECONDS: u64 = 900;

/// One subagent type with its effective settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentSpec {
    pub name: String,
    /// When the lead should delegate to it.
    pub description: String,
    pub system_prompt: String,
    /// Allowlist of tool names; `None` = every parent tool.
    pub tools: Option<Vec<String>>,
    pub disallowed_tools: Vec<String>,
    /// Skill allowlist; `None` = all enabled skills, `[]` = none.
    pub skills: Option<Vec<String>>,
    /// A model name, or [`INHERIT`].
    pub model: String,
    /// The child's recursion limit.
    pub max_turns: usize,
    /// Wall-clock budget of one delegation.
    pub timeout: Duration,
    pub builtin: bool,
}

impl SubagentSpec {
    /// Whether a tool of the parent's may be offered to this type. `task` never is.
    pub fn allows_tool(&self, name: &str) -> bool {
        if name == "task" || self.disallowed_tools.iter().any(|d| d == name) {
            return false;
        }
        match &self.tools {
            Some(allow) => allow.iter().any(|a| a == name),
            None => true,
        }
    }

    /// The model to run on: the type's own, else the parent's (`None` = the default model).
    pub fn resolve_model(&self, parent_model: Option<&str>) -> Option<String> {
        if self.model != INHERIT {
            return Some(self.model.clone());
        }
        parent_model.map(str::to_owned)
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The built-in definition of `name`, before config overrides.
pub fn builtin(name: &str) -> Option<SubagentSpec> {
    let base = |name: &str, description: &str, prompt: &str, max_turns: usize| SubagentSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        system_prompt: prompt.to_owned(),
        tools: None,
        disallowed_tools: strings(&DEFAULT_DISALLOWED_TOOLS),
        skills: None,
        model: INHERIT.to_owned(),
        max_turns,
        timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECONDS),
        builtin: true,
    };
    match name {
        GENERAL_PURPOSE => Some(base(
            GENERAL_PURPOSE,
            prompts::GENERAL_PURPOSE_DESCRIPTION,
            prompts::GENERAL_PURPOSE_PROMPT,
            150,
        )),
        BASH => Some(SubagentSpec {
            tools: Some(strings(&BASH_TOOLS)),
            ..base(BASH, prompts::BASH_DESCRIPTION, prompts::BASH_PROMPT, 60)
        }),
        _ => None,
    }
}

const BUILTIN_NAMES: [&str; 2] = [GENERAL_PURPOSE, BASH];

/// The subagent types of a configuration.
#[derive(Clone, Debug, Default)]
pub struct SubagentRegistry {
    config: SubagentsConfig,
}

impl SubagentRegistry {
    /// Built-ins with DeerFlow's defaults (global timeout 1800 s).
    pub fn new() -> Self {
        Self::default()
    }

    /// Built-ins plus `subagents.custom_agents`, with `subagents.*` overrides applied.
    pub fn from_config(config: &SubagentsConfig) -> Self {
        SubagentRegistry {
            config: config.clone(),
        }
    }

    /// Every type name: built-ins first, then custom types by name.
    pub fn names(&self) -> Vec<String> {
        let mut names = strings(&BUILTIN_NAMES);
        for name in self.config.custom_agents.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// The names the lead may use: `bash` is hidden when bash is not available.
    pub fn available_names(&self, bash_available: bool) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|n| bash_available || n != BASH)
            .collect()
    }

    /// The effective configuration of `name`, or `None` for an unknown type.
    pub fn get(&self, name: &str) -> Option<SubagentSpec> {
        let mut spec = match builtin(name) {
            Some(b) => b,
            None => {
                let c = self.config.custom_agents.get(name)?;
                SubagentSpec {
                    name: name.to_owned(),
                    description: c.description.clone(),
                    system_prompt: c.system_prompt.clone(),
                    tools: c.tools.clone(),
                    disallowed_tools: c.disallowed_tools.clone(),
                    skills: c.skills.clone(),
                    model: c.model.clone(),
                    max_turns: usize::try_from(c.max_turns).unwrap_or(usize::MAX),
                    timeout: Duration::from_secs(c.timeout_seconds),
                    builtin: false,
                }
            }
        };
        let over = self.config.agents.get(name);
        match over.and_then(|o| o.timeout_seconds) {
            Some(t) => spec.timeout = Duration::from_secs(t),
            None if spec.builtin => spec.timeout = Duration::from_secs(self.config.timeout_seconds),
            None => {}
        }
        let global_turns = self.config.max_turns.filter(|_| spec.builtin);
        if let Some(t) = over.and_then(|o| o.max_turns).or(global_turns) {
            spec.max_turns = usize::try_from(t).unwrap_or(usize::MAX);
        }
        if let Some(m) = over.and_then(|o| o.model.clone()).filter(|m| !m.is_empty()) {
            spec.model = m;
        }
        if let Some(s) = over.and_then(|o| o.skills.clone()) {
            spec.skills = Some(s);
        }
        Some(spec)
    }

    /// The `- **name**: description` lines for the lead prompt's subagent section. Custom
    /// descriptions are config- or agent-edited text: only their first line is used, HTML-escaped
    /// so it cannot close the surrounding block.
    pub fn available_description(&self, bash_available: bool) -> String {
        let mut lines = Vec::new();
        for name in self.available_names(bash_available) {
            let desc = match name.as_str() {
                GENERAL_PURPOSE => "For bounded work with clear delegation benefit from specialist capability, context isolation, or independent parallel execution.".to_owned(),
                BASH => "For bounded shell workflows with clear context-isolation or independent-parallel benefit. Routine git, build, test, or deploy operations are not sufficient reason to delegate.".to_owned(),
                _ => match self.get(&name) {
                    Some(spec) => escape_text(spec.description.lines().next().unwrap_or("").trim()),
                    None => continue,
                },
            };
            lines.push(format!("- **{name}**: {desc}"));
        }
        lines.join("\n")
    }
}

/// HTML text escaping (`&`, `<`, `>`).
fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The skill allowlist a delegation gets under the parent's: the type's list intersected with
/// the parent's (`None` on either side = no restriction from that side).
pub fn merge_skill_allowlists(
    parent: Option<&[String]>,
    child: Option<&[String]>,
) -> Option<Vec<String>> {
    match (parent, child) {
        (None, child) => child.map(<[String]>::to_vec),
        (Some(parent), None) => Some(parent.to_vec()),
        (Some(parent), Some(child)) => Some(
            child
                .iter()
                .filter(|s| parent.contains(s))
                .cloned()
                .collect(),
        ),
    }
}
