//! Zero-config (no `config.yaml`: one model from the environment) and the `antler config init`
//! template.

use crate::error::ConfigError;
use crate::model::ModelConfig;
use crate::tools::{ToolConfig, ToolGroupConfig};
use crate::{Config, DatabaseConfig, SandboxConfig};

/// A commented `config.yaml` written by `antler config init`.
pub const TEMPLATE: &str = include_str!("template.yaml");

/// Model id used by zero-config when `$ANTLER_MODEL` is unset.
pub const ZERO_CONFIG_MODEL: &str = "gpt-4o-mini";

impl Config {
    /// The configuration used when no config file exists: one OpenAI-compatible model named
    /// `default` (`$OPENAI_API_KEY`, `$OPENAI_BASE_URL`, `$ANTLER_MODEL` or `gpt-4o-mini`), the
    /// local sandbox (host bash off), sqlite, and DeerFlow's sandbox file tools plus bash (bash is
    /// still dropped by the tool loader unless the sandbox allows it).
    ///
    /// Fails when neither `OPENAI_API_KEY` nor `OPENAI_BASE_URL` is set.
    pub fn zero_config(env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let non_empty = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let api_key = non_empty("OPENAI_API_KEY");
        let base_url = non_empty("OPENAI_BASE_URL");
        if api_key.is_none() && base_url.is_none() {
            return Err(ConfigError::ZeroConfig {
                message: "no config file (--config, $ANTLER_CONFIG, ./config.yaml) and \
                          OPENAI_API_KEY is not set — run `antler config init` to write \
                          config.yaml, or export OPENAI_API_KEY (plus OPENAI_BASE_URL for another \
                          OpenAI-compatible endpoint)"
                    .to_owned(),
            });
        }
        let model_id = non_empty("ANTLER_MODEL").unwrap_or_else(|| ZERO_CONFIG_MODEL.to_owned());
        let mut model = ModelConfig::openai_compatible("default", model_id);
        model.api_key = api_key;
        model.base_url = base_url;

        let config = Config {
            models: vec![model],
            tool_groups: ["file:read", "file:write", "bash"]
                .into_iter()
                .map(ToolGroupConfig::named)
                .collect(),
            tools: ToolConfig::sandbox_defaults(),
            sandbox: SandboxConfig::default(),
            database: DatabaseConfig::default(),
            ..Config::default()
        };
        config.validate().map_err(|e| e.in_file("zero-config"))?;
        Ok(config)
    }
}
