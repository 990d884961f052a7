//! The local sandbox provider — antler's embedded default (spec 50 §3).
//!
//! Commands and file operations run on the host, inside the thread's folders, addressed with
//! virtual paths. Unlike DeerFlow's, this provider confines `bash` with Landlock where the
//! kernel supports it (see [`crate::confine`]), and its file operations never follow a
//! symlink out of a mount: each goes through the mount root's directory handle
//! ([`crate::beneath`]), so a thread folder that bash replaced with a symlink is refused.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::beneath::{self, Beneath};
use crate::confine::{self, ConfinementStatus};
use crate::error::SandboxError;
use crate::exec::{self, Confinement, ExecSpec};
use crate::fsops;
use crate::mapping::{is_under, Mapper, PathMapping};
use crate::paths::{
    ThreadPaths, VIRTUAL_OUTPUTS, VIRTUAL_UPLOADS, VIRTUAL_USER_DATA, VIRTUAL_WORKSPACE,
};
use crate::sandbox::{
    CommandOutput, CommandRequest, GrepMatch, GrepQuery, OutputLines, Sandbox, SandboxProvider,
};
use crate::settings::{Confine, HelperCommand, SandboxSettings};
use crate::warden::{self, Launcher, Policy, Warden};

/// Largest file `download_file` returns.
pub const MAX_DOWNLOAD_BYTES: u64 = 100 * 1024 * 1024;
/// How many per-thread sandboxes stay cached.
pub const LRU_CAPACITY: usize = 256;

/// Virtual prefixes a custom mount may not claim.
fn reserved_prefixes(settings: &SandboxSettings) -> Vec<String> {
    vec![
        VIRTUAL_USER_DATA.to_owned(),
        "/mnt/acp-workspace".to_owned(),
        settings
            .skills_container_path
            .trim_end_matches('/')
            .to_owned(),
    ]
}

/// Split `sandbox.mounts` into entries that pass validation (spec 50 §3.2) and the reasons the
/// others were skipped. Pure: no logging (see [`valid_mounts`]).
pub fn validate_mounts(settings: &SandboxSettings) -> (Vec<PathMapping>, Vec<String>) {
    let reserved = reserved_prefixes(settings);
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for m in &settings.mounts {
        let container = m.container_path.trim_end_matches('/').to_owned();
        let host = m.host_path.display();
        let why = if !m.host_path.is_absolute() {
            Some(format!("host_path {host} must be absolute"))
        } else if !m.host_path.exists() {
            Some(format!(
                "host_path {host} does not exist; create it or fix sandbox.mounts in config.yaml"
            ))
        } else if !container.starts_with('/') {
            Some(format!(
                "container_path {} must be absolute",
                m.container_path
            ))
        } else if reserved.iter().any(|r| is_under(&container, r)) {
            Some(format!("container_path {} is reserved", m.container_path))
        } else {
            None
        };
        match why {
            Some(w) => skipped.push(format!("skipping sandbox mount {}: {w}", m.container_path)),
            None => ok.push(PathMapping::new(container, &m.host_path, m.read_only)),
        }
    }
    (ok, skipped)
}

/// The valid `sandbox.mounts` entries; each skipped one is logged (missing host paths at error
/// level, with guidance).
pub fn valid_mounts(settings: &SandboxSettings) -> Vec<PathMapping> {
    let (ok, skipped) = validate_mounts(settings);
    for s in skipped {
        if s.contains("does not exist") {
            tracing::error!("{s}");
        } else {
            tracing::warn!("{s}");
        }
    }
    ok
}

/// One thread's (or the generic) local sandbox.
pub struct LocalSandbox {
    id: String,
    paths: Option<ThreadPaths>,
    mapper: Mapper,
    settings: Arc<SandboxSettings>,
    confinement: ConfinementStatus,
    /// Directories a confined command may write.
    writable: Vec<PathBuf>,
    /// Host files this sandbox wrote (their content had container paths rewritten).
    agent_written: Mutex<HashSet<PathBuf>>,
    /// What confined commands may reach (see [`crate::warden`]).
    policy: Policy,
    /// The launcher of the helper program (shared by the provider's sandboxes); `None` falls
    /// back to in-process Landlock.
    launcher: Option<Arc<Launcher>>,
    /// The running warden, started on the first command.
    warden: tokio::sync::Mutex<Option<Arc<Warden>>>,
    /// Landlock rules for the in-process fallback, computed once.
    fallback_rules: std::sync::OnceLock<crate::confine::RuleSpec>,
    /// The shell commands run with, found at the first command.
    shell: std::sync::OnceLock<PathBuf>,
    /// The scrubbed host environment, read at the first command of any of the provider's
    /// sandboxes (a new thread's sandbox need not scan and filter the environment again).
    host_env: Arc<HostEnv>,
}

