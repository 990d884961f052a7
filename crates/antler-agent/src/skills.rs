//! Skills: `SKILL.md` packages discovered under the skills root and listed in the lead agent's
//! system prompt (spec 50 §5). The agent loads a skill by reading its `SKILL.md` through the
//! sandbox's read-only `/mnt/skills` mount ("progressive loading"); the prompt only lists them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where a skill comes from, in the order categories are scanned (a later one wins a name
/// clash: custom beats public).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Public,
    Custom,
    Integrations,
    Legacy,
}

impl Category {
    pub const ALL: [Category; 4] = [
        Category::Public,
        Category::Custom,
        Category::Integrations,
        Category::Legacy,
    ];

    pub fn dir(self) -> &'static str {
        match self {
            Category::Public => "public",
            Category::Custom => "custom",
            Category::Integrations => "integrations",
            Category::Legacy => "legacy",
        }
    }

    /// The label shown after the description in the prompt.
    fn label(self) -> &'static str {
        match self {
            Category::Public | Category::Integrations => "[built-in]",
            Category::Custom => "[custom, editable]",
            Category::Legacy => "[legacy, read-only]",
        }
    }
}

/// One discovered skill.
#[derive(Clone, Debug, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    /// `None` = no restriction declared; `Some([])` = no tools.
    pub allowed_tools: Option<Vec<String>>,
    pub category: Category,
    /// Skill folder relative to its category root, `/`-separated.
    pub relative_path: String,
    /// `{container_path}/{category}/{relative_path}/SKILL.md`.
    pub container_file: String,
    pub host_dir: PathBuf,
}

pub use antler_tools::skill_md::{parse_skill_md, FrontMatter, SkillParseError};

/// The host skills root: `skills.path` (relative to `project_root`), else
/// `$DEER_FLOW_SKILLS_PATH` / `$ANTLER_SKILLS_PATH`, else `{project_root}/skills`.
pub fn skills_root(configured: Option<&str>, project_root: &Path) -> PathBuf {
    if let Some(p) = configured.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_absolute() {
            p
        } else {
            project_root.join(p)
        };
    }
    for var in ["ANTLER_SKILLS_PATH", "DEER_FLOW_SKILLS_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return PathBuf::from(v);
        }
    }
    project_root.join("skills")
}

fn walk(dir: &Path, rel: &str, category: Category, container: &str, out: &mut Vec<Skill>) {
    let skill_md = dir.join("SKILL.md");
    if skill_md.is_file() {
        // A folder with SKILL.md is a skill; nothing below it is scanned.
        match std::fs::read_to_string(&skill_md)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_skill_md(&t).map_err(|e| e.to_string()))
        {
            Ok(fm) => out.push(Skill {
                name: fm.name,
                description: fm.description,
                license: fm.license,
                allowed_tools: fm.allowed_tools,
                category,
                container_file: format!(
                    "{}/{}/{rel}/SKILL.md",
                    container.trim_end_matches('/'),
                    category.dir()
                ),
                relative_path: rel.to_owned(),
                host_dir: dir.to_path_buf(),
            }),
            Err(e) => tracing::warn!(path = %skill_md.display(), error = %e, "skipping skill"),
        }
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.'))
        })
        .collect();
    children.sort();
    for child in children {
        let Some(name) = child.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let rel = if rel.is_empty() {
            name.to_owned()
        } else {
            format!("{rel}/{name}")
        };
        walk(&child, &rel, category, container, out);
    }
}

/// Every valid skill under `root`, one per name (later categories win), sorted by name.
pub fn discover(root: &Path, container_path: &str) -> Vec<Skill> {
    let mut by_name: BTreeMap<String, Skill> = BTreeMap::new();
    for category in Category::ALL {
        let mut found = Vec::new();
        walk(
            &root.join(category.dir()),
            "",
            category,
            container_path,
            &mut found,
        );
        for s in found {
            by_name.insert(s.name.clone(), s);
        }
    }
    by_name.into_values().collect()
}

