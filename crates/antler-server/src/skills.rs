//! `GET /skills` (spec 70 §3.4 G20; the composer's slash commands read it) behind the
//! [`SkillsApi`] trait. [`LocalSkills`] lists DeerFlow's skill folders —
//! `<skills root>/{public,custom}/<name>/SKILL.md` — reading `name`, `description` and
//! `license` from each file's front matter. Enable/disable state is not stored yet: every skill
//! is reported enabled.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Skill listing for the UI.
pub trait SkillsApi: Send + Sync {
    /// `[{name, description, license, category, enabled, editable}]`.
    fn list(&self) -> Vec<Value>;
}

/// Skills found on disk (see the module docs).
pub struct LocalSkills {
    root: Option<PathBuf>,
}

impl LocalSkills {
    /// `root` is the skills folder (`skills.path`, else `$DEER_FLOW_SKILLS_PATH`, else
    /// `./skills`); `None` lists nothing.
    pub fn new(root: Option<PathBuf>) -> Self {
        LocalSkills { root }
    }

    /// The skills root from `config.yaml`'s `skills.path` and the environment.
    pub fn from_config(config: &antler_config::Config) -> Self {
        let root = config
            .skills
            .path
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("DEER_FLOW_SKILLS_PATH").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from("skills")));
        LocalSkills { root }
    }
}

/// `key: value` pairs of a `---`-fenced front matter block.
fn front_matter(text: &str) -> Vec<(String, String)> {
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("---") {
        return Vec::new();
    }
    lines
        .take_while(|l| l.trim() != "---")
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            if k.starts_with(' ') {
                return None;
            }
            Some((
                k.trim().to_owned(),
                v.trim().trim_matches(['"', '\'']).to_owned(),
            ))
        })
        .collect()
}

fn scan(dir: &Path, category: &str, out: &mut Vec<Value>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let skill_md = e.path().join("SKILL.md");
        let Ok(text) = std::fs::read_to_string(&skill_md) else {
            continue;
        };
        let fm = front_matter(&text);
        let get = |k: &str| fm.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let name = get("name").unwrap_or_else(|| e.file_name().to_string_lossy().into_owned());
        found.push(json!({
            "name": name,
            "description": get("description").unwrap_or_default(),
            "license": get("license"),
            "category": category,
            "enabled": true,
            "editable": category == "custom",
        }));
    }
    found.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    out.extend(found);
}

impl SkillsApi for LocalSkills {
    fn list(&self) -> Vec<Value> {
        let mut out = Vec::new();
        if let Some(root) = &self.root {
            scan(&root.join("public"), "public", &mut out);
            scan(&root.join("custom"), "custom", &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn skills_are_listed_from_front_matter() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("public/deep-research");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("SKILL.md"),
            "---\nname: deep-research\ndescription: \"Research: deeply\"\nlicense: MIT\n---\n# body\n",
        )
        .unwrap();
        let c = dir.path().join("custom/mine");
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("SKILL.md"), "no front matter").unwrap();
        let list = LocalSkills::new(Some(dir.path().to_path_buf())).list();
        assert_eq!(
            list,
            vec![
                json!({"name": "deep-research", "description": "Research: deeply", "license": "MIT", "category": "public", "enabled": true, "editable": false}),
                json!({"name": "mine", "description": "", "license": null, "category": "custom", "enabled": true, "editable": true}),
            ]
        );
        assert!(LocalSkills::new(None).list().is_empty());
    }
}
