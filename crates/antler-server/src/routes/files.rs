//! Thread files (spec 70 §3.4 G4–G7): uploads into `user-data/uploads` (multipart, streamed to a
//! staging file under the configured limits, client names reduced to a safe basename and
//! de-duplicated, unsafe names and destinations skipped), listing and deleting uploads, and
//! serving artifacts from the thread's `user-data` only — traversal and symlink escapes are
//! refused, active content (HTML, SVG) is always a download, byte ranges are honoured.
//!
//! Every access goes through the thread folders' directory handles
//! ([`antler_sandbox::beneath`]): a folder that a sandboxed command replaced with a symlink or a
//! file is refused (403), and artifact paths resolve beneath `user-data`, never out of it.

use std::collections::HashSet;
use std::io::SeekFrom;
use std::path::{Component, Path as FsPath, PathBuf};
use std::sync::Arc;

use antler_sandbox::paths::{VIRTUAL_UPLOADS, VIRTUAL_USER_DATA};
use antler_sandbox::uploads::{self, safe_filename};
use antler_sandbox::{Beneath, RootDir, SandboxError, ThreadPaths, ThreadRoots};
use axum::body::Body;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Json;
use cap_std::fs::Dir;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::access::may_use_files;
use crate::error::{ApiError, ApiResult};
use crate::extract::{QueryPairs, ThreadScope};
use crate::{AppState, User};

fn thread_paths(state: &AppState, user: &User, thread_id: &str) -> ApiResult<ThreadPaths> {
    ThreadPaths::new(&state.app.home, thread_id, user.fs_id())
        .map_err(|e| ApiError::unprocessable(e.to_string()))
}

/// `/api/threads/{id}/artifacts/mnt/user-data/uploads/<name>` (path segments percent-encoded).
fn upload_artifact_url(thread_id: &str, name: &str) -> String {
    format!(
        "/api/threads/{thread_id}/artifacts{VIRTUAL_UPLOADS}/{}",
        percent_encode(name, false)
    )
}

/// Percent-encode everything but RFC 5987 `attr-char` (and `/` when `keep_slash`).
fn percent_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#' | b'$' | b'&' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            )
            || (keep_slash && b == b'/');
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn file_info(thread_id: &str, dir: &FsPath, name: &str, size: u64) -> Map<String, Value> {
    let mut info = Map::new();
    info.insert("filename".into(), json!(name));
    info.insert("size".into(), json!(size));
    info.insert("path".into(), json!(dir.join(name).to_string_lossy()));
    info.insert(
        "virtual_path".into(),
        json!(format!("{VIRTUAL_UPLOADS}/{name}")),
    );
    info.insert(
        "artifact_url".into(),
        json!(upload_artifact_url(thread_id, name)),
    );
    if let Some(ext) = FsPath::new(name).extension() {
        info.insert(
            "extension".into(),
            json!(format!(".{}", ext.to_string_lossy().to_lowercase())),
        );
    }
    info
}

/// `name`, or `stem_1.ext`, … — the first not yet claimed in this request.
fn claim(name: &str, seen: &mut HashSet<String>) -> String {
    let unique = antler_sandbox::uploads::dedupe_name(name, seen);
    seen.insert(unique.clone());
    unique
}

/// Only a missing file or a single-linked regular file may be replaced (checked no-follow).
fn safe_destination(dir: &Dir, name: &str) -> bool {
    uploads::check_destination(dir, name).is_ok()
}

/// The API error for a thread folder that cannot be used.
fn folder_error(e: SandboxError) -> ApiError {
    match e {
        SandboxError::PermissionDenied(reason) => ApiError::forbidden(reason),
        SandboxError::NotFound(p) => ApiError::not_found(format!("Not found: {p}")),
        other => ApiError::internal(other),
    }
}

/// Run blocking filesystem work off the executor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)?
}

/// The validated handle of a thread folder (`create`: made when missing, never through a link).
async fn open_folder(root: Arc<RootDir>, create: bool) -> ApiResult<Beneath> {
    blocking(move || {
        if create {
            root.open_or_create()
        } else {
            root.open()
        }
        .map_err(folder_error)
    })
    .await
}

/// Bytes a multipart upload may carry: the configured total plus framing overhead.
pub fn upload_body_limit(config: &antler_config::Config) -> usize {
    let u = &config.uploads;
    usize::try_from(u.max_total_size)
        .unwrap_or(usize::MAX)
        .saturating_add(
            usize::try_from(u.max_files)
                .unwrap_or(0)
                .saturating_mul(16 * 1024),
        )
        .saturating_add(1024 * 1024)
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large("Total upload size too large")
    } else {
        ApiError::bad_request(format!("Malformed multipart body: {}", e.body_text()))
    }
}

