//! Workload D (PERFORMANCE.md): cold start. A fresh `antler run` process per sample, against a
//! one-file model server on 127.0.0.1 that answers every request at once; reports the time from
//! spawning the process to the first model request arriving, the whole run's wall time, and the
//! process's peak RSS (0 tool steps: one model call, one answer).
//!
//! Peak RSS comes from `getrusage(RUSAGE_CHILDREN)` in a reaper: the bench re-executes itself as
//! `antler-bench --reap <antler> <args…>`, which waits for its one child and prints the child's
//! maximum resident set, so every sample is measured on its own. The reaper also prints when it
//! spawned antler and how long antler ran (`CLOCK_MONOTONIC`, shared by every process), so the
//! times start at antler's own spawn, not at the reaper's (a second exec of a large binary,
//! ~4 ms here); the figure from the reaper's spawn is printed beside them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

use anyhow::{bail, Context};

const ANSWER: &str = r#"{"id":"chatcmpl-cold","object":"chat.completion","created":0,"model":"mock-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#;

/// Read one HTTP request (headers and a `Content-Length` body) and answer with [`ANSWER`].
fn answer(stream: TcpStream) -> anyhow::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{ANSWER}",
        ANSWER.len()
    )?;
    stream.flush()?;
    Ok(())
}

/// `CLOCK_MONOTONIC` in nanoseconds: comparable across processes, unlike [`std::time::Instant`].
fn monotonic_ns() -> i128 {
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
    })
}

/// The model server: reports the arrival (monotonic ns) of every connection on `arrivals`.
fn serve(listener: TcpListener, arrivals: mpsc::Sender<i128>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if arrivals.send(monotonic_ns()).is_err() {
            return;
        }
        std::thread::spawn(move || {
            let _ = answer(stream);
        });
    }
}

fn config(base_url: &str, trigger_tokens: usize) -> String {
    // DeerFlow's defaults where they matter for a cold start: summarization on with its example
    // trigger (tokens 32,000; a tiny one forces an exact token count on the first step), the
    // file tools. Title and memory off: they call the model again
    // after the answer, which is not part of reaching the first request.
    format!(
        "models:\n  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: gpt-4o-mini\n    base_url: {base_url}\n    api_key: cold-start\n    streaming: false\n\
         tools:\n  - {{name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}}\n  - {{name: read_file, group: file:read, use: deerflow.sandbox.tools:read_file_tool}}\n  - {{name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}}\n  - {{name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}}\n\
         summarization:\n  enabled: true\n  trigger:\n    - {{type: tokens, value: {trigger_tokens}}}\n  keep: {{type: messages, value: 10}}\n\
         title:\n  enabled: false\n\
         memory:\n  enabled: false\n"
    )
}

struct Sample {
    first_request: Duration,
    /// From the reaper's spawn (includes the reaper's own start).
    first_request_via_reaper: Duration,
    wall: Duration,
    peak_rss_kib: u64,
}

/// One `antler run` in a fresh working folder; `home`: an existing data home to use (its database
/// already created and migrated), else a new one.
fn sample(
    antler: &Path,
    dir: &Path,
    home: Option<&Path>,
    arrivals: &mpsc::Receiver<i128>,
) -> anyhow::Result<Sample> {
    let me = std::env::current_exe()?;
    while arrivals.try_recv().is_ok() {}
    let work = tempfile::tempdir_in(dir)?;
    let data_home = home.map_or_else(|| work.path().join(".antler"), Path::to_owned);
    let start_ns = monotonic_ns();
    let out = Command::new(me)
        .arg("--reap")
        .arg(antler)
        .args(["run", "--config"])
        .arg(dir.join("config.yaml"))
        .args(["--output", "json", "hello"])
        .current_dir(work.path())
        .env("ANTLER_HOME", &data_home)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "antler run failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let first = arrivals
        .recv_timeout(Duration::from_secs(5))
        .context("the run never reached the model")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reported = |key: &str| -> anyhow::Result<i128> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .with_context(|| format!("the reaper did not report {}", key.trim()))
    };
    let rss = u64::try_from(reported("reaped-maxrss-kib ")?)?;
    let spawned_ns = reported("reaped-spawn-ns ")?;
    let wall_ns = reported("reaped-wall-ns ")?;
    let since = |from: i128| Duration::from_nanos(u64::try_from(first - from).unwrap_or(0));
    Ok(Sample {
        first_request: since(spawned_ns),
        first_request_via_reaper: since(start_ns),
        wall: Duration::from_nanos(u64::try_from(wall_ns).unwrap_or(0)),
        peak_rss_kib: rss,
    })
}

