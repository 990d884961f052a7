//! Linux confinement of `bash` with Landlock (DESIGN §5; antler goes beyond DeerFlow, whose
//! local sandbox does not confine).
//!
//! Policy: read and execute everywhere; write only inside the thread's folders, `/tmp`,
//! `/dev/shm` and the harmless character devices (`/dev/null`, `/dev/zero`, …); on kernels with
//! Landlock ABI ≥ 6, signals and abstract UNIX sockets are scoped to the sandbox too (a confined
//! command cannot kill antler). The policy is applied to *one thread*, which then becomes the
//! command: either
//!
//! - the helper re-invocation (`antler sandbox-exec --write DIR… -- SHELL -c CMD`, see
//!   [`sandbox_exec_main`]), which restricts itself and `exec`s the shell, or
//! - in-process (no helper configured): a fresh OS thread restricts itself and spawns the
//!   shell, which inherits the restriction; the thread then ends.
//!
//! Landlock is applied with `PR_SET_NO_NEW_PRIVS`, so set-uid programs cannot lift it. "Not
//! enforced" is an error inside the helper (fail closed), never a silent downgrade.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

use crate::settings::{Confine, SandboxSettings};

/// Whether bash will run confined, and why (not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfinementStatus {
    pub mode: Confine,
    /// Commands run under Landlock.
    pub active: bool,
    /// One line for logs and error messages.
    pub reason: String,
}

impl ConfinementStatus {
    /// `sandbox.confine: required` but confinement is unavailable: bash must refuse to run.
    pub fn refuses(&self) -> bool {
        self.mode == Confine::Required && !self.active
    }
}

/// Whether the local sandbox offers `bash`: `allow_host_bash || confinement active`.
///
/// DeerFlow keeps host bash off unless `sandbox.allow_host_bash: true`, because its local
/// sandbox is not an isolation boundary. antler's local sandbox confines bash with Landlock
/// where the kernel supports it (`sandbox.confine: auto|required`); a confined bash is no
/// longer host bash, so it is offered by default. With `sandbox.confine: off` (or no Landlock
/// under `auto`) only `allow_host_bash` turns bash on. Non-local providers (containers) always
/// offer bash; antler ships none yet. The bash tool re-checks this at call time.
pub fn bash_available(settings: &SandboxSettings, status: &ConfinementStatus) -> bool {
    settings.allow_host_bash || status.active
}

/// Kernel support for Landlock, probed once per process: `Ok(description)` or `Err(reason)`.
pub fn landlock_support() -> Result<String, String> {
    static PROBE: OnceLock<Result<String, String>> = OnceLock::new();
    PROBE.get_or_init(probe).clone()
}

/// The confinement status for a `sandbox.confine` mode (probes the kernel on first use).
pub fn confinement_status(mode: Confine) -> ConfinementStatus {
    match mode {
        Confine::Off => ConfinementStatus {
            mode,
            active: false,
            reason: "sandbox.confine is off".to_owned(),
        },
        Confine::Auto | Confine::Required => match landlock_support() {
            Ok(desc) => ConfinementStatus {
                mode,
                active: true,
                reason: desc,
            },
            Err(why) => ConfinementStatus {
                mode,
                active: false,
                reason: why,
            },
        },
    }
}

/// Log the status once per provider: info when active, warn when `auto` falls back, error
/// when `required` cannot be met.
pub fn log_status(status: &ConfinementStatus) {
    match (status.active, status.mode) {
        (true, _) => tracing::info!(reason = %status.reason, "bash is confined with Landlock"),
        (false, Confine::Off) => tracing::info!("bash confinement is off (sandbox.confine: off)"),
        (false, Confine::Auto) => tracing::warn!(
            reason = %status.reason,
            "Landlock is unavailable; bash runs unconfined on the host (sandbox.confine: auto)"
        ),
        (false, Confine::Required) => tracing::error!(
            reason = %status.reason,
            "sandbox.confine is required but Landlock is unavailable; bash will refuse to run"
        ),
    }
}