/// What one upload request wrote into the uploads folder (names in `dir`).
struct Upload {
    dir: Beneath,
    written: Vec<String>,
    staging: Option<String>,
}

impl Upload {
    async fn abort(&mut self, err: ApiError) -> ApiError {
        let dir = self.dir.clone();
        let mut names = std::mem::take(&mut self.written);
        names.extend(self.staging.take());
        let _ = tokio::task::spawn_blocking(move || {
            for n in names {
                let _ = dir.dir().remove_file(n);
            }
        })
        .await;
        err
    }
}

/// Write `bytes` as `name` in `dir` through a staging file.
fn write_new(dir: &Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let staging = uploads::staging_name();
    let res = uploads::create_staging(dir, &staging).and_then(|mut f| {
        f.write_all(bytes)?;
        uploads::publish(dir, &staging, &f, name)
    });
    if res.is_err() {
        let _ = dir.remove_file(&staging);
    }
    res
}

/// G4 `POST /threads/{id}/uploads` (multipart field `files`, repeated).
pub async fn upload(
    scope: ThreadScope,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    may_use_files(&state, &user, &thread_id).await?;
    let mut multipart = multipart
        .map_err(|e| ApiError::bad_request(format!("Expected a multipart/form-data body: {e}")))?;
    let limits = &state.app.config.uploads;
    let paths = thread_paths(&state, &user, &thread_id)?;
    let dir = paths.uploads.clone();
    let handle = open_folder(ThreadRoots::new(&paths).uploads, true).await?;

    let mut up = Upload {
        dir: handle.clone(),
        written: Vec::new(),
        staging: None,
    };
    let mut seen: HashSet<String> = HashSet::new();
    let mut files: Vec<Value> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut count: u64 = 0;
    let mut total: u64 = 0;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return Err(up.abort(multipart_error(e)).await),
        };
        if field.name() != Some("files") {
            continue;
        }
        let Some(raw) = field.file_name().map(str::to_owned) else {
            continue;
        };
        count += 1;
        if count > limits.max_files {
            let e = ApiError::too_large(format!("Too many files: maximum is {}", limits.max_files));
            return Err(up.abort(e).await);
        }
        let Some(name) = safe_filename(&raw) else {
            tracing::warn!(name = %raw.escape_debug(), "skipping an upload with an unsafe file name");
            skipped.push(raw);
            continue;
        };
        let unique = claim(&name, &mut seen);
        if !safe_destination(handle.dir(), &unique) {
            skipped.push(unique);
            continue;
        }
        let staging = format!(".upload-{}.part", uuid::Uuid::new_v4().simple());
        let mut out = match uploads::create_staging(handle.dir(), &staging) {
            Ok(f) => tokio::fs::File::from_std(f),
            Err(e) => return Err(up.abort(ApiError::internal(e)).await),
        };
        up.staging = Some(staging.clone());
        let mut field = field;
        let mut size: u64 = 0;
        loop {
            let chunk = match field.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => return Err(up.abort(multipart_error(e)).await),
            };
            size += chunk.len() as u64;
            total += chunk.len() as u64;
            if size > limits.max_file_size {
                let e = ApiError::too_large(format!("File too large: {unique}"));
                return Err(up.abort(e).await);
            }
            if total > limits.max_total_size {
                return Err(up
                    .abort(ApiError::too_large("Total upload size too large"))
                    .await);
            }
            if let Err(e) = out.write_all(&chunk).await {
                return Err(up.abort(ApiError::internal(e)).await);
            }
        }
        let finished = async {
            out.flush().await?;
            let f = out.into_std().await;
            let (h, s, d) = (handle.clone(), staging.clone(), unique.clone());
            tokio::task::spawn_blocking(move || uploads::publish(h.dir(), &s, &f, &d))
                .await
                .map_err(std::io::Error::other)?
        }
        .await;
        if let Err(e) = finished {
            return Err(up.abort(ApiError::internal(e)).await);
        }
        up.staging = None;
        up.written.push(unique.clone());
        let mut info = file_info(&thread_id, &dir, &unique, size);
        if unique != name {
            info.insert("original_filename".into(), json!(name));
        }
        if limits.auto_convert_documents && antler_sandbox::convert::is_convertible(&unique) {
            let stem = FsPath::new(&unique)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let md_name = claim(&format!("{stem}.md"), &mut seen);
            let (h, n, m) = (handle.clone(), unique.clone(), md_name.clone());
            // Convert the file just written (opened through the handle) and write the
            // companion the same way; `Ok(None)` when the companion could not be written.
            let converted = tokio::task::spawn_blocking(move || {
                let f = h.dir().open(&n).map_err(|e| {
                    antler_sandbox::convert::ConvertError::Failed {
                        file: n.clone(),
                        reason: e.to_string(),
                    }
                })?;
                let md = antler_sandbox::convert::to_markdown_from(f.into_std(), &n)?;
                let ok =
                    safe_destination(h.dir(), &m) && write_new(h.dir(), &m, md.as_bytes()).is_ok();
                Ok::<_, antler_sandbox::convert::ConvertError>(ok.then_some(()))
            })
            .await;
            match converted {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(()))) => {
                    let md_path = dir.join(&md_name);
                    {
                        up.written.push(md_name.clone());
                        info.insert("markdown_file".into(), json!(md_name));
                        info.insert("markdown_path".into(), json!(md_path.to_string_lossy()));
                        info.insert(
                            "markdown_virtual_path".into(),
                            json!(format!("{VIRTUAL_UPLOADS}/{md_name}")),
                        );
                        info.insert(
                            "markdown_artifact_url".into(),
                            json!(upload_artifact_url(&thread_id, &md_name)),
                        );
                    }
                }
                Ok(Err(e)) => tracing::info!(file = %unique, error = %e, "document not converted"),
                Err(e) => tracing::warn!(file = %unique, error = %e, "document conversion failed"),
            }
        }
        files.push(Value::Object(info));
    }
    if count == 0 {
        return Err(ApiError::bad_request("No files provided"));
    }
    let mut message = format!("Successfully uploaded {} file(s)", files.len());
    if !skipped.is_empty() {
        message.push_str(&format!("; skipped {} unsafe file(s)", skipped.len()));
    }
    Ok(Json(json!({
        "success": skipped.is_empty(),
        "files": files,
        "message": message,
        "skipped_files": skipped,
    })))
}

