//! Custom agents: a named agent with its own model default, tool groups, skill allowlist and
//! SOUL.md, stored as DeerFlow stores them under the data home:
//! `{home}/agents/{name}/config.yaml` and `{home}/agents/{name}/SOUL.md`
//! (`{home}/users/{user}/agents/{name}/…` when a user is known and that folder exists).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::AgentError;

/// A custom agent's `config.yaml`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CustomAgent {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Default model (a config `models[].name`); a run's requested model wins.
    #[serde(default)]
    pub model: Option<String>,
    /// Tool groups this agent may use (`None` = all configured tools).
    #[serde(default)]
    pub tool_groups: Option<Vec<String>>,
    /// Skill allowlist (`None` = all enabled, `[]` = none).
    #[serde(default)]
    pub skills: Option<Vec<String>>,
    #[serde(default)]
    pub model_settings: Map<String, Value>,
    #[serde(default)]
    pub thinking_enabled: Option<bool>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// SOUL.md content (not part of config.yaml on disk).
    #[serde(skip)]
    pub soul: Option<String>,
}

/// DeerFlow normalizes agent names: lower-case, `_` → `-`.
pub fn normalize_name(name: &str) -> String {
    name.trim().to_lowercase().replace('_', "-")
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The folder of a custom agent.
pub fn agent_dir(home: &Path, name: &str, user: Option<&str>) -> PathBuf {
    if let Some(u) = user {
        let per_user = home.join("users").join(u).join("agents").join(name);
        if per_user.is_dir() {
            return per_user;
        }
    }
    home.join("agents").join(name)
}

impl CustomAgent {
    /// Load an agent by name. Unknown → `Ok(None)`; unreadable → an error naming the file.
    pub fn load(
        home: &Path,
        name: &str,
        user: Option<&str>,
    ) -> Result<Option<CustomAgent>, AgentError> {
        let name = normalize_name(name);
        if !valid_name(&name) {
            return Err(AgentError::Config(format!(
                "invalid agent name '{name}': use lower-case letters, digits and '-'"
            )));
        }
        let dir = agent_dir(home, &name, user);
        let cfg_path = dir.join("config.yaml");
        if !cfg_path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&cfg_path)
            .map_err(|e| AgentError::Config(format!("{}: {e}", cfg_path.display())))?;
        let options = serde_saphyr::options! { with_snippet: false };
        let mut agent: CustomAgent = serde_saphyr::from_str_with_options(&text, options)
            .map_err(|e| AgentError::Config(format!("{}: {e}", cfg_path.display())))?;
        if agent.name.is_empty() {
            agent.name = name;
        }
        agent.soul = std::fs::read_to_string(dir.join("SOUL.md"))
            .ok()
            .filter(|s| !s.trim().is_empty());
        Ok(Some(agent))
    }

    /// Every custom agent under the data home (per-user ones when `user` is given), by name.
    pub fn list(home: &Path, user: Option<&str>) -> Vec<CustomAgent> {
        let mut dirs = vec![home.join("agents")];
        if let Some(u) = user {
            dirs.push(home.join("users").join(u).join("agents"));
        }
        let mut out: Vec<CustomAgent> = Vec::new();
        for d in dirs {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                if let Ok(Some(a)) = CustomAgent::load(home, &name, user) {
                    out.retain(|x| x.name != a.name);
                    out.push(a);
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_config_and_soul_and_lists_agents() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("agents/researcher");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.yaml"),
            "name: researcher\ndescription: digs\nmodel: fast\ntool_groups: [file:read]\nskills: []\n",
        )
        .unwrap();
        std::fs::write(dir.join("SOUL.md"), "Be curious.").unwrap();
        let a = CustomAgent::load(t.path(), "Researcher", None)
            .unwrap()
            .unwrap();
        assert_eq!(a.model.as_deref(), Some("fast"));
        assert_eq!(a.tool_groups, Some(vec!["file:read".to_string()]));
        assert_eq!(a.skills, Some(vec![]));
        assert_eq!(a.soul.as_deref(), Some("Be curious."));
        assert!(CustomAgent::load(t.path(), "nobody", None)
            .unwrap()
            .is_none());
        assert!(CustomAgent::load(t.path(), "../etc", None).is_err());
        assert_eq!(CustomAgent::list(t.path(), None).len(), 1);
        assert_eq!(normalize_name("My_Agent"), "my-agent");
    }
}
