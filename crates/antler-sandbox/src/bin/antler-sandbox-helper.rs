//! A stand-alone copy of `antler sandbox-exec` for this crate's tests: applies Landlock, then
//! execs the given program. Usage: `antler-sandbox-helper [--write DIR]... -- PROGRAM [ARGS]...`.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(antler_sandbox::sandbox_exec_main(&args));
}
