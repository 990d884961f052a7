//! Errors of loading and validating `config.yaml`.
//!
//! Every [`ConfigError`] renders as ONE line that names the file, the key path and the fix, so the
//! CLI can print it as is (`antler: config.yaml: models[0].api_key: …`).

use std::fmt;

/// A failure to find, read, parse or validate the configuration.
///
/// None of these is transient: the caller reports it and stops (the CLI exits non-zero).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An explicit `--config PATH` or `$ANTLER_CONFIG` names a file that does not exist.
    #[error("{file}: config file not found — check the --config argument or $ANTLER_CONFIG")]
    NotFound {
        /// The path as given.
        file: String,
    },
    /// The file exists but could not be read.
    #[error("{file}: cannot read the config file ({source}) — check its permissions")]
    Read {
        /// The path as given.
        file: String,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid YAML.
    #[error("{file}{}: invalid YAML: {message} — fix the syntax{}", yaml_position(.line, .column), yaml_where(.line))]
    Yaml {
        /// The path as given.
        file: String,
        /// 1-based line of the problem (0 when unknown).
        line: usize,
        /// 1-based column of the problem (0 when unknown).
        column: usize,
        /// The parser's description, without its position suffix.
        message: String,
    },
    /// A `$NAME` value names an environment variable that is not set.
    #[error("{file}: {key}: environment variable {var} is not set — export it or put the value in the file")]
    MissingEnv {
        /// The path as given.
        file: String,
        /// Key path of the value, e.g. `models[0].api_key`.
        key: String,
        /// The variable name (the value without its `$`).
        var: String,
    },
    /// A value has the wrong type or breaks a validation rule; `message` holds the fix.
    #[error("{file}: {key}: {message}")]
    Invalid {
        /// The path as given.
        file: String,
        /// Key path, e.g. `loop_detection.hard_limit`.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// No config file was found and the environment does not describe a model either.
    #[error("{message}")]
    ZeroConfig {
        /// What to do (create a config or export a variable).
        message: String,
    },
}

fn yaml_position(line: &usize, column: &usize) -> String {
    if *line == 0 {
        String::new()
    } else {
        format!(":{line}:{column}")
    }
}

fn yaml_where(line: &usize) -> &'static str {
    if *line == 0 {
        ""
    } else {
        " at that position"
    }
}

/// A validation rule broken by a typed [`crate::Config`], before it is tied to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Key path, e.g. `title.max_words`.
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl ValidationError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }

    /// Ties the error to the file it came from.
    pub fn in_file(self, file: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: file.into(),
            key: self.key,
            message: self.message,
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

impl std::error::Error for ValidationError {}

/// A model entry that antler cannot turn into a provider or a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// Neither `use` nor `provider` is set.
    MissingProvider {
        /// The entry's `name`.
        model: String,
    },
    /// `use` names a class antler does not know.
    UnknownProvider {
        /// The entry's `name`.
        model: String,
        /// The `use` value.
        value: String,
    },
    /// `use` names a DeerFlow provider class that antler does not implement.
    UnsupportedProvider {
        /// The entry's `name`.
        model: String,
        /// The `use` value.
        value: String,
    },
    /// `use` and `provider` name different wire protocols.
    ProviderConflict {
        /// The entry's `name`.
        model: String,
        /// The `use` value.
        value: String,
        /// The `provider` value.
        provider: String,
    },
    /// Thinking was requested with thinking options on a model that does not declare support.
    ThinkingUnsupported {
        /// The entry's `name`.
        model: String,
    },
}

impl ModelError {
    /// The key of the model entry this error is about.
    pub fn key(&self) -> &'static str {
        match self {
            ModelError::MissingProvider { .. }
            | ModelError::UnknownProvider { .. }
            | ModelError::UnsupportedProvider { .. }
            | ModelError::ProviderConflict { .. } => "use",
            ModelError::ThinkingUnsupported { .. } => "supports_thinking",
        }
    }

    /// The entry's `name`.
    pub fn model(&self) -> &str {
        match self {
            ModelError::MissingProvider { model }
            | ModelError::UnknownProvider { model, .. }
            | ModelError::UnsupportedProvider { model, .. }
            | ModelError::ProviderConflict { model, .. }
            | ModelError::ThinkingUnsupported { model } => model,
        }
    }

    /// What is wrong, without the model name.
    pub fn problem(&self) -> String {
        match self {
            ModelError::MissingProvider { .. } => "no `use` or `provider`".to_owned(),
            ModelError::UnknownProvider { value, .. } => {
                format!("unknown provider class '{value}'")
            }
            ModelError::UnsupportedProvider { value, .. } => {
                format!("provider class '{value}' is not implemented by antler")
            }
            ModelError::ProviderConflict {
                value, provider, ..
            } => format!("use '{value}' and provider '{provider}' disagree"),
            ModelError::ThinkingUnsupported { .. } => {
                "thinking options are set but supports_thinking is false".to_owned()
            }
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> String {
        match self {
            ModelError::MissingProvider { .. } => {
                "add `use: langchain_openai:ChatOpenAI` (or `provider: openai|anthropic|gemini|ollama`)"
                    .to_owned()
            }
            ModelError::UnknownProvider { .. } => format!(
                "use one of {}, or provider: openai|anthropic|gemini|ollama",
                crate::model::accepted_use_values()
            ),
            ModelError::UnsupportedProvider { .. } => "point an OpenAI-compatible entry \
                 (use: langchain_openai:ChatOpenAI + base_url) at the service instead"
                .to_owned(),
            ModelError::ProviderConflict { .. } => "keep only one of them".to_owned(),
            ModelError::ThinkingUnsupported { .. } => {
                "set supports_thinking: true or run with thinking off".to_owned()
            }
        }
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "model '{}': {} — {}",
            self.model(),
            self.problem(),
            self.fix()
        )
    }
}

impl std::error::Error for ModelError {}