/// `--reap <program> <args…>`: run the program, wait for it, print its peak RSS (KiB) and the CPU
/// time of it and all its descendants last on stdout, exit with its status. Its own output is
/// passed through.
///
/// The reaper is a child subreaper, so a descendant the program leaves behind (a sandbox
/// launcher it killed without waiting for, say) is re-parented here and waited for too: its CPU
/// time is then in `RUSAGE_CHILDREN` as well.
pub fn reap(args: &[String]) -> anyhow::Result<i32> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;
    let Some((program, rest)) = args.split_first() else {
        bail!("--reap needs a program");
    };
    nix::sys::prctl::set_child_subreaper(true)?;
    let spawned = monotonic_ns();
    let child = Command::new(program).args(rest).spawn()?;
    let main = Pid::from_raw(i32::try_from(child.id())?);
    let mut code = None;
    let mut wall = 0;
    // The program first, then whatever it left; a descendant still running 10 s after the
    // program ended is not waited for (its CPU time is then missing, and said so).
    let mut deadline = None;
    loop {
        let flags = deadline.map(|_| WaitPidFlag::WNOHANG);
        match waitpid(None::<Pid>, flags) {
            Ok(WaitStatus::Exited(pid, status)) if pid == main => {
                wall = monotonic_ns() - spawned;
                code = Some(status);
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == main => {
                wall = monotonic_ns() - spawned;
                code = Some(128 + signal as i32);
            }
            Ok(WaitStatus::StillAlive) => {
                if deadline
                    .is_some_and(|d: std::time::Instant| d.elapsed() > Duration::from_secs(10))
                {
                    println!("\nreaped-lingering 1");
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Ok(_) => {}
            Err(nix::errno::Errno::ECHILD) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if code.is_some() && deadline.is_none() {
            deadline = Some(std::time::Instant::now());
        }
    }
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?;
    let micros = |t: nix::sys::time::TimeVal| t.tv_sec() * 1_000_000 + t.tv_usec();
    println!("\nreaped-spawn-ns {spawned}");
    println!("reaped-wall-ns {wall}");
    println!("reaped-maxrss-kib {}", usage.max_rss());
    println!(
        "reaped-cpu-us {}",
        micros(usage.user_time()) + micros(usage.system_time())
    );
    Ok(code.unwrap_or(1))
}

fn summary(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let lo = values.first().copied().unwrap_or(0.0);
    let hi = values.last().copied().unwrap_or(0.0);
    (crate::median(values), lo, hi)
}

/// `--cold [--antler PATH] [--samples N] [--trigger-tokens N] [--existing-home]`. With
/// `--existing-home` every sample uses one data home that a first, unmeasured run created (the
/// usual case: only the first run ever creates and migrates the database); without it each
/// sample starts from nothing.
pub fn run(
    antler: Option<PathBuf>,
    samples: usize,
    trigger_tokens: usize,
    existing_home: bool,
) -> anyhow::Result<()> {
    let antler = match antler {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .context("no folder beside the bench")?
            .join("antler"),
    };
    if !antler.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p antler-cli) or pass --antler PATH",
            antler.display()
        );
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base_url = format!("http://{}/v1", listener.local_addr()?);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || serve(listener, tx));
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("config.yaml"),
        config(&base_url, trigger_tokens),
    )?;
    let shared_home = dir.path().join("shared-home");
    let home = existing_home.then_some(shared_home.as_path());
    // One unmeasured run warms the page cache (binary, shared libraries) and, with
    // `--existing-home`, creates the shared data home.
    sample(&antler, dir.path(), home, &rx)?;
    let (mut first, mut via_reaper, mut wall, mut rss) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        let s = sample(&antler, dir.path(), home, &rx)?;
        first.push(s.first_request.as_secs_f64() * 1e3);
        via_reaper.push(s.first_request_via_reaper.as_secs_f64() * 1e3);
        wall.push(s.wall.as_secs_f64() * 1e3);
        rss.push(s.peak_rss_kib as f64 / 1024.0);
    }
    println!(
        "antler-bench --cold: {} ({samples} samples; summarization trigger {trigger_tokens} tokens, 4 tools, SQLite in {})",
        antler.display(),
        if existing_home { "an existing data home" } else { "a new data home each" }
    );
    for (name, unit, values) in [
        ("start → first model request", "ms", &mut first),
        ("whole 0-step run", "ms", &mut wall),
        ("peak RSS", "MiB", &mut rss),
        (
            "(first request, reaper's start incl.)",
            "ms",
            &mut via_reaper,
        ),
    ] {
        let (med, lo, hi) = summary(values);
        println!("{name:<38} {med:>8.2} {unit:<3} ({lo:.2}–{hi:.2})");
    }
    Ok(())
}
