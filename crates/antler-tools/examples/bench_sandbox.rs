//! Sandbox micro-benchmarks for the README's performance section:
//!
//! - `bash` round trip (spawn → result) through the bash tool, unconfined and Landlock-confined;
//! - `read_file` of a 1 MB text file through the read_file tool.
//!
//! `cargo run --release -p antler-tools --example bench_sandbox [iterations]`
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use antler_protocol::{Object, ThreadState};
use antler_runtime::{NullSink, RunContext, Tool, ToolContext, ToolOutput};
use antler_sandbox::{
    confinement_status, Confine, ConfinementStatus, HelperCommand, LocalSandboxProvider,
    SandboxSettings, ThreadPaths,
};
use antler_tools::ToolEnv;
use serde_json::json;

fn stats(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<40} median {:>8.3} ms   min {:>8.3} ms   max {:>8.3} ms   (n={})",
        ms(v[v.len() / 2]),
        ms(v[0]),
        ms(v[v.len() - 1]),
        v.len()
    );
}

async fn bench_tool(
    tool: &Arc<dyn Tool>,
    state: &ThreadState,
    args: serde_json::Value,
    n: usize,
) -> Vec<Duration> {
    let run = RunContext::new("bench", "r", Arc::new(NullSink));
    let args: Object = args.as_object().unwrap().clone();
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 3 {
        let ctx = ToolContext::new("c", state, &run);
        let t = Instant::now();
        let r = tool.call(args.clone(), ctx).await.unwrap();
        let d = t.elapsed();
        if let ToolOutput::Content {
            status, content, ..
        } = &r
        {
            assert_eq!(*status, antler_protocol::ToolStatus::Success, "{content:?}");
        }
        if i >= 3 {
            out.push(d);
        }
    }
    out
}

fn setup(
    status: ConfinementStatus,
    helper: Option<HelperCommand>,
) -> (tempfile::TempDir, ToolEnv, ThreadState) {
    // Outside /tmp, so the warden can give the sandbox its own /tmp.
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let settings = SandboxSettings {
        allow_host_bash: true,
        confine: status.mode,
        helper_search: helper.is_some(),
        helper,
        ..Default::default()
    };
    let provider = Arc::new(LocalSandboxProvider::with_status(
        home.path(),
        settings.clone(),
        status,
    ));
    let env = ToolEnv::new(provider, Arc::new(settings));
    let paths = ThreadPaths::new(home.path(), "bench", None).unwrap();
    paths.ensure_dirs().unwrap();
    let state = ThreadState {
        thread_data: Some(paths.thread_data()),
        ..Default::default()
    };
    (home, env, state)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let bash = json!({"description": "bench", "command": "echo hi"});

    let off = ConfinementStatus {
        mode: Confine::Off,
        active: false,
        reason: "off".into(),
    };
    let (_h, env, state) = setup(off, None);
    let tool = antler_tools::builtin_tool("bash", &Object::new(), &env).unwrap();
    stats(
        "bash round trip (unconfined)",
        bench_tool(&tool, &state, bash.clone(), n).await,
    );

    let st = confinement_status(Confine::Auto);
    if st.active {
        let (_h2, env2, state2) = setup(st.clone(), None);
        let tool = antler_tools::builtin_tool("bash", &Object::new(), &env2).unwrap();
        stats(
            "bash round trip (Landlock, in-process)",
            bench_tool(&tool, &state2, bash.clone(), n).await,
        );
        // The helper re-invocation, when `cargo build --release -p antler-cli` built it.
        let helper = std::env::current_exe()
            .unwrap()
            .parent()
            .and_then(|d| d.parent())
            .map(|d| d.join("antler-sandbox-helper"));
        match helper.filter(|h| h.is_file()) {
            Some(exe) => {
                let (_h3, env3, state3) =
                    setup(st.clone(), Some(HelperCommand { exe, args: vec![] }));
                let tool = antler_tools::builtin_tool("bash", &Object::new(), &env3).unwrap();
                stats(
                    "bash round trip (warden: namespaces + Landlock)",
                    bench_tool(&tool, &state3, bash.clone(), n).await,
                );
            }
            None => println!(
                "bash round trip (warden): skipped — build it first: cargo build --release -p antler-cli"
            ),
        }
    } else {
        println!("bash round trip (Landlock): skipped — {}", st.reason);
    }

    let line = "The quick brown fox jumps over the lazy dog, 0123456789 abcdefghij.\n";
    let body: String = line.repeat(1_000_000 / line.len() + 1);
    std::fs::write(
        _h.path().join("threads/bench/user-data/workspace/big.txt"),
        &body[..1_000_000],
    )
    .unwrap();
    let tool = antler_tools::builtin_tool("read_file", &Object::new(), &env).unwrap();
    let args = json!({"description": "bench", "path": "/mnt/user-data/workspace/big.txt"});
    stats(
        "read_file 1 MB (whole, capped at 50k chars)",
        bench_tool(&tool, &state, args, n).await,
    );
    let args = json!({"description": "bench", "path": "/mnt/user-data/workspace/big.txt", "start_line": 7000, "end_line": 7100});
    stats(
        "read_file 1 MB (lines 7000-7100)",
        bench_tool(&tool, &state, args, n).await,
    );
}
