//! `antler-sandbox-helper`: the sandbox helper alone, installed beside `antler`. It is what
//! `antler sandbox-exec` runs (the launcher, the warden's stages, Landlock-and-exec), in a
//! 1.5 MB binary: every sandbox execs it twice, and it starts in about half the time of the
//! whole `antler` (which is used instead when the helper is missing or of another build).

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let code = antler_sandbox::sandbox_exec_main(&args);
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