/// The provider's scrubbed host environment, read once.
type HostEnv = std::sync::OnceLock<Arc<[(std::ffi::OsString, std::ffi::OsString)]>>;

/// Distinct cgroup leaf names within this process.
static SANDBOX_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl LocalSandbox {
    fn new(
        id: String,
        paths: Option<ThreadPaths>,
        static_mounts: &[PathMapping],
        ctx: &ProviderShared,
    ) -> LocalSandbox {
        let settings = ctx.settings.clone();
        let confinement = ctx.status.clone();
        let mut mappings = Vec::new();
        let mut writable = Vec::new();
        let mut readable = Vec::new();
        let mut mount_writable = Vec::new();
        if let Some(p) = &paths {
            // Pinned: confined bash can replace these folders, so they are never followed.
            mappings.push(PathMapping::pinned(VIRTUAL_USER_DATA, &p.user_data));
            mappings.push(PathMapping::pinned(VIRTUAL_WORKSPACE, &p.workspace));
            mappings.push(PathMapping::pinned(VIRTUAL_UPLOADS, &p.uploads));
            mappings.push(PathMapping::pinned(VIRTUAL_OUTPUTS, &p.outputs));
            writable.push(p.user_data.clone());
        }
        if let Some(skills) = &settings.skills_host_path {
            if skills.is_dir() {
                mappings.push(PathMapping::new(
                    settings.skills_container_path.clone(),
                    skills,
                    true,
                ));
                readable.push(skills.clone());
            }
        }
        for m in static_mounts {
            if m.read_only {
                readable.push(m.host.clone());
            } else {
                writable.push(m.host.clone());
                mount_writable.push(m.host.clone());
            }
            mappings.push(m.clone());
        }
        writable.extend(confine::default_writable_extras());
        if let Some(p) = &paths {
            // The thread's own temporary folder (bound over /tmp inside the sandbox).
            let _ = std::fs::create_dir_all(p.thread_dir.join("tmp"));
        }
        let mut deny_read = settings.deny_read.clone();
        deny_read.push(ctx.home.clone());
        let seq = SANDBOX_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let policy = Policy {
            mode: settings.confine,
            user_data: paths.as_ref().map(|p| p.user_data.clone()),
            tmp: paths.as_ref().map(|p| p.thread_dir.join("tmp")),
            writable: mount_writable,
            readable,
            deny_read,
            network: settings.network,
            limits: settings.limits,
            cgroup: format!("{}{}-{seq}", warden::LEAF_PREFIX, std::process::id()),
        };
        LocalSandbox {
            id,
            paths,
            mapper: Mapper::new(mappings),
            settings,
            confinement,
            writable,
            agent_written: Mutex::new(HashSet::new()),
            policy,
            launcher: ctx.launcher.clone(),
            warden: tokio::sync::Mutex::new(None),
            fallback_rules: std::sync::OnceLock::new(),
            shell: std::sync::OnceLock::new(),
            host_env: ctx.host_env.clone(),
        }
    }

    /// The running warden, started (or restarted after it died) on demand.
    async fn warden(&self, launcher: &Launcher) -> Result<Arc<Warden>, SandboxError> {
        let mut slot = self.warden.lock().await;
        if let Some(w) = slot.as_ref().filter(|w| w.is_alive()) {
            return Ok(w.clone());
        }
        let w = Arc::new(Warden::start(launcher, &self.policy).await?);
        *slot = Some(w.clone());
        Ok(w)
    }

    /// What confined commands of this sandbox may reach.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Point `TMPDIR` at the sandbox's own temporary folder: `/tmp` when it is private, else
    /// the thread's tmp folder (the shared /tmp may be only partly writable).
    fn set_tmpdir(&self, spec: &mut ExecSpec, private_tmp: bool) {
        let dir = match (&self.policy.tmp, private_tmp) {
            (_, true) => PathBuf::from("/tmp"),
            (Some(t), false) => t.clone(),
            (None, false) => return,
        };
        spec.env.set("TMPDIR", dir);
    }

    /// The thread folders, when this sandbox belongs to a thread.
    pub fn thread_paths(&self) -> Option<&ThreadPaths> {
        self.paths.as_ref()
    }

    pub fn mapper(&self) -> &Mapper {
        &self.mapper
    }

    /// Directories a confined command may write.
    pub fn writable_dirs(&self) -> &[PathBuf] {
        &self.writable
    }

    fn is_agent_written(&self, host: &Path) -> bool {
        self.agent_written
            .lock()
            .map(|s| s.contains(host))
            .unwrap_or(false)
    }

    fn exec_spec(&self, command: &str, req: &CommandRequest) -> Result<ExecSpec, SandboxError> {
        let shell = match self.shell.get() {
            Some(s) => s.clone(),
            None => {
                let s = exec::find_shell().ok_or_else(|| {
                    SandboxError::Runtime("No usable shell found (tried bash, sh, zsh)".into())
                })?;
                self.shell.get_or_init(|| s).clone()
            }
        };
        let host = self.host_env.get_or_init(crate::env::scrubbed_host_env);
        let env = crate::env::with_injected(host, &req.env)?;
        let cwd = self
            .paths
            .as_ref()
            .map(|p| p.workspace.clone())
            .filter(|w| w.is_dir());
        let timeout = req.timeout.unwrap_or(self.settings.bash_command_timeout);
        let args = vec!["-c".into(), command.into()];
        Ok(ExecSpec {
            program: shell,
            args,
            env,
            cwd,
            timeout,
            capture_limit: self.settings.capture_limit_bytes,
            confinement: Confinement::None,
            // Lines leave the sandbox masked, like the final output.
            lines: req.lines.clone().map(|sink| {
                let mapper = self.mapper.clone();
                OutputLines::new(move |line| sink.line(&mapper.mask(line)))
            }),
        })
    }
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    async fn execute_command(&self, req: CommandRequest) -> Result<CommandOutput, SandboxError> {
        if self.confinement.refuses() {
            return Err(SandboxError::ConfinementRequired(
                self.confinement.reason.clone(),
            ));
        }
        let command = self.mapper.rewrite_command(&req.command).into_owned();
        let mut spec = self.exec_spec(&command, &req)?;
        let timeout = spec.timeout;
        let res = match (self.confinement.active, &self.launcher) {
            (true, Some(launcher)) => {
                let warden = self.warden(launcher).await?;
                self.set_tmpdir(&mut spec, warden.ready().guarantees.private_tmp);
                warden.exec(&spec).await?
            }
            (true, None) if self.settings.confine == Confine::Required => {
                return Err(SandboxError::ConfinementRequired(
                    "no sandbox helper program was found (run through the antler binary, or set ANTLER_SANDBOX_HELPER to an antler or antler-sandbox-helper binary); in-process confinement cannot hide antler's own processes"
                        .to_owned(),
                ))
            }
            (true, None) => {
                self.set_tmpdir(&mut spec, false);
                spec.confinement = Confinement::InProcess {
                    rules: self
                        .fallback_rules
                        .get_or_init(|| self.policy.rules(false))
                        .clone(),
                };
                exec::run(spec).await?
            }
            (false, _) => exec::run(spec).await?,
        };
        let text = exec::assemble_output(&res, timeout);
        Ok(CommandOutput {
            text: self.mapper.mask(&text).into_owned(),
            exit_code: res.exit_code,
            timed_out: res.timed_out,
            timeout,
        })
    }

    fn read_file(
        &self,
        path: &str,
        start_line: Option<u64>,
        end_line: Option<u64>,
    ) -> Result<String, SandboxError> {
        let t = self.target(path, false)?;
        let file = t
            .root
            .open(&t.rel)
            .map_err(|e| SandboxError::from_io(path, e))?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(SandboxError::IsADirectory(path.to_owned()));
        }
        let content = if start_line.is_none() && end_line.is_none() {
            fsops::read_text_from(file, path, self.settings.read_file_max_bytes)?
        } else {
            fsops::read_lines_from(file, path, start_line.unwrap_or(1).max(1), end_line)?
        };
        if self.is_agent_written(&t.host) {
            return Ok(self.mapper.mask(&content).into_owned());
        }
        Ok(content)
    }

    fn download_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        if !is_under(path, VIRTUAL_USER_DATA) {
            tracing::error!(path, "refused download outside /mnt/user-data");
            return Err(SandboxError::PermissionDenied(format!(
                "Access denied: path must be under '{VIRTUAL_USER_DATA}'"
            )));
        }
        let t = self.target(path, false)?;
        let file = t
            .root
            .open(&t.rel)
            .map_err(|e| SandboxError::from_io(path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| SandboxError::from_io(path, e))?;
        if meta.is_dir() {
            return Err(SandboxError::IsADirectory(path.to_owned()));
        }
        if meta.len() > MAX_DOWNLOAD_BYTES {
            return Err(SandboxError::TooLarge {
                path: path.to_owned(),
                size: meta.len(),
                limit: MAX_DOWNLOAD_BYTES,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(MAX_DOWNLOAD_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| SandboxError::from_io(path, e))?;
        Ok(bytes)
    }

    fn list_dir(&self, path: &str, max_depth: usize) -> Result<Vec<String>, SandboxError> {
        let (t, start) = self.folder(path)?;
        let base = self.mapper.root(t.index).host();
        let mut out: Vec<String> = fsops::list_dir_in(&t.root, &start, max_depth)
            .into_iter()
            .map(|e| {
                let v = self.mapper.reverse(&base.join(&e.path));
                if e.is_dir {
                    format!("{}/", v.trim_end_matches('/'))
                } else {
                    v
                }
            })
            .collect();
        // Mounts that are direct children of `path` but live elsewhere on the host.
        let base = path.trim_end_matches('/');
        for (i, m) in self.mapper.mappings().iter().enumerate() {
            if let Some(child) = m
                .container
                .strip_prefix(base)
                .and_then(|r| r.strip_prefix('/'))
            {
                let listed = format!("{}/", m.container);
                if !child.is_empty()
                    && !child.contains('/')
                    && !out.contains(&listed)
                    && self.mapper.root(i).is_usable()
                {
                    out.push(listed);
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn write_file(&self, path: &str, content: &str, append: bool) -> Result<(), SandboxError> {
        let t = self.writable_target(path)?;
        let content = self.mapper.rewrite_content(content);
        let mut file = t
            .root
            .open_with(&t.rel, &beneath::write_options(append))
            .map_err(|e| SandboxError::from_io(path, e))?
            .into_std();
        file.write_all(content.as_bytes())
            .map_err(|e| SandboxError::from_io(path, e))?;
        if let Ok(mut set) = self.agent_written.lock() {
            set.insert(t.host);
        }
        Ok(())
    }

    fn glob(
        &self,
        path: &str,
        pattern: &str,
        include_dirs: bool,
        max_results: usize,
    ) -> Result<(Vec<String>, bool), SandboxError> {
        let (t, start) = self.folder(path)?;
        let dir = t
            .root
            .open_dir(&start)
            .map_err(|e| SandboxError::from_io(path, e))?;
        let (found, truncated) = fsops::glob_in(&dir, pattern, include_dirs, max_results)?;
        let base = self.mapper.root(t.index).host().join(&start);
        Ok((
            found
                .iter()
                .map(|p| self.mapper.reverse(&base.join(p)))
                .collect(),
            truncated,
        ))
    }

    fn grep(&self, path: &str, query: &GrepQuery) -> Result<(Vec<GrepMatch>, bool), SandboxError> {
        let t = self.target(path, false)?;
        let start = t
            .root
            .canonical(&t.rel, false)
            .map_err(|e| SandboxError::from_io(path, e))?;
        let (found, truncated) = fsops::grep_in(
            &t.root,
            &start,
            path,
            &query.pattern,
            query.glob.as_deref(),
            query.literal,
            query.case_sensitive,
            query.max_results,
        )?;
        let base = self.mapper.root(t.index).host();
        Ok((
            found
                .into_iter()
                .map(|m| GrepMatch {
                    path: self.mapper.reverse(&base.join(&m.path)),
                    line_number: m.line_number,
                    line: m.line,
                })
                .collect(),
            truncated,
        ))
    }

    fn update_file(&self, path: &str, bytes: &[u8]) -> Result<(), SandboxError> {
        let t = self.writable_target(path)?;
        let mut file = t
            .root
            .open_with(&t.rel, &beneath::write_options(false))
            .map_err(|e| SandboxError::from_io(path, e))?
            .into_std();
        file.write_all(bytes)
            .map_err(|e| SandboxError::from_io(path, e))
    }

    fn mask(&self, text: &str) -> String {
        self.mapper.mask(text).into_owned()
    }

    fn thread_paths(&self) -> Option<&ThreadPaths> {
        self.paths.as_ref()
    }
}

/// A virtual path resolved to its mount root (see [`LocalSandbox::target`]).
struct Target {
    index: usize,
    root: Beneath,
    /// Below the root, as spelled (no `..`).
    rel: PathBuf,
    /// `root.host()` joined with `rel` (the key of the agent-written set).
    host: PathBuf,
    read_only: bool,
}

// File-operation helpers (kept apart from command execution).
impl LocalSandbox {
    /// Where a virtual path lives: its mount root's validated handle and the path below it.
    /// `create`: a missing root (and its missing parents) is created first. A missing root of
    /// a read is "not found" for the path asked about.
    fn target(&self, path: &str, create: bool) -> Result<Target, SandboxError> {
        let loc = self.mapper.locate(path)?;
        let root = self.mapper.root(loc.index);
        let opened = if create {
            root.open_or_create()
        } else {
            root.open()
        };
        let root_handle = match opened {
            Err(SandboxError::NotFound(_)) => return Err(SandboxError::NotFound(path.to_owned())),
            other => other?,
        };
        Ok(Target {
            index: loc.index,
            host: root.host().join(&loc.rel),
            read_only: loc.mapping.read_only,
            rel: loc.rel,
            root: root_handle,
        })
    }

    /// [`LocalSandbox::target`] for a write: refused on read-only mounts (also when the target
    /// really lies in a read-only mount nested inside this one), parent folders created beneath
    /// the root.
    /// The folder `path` to read: its target and its canonical path below the root
    /// (`NotADirectory` for a file).
    fn folder(&self, path: &str) -> Result<(Target, PathBuf), SandboxError> {
        let t = self.target(path, false)?;
        let start = t
            .root
            .canonical(&t.rel, false)
            .map_err(|e| SandboxError::from_io(path, e))?;
        let meta = t
            .root
            .metadata(&start)
            .map_err(|e| SandboxError::from_io(path, e))?;
        if !meta.is_dir() {
            return Err(SandboxError::NotADirectory(path.to_owned()));
        }
        Ok((t, start))
    }

    fn writable_target(&self, path: &str) -> Result<Target, SandboxError> {
        let loc = self.mapper.locate(path)?;
        if loc.mapping.read_only {
            return Err(SandboxError::ReadOnly(path.to_owned()));
        }
        let t = self.target(path, true)?;
        if let Some(parent) = t.rel.parent() {
            t.root
                .create_dir_all(parent)
                .map_err(|e| SandboxError::from_io(path, e))?;
        }
        if self.mapper.has_read_only_inside(t.index) {
            let canon = t
                .root
                .canonical(&t.rel, true)
                .map_err(|e| SandboxError::from_io(path, e))?;
            if self
                .mapper
                .host_is_read_only(&t.root.canonical_root().join(canon))
            {
                return Err(SandboxError::ReadOnly(path.to_owned()));
            }
        }
        debug_assert!(!t.read_only);
        Ok(t)
    }
}

/// The sandboxes of a provider, least recently used evicted past [`LRU_CAPACITY`] — but never
/// one in use: evicting a sandbox ends its warden, and a thread that is mid-run would start a
/// new one (three processes, namespaces, mounts, Landlock) on its next command. With more
/// threads running at once than the capacity, the cache holds one sandbox per running thread
/// and shrinks back to the capacity at the inserts after they go idle (trimming runs on insert
/// only, so a `get` per tool call never scans the cache).
struct Cache {
    map: HashMap<String, Entry>,
    tick: u64,
    /// How long after its last use a sandbox still counts as in use (between a run's
    /// commands it is not held: the model is thinking).
    busy_for: Duration,
}

struct Entry {
    sandbox: Arc<LocalSandbox>,
    tick: u64,
    used: Instant,
}

/// A sandbox used within this long is not evicted (a model call between two commands of one
/// run rarely takes longer).
const BUSY_FOR: Duration = Duration::from_secs(120);

impl Default for Cache {
    fn default() -> Cache {
        Cache::with_busy_for(BUSY_FOR)
    }
}

impl Cache {
    fn with_busy_for(busy_for: Duration) -> Cache {
        Cache {
            map: HashMap::new(),
            tick: 0,
            busy_for,
        }
    }

    fn get(&mut self, id: &str) -> Option<Arc<LocalSandbox>> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(id).map(|e| {
            e.tick = t;
            e.used = Instant::now();
            e.sandbox.clone()
        })
    }

    fn insert(&mut self, id: String, s: Arc<LocalSandbox>) -> Arc<LocalSandbox> {
        if let Some(existing) = self.get(&id) {
            return existing;
        }
        self.tick += 1;
        self.map.insert(
            id,
            Entry {
                sandbox: s.clone(),
                tick: self.tick,
                used: Instant::now(),
            },
        );
        self.trim();
        s
    }

    /// Evict idle sandboxes, least recently used first, down to the capacity.
    fn trim(&mut self) {
        if self.map.len() <= LRU_CAPACITY {
            return;
        }
        let now = Instant::now();
        let busy_for = self.busy_for;
        let mut idle: Vec<(u64, String)> = self
            .map
            .iter()
            .filter(|(_, e)| {
                Arc::strong_count(&e.sandbox) == 1 && now.duration_since(e.used) >= busy_for
            })
            .map(|(k, e)| (e.tick, k.clone()))
            .collect();
        idle.sort_unstable();
        let excess = self.map.len() - LRU_CAPACITY;
        for (_, k) in idle.into_iter().take(excess) {
            self.map.remove(&k);
        }
    }
}

/// Hands out [`LocalSandbox`]es: one per (user, thread), cached (LRU, 256) and reused across
/// turns. Ids: `local:{thread}`, `local:{user}:{thread}`, or `local` without a thread.
pub struct LocalSandboxProvider {
    shared: ProviderShared,
    mounts: Vec<PathMapping>,
    cache: Mutex<Cache>,
}

/// What every sandbox of a provider shares.
struct ProviderShared {
    home: PathBuf,
    settings: Arc<SandboxSettings>,
    status: ConfinementStatus,
    /// Starts the wardens of every sandbox of the provider (one process, started on first use).
    launcher: Option<Arc<Launcher>>,
    host_env: Arc<HostEnv>,
}

impl LocalSandboxProvider {
    /// `home` is the data home (`$ANTLER_HOME`). Probes Landlock (once per process) and logs
    /// the confinement status.
    pub fn new(home: impl Into<PathBuf>, settings: SandboxSettings) -> LocalSandboxProvider {
        let status = confine::confinement_status(settings.confine);
        confine::log_status(&status);
        Self::with_status(home, settings, status)
    }

    /// As [`LocalSandboxProvider::new`] with a given confinement status (tests, or a caller
    /// that already probed).
    pub fn with_status(
        home: impl Into<PathBuf>,
        settings: SandboxSettings,
        status: ConfinementStatus,
    ) -> LocalSandboxProvider {
        let mounts = valid_mounts(&settings);
        let helpers = if status.active {
            let helpers = match &settings.helper {
                Some(h) => vec![h.clone()],
                None if settings.helper_search => HelperCommand::candidates(),
                None => Vec::new(),
            };
            match helpers.first() {
                Some(h) => {
                    tracing::debug!(helper = %h.exe.display(), "bash runs under the sandbox helper");
                    warden::sweep_stale_cgroups();
                }
                None => tracing::warn!(
                    "no sandbox helper program found: bash is confined in-process with Landlock only (antler's processes stay visible to it)"
                ),
            }
            helpers
        } else {
            Vec::new()
        };
        LocalSandboxProvider {
            shared: ProviderShared {
                home: home.into(),
                settings: Arc::new(settings),
                status,
                launcher: Launcher::new(helpers).map(Arc::new),
                host_env: Arc::default(),
            },
            mounts,
            cache: Mutex::new(Cache::default()),
        }
    }

    pub fn home(&self) -> &Path {
        &self.shared.home
    }

    pub fn settings(&self) -> &Arc<SandboxSettings> {
        &self.shared.settings
    }

    /// The concrete sandbox for an id (for callers that need its thread paths).
    pub fn get_local(&self, id: &str) -> Option<Arc<LocalSandbox>> {
        self.cache.lock().ok()?.get(id)
    }

    /// The sandbox id `acquire` returns for (thread, user).
    pub fn sandbox_id(thread_id: Option<&str>, user_id: Option<&str>) -> String {
        match (thread_id, user_id) {
            (None, _) => "local".to_owned(),
            (Some(t), None) => format!("local:{t}"),
            (Some(t), Some(u)) => format!("local:{u}:{t}"),
        }
    }
}

impl SandboxProvider for LocalSandboxProvider {
    fn acquire(
        &self,
        thread_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<String, SandboxError> {
        let id = Self::sandbox_id(thread_id, user_id);
        if let Some(found) = self.cache.lock().ok().and_then(|mut c| c.get(&id)) {
            return Ok(found.id.clone());
        }
        // Filesystem work outside the lock; the insert re-checks and keeps the first.
        let paths = match thread_id {
            Some(t) => {
                let p = ThreadPaths::new(&self.shared.home, t, user_id)?;
                p.ensure_dirs().map_err(|e| {
                    SandboxError::Runtime(format!("Failed to create thread folders: {e}"))
                })?;
                Some(p)
            }
            None => None,
        };
        let sandbox = Arc::new(LocalSandbox::new(
            id.clone(),
            paths,
            &self.mounts,
            &self.shared,
        ));
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| SandboxError::Runtime("sandbox cache lock poisoned".into()))?;
        Ok(cache.insert(id, sandbox).id.clone())
    }

    fn get(&self, id: &str) -> Option<Arc<dyn Sandbox>> {
        self.get_local(id).map(|s| s as Arc<dyn Sandbox>)
    }

    fn release(&self, _id: &str) {}

    fn reset(&self) {
        if let Ok(mut c) = self.cache.lock() {
            c.map.clear();
        }
    }

    fn uses_thread_data_mounts(&self) -> bool {
        true
    }

    fn is_local(&self) -> bool {
        true
    }

    fn confinement(&self) -> ConfinementStatus {
        self.shared.status.clone()
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    fn shared(home: &Path) -> ProviderShared {
        ProviderShared {
            home: home.to_path_buf(),
            settings: Arc::new(SandboxSettings::default()),
            status: ConfinementStatus {
                mode: Confine::Off,
                active: false,
                reason: String::new(),
            },
            launcher: None,
            host_env: Arc::default(),
        }
    }

    fn fill(cache: &mut Cache, ctx: &ProviderShared, n: usize) {
        for i in 0..n {
            let id = format!("local:t{i}");
            let sb = Arc::new(LocalSandbox::new(id.clone(), None, &[], ctx));
            cache.insert(id, sb);
        }
    }

    #[test]
    fn idle_sandboxes_are_evicted_oldest_first_down_to_the_capacity() {
        let home = tempfile::tempdir().unwrap();
        let ctx = shared(home.path());
        let mut cache = Cache::with_busy_for(Duration::ZERO);
        fill(&mut cache, &ctx, LRU_CAPACITY + 44);
        assert_eq!(cache.map.len(), LRU_CAPACITY);
        assert!(cache.get("local:t43").is_none());
        assert!(cache.get("local:t44").is_some());
    }

    #[test]
    fn a_sandbox_in_use_is_never_evicted() {
        let home = tempfile::tempdir().unwrap();
        let ctx = shared(home.path());
        // Recently used: a thread between two commands of a run.
        let mut recent = Cache::with_busy_for(Duration::from_secs(3600));
        fill(&mut recent, &ctx, LRU_CAPACITY + 44);
        assert_eq!(recent.map.len(), LRU_CAPACITY + 44);
        // Held: a command is running in it, however long ago it started.
        let mut held = Cache::with_busy_for(Duration::ZERO);
        fill(&mut held, &ctx, 1);
        let running = held.get("local:t0");
        fill(&mut held, &ctx, LRU_CAPACITY + 44);
        assert_eq!(held.map.len(), LRU_CAPACITY);
        assert!(held.get("local:t0").is_some());
        drop(running);
    }
}
