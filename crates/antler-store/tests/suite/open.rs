//! Opening: pragmas, migrations, and clear errors instead of panics.

use std::io::Write as _;
use std::path::Path;

use antler_store::{Failure, SqliteStore, StoreError, SCHEMA_VERSION};

fn pragma(path: &Path, name: &str) -> String {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(s) => s,
            other => format!("{other:?}"),
        })
        .unwrap()
}

#[test]
fn open_creates_parents_wal_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("antler.db");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.path(), path);
    assert!(path.exists());
    assert_eq!(pragma(&path, "journal_mode"), "wal");
    assert_eq!(pragma(&path, "user_version"), SCHEMA_VERSION.to_string());
    drop(store);
    // Opening again is a no-op migration.
    SqliteStore::open(&path).unwrap();
    assert_eq!(pragma(&path, "user_version"), SCHEMA_VERSION.to_string());
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    drop(SqliteStore::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()) && text.contains("99"),
        "{text}"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&[b'#'; 4096]).unwrap();
    drop(f);
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(err.failure(), Some(Failure::NotADatabase), "{err}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("not an antler (SQLite) database"), "{text}");
}

#[test]
fn a_parent_that_is_a_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("home");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let path = blocker.join("antler.db");
    let err = SqliteStore::open(&path).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("cannot create directory"), "{text}");
}

#[cfg(unix)]
#[test]
fn a_read_only_directory_is_a_clear_error() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = ro.join("probe");
    if std::fs::write(&probe, b"x").is_ok() {
        eprintln!(
            "skipping a_read_only_directory_is_a_clear_error: a 0555 directory is still \
             writable here (running as root or with CAP_DAC_OVERRIDE)"
        );
        let _ = std::fs::remove_file(&probe);
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        return;
    }
    let in_dir = ro.join("antler.db");
    let err = SqliteStore::open(&in_dir).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&in_dir.display().to_string()), "{text}");
    assert!(
        matches!(err.failure(), Some(Failure::CannotOpen | Failure::ReadOnly)),
        "{text}"
    );
    let nested = ro.join("sub").join("antler.db");
    let err = SqliteStore::open(&nested).unwrap_err();
    assert_eq!(err.failure(), Some(Failure::ReadOnly), "{err}");
    assert!(err.to_string().contains("read-only"), "{err}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn the_exit_checkpoint_never_waits_for_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    let store = SqliteStore::open(&path).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE scratch(x); INSERT INTO scratch VALUES (1);")
        .unwrap();
    // Another process reads an older snapshot than the newest write: a full checkpoint would
    // have to wait for it.
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM scratch;")
        .unwrap();
    other
        .execute_batch("INSERT INTO scratch VALUES (2);")
        .unwrap();
    let wal = path.with_extension("db-wal");
    // The truncation gives up at once (waiting would take the store's 10 s busy timeout and
    // miss this bound) and the log stays.
    let done = tokio::time::timeout(std::time::Duration::from_secs(5), store.try_truncate_wal())
        .await
        .expect("the checkpoint waited for the reader");
    assert!(!done.unwrap());
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);
    // Once the reader is done, the log is folded into the file and truncated.
    reader.execute_batch("COMMIT;").unwrap();
    assert!(store.try_truncate_wal().await.unwrap());
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
}