/// Directories a confined command may write, besides its thread folders.
pub fn default_writable_extras() -> Vec<PathBuf> {
    ["/tmp", "/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}

/// Device files a confined command may open for writing.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// What a Landlock ruleset allows: read (and execute) beneath `read`, everything beneath
/// `write` (plus the harmless devices), and — with `deny_net` — no TCP bind or connect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSpec {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub deny_net: bool,
}

/// What the kernel enforced of a [`RuleSpec`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enforced {
    /// `Landlock ABI vN (fully|partially enforced)`.
    pub description: String,
    /// TCP rules are in force (ABI ≥ 4).
    pub net: bool,
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use landlock::{
        path_beneath_rules, Access, AccessFs, AccessNet, LandlockStatus, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
    };

    /// Newest filesystem rights antler asks for; older kernels enforce what they know
    /// (best effort). V9 adds connecting to named UNIX sockets.
    const FS_ABI: ABI = ABI::V9;
    const SCOPE_ABI: ABI = ABI::V6;
    const NET_ABI: ABI = ABI::V4;

    fn ruleset(spec: &RuleSpec) -> Result<landlock::RestrictionStatus, RulesetError> {
        let devices: Vec<&Path> = WRITABLE_DEVICES
            .iter()
            .map(Path::new)
            .filter(|p| p.exists())
            .collect();
        let mut rs = Ruleset::default()
            .handle_access(AccessFs::from_all(FS_ABI))?
            .scope(Scope::from_all(SCOPE_ABI))?;
        if spec.deny_net {
            rs = rs.handle_access(AccessNet::from_all(NET_ABI))?;
        }
        rs.create()?
            .add_rules(path_beneath_rules(&spec.read, AccessFs::from_read(FS_ABI)))?
            .add_rules(path_beneath_rules(&spec.write, AccessFs::from_all(FS_ABI)))?
            .add_rules(path_beneath_rules(devices, AccessFs::from_all(FS_ABI)))?
            .restrict_self()
    }

    /// Restrict the calling thread (and everything it spawns or execs) to `spec`. Fails unless
    /// Landlock is enforced.
    pub fn restrict_current_thread_with(spec: &RuleSpec) -> Result<Enforced, String> {
        let status = ruleset(spec).map_err(|e| format!("Landlock setup failed: {e}"))?;
        let (abi, how) = match (&status.ruleset, &status.landlock) {
            (RulesetStatus::NotEnforced, l) => return Err(describe_unavailable(l)),
            (
                r,
                LandlockStatus::Available {
                    effective_abi,
                    kernel_abi,
                },
            ) => (
                (kernel_abi.unwrap_or(*effective_abi as i32), *effective_abi),
                if *r == RulesetStatus::FullyEnforced {
                    "fully"
                } else {
                    "partially"
                },
            ),
            (_, l) => return Err(describe_unavailable(l)),
        };
        Ok(Enforced {
            description: format!("Landlock ABI v{} ({how} enforced)", abi.0),
            net: spec.deny_net && abi.1 >= NET_ABI,
        })
    }

    /// Restrict the calling thread: read everywhere, write only under `writable` and the
    /// device files.
    pub fn restrict_current_thread(writable: &[PathBuf]) -> Result<(), String> {
        restrict_current_thread_with(&RuleSpec {
            read: vec![PathBuf::from("/")],
            write: writable.to_vec(),
            deny_net: false,
        })
        .map(|_| ())
    }

    fn describe_unavailable(s: &LandlockStatus) -> String {
        match s {
            LandlockStatus::NotEnabled => {
                "Landlock is built into this kernel but not enabled (add it to the lsm= boot parameter)".to_owned()
            }
            LandlockStatus::NotImplemented => {
                "this kernel does not support Landlock (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)".to_owned()
            }
            LandlockStatus::Available { .. } => {
                "Landlock is available but the ruleset could not be enforced".to_owned()
            }
        }
    }

    /// Restrict a throwaway thread and report what the kernel enforced.
    pub fn probe() -> Result<String, String> {
        let handle = std::thread::Builder::new()
            .name("antler-landlock-probe".into())
            .spawn(|| restrict_current_thread_with(&RuleSpec::default()).map(|e| e.description))
            .map_err(|e| format!("could not start the Landlock probe thread: {e}"))?;
        handle
            .join()
            .unwrap_or_else(|_| Err("the Landlock probe thread panicked".to_owned()))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    pub fn restrict_current_thread_with(_spec: &RuleSpec) -> Result<Enforced, String> {
        Err("Landlock is Linux-only".to_owned())
    }

    pub fn restrict_current_thread(_writable: &[PathBuf]) -> Result<(), String> {
        Err("Landlock is Linux-only".to_owned())
    }

    pub fn probe() -> Result<String, String> {
        Err("Landlock is Linux-only".to_owned())
    }
}

use imp::probe;
pub(crate) use imp::{restrict_current_thread, restrict_current_thread_with};

/// Parsed `sandbox-exec` arguments.
#[derive(Debug, PartialEq, Eq)]
struct ExecArgs {
    writable: Vec<PathBuf>,
    program: OsString,
    args: Vec<OsString>,
}

const USAGE: &str = "usage: sandbox-exec [--write DIR]... -- PROGRAM [ARGS]...";

fn parse_exec_args(args: &[OsString]) -> Result<ExecArgs, String> {
    let mut writable = Vec::new();
    let mut it = args.iter();
    loop {
        let Some(a) = it.next() else {
            return Err(USAGE.to_owned());
        };
        match a.to_str() {
            Some("--write") => match it.next() {
                Some(dir) => writable.push(PathBuf::from(dir)),
                None => return Err(format!("--write needs a directory; {USAGE}")),
            },
            Some("--") => break,
            _ => return Err(format!("unexpected argument {a:?}; {USAGE}")),
        }
    }
    let program = it.next().cloned().ok_or_else(|| USAGE.to_owned())?;
    Ok(ExecArgs {
        writable,
        program,
        args: it.cloned().collect(),
    })
}

/// The sandbox helper: `[--write DIR]... -- PROGRAM [ARGS]...` (arguments after the helper's
/// own name or subcommand). Applies Landlock to this process, then `exec`s `PROGRAM`. Returns
/// only on failure, with the exit code to use (125 bad usage, 126 confinement failed, 127 exec
/// failed); the reason is written to stderr. With `--warden POLICY` (and the internal
/// `--warden-init`/`--warden-serve` stages) it runs the warden instead ([`crate::warden`]).
/// The `antler` binary calls this from its hidden `sandbox-exec` subcommand.
pub fn sandbox_exec_main(args: &[OsString]) -> i32 {
    use std::io::Write;
    if args
        .first()
        .and_then(|a| a.to_str())
        .is_some_and(|a| a.starts_with("--warden"))
    {
        return crate::warden::warden_main(args);
    }
    let parsed = match parse_exec_args(args) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "antler sandbox-exec: {e}");
            return 125;
        }
    };
    if let Err(e) = restrict_current_thread(&parsed.writable) {
        let _ = writeln!(
            std::io::stderr(),
            "antler sandbox-exec: refusing to run unconfined: {e}"
        );
        return 126;
    }
    exec(&parsed.program, &parsed.args)
}