/// G5 `GET /threads/{id}/uploads/limits` (any thread id, existing or not).
pub async fn limits(
    State(state): State<AppState>,
    Path(thread_id): Path<String>,
) -> ApiResult<Json<Value>> {
    crate::access::check_thread_id(&thread_id)?;
    let u = &state.app.config.uploads;
    Ok(Json(json!({
        "max_files": u.max_files,
        "max_file_size": u.max_file_size,
        "max_total_size": u.max_total_size,
    })))
}

/// G6 `GET /threads/{id}/uploads/list`.
pub async fn list(scope: ThreadScope) -> ApiResult<Json<Value>> {
    let (state, user, thread_id) = scope.into_parts();
    may_use_files(&state, &user, &thread_id).await?;
    let paths = thread_paths(&state, &user, &thread_id)?;
    let dir = paths.uploads.clone();
    let root = ThreadRoots::new(&paths).uploads;
    let tid = thread_id.clone();
    let files = blocking(move || {
        let mut files: Vec<(String, Value)> = Vec::new();
        let handle = match root.open() {
            Ok(h) => h,
            // Not uploaded to yet.
            Err(SandboxError::NotFound(_)) => return Ok(Vec::new()),
            Err(e) => return Err(folder_error(e)),
        };
        if let Ok(entries) = handle.dir().entries() {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Ok(meta) = handle.dir().symlink_metadata(e.file_name()) else {
                    continue;
                };
                if !meta.is_file() || (name.starts_with(".upload-") && name.ends_with(".part")) {
                    continue;
                }
                let mut info = file_info(&tid, &dir, &name, meta.len());
                if let Ok(m) = meta.modified() {
                    if let Ok(d) = m.into_std().duration_since(std::time::UNIX_EPOCH) {
                        info.insert("modified".into(), json!(d.as_secs_f64()));
                    }
                }
                files.push((name, Value::Object(info)));
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(files.into_iter().map(|(_, v)| v).collect::<Vec<_>>())
    })
    .await?;
    Ok(Json(json!({"count": files.len(), "files": files})))
}

/// G6 `DELETE /threads/{id}/uploads/{filename}` (with its Markdown companion).
pub async fn delete(
    State(state): State<AppState>,
    user: User,
    Path((thread_id, filename)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    crate::access::owned_thread(&state, &user, &thread_id).await?;
    let name = match safe_filename(&filename) {
        Some(n) if n == filename => n,
        _ => return Err(ApiError::bad_request("Invalid path")),
    };
    let root = ThreadRoots::new(&thread_paths(&state, &user, &thread_id)?).uploads;
    let n = name.clone();
    blocking(move || {
        let not_found = || ApiError::not_found(format!("File not found: {n}"));
        let handle = match root.open() {
            Ok(h) => h,
            Err(SandboxError::NotFound(_)) => return Err(not_found()),
            Err(e) => return Err(folder_error(e)),
        };
        let dir = handle.dir();
        match dir.symlink_metadata(&n) {
            Ok(m) if m.is_file() || m.file_type().is_symlink() => {}
            _ => return Err(not_found()),
        }
        // Unlinks the entry itself (a symlink is removed, never followed).
        dir.remove_file(&n).map_err(ApiError::internal)?;
        if antler_sandbox::convert::is_convertible(&n) {
            if let Some(stem) = FsPath::new(&n).file_stem() {
                let _ = dir.remove_file(format!("{}.md", stem.to_string_lossy()));
            }
        }
        Ok(())
    })
    .await?;
    Ok(Json(
        json!({"success": true, "message": format!("Deleted {name}")}),
    ))
}

/// An artifact path below the thread's `user-data` (validated segments), or why it may not be
/// served.
fn resolve_virtual(path: &str) -> ApiResult<PathBuf> {
    let prefix = VIRTUAL_USER_DATA.trim_start_matches('/');
    let rest = path
        .trim_start_matches('/')
        .strip_prefix(prefix)
        .ok_or_else(|| ApiError::bad_request(format!("Invalid artifact path: {path}")))?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return Err(ApiError::bad_request(format!(
            "Invalid artifact path: {path}"
        )));
    }
    let mut out = PathBuf::new();
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        if part == ".." || part == "." || part.contains('\\') || part.contains('\0') {
            return Err(ApiError::forbidden(
                "Access denied: path traversal detected",
            ));
        }
        out.push(part);
    }
    Ok(out)
}

