//! antler's own `web_fetch` (`use: antler.web.direct:web_fetch_tool`): fetch the page here and
//! turn it into Markdown, with no third-party reader in between.
//!
//! Every hop goes through the [`UrlGuard`]: the URL is checked before the request, the client's
//! only resolver is the guard (so the connection goes to an address that was checked, and a
//! rebinding name cannot swap it), redirects are followed by hand and each target checked the
//! same way. Limits: `timeout` for the whole fetch (all hops and the body), `max_bytes` of body
//! (the rest is not read; HTML is converted from what arrived, a truncated PDF is refused),
//! `max_redirects` hops. No proxy is used, not even one from the environment: a proxy resolves
//! names itself and would undo the pinning.
//!
//! Content: HTML → readability + Markdown ([`crate::markdown`]); JSON → pretty-printed in a
//! fenced block; other text → as is; PDF → the upload converter of antler-sandbox; anything
//! else → an error. Text is decoded from its declared or sniffed charset ([`crate::decode`]).
//! The result is not cut: long pages are left to ToolOutputBudget, which saves them to a file.

use std::io::{Seek, Write};
use std::time::Duration;

use reqwest::header::{ACCEPT, ACCEPT_LANGUAGE, CONTENT_ENCODING, CONTENT_TYPE, LOCATION};
use reqwest::StatusCode;
use url::Url;

use crate::guard::{refusal_in, Refusal, UrlGuard};
use crate::http::error_chain;
use crate::providers::Reply;

/// Defaults of the direct fetcher's options.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_BYTES: usize = 5 << 20;
pub const DEFAULT_MAX_REDIRECTS: usize = 10;

