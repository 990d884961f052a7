//! `sandbox`, `uploads` and the skills sections (spec 60 §12–§14).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::de::section;

/// `use:` of DeerFlow's local (host) sandbox provider — antler's default.
pub const LOCAL_SANDBOX_USE: &str = "deerflow.sandbox.local:LocalSandboxProvider";
/// Long spelling of the local provider that DeerFlow's local detection also accepts.
pub const LOCAL_SANDBOX_USE_LONG: &str =
    "deerflow.sandbox.local.local_sandbox_provider:LocalSandboxProvider";

/// antler extension `sandbox.confine`: Linux confinement (Landlock, seccomp) of bash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confine {
    /// Confine when the kernel supports it; otherwise run unconfined and say so in the log.
    #[default]
    Auto,
    /// Never confine.
    Off,
    /// Refuse to run bash when confinement cannot be enforced.
    Required,
}

/// antler extension `sandbox.network`: whether bash may use the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkPolicy {
    /// The host's network (DeerFlow's local sandbox behaviour).
    #[default]
    Allow,
    /// No network for bash and its children: a private network namespace (not even loopback)
    /// where namespaces are available, and Landlock's TCP rules (bind/connect denied) in any case.
    Deny,
}

/// A byte count: an integer, or a string with a unit (`512M`, `2GiB`, `1.5 GB`; powers of
/// 1024 either way, as `ulimit` and cgroups count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parse `s` (`"512M"`, `"2GiB"`, `"100"`).
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("expected a size such as 512M or 2GiB, got {s:?}"))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            other => return Err(format!("unknown size unit {other:?} in {s:?}")),
        };
        let bytes = n * mult as f64;
        if !(bytes.is_finite() && bytes >= 1.0 && bytes <= u64::MAX as f64) {
            return Err(format!("size out of range: {s:?}"));
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(de)? {
            Value::Number(n) => n
                .as_u64()
                .filter(|v| *v > 0)
                .map(ByteSize)
                .ok_or_else(|| D::Error::custom("expected a positive number of bytes")),
            Value::String(s) => ByteSize::parse(&s).map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "expected a size such as 512M or a number of bytes, got {other}"
            ))),
        }
    }
}

fn d_processes() -> Option<u64> {
    Some(1024)
}

section! {
    plain:
    /// antler extension `sandbox.limits`: caps on what one thread's bash may use (`null` = none).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct LimitsConfig {
        /// Memory of the thread's commands together (cgroup), or of each process (rlimit).
        #[serde(default)]
        pub memory: Option<ByteSize> = None,
        /// Processes at once (default 1024).
        #[serde(default = "d_processes")]
        pub processes: Option<u64> = d_processes(),
        /// Largest file a command may write.
        #[serde(default)]
        pub file_size: Option<ByteSize> = None,
    }
}

/// One `sandbox.mounts` entry (validated by the sandbox, spec 50 §3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountConfig {
    /// Absolute host directory.
    pub host_path: String,
    /// Absolute path the agent sees.
    pub container_path: String,
    /// Writes are rejected when true.
    #[serde(default)]
    pub read_only: bool,
}

/// E2B capacity policy (EXTRA).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverflowPolicy {
    /// Wait up to `acquire_timeout` for a free sandbox.
    #[default]
    Wait,
    /// Fail immediately.
    Reject,
    /// Create up to `burst_limit` extra sandboxes.
    Burst,
}

/// Lease store kind for multi-instance sandbox ownership (EXTRA).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnershipType {
    /// In-process.
    #[default]
    Memory,
    /// Shared through Redis.
    Redis,
}

section! {
    /// `sandbox.ownership` (EXTRA).
    pub struct OwnershipConfig {
        /// `memory` | `redis`.
        #[serde(rename = "type")]
        pub kind: OwnershipType = OwnershipType::Memory,
        /// Redis URL for the `redis` type.
        pub redis_url: Option<String> = None,
        /// Lease renewal period (> 0).
        pub renewal_interval_seconds: f64 = 30.0,
        /// Lease TTL = interval × this (≥ 2).
        pub ttl_multiplier: f64 = 4.0,
        /// Redis key prefix.
        pub key_prefix: String = "deerflow:sandbox:owner".to_owned(),
    }
}