/// Open artifact `rel` beneath the thread's `user-data`: the folder it names must still be a
/// real directory, and symlinks are followed only while they stay inside `user-data`.
fn open_artifact(roots: &ThreadRoots, rel: &FsPath, path: &str) -> ApiResult<std::fs::File> {
    let not_found = || ApiError::not_found(format!("Artifact not found: {path}"));
    let refused = |e: SandboxError| match e {
        SandboxError::NotFound(_) => not_found(),
        other => folder_error(other),
    };
    let ud = roots.user_data.as_ref().ok_or_else(not_found)?;
    let handle = ud.open().map_err(refused)?;
    if let Some(Component::Normal(first)) = rel.components().next() {
        if let Some(folder) = roots.folder(first) {
            folder.open().map_err(refused)?;
        }
    }
    handle.open(rel).map_err(|e| {
        if antler_sandbox::beneath::is_escape(&e) {
            ApiError::forbidden("Access denied: path traversal detected")
        } else {
            not_found()
        }
    })
}

/// A single `bytes=` range of a `len`-byte file: `Some(Ok((start, end_exclusive)))`,
/// `Some(Err(()))` when unsatisfiable, `None` to serve the whole file (absent, malformed or
/// multiple ranges).
fn byte_range(headers: &HeaderMap, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = headers
        .get(header::RANGE)?
        .to_str()
        .ok()?
        .trim()
        .strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        if n == 0 || len == 0 {
            return Some(Err(()));
        }
        return Some(Ok((len.saturating_sub(n), len)));
    }
    let start: u64 = a.parse().ok()?;
    let end = if b.is_empty() {
        len
    } else {
        let e: u64 = b.parse().ok()?;
        if e < start {
            return None;
        }
        e.saturating_add(1).min(len)
    };
    if start >= len {
        return Some(Err(()));
    }
    Some(Ok((start, end)))
}

/// Serve an open file: 200, or 206/416 for a byte range.
async fn serve(
    file: std::fs::File,
    len: u64,
    modified: Option<std::time::SystemTime>,
    content_type: &str,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let range = byte_range(headers, len);
    let mut b = Response::builder()
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, content_type);
    if let Some(m) = modified {
        b = b.header(header::LAST_MODIFIED, httpdate::fmt_http_date(m));
    }
    let (start, end) = match range {
        Some(Err(())) => {
            return b
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                .body(Body::empty())
                .map_err(ApiError::internal);
        }
        Some(Ok((s, e))) => {
            b = b
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {s}-{}/{len}", e - 1));
            (s, e)
        }
        None => (0, len),
    };
    let mut f = tokio::fs::File::from_std(file);
    if start > 0 {
        f.seek(SeekFrom::Start(start))
            .await
            .map_err(ApiError::internal)?;
    }
    let stream = tokio_util::io::ReaderStream::new(f.take(end - start));
    b.header(header::CONTENT_LENGTH, end - start)
        .body(Body::from_stream(stream))
        .map_err(ApiError::internal)
}

