//! `ANTLER_SANDBOX_BUILD`: a fingerprint of this crate's sources. antler hands it to the
//! sandbox helper it starts, and a helper built from other sources (an `antler-sandbox-helper`
//! left beside a newer `antler`) refuses to serve, so antler falls back to itself instead of
//! speaking to a warden of another version.

use std::path::Path;

fn main() {
    let src = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut files = Vec::new();
    collect(&src, &mut files);
    files.sort();
    // FNV-1a over relative paths and contents: stable across machines and build commands.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for f in &files {
        eat(f
            .strip_prefix(&src)
            .unwrap_or(f)
            .to_string_lossy()
            .as_bytes());
        eat(&std::fs::read(f).unwrap_or_default());
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=ANTLER_SANDBOX_BUILD={version}-{h:016x}");
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
