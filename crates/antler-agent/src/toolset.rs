//! The lead agent's tools (spec 50 §4.0): config `tools:` entries in file order (bash entries
//! dropped when bash is not available; web entries built by antler-web), then the built-ins.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_config::Config;
use antler_models::ModelInfo;
use antler_runtime::{RunOptions, ToolRegistry};
use antler_sandbox::{Mount, SandboxProvider, SandboxSettings, ThreadPaths, UploadSettings};
use antler_tools::ToolEnv;
use serde_json::Value;

use crate::{AgentError, App};

/// Sandbox settings from `sandbox:` and `skills:`.
pub fn sandbox_settings(config: &Config, _home: &Path) -> SandboxSettings {
    let s = &config.sandbox;
    SandboxSettings {
        allow_host_bash: s.allow_host_bash,
        confine: s.confine,
        bash_output_max_chars: s.bash_output_max_chars,
        read_file_output_max_chars: s.read_file_output_max_chars,
        ls_output_max_chars: s.ls_output_max_chars,
        bash_command_timeout: s.bash_timeout(),
        mounts: s
            .mounts
            .iter()
            .map(|m| Mount {
                host_path: PathBuf::from(&m.host_path),
                container_path: m.container_path.clone(),
                read_only: m.read_only,
            })
            .collect(),
        // Set by App::open to the resolved skills root when it exists.
        skills_host_path: None,
        skills_container_path: config.skills.container_path.clone(),
        network: s.network,
        limits: antler_sandbox::Limits {
            memory: s.limits.memory.map(|b| b.0),
            processes: s.limits.processes,
            file_size: s.limits.file_size.map(|b| b.0),
        },
        ..SandboxSettings::default()
    }
}

/// Files confined bash may not read besides the data home: the config file and what DeerFlow
/// keeps beside it (`.env` with keys, `extensions_config.json` with MCP credentials), in its
/// folder and in the project root.
pub fn secret_files(config_file: Option<&Path>, project_root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![project_root.to_path_buf()];
    let mut out = Vec::new();
    if let Some(f) = config_file {
        out.push(f.to_path_buf());
        if let Some(d) = f.parent().filter(|d| !d.as_os_str().is_empty()) {
            dirs.push(d.to_path_buf());
        }
    }
    for d in dirs {
        for name in [
            ".env",
            "extensions_config.json",
            "mcp_config.json",
            "config.yaml",
        ] {
            out.push(d.join(name));
        }
    }
    out.retain(|p| p.exists());
    out.sort();
    out.dedup();
    out
}

/// One line per web tool entry for `antler config check`: provider, key status, SSRF opt-out.
/// An entry naming a provider antler lacks is an error.
pub fn web_tools_report(config: &Config) -> Result<Vec<String>, AgentError> {
    let mut out = Vec::new();
    for t in &config.tools {
        if let Some(s) = antler_web::describe(&t.name, &t.use_, &t.extra)
            .map_err(|e| AgentError::Config(e.to_string()))?
        {
            out.push(s.to_string());
        }
    }
    Ok(out)
}

/// Upload limits from `uploads:`.
pub fn upload_settings(config: &Config) -> UploadSettings {
    let u = &config.uploads;
    UploadSettings {
        max_files: u.max_files as usize,
        max_file_size: u.max_file_size,
        max_total_size: u.max_total_size,
        auto_convert_documents: u.auto_convert_documents,
    }
}

fn tool_env(app: &App) -> ToolEnv {
    let provider: Arc<dyn SandboxProvider> = app.sandbox.clone();
    ToolEnv::new(provider, app.sandbox.settings().clone())
}

