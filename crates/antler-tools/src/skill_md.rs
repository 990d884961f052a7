//! `SKILL.md` front matter (spec 50 §5.1): a `---` line, YAML, a `---` line, then Markdown.
//! Runtime parsing is lenient: a file that does not parse is skipped by discovery, never fatal.

/// Why a `SKILL.md` was skipped.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SkillParseError {
    #[error("no YAML front matter (the file must start with a `---` line)")]
    NoFrontMatter,
    #[error("invalid YAML front matter: {0}")]
    Yaml(String),
    #[error("front matter is not a mapping")]
    NotAMapping,
    #[error("missing or empty `{0}`")]
    Missing(&'static str),
    #[error("`allowed-tools` must be a list of non-empty strings")]
    BadAllowedTools,
}

/// The parsed front matter of a `SKILL.md`.
#[derive(Clone, Debug, PartialEq)]
pub struct FrontMatter {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
}

/// Split `---\n<yaml>\n---` off the top of a `SKILL.md` (lenient runtime parsing, spec 50 §5.1).
pub fn parse_skill_md(text: &str) -> Result<FrontMatter, SkillParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().ok_or(SkillParseError::NoFrontMatter)?;
    if first.trim_end() != "---" {
        return Err(SkillParseError::NoFrontMatter);
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err(SkillParseError::NoFrontMatter);
    }
    let options = serde_saphyr::options! { with_snippet: false };
    let value: serde_json::Value =
        serde_saphyr::from_str_with_options(&yaml, options).map_err(|e| {
            let hint = yaml
                .lines()
                .enumerate()
                .find(|(_, l)| {
                    l.split_once(": ").is_some_and(|(_, v)| {
                        v.contains(": ") && !v.trim_start().starts_with(['"', '\''])
                    })
                })
                .map(|(i, l)| {
                    format!(
                        " (line {}: `{}` — quote values that contain \": \")",
                        i + 2,
                        l.trim()
                    )
                })
                .unwrap_or_default();
            SkillParseError::Yaml(format!("{e}{hint}"))
        })?;
    let map = value.as_object().ok_or(SkillParseError::NotAMapping)?;
    let text_field = |key: &str| -> Option<String> {
        map.get(key)
            .and_then(|v| v.as_str())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let name = text_field("name").ok_or(SkillParseError::Missing("name"))?;
    let description = text_field("description").ok_or(SkillParseError::Missing("description"))?;
    let allowed_tools = match map.get("allowed-tools") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str().map(str::trim) {
                    Some(s) if !s.is_empty() => out.push(s.to_owned()),
                    _ => return Err(SkillParseError::BadAllowedTools),
                }
            }
            Some(out)
        }
        Some(_) => return Err(SkillParseError::BadAllowedTools),
    };
    Ok(FrontMatter {
        name,
        description,
        license: text_field("license"),
        allowed_tools,
    })
}
