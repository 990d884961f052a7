//! A real `antler serve` process on 127.0.0.1 and the reading of its SSE streams: one piece of
//! code for `antler-bench --serve` (`serve.rs`) and the load example (`examples/load.rs`).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

/// A running `antler serve` on a free loopback port, killed when dropped.
pub struct ServeProcess {
    child: tokio::process::Child,
    pub pid: u32,
    /// `http://127.0.0.1:PORT` (the API is under `/api`).
    pub origin: String,
}

impl ServeProcess {
    /// Starts `antler serve --config CONFIG` with `ANTLER_HOME=home` (stderr to `work/serve.log`)
    /// and waits until it answers `/health`.
    pub async fn start(
        antler: &Path,
        config: &Path,
        work: &Path,
        home: &Path,
        retention_secs: u64,
        client: &reqwest::Client,
    ) -> anyhow::Result<ServeProcess> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log_path = work.join("serve.log");
        let log = std::fs::File::create(&log_path)?;
        let child = tokio::process::Command::new(antler)
            .args(["serve", "--config"])
            .arg(config)
            .args(["--port", &port.to_string()])
            .args(["--retention-secs", &retention_secs.to_string()])
            .current_dir(work)
            .env("ANTLER_HOME", home)
            .env_remove("ANTLER_API_KEY")
            .env_remove("ANTLER_API_KEYS")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", antler.display()))?;
        let pid = child.id().context("no pid")?;
        let origin = format!("http://127.0.0.1:{port}");
        let mut server = ServeProcess { child, pid, origin };
        let health = format!("{}/health", server.origin);
        for _ in 0..400 {
            if client.get(&health).send().await.is_ok() {
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait()? {
                bail!(
                    "antler serve exited ({status}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        bail!("antler serve did not answer /health")
    }

    /// CPU time of the server, its own threads only (children excluded): its process CPU clock
    /// (nanoseconds), else `utime + stime` from `/proc` (10 ms ticks: at 100 steps a sample,
    /// 0.1 ms per step).
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid)?);
        if let Ok(t) = nix::time::ClockId::pid_cpu_clock_id(pid).and_then(nix::time::clock_gettime)
        {
            return Ok(Duration::from(t));
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').context("bad /proc stat")?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f.get(11).context("no utime")?.parse::<u64>()?
            + f.get(12).context("no stime")?.parse::<u64>()?;
        // USER_HZ is 100 on Linux whatever the kernel's tick rate.
        Ok(Duration::from_millis(ticks * 10))
    }

    /// A `/proc/PID/status` field in MiB (`VmHWM:`, `VmRSS:`); 0 when unreadable.
    pub fn status_mib(&self, field: &str) -> f64 {
        let kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        kib as f64 / 1024.0
    }

    pub fn peak_rss_mib(&self) -> f64 {
        self.status_mib("VmHWM:")
    }

    /// SIGTERM and wait: a clean stop folds the WAL into the database.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid)?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                self.child.kill().await?;
                bail!("antler serve did not stop on SIGTERM");
            }
        }
        Ok(())
    }
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub event: String,
    /// The `data:` line as JSON (`Null` when there is none).
    pub data: Value,
    pub id: Option<String>,
}

/// Reads a response body as server-sent events, however the chunks split them.
#[derive(Default)]
pub struct SseReader {
    buf: Vec<u8>,
}

impl SseReader {
    /// The events completed by the next chunk of `resp` (possibly none); `None` at the end of
    /// the body. Comment blocks (keep-alives) are skipped.
    pub async fn next_events(
        &mut self,
        resp: &mut reqwest::Response,
    ) -> anyhow::Result<Option<Vec<SseEvent>>> {
        let Some(chunk) = resp.chunk().await? else {
            return Ok(None);
        };
        self.buf.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buf.drain(..pos + 2).collect();
            let block = std::str::from_utf8(&block).context("SSE block is not UTF-8")?;
            if block.starts_with(':') {
                continue;
            }
            let mut ev = SseEvent {
                event: String::new(),
                data: Value::Null,
                id: None,
            };
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    ev.event = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    ev.data = serde_json::from_str(v).context("bad data")?;
                } else if let Some(v) = line.strip_prefix("id: ") {
                    ev.id = Some(v.to_owned());
                }
            }
            out.push(ev);
        }
        Ok(Some(out))
    }

    /// Every event of the body.
    pub async fn read_all(resp: &mut reqwest::Response) -> anyhow::Result<Vec<SseEvent>> {
        let mut reader = SseReader::default();
        let mut all = Vec::new();
        while let Some(batch) = reader.next_events(resp).await? {
            all.extend(batch);
        }
        Ok(all)
    }
}

/// The text of a message's `content`: a string, or the `text` of its parts.
pub fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}
