//! Puts the git commit into `workcell --version` when built from a checkout:
//! `WORKCELL_VERSION` is `0.1.0 (abc1234)` there, and just `0.1.0` without git or outside a
//! checkout (a crate tarball, `cargo install` from a registry).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    // Rebuilt when HEAD moves: HEAD itself (a checkout of another branch), the branch's ref
    // file (a commit) and packed-refs. Only files that exist: cargo reruns a script on every
    // build while a watched file is missing.
    if commit.is_some() {
        let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
        watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for name in watched {
            if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
                if Path::new(&path).exists() {
                    println!("cargo:rerun-if-changed={path}");
                }
            }
        }
    }
    let shown = match commit {
        Some(c) => format!("{version} ({c})"),
        None => version,
    };
    println!("cargo:rustc-env=WORKCELL_VERSION={shown}");
}
