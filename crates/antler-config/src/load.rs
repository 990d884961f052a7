//! Finding and loading `config.yaml`: resolution order, YAML parsing, `$VAR` substitution,
//! key normalization, typed deserialization with key paths, unknown-key warnings, validation.

use std::path::{Path, PathBuf};

use crate::context::{DEERMEM_LEGACY_KEYS, DEERMEM_LEGACY_PREFIXES};
use crate::env::substitute_env;
use crate::error::ConfigError;
use crate::sandbox::UploadsConfig;
use crate::yaml::{self, Mapping, Node, NodeError};
use crate::Config;

/// Environment variable naming the config file (second in the lookup order).
pub const CONFIG_ENV: &str = "ANTLER_CONFIG";
/// File looked for in the working directory (last in the lookup order).
pub const DEFAULT_CONFIG_FILE: &str = "config.yaml";

/// How many parent directories are searched for `config.example.yaml` (§1.4).
const EXAMPLE_SEARCH_PARENTS: usize = 5;

/// A loaded configuration and what the loader has to say about it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The typed, validated configuration.
    pub config: Config,
    /// The file it came from.
    pub path: PathBuf,
    /// Non-fatal findings, one line each (unknown keys, defaults applied, dropped aliases).
    /// The loader does not log them; the caller shows them.
    pub warnings: Vec<String>,
}

/// The config file to load: `--config PATH`, else `$ANTLER_CONFIG`, else `./config.yaml` when it
/// exists. `None` means no file (the caller may fall back to [`Config::zero_config`]).
///
/// An explicit or environment path is returned even when it does not exist, so that
/// [`Config::load`] reports it as [`ConfigError::NotFound`] instead of silently using another.
pub fn resolve_path(cli: Option<&Path>) -> Option<PathBuf> {
    resolve_path_with_env(cli, &|name| std::env::var(name).ok())
}

/// [`resolve_path`] with an injectable environment lookup.
pub fn resolve_path_with_env(
    cli: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    if let Some(path) = cli {
        return Some(path.to_path_buf());
    }
    if let Some(path) = env(CONFIG_ENV).filter(|p| !p.trim().is_empty()) {
        return Some(PathBuf::from(path));
    }
    let local = PathBuf::from(DEFAULT_CONFIG_FILE);
    local.is_file().then_some(local)
}

impl Config {
    /// Loads `path`, resolving `$VAR` values from the process environment.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        Self::load_with_env(path, &|name| std::env::var(name).ok())
    }

    /// Loads `path` with an injectable environment lookup (tests, embedding).
    pub fn load_with_env(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Loaded, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ConfigError::NotFound { file: file.clone() }
            } else {
                ConfigError::Read {
                    file: file.clone(),
                    source,
                }
            }
        })?;
        let mut loaded = Self::load_str(&text, path, env)?;
        if let Some(warning) = version_check(path, loaded.config.config_version) {
            loaded.warnings.push(warning);
        }
        tracing::debug!(path = %file, warnings = loaded.warnings.len(), "config loaded");
        Ok(loaded)
    }

    /// Loads YAML text; `path` is only used to name the file in messages.
    pub fn load_str(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Loaded, ConfigError> {
        let file = path.display().to_string();
        let mut warnings = Vec::new();

        let mut root = yaml::parse(text).map_err(|e| yaml_error(&file, &e))?;
        if root.is_null() {
            root = Node::Map(Mapping::new());
        }
        if !matches!(root, Node::Map(_)) {
            return Err(ConfigError::Invalid {
                file,
                key: "top level".to_owned(),
                message: "the file must be a mapping of sections (models:, tools:, sandbox:, …)"
                    .to_owned(),
            });
        }
        substitute_env(&mut root, env).map_err(|missing| ConfigError::MissingEnv {
            file: file.clone(),
            key: missing.key,
            var: missing.var,
        })?;

        normalize_models(&mut root, &file, &mut warnings);
        migrate_memory(&mut root, &file, &mut warnings);
        if root.get("sandbox").is_none_or(Node::is_null) {
            // DeerFlow requires the section; antler's documented default is the local sandbox,
            // so this is not worth a warning on every run.
            tracing::debug!(
                "{file}: no sandbox section; using the local sandbox (sandbox.use: {})",
                crate::LOCAL_SANDBOX_USE
            );
        }
        if let Some(uploads) = root.get("uploads") {
            if let Ok(json) = serde_json::to_value(uploads) {
                let (_, upload_warnings) = UploadsConfig::from_value(&json, "uploads");
                warnings.extend(upload_warnings.into_iter().map(|w| format!("{file}: {w}")));
            }
        }

        let mut unknown = Vec::new();
        let config: Config = {
            let mut record = |p: serde_ignored::Path<'_>| unknown.push(ignored_path(&p));
            let ignored = serde_ignored::Deserializer::new(root, &mut record);
            serde_path_to_error::deserialize(ignored).map_err(|e| type_error(&file, &e))?
        };
        for key in config.extra.keys() {
            unknown.push(key.clone());
        }
        warnings.extend(
            unknown
                .into_iter()
                .map(|key| format!("unknown key '{key}' in {file} (ignored)")),
        );

        let findings = config.validate().map_err(|e| e.in_file(file.clone()))?;
        warnings.extend(findings.into_iter().map(|w| format!("{file}: {w}")));

        Ok(Loaded {
            config,
            path: path.to_path_buf(),
            warnings,
        })
    }
}

