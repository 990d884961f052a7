//! The sandbox helper for this crate's own tests (the shipped one is `antler-sandbox-helper`
//! of antler-cli, the same program): `[--write DIR]... -- PROGRAM [ARGS]...` applies Landlock
//! and execs the program; `--warden…` runs the warden's stages.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(antler_sandbox::sandbox_exec_main(&args));
}