const USER_AGENT: &str = concat!(
    "Mozilla/5.0 (compatible; antler/",
    env!("CARGO_PKG_VERSION"),
    "; +https://github.com/antler-dev/antler)"
);
const ACCEPT_VALUE: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,\
application/json;q=0.9,text/plain;q=0.8,application/pdf;q=0.7,*/*;q=0.5";

/// The direct fetcher's settings.
#[derive(Debug, Clone)]
pub struct FetchLimits {
    pub timeout: Duration,
    pub max_bytes: usize,
    pub max_redirects: usize,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            max_bytes: DEFAULT_MAX_BYTES,
            max_redirects: DEFAULT_MAX_REDIRECTS,
        }
    }
}

/// Why a fetch failed. The `Display` text follows `Error: ` in the tool result.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("Timed out after {}s fetching {url}", .after.as_secs_f64())]
    Timeout { url: String, after: Duration },
    #[error("Too many redirects (more than {0})")]
    TooManyRedirects(usize),
    #[error("Bad redirect from {from}: {reason}")]
    BadRedirect { from: String, reason: String },
    #[error("HTTP {} fetching {url}", .status)]
    Status { status: StatusCode, url: String },
    #[error("Fetching {url} failed: {reason}")]
    Transport { url: String, reason: String },
    #[error("{0}")]
    Unsupported(String),
}

/// A response body as it arrived.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The URL after redirects.
    pub url: Url,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The body was longer than `max_bytes`; only the first `max_bytes` were read.
    pub truncated: bool,
}

/// The direct fetcher.
#[derive(Debug, Clone)]
pub struct DirectFetcher {
    client: reqwest::Client,
    guard: UrlGuard,
    limits: FetchLimits,
}

impl DirectFetcher {
    pub fn new(guard: UrlGuard, limits: FetchLimits) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(guard.dns())
            .connect_timeout(limits.timeout)
            .build()?;
        Ok(Self {
            client,
            guard,
            limits,
        })
    }

    pub fn limits(&self) -> &FetchLimits {
        &self.limits
    }

    /// Fetch `raw`, following redirects, within the time limit.
    pub async fn fetch(&self, raw: &str) -> Result<Fetched, FetchError> {
        let after = self.limits.timeout;
        match tokio::time::timeout(after, self.fetch_inner(raw)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout {
                url: raw.to_owned(),
                after,
            }),
        }
    }

    async fn fetch_inner(&self, raw: &str) -> Result<Fetched, FetchError> {
        let mut url = self.guard.check_literal(raw)?;
        let mut hops = 0;
        loop {
            // Redirect targets get the same literal/name check; names are checked (and pinned)
            // by the client's resolver when it connects.
            self.guard.check_url(&url)?;
            let resp = self
                .client
                .get(url.clone())
                .header(ACCEPT, ACCEPT_VALUE)
                .header(ACCEPT_LANGUAGE, "en-US,en;q=0.8")
                .send()
                .await
                .map_err(|e| transport(&url, &e))?;
            let status = resp.status();
            if status.is_redirection() {
                if let Some(loc) = resp.headers().get(LOCATION) {
                    let next = loc
                        .to_str()
                        .map_err(|e| e.to_string())
                        .and_then(|l| url.join(l.trim()).map_err(|e| e.to_string()))
                        .map_err(|reason| FetchError::BadRedirect {
                            from: url.to_string(),
                            reason,
                        })?;
                    hops += 1;
                    if hops > self.limits.max_redirects {
                        return Err(FetchError::TooManyRedirects(self.limits.max_redirects));
                    }
                    tracing::debug!(from = %url, to = %next, "following a redirect");
                    url = next;
                    continue;
                }
            }
            if !status.is_success() {
                return Err(FetchError::Status {
                    status,
                    url: url.to_string(),
                });
            }
            if let Some(enc) = resp
                .headers()
                .get(CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
            {
                return Err(FetchError::Unsupported(format!(
                    "{url} was sent with Content-Encoding {enc}, which web_fetch does not decode"
                )));
            }
            let content_type = resp
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let (body, truncated) = self.read_body(resp, &url).await?;
            return Ok(Fetched {
                url,
                content_type,
                body,
                truncated,
            });
        }
    }

    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        url: &Url,
    ) -> Result<(Vec<u8>, bool), FetchError> {
        let max = self.limits.max_bytes;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| transport(url, &e))? {
            let room = max - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                // The rest is never read: dropping the response closes the connection.
                return Ok((body, true));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, false))
    }

    /// `web_fetch`: the page as Markdown, or an `Error: …` result.
    pub async fn web_fetch(&self, raw: &str) -> Reply {
        match self.fetch(raw).await {
            Ok(f) => {
                let max = self.limits.max_bytes;
                match tokio::task::spawn_blocking(move || render(&f, max)).await {
                    Ok(Ok(text)) => Reply::ok(text),
                    Ok(Err(e)) => Reply::error_text(e.to_string()),
                    Err(e) => Reply::error_text(format!("converting the page failed: {e}")),
                }
            }
            Err(e) => {
                tracing::info!(url = %raw, error = %e, "web_fetch failed");
                Reply::error_text(e.to_string())
            }
        }
    }
}

fn transport(url: &Url, e: &reqwest::Error) -> FetchError {
    if let Some(r) = refusal_in(e) {
        return FetchError::Refused(r);
    }
    FetchError::Transport {
        url: url.to_string(),
        reason: error_chain(e),
    }
}

/// What the bytes are, from the Content-Type (parameters dropped) or, without one, a sniff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Html,
    Json,
    Text,
    Pdf,
    Other,
}

fn sniff(body: &[u8]) -> Kind {
    if body.starts_with(b"%PDF-") {
        return Kind::Pdf;
    }
    let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
    let t = head.trim_start_matches('\u{feff}').trim_start();
    if t.starts_with("<!doctype html")
        || t.starts_with("<html")
        || t.contains("<body")
        || t.contains("<head")
    {
        return Kind::Html;
    }
    if t.starts_with('{') || t.starts_with('[') {
        return Kind::Json;
    }
    if body.iter().take(4096).any(|b| *b == 0) {
        Kind::Other
    } else {
        Kind::Text
    }
}

/// Classify a response.
pub fn kind_of(content_type: Option<&str>, body: &[u8]) -> Kind {
    let mime = content_type
        .and_then(|c| c.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match mime.as_str() {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        "application/json" | "text/json" => Kind::Json,
        m if m.ends_with("+json") => Kind::Json,
        "application/pdf" | "application/x-pdf" => Kind::Pdf,
        "" | "application/octet-stream" | "binary/octet-stream" => sniff(body),
        m if m.starts_with("text/") || m.ends_with("+xml") || m == "application/xml" => Kind::Text,
        m if m.starts_with("application/javascript") || m == "application/x-yaml" => Kind::Text,
        _ => match sniff(body) {
            Kind::Pdf => Kind::Pdf,
            _ => Kind::Other,
        },
    }
}

/// Turn a fetched body into the tool's text.
pub fn render(f: &Fetched, max_bytes: usize) -> Result<String, FetchError> {
    let ct = f.content_type.as_deref();
    let note = || {
        format!(
            "\n\n[Truncated: the response is larger than {max_bytes} bytes; only the first {max_bytes} were read.]"
        )
    };
    let text = match kind_of(ct, &f.body) {
        Kind::Html => {
            let html = crate::decode::decode(&f.body, ct, true);
            crate::markdown::html_to_page(&html, Some(f.url.as_str())).to_markdown()
        }
        Kind::Json => {
            let raw = crate::decode::decode(&f.body, ct, false);
            match serde_json::from_str::<serde_json::Value>(&raw) {
                Ok(v) if !f.truncated => format!(
                    "```json\n{}\n```",
                    serde_json::to_string_pretty(&v).unwrap_or(raw)
                ),
                _ => raw,
            }
        }
        Kind::Text => crate::decode::decode(&f.body, ct, false),
        Kind::Pdf => {
            if f.truncated {
                return Err(FetchError::Unsupported(format!(
                    "{} is a PDF larger than {max_bytes} bytes (raise max_bytes to read it)",
                    f.url
                )));
            }
            pdf_to_markdown(&f.body).map_err(FetchError::Unsupported)?
        }
        Kind::Other => {
            return Err(FetchError::Unsupported(format!(
                "web_fetch cannot read {} content ({})",
                ct.unwrap_or("binary"),
                f.url
            )))
        }
    };
    Ok(if f.truncated { text + &note() } else { text })
}

/// PDF bytes → Markdown with the upload converter (it reads from a file).
fn pdf_to_markdown(bytes: &[u8]) -> Result<String, String> {
    let mut file = tempfile::tempfile().map_err(|e| e.to_string())?;
    file.write_all(bytes).map_err(|e| e.to_string())?;
    file.rewind().map_err(|e| e.to_string())?;
    antler_sandbox::convert::to_markdown_from(file, "page.pdf").map_err(|e| e.to_string())
}
