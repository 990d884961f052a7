//! Attaching files to a message (spec 50 §7.1–7.2): copy them into the thread's uploads folder
//! under safe, de-duplicated names, optionally convert documents to a Markdown companion, and
//! return the `additional_kwargs.files` entries the UploadsMiddleware reads.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

use cap_std::fs::{Dir, MetadataExt};

use crate::beneath::ThreadRoots;
use crate::convert::{self, ConvertError};
use crate::error::SandboxError;
use crate::paths::{ThreadPaths, VIRTUAL_UPLOADS};
use crate::settings::UploadSettings;

/// One attached file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttachedFile {
    /// Name in the uploads folder.
    pub filename: String,
    pub size: u64,
    /// Virtual path (`/mnt/user-data/uploads/{filename}`).
    pub path: String,
    /// Always `uploaded`.
    pub status: String,
    /// The name the file had on the command line, when it had to be renamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_filename: Option<String>,
    /// Markdown companion (`{stem}.md`), when converted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub markdown_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub markdown_path: Option<String>,
    /// Why a document was not converted (unsupported format or a failed conversion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl AttachedFile {
    /// The `additional_kwargs.files` entry: `{filename, size, path, status}`.
    pub fn kwargs_entry(&self) -> Value {
        json!({
            "filename": self.filename,
            "size": self.size,
            "path": self.path,
            "status": self.status,
        })
    }
}

/// Why attaching failed. Nothing written by the failed call is left behind.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("too many files: {count} given, at most {max} per message (uploads.max_files)")]
    TooManyFiles { count: usize, max: usize },
    #[error("file not found: {0}")]
    NotFound(PathBuf),
    #[error("not a regular file: {0}")]
    NotAFile(PathBuf),
    #[error("unsafe file name: {0:?}")]
    InvalidName(String),
    #[error("{path} is {size} bytes; the limit is {max} bytes (uploads.max_file_size)")]
    FileTooLarge { path: PathBuf, size: u64, max: u64 },
    #[error("the files total {total} bytes; the limit is {max} bytes (uploads.max_total_size)")]
    TotalTooLarge { total: u64, max: u64 },
    #[error("refusing to overwrite {0}: it is a symlink, a special file or hard-linked")]
    UnsafeDestination(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The uploads folder is unusable (e.g. replaced by a symlink); nothing was written.
    #[error("{0}")]
    Folder(#[from] SandboxError),
}

/// The basename of a client-supplied name, or `None` when it is unsafe (empty, `.`, `..`,
/// contains `\`, or longer than 255 bytes).
pub fn safe_filename(raw: &str) -> Option<String> {
    let base = raw.rsplit('/').next().unwrap_or(raw).trim();
    if base.is_empty()
        || base == "."
        || base == ".."
        || base.contains('\\')
        || base.len() > 255
        || base.contains('\0')
    {
        return None;
    }
    Some(base.to_owned())
}

/// `name`, or `stem_1.ext`, `stem_2.ext`, … — the first not in `taken`.
pub fn dedupe_name(name: &str, taken: &HashSet<String>) -> String {
    if !taken.contains(name) {
        return name.to_owned();
    }
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name, ""),
    };
    (1..)
        .map(|n| format!("{stem}_{n}{ext}"))
        .find(|c| !taken.contains(c))
        .unwrap_or_else(|| name.to_owned())
}

/// Refuse to replace anything but a single-linked regular file (checked without following).
pub fn check_destination(dir: &Dir, name: &str) -> Result<(), UploadError> {
    match dir.symlink_metadata(name) {
        Err(_) => Ok(()),
        Ok(m) if m.file_type().is_file() && m.nlink() <= 1 => Ok(()),
        Ok(_) => Err(UploadError::UnsafeDestination(name.to_owned())),
    }
}

/// A fresh staging name (`.upload-*.part`, hidden from listings).
pub fn staging_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        ".upload-{}-{}.part",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Create the staging file `name` in `dir` (never an existing entry, never through a link).
pub fn create_staging(dir: &Dir, name: &str) -> std::io::Result<std::fs::File> {
    let mut o = cap_std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    dir.open_with(name, &o).map(cap_std::fs::File::into_std)
}

/// Make a finished staging file world-readable and rename it over `dest` (rename replaces the
/// entry itself, never what a link points to).
pub fn publish(dir: &Dir, staging: &str, file: &std::fs::File, dest: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.sync_all()?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    dir.rename(staging, dir, dest)
}