fn is_active_content(ct: &str) -> bool {
    let base = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    matches!(
        base.as_str(),
        "text/html" | "application/xhtml+xml" | "image/svg+xml"
    )
}

/// G7 `GET /threads/{id}/artifacts/{path}` (`?download=true`).
pub async fn artifact(
    State(state): State<AppState>,
    user: User,
    Path((thread_id, path)): Path<(String, String)>,
    q: QueryPairs,
    req: Request,
) -> ApiResult<Response> {
    may_use_files(&state, &user, &thread_id).await?;
    let download = q.bool("download").unwrap_or(Some(false)).unwrap_or(false);
    let roots = ThreadRoots::new(&thread_paths(&state, &user, &thread_id)?);
    let rel = resolve_virtual(&path)?;
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let guessed = mime_guess::from_path(&name)
        .first_raw()
        .filter(|ct| *ct != "application/octet-stream");
    let (r, p) = (rel.clone(), path.clone());
    let (file, len, modified, text) = blocking(move || {
        let file = open_artifact(&roots, &r, &p)?;
        let meta = file
            .metadata()
            .map_err(|_| ApiError::not_found(format!("Artifact not found: {p}")))?;
        if meta.is_dir() {
            return Err(ApiError::bad_request(format!("Path is a directory: {p}")));
        }
        let text = guessed.is_none() && looks_like_text(&file);
        Ok((file, meta.len(), meta.modified().ok(), text))
    })
    .await?;
    let ct = match guessed {
        Some(ct) => ct,
        None if text => "text/plain; charset=utf-8",
        None => "application/octet-stream",
    };
    let mut resp = serve(file, len, modified, ct, req.headers()).await?;
    let ct = ct.to_owned();
    let active = is_active_content(&ct);
    let kind = if download || active {
        "attachment"
    } else {
        "inline"
    };
    let disposition = format!("{kind}; filename*=UTF-8''{}", percent_encode(&name, false));
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if active {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("sandbox"),
        );
    }
    Ok(resp)
}

/// UTF-8 without NUL bytes in the first 8 KiB (read without moving the file offset).
fn looks_like_text(f: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 8192];
    let Ok(n) = f.read_at(&mut buf, 0) else {
        return false;
    };
    let head = &buf[..n];
    if head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        // A multi-byte character cut at the buffer end is still text.
        Err(e) => e.error_len().is_none() && n == buf.len(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn virtual_paths_stay_inside_user_data() {
        assert_eq!(
            resolve_virtual("mnt/user-data/outputs/a b.md").unwrap(),
            FsPath::new("outputs/a b.md")
        );
        assert_eq!(
            resolve_virtual("mnt/user-data/outputs/../../x")
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            resolve_virtual("etc/passwd").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            resolve_virtual("mnt/user-dataX/a").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn byte_ranges() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::RANGE, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(byte_range(&HeaderMap::new(), 10), None);
        assert_eq!(byte_range(&h("bytes=1-3"), 10), Some(Ok((1, 4))));
        assert_eq!(byte_range(&h("bytes=4-"), 10), Some(Ok((4, 10))));
        assert_eq!(byte_range(&h("bytes=-3"), 10), Some(Ok((7, 10))));
        assert_eq!(byte_range(&h("bytes=5-99"), 10), Some(Ok((5, 10))));
        assert_eq!(byte_range(&h("bytes=10-"), 10), Some(Err(())));
        assert_eq!(byte_range(&h("bytes=0-1,3-4"), 10), None);
        assert_eq!(byte_range(&h("items=0-1"), 10), None);
        assert_eq!(byte_range(&h("bytes=3-1"), 10), None);
    }

    #[test]
    fn names_are_percent_encoded() {
        assert_eq!(percent_encode("a b/é.md", false), "a%20b%2F%C3%A9.md");
        assert_eq!(
            upload_artifact_url("t1", "r é.pdf"),
            "/api/threads/t1/artifacts/mnt/user-data/uploads/r%20%C3%A9.pdf"
        );
        assert!(is_active_content("text/html; charset=utf-8"));
        assert!(is_active_content("image/svg+xml"));
        assert!(!is_active_content("text/plain"));
    }
}