fn yaml_error(file: &str, error: &serde_saphyr::Error) -> ConfigError {
    let (line, column) = error
        .location()
        .map(|l| (to_usize(l.line()), to_usize(l.column())))
        .unwrap_or((0, 0));
    let mut message = error.to_string();
    // The position is part of the error line already; drop the parser's own copy.
    for suffix in [
        format!(" at line {line}, column {column}"),
        format!(" at line {line} column {column}"),
    ] {
        if let Some(pos) = message.find(&suffix) {
            message.replace_range(pos..pos + suffix.len(), "");
        }
    }
    ConfigError::Yaml {
        file: file.to_owned(),
        line,
        column,
        message,
    }
}

fn type_error(file: &str, error: &serde_path_to_error::Error<NodeError>) -> ConfigError {
    let path = error.path().to_string();
    let key = if path == "." {
        "top level".to_owned()
    } else {
        path
    };
    let message = explain_serde_error(&error.inner().to_string());
    ConfigError::Invalid {
        file: file.to_owned(),
        key,
        message,
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A serde message made friendlier, with a fix appended.
pub(crate) fn explain_serde_error(raw: &str) -> String {
    let mut message = raw.to_owned();
    for unsigned in ["usize", "u64", "u32", "u16", "u8"] {
        message = message.replace(
            &format!("expected {unsigned}"),
            "expected a non-negative integer",
        );
    }
    let fix = if message.starts_with("missing field") {
        "add it"
    } else if message.starts_with("unknown variant") {
        "use one of the listed values"
    } else if message.starts_with("invalid type") {
        "change the value to the expected type"
    } else {
        "fix the value"
    };
    format!("{message} — {fix}")
}

/// `models.0.foo` → `models[0].foo`, without serde_ignored's `?` markers.
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    match path {
        serde_ignored::Path::Root => String::new(),
        serde_ignored::Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        serde_ignored::Path::Map { parent, key } => {
            let parent = ignored_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// Keeps one spelling per aliased model key (first of `names` wins) and renames it to the
/// canonical name (`names[0]`).
fn collapse_aliases(
    entry: &mut Mapping,
    names: &[&str],
    prefix: &str,
    file: &str,
    warnings: &mut Vec<String>,
) {
    let present: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| entry.contains_key(n))
        .collect();
    let Some((&kept, dropped)) = present.split_first() else {
        return;
    };
    for name in dropped {
        entry.remove(name);
        warnings.push(format!(
            "{file}: {prefix}.{name}: ignored because {prefix}.{kept} is also set"
        ));
    }
    if kept != names[0] {
        if let Some(value) = entry.remove(kept) {
            entry.insert(names[0], value);
        }
    }
}

fn normalize_models(root: &mut Node, file: &str, warnings: &mut Vec<String>) {
    let Some(Node::Seq(models)) = root.get_mut("models") else {
        return;
    };
    for (index, model) in models.iter_mut().enumerate() {
        let Node::Map(entry) = model else {
            continue;
        };
        let prefix = format!("models[{index}]");
        collapse_aliases(
            entry,
            &["base_url", "openai_api_base", "api_base"],
            &prefix,
            file,
            warnings,
        );
        collapse_aliases(
            entry,
            &["request_timeout", "timeout", "default_request_timeout"],
            &prefix,
            file,
            warnings,
        );
    }
}

fn is_legacy_memory_key(key: &str) -> bool {
    DEERMEM_LEGACY_KEYS.contains(&key) || DEERMEM_LEGACY_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Moves legacy DeerMem keys from `memory:` into `memory.backend_config` (§17);
/// `model_name` becomes `backend_config.model.model`. An explicit `backend_config` value wins.
fn migrate_memory(root: &mut Node, file: &str, warnings: &mut Vec<String>) {
    let Some(Node::Map(memory)) = root.get_mut("memory") else {
        return;
    };
    let legacy: Vec<String> = memory
        .keys()
        .filter(|k| *k == "model_name" || is_legacy_memory_key(k))
        .map(str::to_owned)
        .collect();
    if legacy.is_empty() {
        return;
    }
    let mut backend = match memory.remove("backend_config") {
        None | Some(Node::Null) => Mapping::new(),
        Some(Node::Map(backend)) => backend,
        Some(other) => {
            // Not a mapping: deserialization reports it at memory.backend_config.
            memory.insert("backend_config", other);
            return;
        }
    };
    for key in legacy {
        let Some(value) = memory.remove(key.as_str()) else {
            continue;
        };
        let (slot, slot_key, target) = if key == "model_name" {
            let model = backend.entry_or_insert("model", || Node::Null);
            if model.is_null() {
                *model = Node::Map(Mapping::new());
            }
            let Node::Map(model) = model else {
                warnings.push(format!(
                    "{file}: memory.model_name: ignored because memory.backend_config.model is not a mapping"
                ));
                continue;
            };
            (model, "model", "backend_config.model.model".to_owned())
        } else {
            let target = format!("backend_config.{key}");
            (&mut backend, key.as_str(), target)
        };
        if slot.contains_key(slot_key) {
            warnings.push(format!(
                "{file}: memory.{key}: ignored because memory.{target} is also set"
            ));
        } else {
            slot.insert(slot_key, value);
        }
    }
    memory.insert("backend_config", Node::Map(backend));
}

/// §1.4: warn when a `config.example.yaml` next to (or up to five levels above) the file has a
/// newer `config_version`.
fn version_check(path: &Path, version: i64) -> Option<String> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let start = parent.unwrap_or_else(|| Path::new("."));
    let start = std::fs::canonicalize(start).unwrap_or_else(|_| start.to_path_buf());
    for dir in start.ancestors().take(EXAMPLE_SEARCH_PARENTS + 1) {
        let example = dir.join("config.example.yaml");
        if !example.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&example).ok()?;
        let value = yaml::parse(&text).ok()?;
        let latest = value
            .get("config_version")
            .and_then(Node::as_i64)
            .unwrap_or(0);
        return (latest > version).then(|| {
            format!(
                "{}: config_version {version} is older than {latest} in {} — run the config \
                 upgrade (make config-upgrade) to pick up new keys",
                path.display(),
                example.display()
            )
        });
    }
    None
}
