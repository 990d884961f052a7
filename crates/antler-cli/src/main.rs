//! `antler`: DeerFlow's super-agent harness in one binary.

mod mcp_cmd;
mod memory_cmd;
mod render;
mod runs_cmd;
mod serve_cmd;
mod threads;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use antler_agent::{AgentError, App, TurnRequest};
use antler_config::{Config, Loaded};
use antler_protocol::Message;
use antler_runtime::{CancellationToken, EventSink, NullSink, RunStatus};
use antler_store::MultitaskStrategy;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use render::{JsonlRenderer, OutputFormat, TextRenderer};
use serde_json::json;

/// Small blocks are kept per thread (see `antler-alloc`): an agent step's few hundred
/// short-lived allocations then skip glibc's slow path.
#[global_allocator]
static GLOBAL: antler_alloc::ThreadCache = antler_alloc::ThreadCache;

/// Exit codes (README "Exit codes").
pub(crate) mod exit {
    /// Success, interrupted, or an error the agent answered gracefully.
    pub const OK: u8 = 0;
    /// The run failed (status `error`).
    pub const RUN_FAILED: u8 = 1;
    /// Bad config, unknown model, bad arguments.
    pub const USAGE: u8 = 2;
    /// The store (database, data home) is unavailable.
    pub const STORE: u8 = 3;
    /// The thread already has an active run (`--multitask-strategy reject`).
    pub const BUSY: u8 = 4;
}

#[derive(Parser)]
#[command(
    name = "antler",
    version,
    about = "DeerFlow's super-agent harness, in Rust"
)]
struct Cli {
    /// config.yaml to use (default: $ANTLER_CONFIG, then ./config.yaml, else a built-in default).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the lead agent for one user message on a thread.
    Run(RunArgs),
    /// Inspect threads.
    #[command(subcommand)]
    Threads(ThreadsCmd),
    /// Inspect runs and their journal.
    #[command(subcommand)]
    Runs(runs_cmd::RunsCmd),
    /// Show or clear long-term memory.
    #[command(subcommand)]
    Memory(memory_cmd::MemoryCmd),
    /// MCP servers from extensions_config.json and the tools they give the agent.
    #[command(subcommand)]
    Mcp(mcp_cmd::McpCmd),
    /// Write or validate config.yaml.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Serve the LangGraph-compatible HTTP API (DeerFlow's web UI, langgraph-sdk clients).
    Serve(ServeArgs),
    /// Print the middleware chain a run would use, in order.
    Chain(ChainArgs),
    /// Internal: run a command under the sandbox's confinement.
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Continue this thread (created when new).
    #[arg(long)]
    thread_id: Option<String>,
    #[command(flatten)]
    agent: AgentArgs,
    /// Allow delegating to subagents (overrides `subagents.enabled`).
    #[arg(long, overrides_with = "no_subagents")]
    subagents: bool,
    /// Do not delegate to subagents.
    #[arg(long)]
    no_subagents: bool,
    /// Graph steps allowed (default 100, clamped to `max_recursion_limit`).
    #[arg(long)]
    recursion_limit: Option<i64>,
    /// Files to upload into the thread and attach to the message.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    attach: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
    /// When the thread already has an active run: refuse (reject), stop it (interrupt), stop
    /// it and restore the thread to before it (rollback), or wait for it (enqueue).
    #[arg(long, default_value = "reject", value_parser = parse_strategy)]
    multitask_strategy: MultitaskStrategy,
    /// The message (`-` reads it from stdin).
    message: String,
}

fn parse_strategy(s: &str) -> Result<MultitaskStrategy, String> {
    s.parse()
        .map_err(|_| "expected reject, interrupt, rollback or enqueue".to_owned())
}

/// Which agent `run` and `chain` build.
#[derive(Args)]
struct AgentArgs {
    /// Model name from config.yaml `models:` (default: the custom agent's, else the first).
    #[arg(long)]
    model: Option<String>,
    /// Run a custom agent (`$ANTLER_HOME/agents/NAME/config.yaml` + `SOUL.md`).
    #[arg(long)]
    agent: Option<String>,
    /// Plan mode: the agent keeps a todo list.
    #[arg(long)]
    plan_mode: bool,
}