/// Tools offered to the lead agent's model.
pub fn lead_tools(
    app: &App,
    model: &ModelInfo,
    opts: &RunOptions,
    tool_groups: Option<&[String]>,
) -> Result<ToolRegistry, AgentError> {
    let env = tool_env(app);
    let bash_ok = env.bash_available();
    let mut reg = ToolRegistry::new();
    for t in &app.config.tools {
        // A custom agent's `tool_groups` restricts config tools (built-ins are not filtered).
        if tool_groups.is_some_and(|g| !g.iter().any(|x| x == &t.group)) {
            continue;
        }
        let is_bash = t.group == "bash" || antler_tools::is_bash_tool(&t.use_);
        if is_bash && !bash_ok {
            tracing::debug!(tool = %t.name, "bash is not available (host bash off and no confinement); tool dropped");
            continue;
        }
        // web_search / web_fetch / image_search: a provider antler lacks is a config error.
        if let Some(tool) = antler_web::build_tool(&t.name, &t.use_, &t.extra)
            .map_err(|e| AgentError::Config(e.to_string()))?
        {
            if tool.name() != t.name {
                tracing::warn!(configured = %t.name, actual = %tool.name(), "tool name differs from its implementation; the model sees the implementation's name");
            }
            reg.register(tool);
            continue;
        }
        let built = antler_tools::builtin_tool(&t.use_, &t.extra, &env)
            .or_else(|| antler_tools::builtin_tool(&t.name, &t.extra, &env));
        match built {
            Some(tool) => {
                if tool.name() != t.name {
                    tracing::warn!(configured = %t.name, actual = %tool.name(), "tool name differs from its implementation; the model sees the implementation's name");
                }
                reg.register(tool);
            }
            None => {
                tracing::warn!(tool = %t.name, r#use = %t.use_, "tool is not available in antler; skipped")
            }
        }
    }
    reg.register(antler_tools::present_files_tool(&env));
    // Non-interactive runs (no one to answer) never get ask_clarification.
    let non_interactive = opts
        .extra
        .get("non_interactive")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if !non_interactive {
        reg.register(antler_tools::ask_clarification::ask_clarification_tool());
    }
    if model.supports_vision {
        reg.register(antler_tools::view_image_tool(&env));
    }
    if opts.is_plan_mode {
        reg.register(antler_tools::write_todos::write_todos_tool());
    }
    // MCP tools (§4.0 step 3), before `task` so subagents inherit them; with tool_search
    // their schemas stay hidden until promoted (§4.14).
    let mcp = crate::mcp::setup(&app.config, &app.mcp.snapshot());
    for tool in mcp.tools {
        reg.register(tool);
    }
    if let Some(d) = mcp.deferred {
        reg.register(d.search);
    }
    if opts.subagent_enabled {
        // Children get the lead's tools (the executor drops task/ask_clarification/present_files).
        let executor = subagent_executor(app, reg.clone(), bash_ok);
        reg.register(crate::subagents::task_tool(Arc::new(executor)));
    }
    // Memory tool mode (spec 40 §4.3): the lead agent's own, after everything else; a name that
    // is already taken keeps its tool.
    if app.memory().settings().tool_mode() {
        crate::memory::tools::append(&mut reg, crate::memory::tools::memory_tools(app.memory()));
    }
    Ok(reg)
}

/// The `task` executor: DeerFlow's subagent types from `subagents:`, children built with the
/// subagent chain on the lead's tools.
pub fn subagent_executor(
    app: &App,
    tools: ToolRegistry,
    bash_available: bool,
) -> crate::subagents::SubagentExecutor {
    use crate::subagents::{SubagentError, SubagentExecutor, SubagentRegistry, SubagentRequest};
    let parts = app.chain_parts();
    let factory = move |req: &SubagentRequest<'_>| -> Result<antler_runtime::Agent, SubagentError> {
        let cfg = match req.model_name {
            Some(name) => parts.config.model(name),
            None => parts.config.default_model(),
        }
        .ok_or_else(|| {
            SubagentError::Build(format!(
                "no model '{}' for subagent type '{}'",
                req.model_name.unwrap_or("(default)"),
                req.spec.name
            ))
        })?;
        // Subagents always run with thinking off.
        let model = crate::models::build_model(cfg, false)
            .map_err(|e| SubagentError::Build(e.to_string()))?;
        let entries = crate::chain::subagent_entries(&parts, model.info(), Some(model.clone()))
            .map_err(|e| SubagentError::Build(e.to_string()))?;
        let chain =
            antler_runtime::Chain::new(entries.into_iter().map(|e| e.middleware).collect())?;
        let mut agent = antler_runtime::Agent::new(model)
            .with_tools(tools.clone())
            .with_chain(chain);
        // Children see the deferred-tool and routing sections too (appended to their prompt).
        let mcp = crate::mcp::setup(&parts.config, &parts.mcp.snapshot()).prompt_section;
        if !mcp.is_empty() {
            agent = agent.with_system_prompt(mcp);
        }
        Ok(agent)
    };
    SubagentExecutor::new(
        SubagentRegistry::from_config(&app.config.subagents),
        Arc::new(factory),
    )
    .with_bash_available(bash_available)
}

/// Files attached to a message.
pub struct Attached {
    /// `additional_kwargs.files` entries (`{filename, size, path, status}`).
    pub files: Vec<Value>,
    /// One line per file that was renamed or not converted to Markdown.
    pub notes: Vec<String>,
}

/// Copy files into a thread's uploads folder (converting documents when
/// `uploads.auto_convert_documents` is on).
pub fn attach(app: &App, thread_id: &str, paths: &[PathBuf]) -> Result<Attached, AgentError> {
    let thread = ThreadPaths::new(&app.home, thread_id, None)
        .map_err(|e| AgentError::Sandbox(e.to_string()))?;
    let files = antler_sandbox::attach_files(paths, &thread, &upload_settings(&app.config))
        .map_err(|e| AgentError::Upload(e.to_string()))?;
    let mut notes = Vec::new();
    for f in &files {
        if let Some(orig) = &f.original_filename {
            notes.push(format!("{orig}: uploaded as {}", f.filename));
        }
        if let Some(md) = &f.markdown_file {
            notes.push(format!("{}: converted to {md}", f.filename));
        }
        if let Some(n) = &f.note {
            notes.push(format!("{}: {n}", f.filename));
        }
    }
    Ok(Attached {
        files: files.iter().map(|f| f.kwargs_entry()).collect(),
        notes,
    })
}