/// Copy `src` (or `bytes`) through a staging file in `dir`, then rename into place.
fn install(
    src: &Path,
    dir: &Dir,
    dest_name: &str,
    bytes: Option<&[u8]>,
) -> Result<(), UploadError> {
    check_destination(dir, dest_name)?;
    let staging = staging_name();
    let res = (|| -> std::io::Result<()> {
        let mut out = create_staging(dir, &staging)?;
        match bytes {
            Some(b) => out.write_all(b)?,
            None => {
                let mut input = std::fs::File::open(src)?;
                std::io::copy(&mut input, &mut out)?;
            }
        }
        publish(dir, &staging, &out, dest_name)
    })();
    if let Err(e) = res {
        let _ = dir.remove_file(&staging);
        return Err(UploadError::Io {
            path: src.to_path_buf(),
            source: e,
        });
    }
    Ok(())
}

/// Copy `paths` into the thread's uploads folder and describe them for
/// `additional_kwargs.files`. Limits are checked before anything is written; on any failure
/// everything this call wrote is removed. Documents are converted when
/// `settings.auto_convert_documents` is on; an unsupported or failed conversion leaves a `note`
/// and no companion (the upload itself still succeeds). The uploads folder is written through
/// its directory handle: a folder replaced by a symlink is refused, never followed.
pub fn attach_files(
    paths: &[PathBuf],
    thread: &ThreadPaths,
    settings: &UploadSettings,
) -> Result<Vec<AttachedFile>, UploadError> {
    if paths.len() > settings.max_files {
        return Err(UploadError::TooManyFiles {
            count: paths.len(),
            max: settings.max_files,
        });
    }
    let mut plan: Vec<(PathBuf, String, Option<String>, u64)> = Vec::new();
    let mut taken: HashSet<String> = HashSet::new();
    let mut total = 0u64;
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => UploadError::NotFound(p.clone()),
            _ => UploadError::Io {
                path: p.clone(),
                source: e,
            },
        })?;
        if !meta.is_file() {
            return Err(UploadError::NotAFile(p.clone()));
        }
        if meta.len() > settings.max_file_size {
            return Err(UploadError::FileTooLarge {
                path: p.clone(),
                size: meta.len(),
                max: settings.max_file_size,
            });
        }
        total += meta.len();
        if total > settings.max_total_size {
            return Err(UploadError::TotalTooLarge {
                total,
                max: settings.max_total_size,
            });
        }
        let raw = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = safe_filename(&raw).ok_or_else(|| UploadError::InvalidName(raw.clone()))?;
        let unique = dedupe_name(&name, &taken);
        taken.insert(unique.clone());
        let original = (unique != name).then_some(name);
        plan.push((p.clone(), unique, original, meta.len()));
    }
    let roots = ThreadRoots::new(thread);
    roots.ensure().map_err(|source| UploadError::Io {
        path: thread.uploads.clone(),
        source,
    })?;
    let uploads = roots.uploads.open()?;
    let dir = uploads.dir();
    let mut written: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (src, name, original, size) in plan {
        if let Err(e) = install(&src, dir, &name, None) {
            for w in &written {
                let _ = dir.remove_file(w);
            }
            return Err(e);
        }
        written.push(name.clone());
        let mut file = AttachedFile {
            path: format!("{VIRTUAL_UPLOADS}/{name}"),
            filename: name.clone(),
            size,
            status: "uploaded".to_owned(),
            original_filename: original,
            markdown_file: None,
            markdown_path: None,
            note: None,
        };
        if settings.auto_convert_documents && convert::is_convertible(&name) {
            let stem = Path::new(&name)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let md_name = dedupe_name(&format!("{stem}.md"), &taken);
            let converted = dir
                .open(&name)
                .map_err(|e| ConvertError::Failed {
                    file: name.clone(),
                    reason: e.to_string(),
                })
                .and_then(|f| convert::to_markdown_from(f.into_std(), &name));
            match converted {
                Ok(md) => match install(&src, dir, &md_name, Some(md.as_bytes())) {
                    Ok(()) => {
                        taken.insert(md_name.clone());
                        written.push(md_name.clone());
                        file.markdown_path = Some(format!("{VIRTUAL_UPLOADS}/{md_name}"));
                        file.markdown_file = Some(md_name);
                    }
                    Err(e) => {
                        file.note = Some(format!("could not write the Markdown companion: {e}"))
                    }
                },
                Err(e @ ConvertError::Unsupported(_)) => {
                    file.note = Some(format!("{e}; the original file was uploaded — read it with bash and a suitable tool"));
                }
                Err(e) => file.note = Some(e.to_string()),
            }
        }
        out.push(file);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn names_are_sanitised_and_deduplicated() {
        assert_eq!(safe_filename("a/b/c.txt").as_deref(), Some("c.txt"));
        assert_eq!(safe_filename(".."), None);
        assert_eq!(safe_filename("a\\b"), None);
        assert_eq!(safe_filename(""), None);
        let mut taken = HashSet::new();
        taken.insert("r.txt".to_owned());
        assert_eq!(dedupe_name("r.txt", &taken), "r_1.txt");
        taken.insert("r_1.txt".to_owned());
        assert_eq!(dedupe_name("r.txt", &taken), "r_2.txt");
        assert_eq!(
            dedupe_name("README", &HashSet::from(["README".to_owned()])),
            "README_1"
        );
    }

    /// A thread `t1` under a fresh home, and a source folder holding file `name` (its path
    /// returned) with `contents`.
    fn with_source(
        name: &str,
        contents: impl AsRef<[u8]>,
    ) -> (tempfile::TempDir, tempfile::TempDir, PathBuf, ThreadPaths) {
        let home = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        let a = src.path().join(name);
        std::fs::write(&a, contents).unwrap();
        let t = ThreadPaths::new(home.path(), "t1", None).unwrap();
        (home, src, a, t)
    }

    #[test]
    fn attach_copies_into_uploads_and_describes_files() {
        let (_home, src, a, t) = with_source("notes.txt", "hello");
        let sub = src.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let b = sub.join("notes.txt");
        std::fs::write(&b, "other").unwrap();
        let files = attach_files(&[a, b], &t, &UploadSettings::default()).unwrap();
        assert_eq!(
            files[0].kwargs_entry(),
            json!({"filename": "notes.txt", "size": 5, "path": "/mnt/user-data/uploads/notes.txt", "status": "uploaded"})
        );
        assert_eq!(files[1].filename, "notes_1.txt");
        assert_eq!(files[1].original_filename.as_deref(), Some("notes.txt"));
        assert_eq!(
            std::fs::read_to_string(t.uploads.join("notes_1.txt")).unwrap(),
            "other"
        );
        // No staging files left behind.
        let names: Vec<String> = std::fs::read_dir(&t.uploads)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(".upload-")),
            "{names:?}"
        );
    }

    #[test]
    fn limits_are_checked_before_writing() {
        let (_home, src, a, t) = with_source("big.bin", vec![0u8; 100]);
        let attach = |s: UploadSettings| attach_files(std::slice::from_ref(&a), &t, &s);
        assert!(matches!(
            attach(UploadSettings {
                max_file_size: 10,
                ..Default::default()
            }),
            Err(UploadError::FileTooLarge { .. })
        ));
        assert!(matches!(
            attach(UploadSettings {
                max_files: 0,
                ..Default::default()
            }),
            Err(UploadError::TooManyFiles { .. })
        ));
        assert!(matches!(
            attach_files(&[src.path().join("nope")], &t, &UploadSettings::default()),
            Err(UploadError::NotFound(_))
        ));
        assert!(!t.uploads.join("big.bin").exists());
    }

    #[test]
    fn symlinked_destinations_are_refused() {
        let (_home, src, a, t) = with_source("x.txt", "x");
        t.ensure_dirs().unwrap();
        let victim = src.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, t.uploads.join("x.txt")).unwrap();
        assert!(matches!(
            attach_files(&[a], &t, &UploadSettings::default()),
            Err(UploadError::UnsafeDestination(_))
        ));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    #[test]
    fn a_swapped_uploads_folder_is_refused() {
        let (_home, _src, a, t) = with_source("x.txt", "pwned");
        let canary = tempfile::tempdir().unwrap();
        std::fs::write(canary.path().join("x.txt"), "keep").unwrap();
        t.ensure_dirs().unwrap();
        std::fs::remove_dir(&t.uploads).unwrap();
        std::os::unix::fs::symlink(canary.path(), &t.uploads).unwrap();
        let e = attach_files(&[a], &t, &UploadSettings::default()).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        assert_eq!(std::fs::read_dir(canary.path()).unwrap().count(), 1);
        assert_eq!(
            std::fs::read_to_string(canary.path().join("x.txt")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn unsupported_documents_get_a_note() {
        let (_home, _src, a, t) = with_source("old.doc", "binary");
        let s = UploadSettings {
            auto_convert_documents: true,
            ..Default::default()
        };
        let files = attach_files(&[a], &t, &s).unwrap();
        assert!(files[0]
            .note
            .as_deref()
            .unwrap()
            .starts_with("conversion of .doc files to Markdown is not supported"));
        assert!(files[0].markdown_file.is_none());
    }
}
