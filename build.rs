//! Release builds on x86_64 Linux hand the linker the list of functions a `workcell run`
//! executes (`link/startup-order.txt`, made by `link/update-startup-order.sh`), so that they
//! are placed together: a run then touches a dozen pages of code instead of ~90 scattered
//! ones, each a page fault (≈ 0.5 ms of a 10 ms bwrap run; see BENCHMARKS.md).
//!
//! Only with the linker Rust uses by default there (rust-lld since Rust 1.90); a configured
//! linker or linker flags turn it off, and so does `WORKCELL_NO_STARTUP_ORDER=1`. A stale list
//! only costs speed: names that no longer exist are skipped.

use std::env;
use std::path::Path;
use std::process::Command;

const ORDER_FILE: &str = "link/startup-order.txt";
const OPT_OUT: &str = "WORKCELL_NO_STARTUP_ORDER";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed={OPT_OUT}");
    if let Some(why_not) = skip_reason() {
        // Visible with `cargo build -vv`.
        println!("startup order not used: {why_not}");
        return;
    }
    let file = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(ORDER_FILE);
    println!("cargo:rustc-link-arg-bin=workcell=-Wl,--symbol-ordering-file={}", file.display());
    println!("cargo:rustc-link-arg-bin=workcell=-Wl,--no-warn-symbol-ordering");
}

fn skip_reason() -> Option<String> {
    let var = |k: &str| env::var(k).unwrap_or_default();
    if !var(OPT_OUT).is_empty() {
        return Some(format!("{OPT_OUT} is set"));
    }
    if var("PROFILE") != "release" {
        return Some("not a release build".into());
    }
    if var("TARGET") != "x86_64-unknown-linux-gnu" {
        return Some(format!("target {} does not link with rust-lld by default", var("TARGET")));
    }
    if !var("RUSTC_LINKER").is_empty() {
        return Some("a linker is configured".into());
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if flags.contains("link") || flags.contains("fuse-ld") {
        return Some("RUSTFLAGS choose linker options".into());
    }
    if !Path::new(ORDER_FILE).is_file() {
        return Some(format!("{ORDER_FILE} is missing"));
    }
    match rustc_minor() {
        Some(minor) if minor >= 90 => None,
        Some(minor) => Some(format!("rustc 1.{minor} links with the system linker")),
        None => Some("the rustc version is unknown".into()),
    }
}

/// The minor version of the compiler building this crate (`rustc 1.95.0 (…)` → 95).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().nth(1)?.split('.').nth(1)?.parse().ok()
}