/// Enabled state from `extensions_config.json`'s `"skills": {"<name>": {"enabled": bool}}`
/// (no entry = enabled). An unreadable file disables nothing but is logged.
pub fn enabled_states(extensions_config: &Path) -> BTreeMap<String, bool> {
    let Ok(text) = std::fs::read_to_string(extensions_config) else {
        return BTreeMap::new();
    };
    let v: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(path = %extensions_config.display(), error = %e, "invalid extensions config; skill states ignored");
            return BTreeMap::new();
        }
    };
    v.get("skills")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.get("enabled").and_then(Value::as_bool).unwrap_or(true),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The live registry the skill middlewares resolve against: the skills on disk and their
/// enabled state now (re-read per call, so installing or enabling a skill applies at once).
pub struct LiveSkills {
    pub root: PathBuf,
    pub container_path: String,
    pub extensions_config: PathBuf,
}

impl antler_middleware::skill_registry::SkillRegistry for LiveSkills {
    fn load(&self) -> Result<Vec<antler_middleware::skill_registry::SkillRecord>, String> {
        let enabled = enabled_states(&self.extensions_config);
        Ok(discover(&self.root, &self.container_path)
            .into_iter()
            .map(|s| antler_middleware::skill_registry::SkillRecord {
                enabled: enabled.get(&s.name).copied().unwrap_or(true),
                category: s.category.dir().to_owned(),
                editable: s.category == Category::Custom,
                host_file: s.host_dir.join("SKILL.md"),
                root: self.root.clone(),
                name: s.name,
                container_file: s.container_file,
                allowed_tools: s.allowed_tools,
            })
            .collect())
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The `<skill_system>` block (spec 50 §5.4); empty when there is nothing to list.
/// `allowlist`: `None` = every enabled skill, `Some(list)` = only those names.
pub fn skills_section(
    skills: &[Skill],
    enabled: &BTreeMap<String, bool>,
    container_path: &str,
    allowlist: Option<&[String]>,
) -> String {
    let allowed = |s: &Skill| allowlist.is_none_or(|l| l.iter().any(|n| n == &s.name));
    let is_enabled = |s: &Skill| enabled.get(&s.name).copied().unwrap_or(true);
    let on: Vec<&Skill> = skills
        .iter()
        .filter(|s| is_enabled(s) && allowed(s))
        .collect();
    let off: Vec<&Skill> = skills
        .iter()
        .filter(|s| !is_enabled(s) && allowed(s))
        .collect();
    if on.is_empty() && off.is_empty() {
        return String::new();
    }
    let mut p = String::from("<skill_system>\n");
    p.push_str(
        "Skills are tested workflows for specific kinds of tasks. When a request matches a skill, \
read its main file at the skill's location with `read_file` right away and follow it; load the \
other files of that skill folder only when the instructions need them. A skill the user \
activated with `/skill-name` is already in your context: do not read its SKILL.md again.\n",
    );
    p.push_str(&format!("Skills are located at: {container_path}\n"));
    if !on.is_empty() {
        p.push_str("<available_skills>\n");
        for s in &on {
            p.push_str(&format!(
                "<skill><name>{}</name><description>{} {}</description><location>{}</location></skill>\n",
                escape(&s.name),
                escape(&s.description),
                s.category.label(),
                escape(&s.container_file)
            ));
        }
        p.push_str("</available_skills>\n");
    }
    if !off.is_empty() {
        p.push_str(
            "<disabled_skills>\nThese skills are installed but disabled. Do not read or use them.\n",
        );
        for s in &off {
            p.push_str(&format!("- {} ({})\n", escape(&s.name), s.category.dir()));
        }
        p.push_str("</disabled_skills>\n");
    }
    p.push_str("</skill_system>");
    p
}

#[cfg(test)]
#[path = "skills_tests.rs"]
mod tests;
