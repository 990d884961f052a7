//! Assistants (spec 70 §2.5, §3.1): the lead agent, plus one per custom agent found in DeerFlow's
//! agent folders (`$ANTLER_HOME/agents/<name>/` and, for named users,
//! `$ANTLER_HOME/users/<user>/agents/<name>/`, holding `config.yaml` and/or `SOUL.md`).
//! A custom assistant runs the lead agent with `agent_name` set (name lower-cased, `_` → `-`).

use std::path::Path;

use serde_json::{json, Value};

use crate::{wire, AppState, User};

/// The built-in assistant.
pub const LEAD_AGENT: &str = "lead_agent";

/// One assistant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assistant {
    pub name: String,
    pub description: String,
    /// A custom agent (else the lead agent).
    pub custom: bool,
    /// Folder modification time (custom agents), ISO-8601.
    pub updated_at: Option<String>,
}

impl Assistant {
    /// The run option `agent_name` for this assistant.
    pub fn agent_name(&self) -> Option<String> {
        self.custom
            .then(|| self.name.to_lowercase().replace('_', "-"))
    }

    pub fn to_json(&self) -> Value {
        let ts = self
            .updated_at
            .clone()
            .unwrap_or_else(|| "1970-01-01T00:00:00+00:00".to_owned());
        json!({
            "assistant_id": self.name,
            "graph_id": LEAD_AGENT,
            "name": self.name,
            "description": self.description,
            "config": {},
            "context": {},
            "metadata": {"created_by": if self.custom { "user" } else { "system" }},
            "version": 1,
            "created_at": ts,
            "updated_at": ts,
        })
    }
}

fn lead() -> Assistant {
    Assistant {
        name: LEAD_AGENT.to_owned(),
        description: "DeerFlow lead agent".to_owned(),
        custom: false,
        updated_at: None,
    }
}

fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn description_of(dir: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(dir.join("config.yaml")) else {
        return String::new();
    };
    // Only the top-level `description:` line is read; the agent's own loader owns the rest.
    text.lines()
        .find_map(|l| l.strip_prefix("description:"))
        .map(|d| d.trim().trim_matches(['"', '\'']).to_owned())
        .unwrap_or_default()
}

fn scan(root: &Path, out: &mut Vec<Assistant>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if !path.is_dir()
            || !valid_agent_name(&name)
            || !(path.join("config.yaml").is_file() || path.join("SOUL.md").is_file())
            || out.iter().any(|a| a.name == name)
        {
            continue;
        }
        let updated_at = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .map(|t| wire::iso(&chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339()));
        out.push(Assistant {
            description: description_of(&path),
            name,
            custom: true,
            updated_at,
        });
    }
}

/// Every assistant the user can run, the lead agent first, custom agents by name.
pub fn list(state: &AppState, user: &User) -> Vec<Assistant> {
    let home = &state.app.home;
    let mut custom = Vec::new();
    if let Some(uid) = user.fs_id() {
        scan(&home.join("users").join(uid).join("agents"), &mut custom);
    }
    scan(&home.join("agents"), &mut custom);
    custom.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = vec![lead()];
    out.extend(custom);
    out
}

/// The assistant named `id` (`lead_agent` or a custom agent), if any.
pub fn find(state: &AppState, user: &User, id: &str) -> Option<Assistant> {
    if id == LEAD_AGENT {
        return Some(lead());
    }
    if !valid_agent_name(id) {
        return None;
    }
    list(state, user).into_iter().find(|a| a.name == id)
}
