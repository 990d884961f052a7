//! Thread files (spec 70 §3.4 G4–G7): uploads into `user-data/uploads` (multipart, streamed to a
//! staging file under the configured limits, client names reduced to a safe basename and
//! de-duplicated, unsafe names and destinations skipped), listing and deleting uploads, and
//! serving artifacts from the thread's `user-data` only — traversal and symlink escapes are
//! refused, active content (HTML, SVG) is always a download, byte ranges are honoured.

use std::collections::HashSet;
use std::path::{Path as FsPath, PathBuf};

use antler_sandbox::paths::{VIRTUAL_UPLOADS, VIRTUAL_USER_DATA};
use antler_sandbox::uploads::safe_filename;
use antler_sandbox::ThreadPaths;
use axum::body::Body;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Json;
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;

use crate::access::may_use_files;
use crate::error::{ApiError, ApiResult};
use crate::extract::QueryPairs;
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

/// Only a missing file or a single-linked regular file may be replaced.
fn safe_destination(dest: &FsPath) -> bool {
    match std::fs::symlink_metadata(dest) {
        Err(_) => true,
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            m.file_type().is_file() && m.nlink() <= 1
        }
    }
}

async fn remove_all(paths: &[PathBuf]) {
    for p in paths {
        let _ = tokio::fs::remove_file(p).await;
    }
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

struct Upload {
    written: Vec<PathBuf>,
    staging: Option<PathBuf>,
}

impl Upload {
    async fn abort(&mut self, err: ApiError) -> ApiError {
        if let Some(s) = self.staging.take() {
            let _ = tokio::fs::remove_file(s).await;
        }
        remove_all(&self.written).await;
        err
    }
}

/// G4 `POST /threads/{id}/uploads` (multipart field `files`, repeated).
pub async fn upload(
    State(state): State<AppState>,
    user: User,
    Path(thread_id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<Value>> {
    may_use_files(&state, &user, &thread_id).await?;
    let mut multipart = multipart
        .map_err(|e| ApiError::bad_request(format!("Expected a multipart/form-data body: {e}")))?;
    let limits = &state.app.config.uploads;
    let paths = thread_paths(&state, &user, &thread_id)?;
    let dir = paths.uploads.clone();
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(ApiError::internal)?;

    let mut up = Upload {
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
        let dest = dir.join(&unique);
        if !safe_destination(&dest) {
            skipped.push(unique);
            continue;
        }
        let staging = dir.join(format!(".upload-{}.part", uuid::Uuid::new_v4().simple()));
        let mut out = match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&staging)
            .await
        {
            Ok(f) => f,
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
            out.sync_all().await?;
            drop(out);
            {
                use std::os::unix::fs::PermissionsExt;
                tokio::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o644))
                    .await?;
            }
            tokio::fs::rename(&staging, &dest).await
        }
        .await;
        if let Err(e) = finished {
            return Err(up.abort(ApiError::internal(e)).await);
        }
        up.staging = None;
        up.written.push(dest.clone());
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
            let (src, n) = (dest.clone(), unique.clone());
            let converted =
                tokio::task::spawn_blocking(move || antler_sandbox::convert::to_markdown(&src, &n))
                    .await;
            match converted {
                Ok(Ok(md)) => {
                    let md_path = dir.join(&md_name);
                    if safe_destination(&md_path) && tokio::fs::write(&md_path, md).await.is_ok() {
                        up.written.push(md_path.clone());
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
pub async fn list(
    State(state): State<AppState>,
    user: User,
    Path(thread_id): Path<String>,
) -> ApiResult<Json<Value>> {
    may_use_files(&state, &user, &thread_id).await?;
    let dir = thread_paths(&state, &user, &thread_id)?.uploads;
    let tid = thread_id.clone();
    let files = tokio::task::spawn_blocking(move || {
        let mut files: Vec<(String, Value)> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Ok(meta) = e.metadata() else { continue };
                if !meta.is_file() || (name.starts_with(".upload-") && name.ends_with(".part")) {
                    continue;
                }
                let mut info = file_info(&tid, &dir, &name, meta.len());
                if let Ok(m) = meta.modified() {
                    if let Ok(d) = m.duration_since(std::time::UNIX_EPOCH) {
                        info.insert("modified".into(), json!(d.as_secs_f64()));
                    }
                }
                files.push((name, Value::Object(info)));
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        files.into_iter().map(|(_, v)| v).collect::<Vec<_>>()
    })
    .await
    .map_err(ApiError::internal)?;
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
    let dir = thread_paths(&state, &user, &thread_id)?.uploads;
    let path = dir.join(&name);
    match tokio::fs::symlink_metadata(&path).await {
        Ok(m) if m.is_file() || m.file_type().is_symlink() => {}
        _ => return Err(ApiError::not_found(format!("File not found: {name}"))),
    }
    tokio::fs::remove_file(&path)
        .await
        .map_err(ApiError::internal)?;
    if antler_sandbox::convert::is_convertible(&name) {
        if let Some(stem) = FsPath::new(&name).file_stem() {
            let md = dir.join(format!("{}.md", stem.to_string_lossy()));
            let _ = tokio::fs::remove_file(md).await;
        }
    }
    Ok(Json(
        json!({"success": true, "message": format!("Deleted {name}")}),
    ))
}

/// Where an artifact path points inside the thread's `user-data`, or why it may not be served.
fn resolve_virtual(user_data: &FsPath, path: &str) -> ApiResult<PathBuf> {
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
    let mut out = user_data.to_path_buf();
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
    let user_data = thread_paths(&state, &user, &thread_id)?.user_data;
    let target = resolve_virtual(&user_data, &path)?;
    let not_found = || ApiError::not_found(format!("Artifact not found: {path}"));
    let root = tokio::fs::canonicalize(&user_data)
        .await
        .map_err(|_| not_found())?;
    let real = tokio::fs::canonicalize(&target)
        .await
        .map_err(|_| not_found())?;
    if !real.starts_with(&root) {
        return Err(ApiError::forbidden(
            "Access denied: path traversal detected",
        ));
    }
    let meta = tokio::fs::metadata(&real).await.map_err(|_| not_found())?;
    if meta.is_dir() {
        return Err(ApiError::bad_request(format!(
            "Path is a directory: {path}"
        )));
    }
    let resp = tower_http::services::ServeFile::new(&real)
        .oneshot(req)
        .await
        .map_err(ApiError::internal)?;
    let mut resp = resp.map(Body::new);
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    if ct == "application/octet-stream" && looks_like_text(&real).await {
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
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

/// UTF-8 without NUL bytes in the first 8 KiB.
async fn looks_like_text(path: &FsPath) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(mut f) = tokio::fs::File::open(path).await else {
        return false;
    };
    let mut buf = vec![0u8; 8192];
    let Ok(n) = f.read(&mut buf).await else {
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
        let root = FsPath::new("/h/threads/t/user-data");
        assert_eq!(
            resolve_virtual(root, "mnt/user-data/outputs/a b.md").unwrap(),
            root.join("outputs/a b.md")
        );
        assert_eq!(
            resolve_virtual(root, "mnt/user-data/outputs/../../x")
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            resolve_virtual(root, "etc/passwd").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            resolve_virtual(root, "mnt/user-dataX/a")
                .unwrap_err()
                .status,
            StatusCode::BAD_REQUEST
        );
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