/// `sandbox` (§13). DeerFlow requires this section; antler defaults a missing one to the local
/// provider and warns (see [`SandboxConfig::default`]). Provider-specific keys antler does not
/// type (E2B `api_key`, `template`, …) are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// Provider class, e.g. `deerflow.sandbox.local:LocalSandboxProvider`. Required when the
    /// section is present.
    #[serde(rename = "use", default)]
    pub use_: String,
    /// Local provider only: enables the bash tool and the bash subagent.
    #[serde(default)]
    pub allow_host_bash: bool,
    /// Extra host directories visible to the agent.
    #[serde(default, deserialize_with = "crate::de::null_default")]
    pub mounts: Vec<MountConfig>,
    /// bash output cap (middle truncation); 0 = none.
    #[serde(default = "d_20000")]
    pub bash_output_max_chars: usize,
    /// read_file output cap (head truncation); 0 = none.
    #[serde(default = "d_50000")]
    pub read_file_output_max_chars: usize,
    /// ls output cap (head truncation); 0 = none.
    #[serde(default = "d_20000")]
    pub ls_output_max_chars: usize,
    /// bash timeout in seconds (> 0).
    #[serde(default = "d_600")]
    pub bash_command_timeout: f64,
    /// antler extension: Linux confinement of bash (`auto` | `off` | `required`).
    #[serde(default)]
    pub confine: Confine,
    /// antler extension: network for bash (`allow` | `deny`).
    #[serde(default)]
    pub network: NetworkPolicy,
    /// antler extension: resource caps for bash.
    #[serde(default, deserialize_with = "crate::de::null_default")]
    pub limits: LimitsConfig,
    /// Container image (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Container base port (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Sandbox pool cap (EXTRA, > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Container name prefix (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_prefix: Option<String>,
    /// Seconds before warm sandboxes are reaped; 0 = never (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<f64>,
    /// Environment for containers (`$VAR` values already resolved) (EXTRA).
    #[serde(default, deserialize_with = "crate::de::null_default")]
    pub environment: Map<String, Value>,
    /// Whether the sandbox already sees the thread dirs (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_data_mounts: Option<bool>,
    /// E2B capacity policy (EXTRA).
    #[serde(default)]
    pub overflow_policy: OverflowPolicy,
    /// E2B acquire wait in seconds (EXTRA, > 0).
    #[serde(default = "d_30")]
    pub acquire_timeout: f64,
    /// E2B burst size (EXTRA, ≥ 0).
    #[serde(default)]
    pub burst_limit: i64,
    /// BoxLite health-check skip window (EXTRA, ≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_skip_seconds: Option<f64>,
    /// Multi-instance ownership leases (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership: Option<OwnershipConfig>,
    /// AIO remote provisioner (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioner_url: Option<String>,
    /// AIO remote provisioner key (EXTRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioner_api_key: Option<String>,
    /// Other provider-specific keys, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn d_20000() -> usize {
    20_000
}
fn d_50000() -> usize {
    50_000
}
fn d_600() -> f64 {
    600.0
}
fn d_30() -> f64 {
    30.0
}

impl Default for SandboxConfig {
    /// The local provider with DeerFlow's defaults (what antler uses when `sandbox` is missing).
    fn default() -> Self {
        Self {
            use_: LOCAL_SANDBOX_USE.to_owned(),
            allow_host_bash: false,
            mounts: Vec::new(),
            bash_output_max_chars: d_20000(),
            read_file_output_max_chars: d_50000(),
            ls_output_max_chars: d_20000(),
            bash_command_timeout: d_600(),
            confine: Confine::Auto,
            network: NetworkPolicy::Allow,
            limits: LimitsConfig::default(),
            image: None,
            port: None,
            replicas: None,
            container_prefix: None,
            idle_timeout: None,
            environment: Map::new(),
            thread_data_mounts: None,
            overflow_policy: OverflowPolicy::Wait,
            acquire_timeout: d_30(),
            burst_limit: 0,
            health_check_skip_seconds: None,
            ownership: None,
            provisioner_url: None,
            provisioner_api_key: None,
            extra: Map::new(),
        }
    }
}

impl SandboxConfig {
    /// `bash_command_timeout` as a duration (600 s if the value cannot be represented).
    pub fn bash_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.bash_command_timeout)
            .unwrap_or_else(|_| Duration::from_secs(600))
    }

    /// Whether `use` names the local (host) provider, in either spelling.
    pub fn is_local(&self) -> bool {
        let use_ = self.use_.trim();
        use_ == LOCAL_SANDBOX_USE || use_ == LOCAL_SANDBOX_USE_LONG
    }
}

/// Converter for host-side PDF conversion of uploads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PdfConverter {
    /// Pick what is available.
    #[default]
    Auto,
    /// pymupdf4llm.
    Pymupdf4llm,
    /// markitdown.
    Markitdown,
}

section! {
    plain:
    /// `uploads` (§12): a free-form mapping read leniently — a bad value falls back to its default
    /// (the loader reports it as a warning) instead of failing the load.
    #[derive(Debug, Clone, PartialEq, Serialize)]
    pub struct UploadsConfig {
        /// Files per upload request (legacy `max_file_count`).
        pub max_files: u64 = 10,
        /// Bytes per file (legacy `max_single_file_size`).
        pub max_file_size: u64 = 52_428_800,
        /// Bytes per request.
        pub max_total_size: u64 = 104_857_600,
        /// Convert PDF/Office uploads to Markdown companions.
        pub auto_convert_documents: bool = false,
        /// PDF converter.
        pub pdf_converter: PdfConverter = PdfConverter::Auto,
        /// Keys of the section that are not typed above, kept as written.
        #[serde(flatten)]
        pub extra: Map<String, Value> = Map::new(),
    }
}