impl AgentArgs {
    /// The turn request for this agent (the rest defaulted).
    fn request(&self) -> TurnRequest {
        TurnRequest {
            model_name: self.model.clone(),
            agent_name: self.agent.clone(),
            plan_mode: self.plan_mode,
            ..Default::default()
        }
    }
}

#[derive(Args)]
struct ChainArgs {
    #[command(flatten)]
    agent: AgentArgs,
    #[arg(long)]
    subagents: bool,
    /// Print a subagent's chain instead of the lead agent's.
    #[arg(long)]
    subagent: bool,
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on. Anything but a loopback address needs ANTLER_API_KEY (or
    /// ANTLER_API_KEYS=user=key,…) in the environment.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    #[arg(long, default_value_t = 2026)]
    port: u16,
    /// Browser origin allowed to call the API cross-origin (repeatable; default: CORS off).
    #[arg(
        long = "cors-origin",
        value_name = "ORIGIN",
        env = "ANTLER_CORS_ORIGINS",
        value_delimiter = ','
    )]
    cors_origins: Vec<String>,
    /// Seconds a finished run's events stay replayable for late joins.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    retention_secs: u64,
    /// Seconds a client may take to send its request headers (or keep an idle connection
    /// open) before the connection is closed. Streams are not affected.
    #[arg(long, default_value_t = 10, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout_secs: u64,
    /// Most connections served at once; further clients wait until one closes.
    #[arg(long, default_value_t = antler_server::DEFAULT_MAX_CONNECTIONS, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
}

#[derive(Subcommand)]
enum ThreadsCmd {
    /// List threads, most recently updated first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
    /// Print a thread's conversation.
    Show {
        id: String,
        /// Include hidden messages and everything a summary replaced.
        #[arg(long)]
        full: bool,
        #[arg(long, value_enum, default_value = "text")]
        output: OutputFormat,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Write a commented config.yaml.
    Init {
        #[arg(long, default_value = "config.yaml")]
        path: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Validate a config file and show what it sets up.
    Check,
}

/// An error with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
    }
}