#[cfg(unix)]
fn exec(program: &OsString, args: &[OsString]) -> i32 {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(program).args(args).exec();
    let _ = writeln!(
        std::io::stderr(),
        "antler sandbox-exec: cannot execute {program:?}: {err}"
    );
    127
}

#[cfg(not(unix))]
fn exec(_program: &OsString, _args: &[OsString]) -> i32 {
    127
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn helper_arguments_parse() {
        let p = parse_exec_args(&os(&[
            "--write", "/a", "--write", "/b", "--", "/bin/sh", "-c", "echo",
        ]))
        .unwrap();
        assert_eq!(p.writable, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(p.program, "/bin/sh");
        assert_eq!(p.args, os(&["-c", "echo"]));
        assert!(parse_exec_args(&os(&["--write"])).is_err());
        assert!(parse_exec_args(&os(&["--",])).is_err());
        assert!(parse_exec_args(&os(&["/bin/sh"])).is_err());
        assert_eq!(sandbox_exec_main(&os(&["--bogus"])), 125);
    }

    #[test]
    fn the_bash_rule() {
        let mut s = SandboxSettings::default();
        let on = ConfinementStatus {
            mode: Confine::Auto,
            active: true,
            reason: String::new(),
        };
        let off = ConfinementStatus {
            mode: Confine::Auto,
            active: false,
            reason: String::new(),
        };
        assert!(bash_available(&s, &on));
        assert!(!bash_available(&s, &off));
        s.allow_host_bash = true;
        assert!(bash_available(&s, &off));
        let st = confinement_status(Confine::Off);
        assert!(!st.active);
        assert!(!st.refuses());
        let req = ConfinementStatus {
            mode: Confine::Required,
            active: false,
            reason: String::new(),
        };
        assert!(req.refuses());
    }
}
