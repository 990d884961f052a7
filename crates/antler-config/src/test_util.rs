//! Helpers shared by the unit tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;

use crate::{Config, ConfigError, Loaded};

/// An injectable environment from pairs.
pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

/// A sandbox section so tests do not get the "no sandbox" warning.
pub(crate) const SANDBOX: &str = "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n";

/// Loads YAML text named `config.yaml` with the given environment.
pub(crate) fn load_env(yaml: &str, env: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    let env = env_of(env);
    Config::load_str(yaml, Path::new("config.yaml"), &env)
}

/// Loads YAML text (with an empty environment).
pub(crate) fn load(yaml: &str) -> Result<Loaded, ConfigError> {
    load_env(yaml, &[])
}

/// Loads YAML plus a local sandbox section and expects success.
pub(crate) fn load_ok(yaml: &str) -> Loaded {
    let text = format!("{SANDBOX}{yaml}");
    match load(&text) {
        Ok(loaded) => loaded,
        Err(e) => panic!("load failed: {e}\n---\n{text}"),
    }
}

/// The load warnings of YAML plus a local sandbox section (the load must succeed).
pub(crate) fn warnings_of(yaml: &str) -> Vec<String> {
    load_ok(yaml).warnings
}

/// Loads YAML plus a local sandbox section and returns the error line.
pub(crate) fn load_err(yaml: &str) -> String {
    let text = format!("{SANDBOX}{yaml}");
    match load(&text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// The warnings other than "no models configured".
pub(crate) fn other_warnings(loaded: &Loaded) -> Vec<String> {
    loaded
        .warnings
        .iter()
        .filter(|w| !w.contains("no models configured"))
        .cloned()
        .collect()
}
