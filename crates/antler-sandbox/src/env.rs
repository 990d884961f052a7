//! The environment a sandboxed command gets (spec 50 §3.9): the host's, minus anything that
//! looks like a secret, plus per-call injected variables.

use std::ffi::OsString;
use std::sync::Arc;

use crate::error::SandboxError;
use crate::exec::CommandEnv;

/// Exact names scrubbed besides the `*KEY*`-style patterns.
const SECRET_NAMES: &[&str] = &[
    "DATABASE_URL",
    "DATABASE_URI",
    "REDIS_URL",
    "MONGODB_URI",
    "MONGO_URL",
    "AMQP_URL",
    "RABBITMQ_URL",
    "POSTGRES_URL",
    "POSTGRESQL_URL",
    "MYSQL_URL",
    "CLICKHOUSE_URL",
    "CONNECTION_STRING",
    "CONN_STR",
    "GH_PAT",
    "GITHUB_PAT",
    "MYSQL_PWD",
    "REDISCLI_AUTH",
    "REDIS_AUTH",
    "PGSERVICEFILE",
];

/// Substrings (case-insensitive) that mark a variable as secret.
const SECRET_PARTS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASS", "CREDENTIAL", "DSN"];

/// Whether a variable name looks like it holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_PARTS.iter().any(|p| upper.contains(p)) || SECRET_NAMES.contains(&upper.as_str())
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn is_valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The host environment without secret-looking names (read now: a sandbox keeps it, since
/// reading and filtering the environment on every command was a measurable part of a step).
pub fn scrubbed_host_env() -> Arc<[(OsString, OsString)]> {
    std::env::vars_os()
        .filter(|(k, _)| !is_secret_name(&k.to_string_lossy()))
        .collect()
}

/// `host` (already scrubbed: [`scrubbed_host_env`]) with `inject` on top (injected wins).
/// Injected names are validated first; a bad one fails before anything runs.
pub fn with_injected(
    host: &Arc<[(OsString, OsString)]>,
    inject: &[(String, String)],
) -> Result<CommandEnv, SandboxError> {
    for (k, _) in inject {
        if !is_valid_env_name(k) {
            return Err(SandboxError::InvalidEnvKey(k.clone()));
        }
    }
    let mut env = CommandEnv::new(host.clone());
    for (k, v) in inject {
        env.set(k, v);
    }
    Ok(env)
}

/// Replace every injected value of 8+ chars (longest first) with `[redacted]`.
pub fn redact(output: &str, inject: &[(String, String)]) -> String {
    let mut values: Vec<&str> = inject
        .iter()
        .map(|(_, v)| v.as_str())
        .filter(|v| v.chars().count() >= 8)
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = output.to_owned();
    for v in values {
        out = out.replace(v, "[redacted]");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn secret_names() {
        for n in [
            "OPENAI_API_KEY",
            "anthropic_api_key",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "SENTRY_DSN",
            "DATABASE_URL",
            "my_credentials",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "LANG", "PWD", "VIRTUAL_ENV", "TERM"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn env_names_are_validated() {
        assert!(is_valid_env_name("A_1"));
        assert!(!is_valid_env_name("1A"));
        assert!(!is_valid_env_name("A-B"));
        let host = scrubbed_host_env();
        assert!(with_injected(&host, &[("BAD NAME".into(), "x".into())]).is_err());
        let env = with_injected(&host, &[("GH_TOKEN".into(), "tok".into())]).unwrap();
        assert!(env.vars().any(|(k, v)| k == "GH_TOKEN" && v == "tok"));
    }

    #[test]
    fn injected_values_replace_the_kept_host_ones() {
        let host: Arc<[(OsString, OsString)]> = Arc::new([
            ("PATH".into(), "/bin".into()),
            ("LANG".into(), "C".into()),
            ("HOME".into(), "/root".into()),
        ]);
        let env = with_injected(
            &host,
            &[("LANG".into(), "en".into()), ("EXTRA".into(), "1".into())],
        )
        .unwrap();
        let pairs: Vec<(&str, &str)> = env
            .vars()
            .map(|(k, v)| (k.to_str().unwrap(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("PATH", "/bin"),
                ("HOME", "/root"),
                ("LANG", "en"),
                ("EXTRA", "1")
            ]
        );
        assert!(matches!(
            with_injected(&host, &[("A-B".into(), "x".into())]),
            Err(SandboxError::InvalidEnvKey(k)) if k == "A-B"
        ));
        // What a sandbox keeps has no secret-looking names.
        assert!(scrubbed_host_env()
            .iter()
            .all(|(k, _)| !is_secret_name(&k.to_string_lossy())));
    }

    #[test]
    fn redaction_replaces_long_values_only() {
        let inj = vec![
            ("A".into(), "supersecretvalue".into()),
            ("B".into(), "short".into()),
        ];
        assert_eq!(
            redact("x supersecretvalue short", &inj),
            "x [redacted] short"
        );
    }
}
