//! Release builds hand the linker the list of functions a `workcell run` executes
//! (`link/startup-order.txt`, made by `link/update-startup-order.sh`), so that they are placed
//! together: a run then touches a dozen pages of code instead of ~90 scattered ones, each a
//! page fault (≈ 0.5 ms of a 10 ms bwrap run; see BENCHMARKS.md).
//!
//! `--symbol-ordering-file` is an lld (and mold) option; GNU ld refuses it. Which linker a
//! toolchain uses cannot be told from its version (rustup's x86_64 Linux builds link with
//! rust-lld since 1.90, distribution builds often with the system `ld`), so the option is
//! used only when a trivial program links with it using the same compiler, target, flags
//! and configured linker. `WORKCELL_NO_STARTUP_ORDER=1` turns it off. A stale list only
//! costs speed: names that no longer exist are skipped.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const ORDER_FILE: &str = "link/startup-order.txt";
const OPT_OUT: &str = "WORKCELL_NO_STARTUP_ORDER";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed={OPT_OUT}");
    match startup_order_args() {
        Ok(args) => {
            for a in args {
                println!("cargo:rustc-link-arg-bin=workcell={a}");
            }
        }
        // Visible with `cargo build -vv`.
        Err(why_not) => println!("startup order not used: {why_not}"),
    }
}

/// The linker arguments that apply the startup order, or why they are not used.
fn startup_order_args() -> Result<Vec<String>, String> {
    if env::var_os(OPT_OUT).is_some_and(|v| !v.is_empty()) {
        return Err(format!("{OPT_OUT} is set"));
    }
    if env::var("PROFILE").as_deref() != Ok("release") {
        return Err("not a release build".into());
    }
    let file = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?).join(ORDER_FILE);
    let file = file.to_str().filter(|_| file.is_file()).ok_or_else(|| format!("{} is missing or not UTF-8", file.display()))?;
    // `-Xlinker` passes the path as one argument (`-Wl,` would split it at commas).
    let args = vec!["-Xlinker".to_string(), format!("--symbol-ordering-file={file}"), "-Xlinker".into(), "--no-warn-symbol-ordering".into()];
    links_with(&args)?;
    Ok(args)
}

/// Links `fn main() {}` with `link_args` the way this crate's binary will be linked.
fn links_with(link_args: &[String]) -> Result<(), String> {
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let source = out.join("startup_order_probe.rs");
    std::fs::write(&source, "fn main() {}\n").map_err(|e| format!("cannot write the probe: {e}"))?;
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.arg("--crate-type=bin").arg("--crate-name=startup_order_probe").arg("-o").arg(out.join("startup_order_probe"));
    if let Some(target) = env::var_os("TARGET") {
        cmd.arg("--target").arg(target);
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        let mut flag = OsString::from("-Clinker=");
        flag.push(linker);
        cmd.arg(flag);
    }
    // The crate's own flags (a chosen linker or linker flavour among them).
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    for a in link_args {
        cmd.arg(format!("-Clink-arg={a}"));
    }
    cmd.arg(&source).stdout(Stdio::null()).stderr(Stdio::null());
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err("the linker does not accept --symbol-ordering-file".into()),
        Err(e) => Err(format!("cannot run rustc for the probe: {e}")),
    }
}