impl From<AgentError> for Failure {
    fn from(e: AgentError) -> Self {
        let code = if matches!(e, AgentError::ThreadBusy { .. }) {
            exit::BUSY
        } else if e.is_usage() {
            exit::USAGE
        } else {
            exit::STORE
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure {
            code: exit::RUN_FAILED,
            message: format!("{e:#}"),
        }
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

#[allow(clippy::print_stderr)]
fn warn_user(msg: &str) {
    eprintln!("antler: {msg}");
}

/// `$ANTLER_HOME`, default `./.antler`.
fn data_home() -> PathBuf {
    std::env::var_os("ANTLER_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".antler"))
}

fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Load the config file, or the built-in default when there is none; with the file's path.
fn load_config_file(cli: Option<&Path>) -> Result<(Config, Option<PathBuf>), Failure> {
    match antler_config::resolve_path(cli) {
        Some(path) => {
            let Loaded {
                config, warnings, ..
            } = Config::load(&path).map_err(|e| Failure::usage(e.to_string()))?;
            for w in warnings {
                warn_user(&format!("warning: {w}"));
            }
            Ok((config, Some(path)))
        }
        None => {
            let config =
                Config::zero_config(&env_lookup).map_err(|e| Failure::usage(e.to_string()))?;
            let model = config.default_model();
            warn_user(&format!(
                "no config.yaml found; using the built-in default (model '{}' at {}, SQLite in {}, local sandbox). Run `antler config init` to write one.",
                model.map(|m| m.model.as_str()).unwrap_or("?"),
                model
                    .and_then(|m| m.base_url.as_deref())
                    .unwrap_or("https://api.openai.com/v1"),
                data_home().display()
            ));
            Ok((config, None))
        }
    }
}

fn open_app(cli: Option<&Path>) -> Result<App, Failure> {
    let (config, path) = load_config_file(cli)?;
    Ok(App::open_with_config_file(
        config,
        data_home(),
        path.as_deref(),
    )?)
}

fn main() -> ExitCode {
    // The sandbox helper must not start a runtime or logging: it execs the command.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == "sandbox-exec") {
        let code = antler_sandbox::sandbox_exec_main(&raw[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")
    {
        Ok(rt) => rt.block_on(dispatch(cli)),
        Err(e) => Err(Failure::from(e)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            warn_user(&format!("error: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Run(args) => run(config_path, args).await,
        Command::Threads(cmd) => {
            let app = open_app(config_path)?;
            threads::run(&app, cmd).await
        }
        Command::Chain(args) => print_chain(config_path, args),
        Command::Runs(cmd) => {
            let app = open_app(config_path)?;
            runs_cmd::run(&app, cmd).await
        }
        Command::Memory(cmd) => {
            let app = open_app(config_path)?;
            memory_cmd::run(&app, cmd).await
        }
        Command::Mcp(cmd) => {
            let app = open_app(config_path)?;
            mcp_cmd::run(&app, cmd).await
        }
        Command::Config(ConfigCmd::Init { path, force }) => config_init(&path, force),
        Command::Config(ConfigCmd::Check) => config_check(config_path),
        Command::Serve(args) => serve_cmd::serve(config_path, &args).await,
        Command::SandboxExec { args } => {
            Ok(u8::try_from(antler_sandbox::sandbox_exec_main(&args)).unwrap_or(1))
        }
    }
}

fn read_message(arg: &str) -> Result<String, Failure> {
    if arg != "-" {
        return Ok(arg.to_owned());
    }
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| Failure::usage(format!("could not read the message from stdin: {e}")))?;
    Ok(s)
}

#[allow(clippy::print_stdout)]
async fn run(config_path: Option<&Path>, args: RunArgs) -> Result<u8, Failure> {
    let text = read_message(&args.message)?;
    if text.trim().is_empty() && args.attach.is_empty() {
        return Err(Failure::usage("the message is empty"));
    }
    let app = open_app(config_path)?;
    // Runs a crashed or killed process left behind (never those of live processes).
    match app.reclaim_orphaned_runs().await {
        Ok(r) if !r.is_empty() => warn_user(&format!(
            "{} unfinished run(s) of exited processes marked error",
            r.len()
        )),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not reclaim orphaned runs"),
    }
    let thread_id = args
        .thread_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut message = Message::human(text);
    if !args.attach.is_empty() {
        let attached = antler_agent::toolset::attach(&app, &thread_id, &args.attach)?;
        for note in &attached.notes {
            warn_user(note);
        }
        message
            .additional_kwargs_mut()
            .insert("files".into(), serde_json::Value::Array(attached.files));
    }
    let cancel = CancellationToken::new();
    spawn_ctrl_c(cancel.clone());
    let subagents = if args.subagents {
        Some(true)
    } else if args.no_subagents {
        Some(false)
    } else {
        None
    };
    let req = TurnRequest {
        thread_id: Some(thread_id),
        message: Some(message),
        subagents,
        recursion_limit: args.recursion_limit,
        cancel: Some(cancel),
        multitask_strategy: args.multitask_strategy,
        ..args.agent.request()
    };
    let text_sink = Arc::new(TextRenderer::new(std::io::stdout(), std::io::stderr()));
    let sink: Arc<dyn EventSink> = match args.output {
        OutputFormat::Text => text_sink.clone(),
        OutputFormat::Jsonl => Arc::new(JsonlRenderer::new(std::io::stdout())),
        OutputFormat::Json => Arc::new(NullSink),
    };
    let outcome = app.run_turn(req, sink).await?;
    // A one-shot run writes its pending memory update before exiting (bounded wait).
    if !app.flush_memory().await {
        warn_user(&format!(
            "memory: not every update was written before exit — see `antler runs show {}`",
            outcome.run_id
        ));
    }
    app.close_store().await;
    match args.output {
        OutputFormat::Text => {
            text_sink.finish();
            if let Some(reason) = &outcome.stop_reason {
                warn_user(&stop_reason_note(reason));
            }
            match outcome.status {
                RunStatus::Success => {}
                RunStatus::Interrupted => warn_user("run interrupted"),
                RunStatus::Error => warn_user(&format!(
                    "run failed: {}",
                    outcome.error.as_deref().unwrap_or("see the last message")
                )),
            }
            warn_user(&format!("thread {}", outcome.thread_id));
        }
        OutputFormat::Json => {
            let obj = json!({
                "thread_id": outcome.thread_id,
                "run_id": outcome.run_id,
                "status": outcome.status.as_str(),
                "values": outcome.state.as_ref(),
                "error": outcome.error,
                "stop_reason": outcome.stop_reason,
            });
            println!("{obj}");
        }
        OutputFormat::Jsonl => {}
    }
    // Exit 1 only when the run failed outright; a failure the agent answered (status `error`
    // with a friendly message) exits 0 like success.
    Ok(if outcome.error_name.is_some() {
        exit::RUN_FAILED
    } else {
        exit::OK
    })
}

/// What `antler run` says on stderr when a guard stopped the run early, so a capped answer is
/// never passed off as a complete one.
fn stop_reason_note(reason: &str) -> String {
    let what = match reason {
        "model_length_capped" => "the answer is incomplete: the model hit its output token limit (raise max_tokens for this model, or ask for a shorter answer)",
        "safety_capped" => "the model provider stopped the answer on a safety signal; any tool calls in it were not run",
        "loop_capped" => "the run was stopped because the agent kept repeating the same tool calls",
        "token_capped" => "the run was stopped at its token budget",
        "subagent_limit_capped" => "the run's subagent delegation limit was reached",
        _ => "the run was stopped early by a guard",
    };
    format!("note: {what} (stop_reason: {reason})")
}

/// First Ctrl-C cancels the run cleanly; a second one exits at once.
fn spawn_ctrl_c(cancel: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            warn_user("cancelling… (Ctrl-C again to quit now)");
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
}

#[allow(clippy::print_stdout)]
fn print_chain(config_path: Option<&Path>, args: ChainArgs) -> Result<u8, Failure> {
    let app = open_app(config_path)?;
    let req = TurnRequest {
        subagents: Some(args.subagents),
        ..args.agent.request()
    };
    let opts = app.run_options(&req);
    let entries = if args.subagent {
        let model = app.model(opts.model_name.as_deref(), false)?;
        antler_agent::chain::subagent_entries(
            &app.chain_parts(),
            model.info(),
            Some(model.clone()),
        )?
    } else {
        app.lead_entries(&opts, None)?
    };
    let segment = if args.subagent {
        antler_agent::extensions::Segment::Subagent
    } else {
        antler_agent::extensions::Segment::Lead
    };
    let rows = chain_rows(&app, &entries, segment);
    let skipped = app.skipped_python_middlewares();
    if args.output != OutputFormat::Text {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| match r {
                ChainRow::Entry(e) => json!({
                    "slot": e.slot,
                    "name": e.middleware.name(),
                    "hooks": e.middleware.hooks().names(),
                }),
                ChainRow::Deferred { slot, name, .. } => json!({
                    "slot": slot,
                    "name": name,
                    "hooks": [],
                    "deferred": "mcp",
                }),
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
        for s in &skipped {
            warn_user(&format!("warning: {s}"));
        }
        return Ok(exit::OK);
    }
    for (i, r) in rows.iter().enumerate() {
        let (slot, name, hooks) = match r {
            ChainRow::Entry(e) => (
                e.slot,
                e.middleware.name(),
                e.middleware.hooks().names().join(", "),
            ),
            ChainRow::Deferred { slot, name, note } => (*slot, *name, (*note).to_owned()),
        };
        println!("{:>2}. {:<4} {:<36} {}", i + 1, slot, name, hooks);
    }
    for s in &skipped {
        println!("    {s}");
    }
    Ok(exit::OK)
}

/// One line of `antler chain`.
enum ChainRow<'a> {
    Entry(&'a antler_agent::chain::ChainEntry),
    /// A slot that exists only once MCP tools are loaded (the catalog is cold here).
    Deferred {
        slot: &'static str,
        name: &'static str,
        note: &'static str,
    },
}

/// The chain's entries, plus McpRouting/DeferredToolFilter as "deferred (MCP)" when tool_search
/// will defer MCP tools that are not loaded yet (`antler chain` does not start MCP servers).
fn chain_rows<'a>(
    app: &antler_agent::App,
    entries: &'a [antler_agent::chain::ChainEntry],
    segment: antler_agent::extensions::Segment,
) -> Vec<ChainRow<'a>> {
    use antler_agent::extensions::{position_of_absent, Segment};
    let mut rows: Vec<ChainRow<'a>> = entries.iter().map(ChainRow::Entry).collect();
    let (routing, filter) = match segment {
        Segment::Lead => ("L11", "L12"),
        Segment::Subagent => ("U4", "U5"),
    };
    let has_servers = || {
        app.mcp
            .lookup()
            .resolve()
            .ok()
            .flatten()
            .and_then(|f| antler_mcp::ExtensionsConfig::load(&f).ok())
            .is_some_and(|x| x.enabled().next().is_some())
    };
    if !app.config.tool_search.enabled || entries.iter().any(|e| e.slot == filter) || !has_servers()
    {
        return rows;
    }
    let at = position_of_absent(entries, segment, routing);
    rows.insert(
        at,
        ChainRow::Deferred {
            slot: filter,
            name: "DeferredToolFilterMiddleware",
            note: "deferred (MCP): wrap_model, wrap_tool once MCP tools are loaded",
        },
    );
    rows.insert(
        at,
        ChainRow::Deferred {
            slot: routing,
            name: "McpRoutingMiddleware",
            note:
                "deferred (MCP): before_model once MCP tools with routing.mode: prefer are loaded",
        },
    );
    rows
}

#[allow(clippy::print_stdout)]
fn config_init(path: &Path, force: bool) -> Result<u8, Failure> {
    if path.exists() && !force {
        return Err(Failure::usage(format!(
            "{} already exists — pass --force to overwrite it",
            path.display()
        )));
    }
    std::fs::write(path, antler_config::TEMPLATE)
        .map_err(|e| Failure::usage(format!("could not write {}: {e}", path.display())))?;
    println!("wrote {}", path.display());
    Ok(exit::OK)
}

#[allow(clippy::print_stdout)]
fn config_check(cli: Option<&Path>) -> Result<u8, Failure> {
    let Some(path) = antler_config::resolve_path(cli) else {
        return Err(Failure::usage(
            "no config file: pass --config PATH, set ANTLER_CONFIG, or create ./config.yaml (`antler config init`)",
        ));
    };
    let loaded = Config::load(&path).map_err(|e| Failure::usage(e.to_string()))?;
    for w in &loaded.warnings {
        warn_user(&format!("warning: {w}"));
    }
    let config = &loaded.config;
    for m in &config.models {
        m.provider_kind()
            .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    }
    let web = antler_agent::toolset::web_tools_report(config)
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    // extensions_config.json (MCP servers): found as a run finds it; a bad entry fails the check.
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mcp_line = match antler_mcp::Lookup::new(Some(&path), cwd)
        .resolve()
        .map_err(|e| Failure::usage(e.to_string()))?
    {
        None => "mcp: no extensions_config.json".to_owned(),
        Some(file) => {
            let ext = antler_mcp::ExtensionsConfig::load(&file)
                .map_err(|e| Failure::usage(e.to_string()))?;
            ext.validate().map_err(|e| Failure::usage(e.to_string()))?;
            let servers: Vec<String> = ext
                .servers
                .iter()
                .map(|s| {
                    let off = if s.enabled { "" } else { ", disabled" };
                    format!("{} ({}{off})", s.name, s.transport.kind())
                })
                .collect();
            format!("mcp: {} — {}", file.display(), servers.join(", "))
        }
    };
    println!("{}: ok", path.display());
    println!(
        "  models: {}",
        config
            .models
            .iter()
            .map(|m| format!("{} ({})", m.name, m.model))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  tools: {}",
        config
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for line in web {
        println!("  {line}");
    }
    println!("  {mcp_line}");
    antler_agent::chain::check_safety_finish_reason(config)
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    let ext_file = antler_mcp::Lookup::new(
        Some(&path),
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    )
    .resolve()
    .ok()
    .flatten();
    for s in antler_agent::extensions::configured_python_middlewares(
        config.extensions.as_ref(),
        ext_file.as_deref(),
    ) {
        println!("  middlewares: {s}");
    }
    println!(
        "  sandbox: {} (allow_host_bash: {}, confine: {:?})",
        config.sandbox.use_, config.sandbox.allow_host_bash, config.sandbox.confine
    );
    println!("  max_recursion_limit: {}", config.max_recursion_limit);
    Ok(exit::OK)
}