impl UploadsConfig {
    /// Reads the section leniently; returns the config and one warning per value replaced by
    /// its default (`key` is the key path prefix, normally `uploads`).
    pub fn from_value(value: &Value, key: &str) -> (Self, Vec<String>) {
        let mut cfg = Self::default();
        let mut warnings = Vec::new();
        let Some(map) = value.as_object() else {
            if !value.is_null() {
                warnings.push(format!(
                    "{key}: expected a mapping, using the defaults (ignored)"
                ));
            }
            return (cfg, warnings);
        };
        const TYPED: &[&str] = &[
            "max_files",
            "max_file_count",
            "max_file_size",
            "max_single_file_size",
            "max_total_size",
            "auto_convert_documents",
            "pdf_converter",
        ];
        cfg.extra = map
            .iter()
            .filter(|(k, _)| !TYPED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let positive = |names: &[&str], default: u64, warnings: &mut Vec<String>| -> u64 {
            let Some((name, v)) = names.iter().find_map(|n| map.get(*n).map(|v| (*n, v))) else {
                return default;
            };
            let parsed = match v {
                Value::Number(n) => n.as_u64(),
                Value::String(s) => s.trim().parse::<u64>().ok(),
                _ => None,
            };
            match parsed {
                Some(n) if n > 0 => n,
                _ => {
                    warnings.push(format!(
                        "{key}.{name}: expected a positive integer, got {v}; using {default}"
                    ));
                    default
                }
            }
        };
        cfg.max_files = positive(&["max_files", "max_file_count"], 10, &mut warnings);
        cfg.max_file_size = positive(
            &["max_file_size", "max_single_file_size"],
            52_428_800,
            &mut warnings,
        );
        cfg.max_total_size = positive(&["max_total_size"], 104_857_600, &mut warnings);
        if let Some(v) = map.get("auto_convert_documents") {
            cfg.auto_convert_documents = match v {
                Value::Bool(b) => *b,
                Value::String(s) => matches!(
                    s.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                ),
                Value::Number(n) => n.as_i64() == Some(1),
                _ => false,
            };
        }
        if let Some(v) = map.get("pdf_converter") {
            cfg.pdf_converter = match v.as_str().map(|s| s.trim().to_ascii_lowercase()) {
                Some(s) if s == "auto" => PdfConverter::Auto,
                Some(s) if s == "pymupdf4llm" => PdfConverter::Pymupdf4llm,
                Some(s) if s == "markitdown" => PdfConverter::Markitdown,
                _ => {
                    warnings.push(format!(
                        "{key}.pdf_converter: expected auto, pymupdf4llm or markitdown, got {v}; using auto"
                    ));
                    PdfConverter::Auto
                }
            };
        }
        (cfg, warnings)
    }
}

impl<'de> Deserialize<'de> for UploadsConfig {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(de)?;
        Ok(Self::from_value(&value, "uploads").0)
    }
}

section! {
    /// `skills` (§14): where SKILL.md folders live and how the agent sees them.
    pub struct SkillsConfig {
        /// Storage backend (antler: built-in local storage).
        #[serde(rename = "use")]
        pub use_: String = "deerflow.skills.storage.local_skill_storage:LocalSkillStorage".to_owned(),
        /// Host skills root; relative → project root; null → `$DEER_FLOW_SKILLS_PATH`, `./skills`.
        pub path: Option<String> = None,
        /// Virtual mount path seen by the agent.
        pub container_path: String = "/mnt/skills".to_owned(),
        /// List names only in the prompt; details via `describe_skill`.
        pub deferred_discovery: bool = false,
    }
}

section! {
    /// `skill_evolution` (EXTRA): `skill_manage` tool + prompt section.
    pub struct SkillEvolutionConfig {
        /// Off by default.
        pub enabled: bool = false,
        /// Model for security scanning.
        pub moderation_model_name: Option<String> = None,
        /// Block on scanner failure.
        pub security_fail_closed: bool = true,
        /// Other keys, kept.
        #[serde(flatten)]
        pub extra: Map<String, Value> = Map::new(),
    }
}

section! {
    /// `skill_scan` (EXTRA): deterministic install-time analyzers.
    pub struct SkillScanConfig {
        /// On by default.
        pub enabled: bool = true,
        /// Other keys, kept.
        #[serde(flatten)]
        pub extra: Map<String, Value> = Map::new(),
    }
}
