//! One table of endings: the same exit status and the same explanation from workcell on
//! docker and on bwrap (docs/commands.md, "Exit statuses").

mod support;

use std::process::Command;

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    code: i32,
    /// What workcell's own last line on stderr says (`None`: workcell says nothing).
    says: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case { name: "exit status", args: &["--", "sh", "-c", "exit 3"], code: 3, says: None },
    Case {
        name: "timeout",
        args: &["--timeout", "1s", "--", "sleep", "30"],
        code: 124,
        says: Some("ran longer than its timeout (1s) and was stopped (exit 124)"),
    },
    Case {
        name: "out of memory",
        args: &["--memory", "64m", "--", "python3", "-c", "a = bytearray(400 << 20); a[::4096] = b'x' * len(a[::4096])"],
        code: 137,
        says: Some("killed for using more than its memory limit (67108864 bytes) (exit 137)"),
    },
    Case { name: "signal", args: &["--", "sh", "-c", "kill -TERM $$"], code: 143, says: None },
    Case { name: "not found", args: &["--", "no-such-program"], code: 127, says: Some("no-such-program: command not found inside the worker (exit 127)") },
    Case { name: "not executable", args: &["--", "/in/a.txt"], code: 126, says: Some("/in/a.txt: not executable inside the worker (exit 126)") },
    Case { name: "bad workdir", args: &["-w", "/nonexistent", "--", "true"], code: 2, says: Some("the working directory '/nonexistent' cannot be used") },
    Case { name: "missing workdir in a zone", args: &["-w", "/in/nope", "--", "true"], code: 2, says: Some("/in has no directory nope") },
    Case { name: "empty program", args: &["--", ""], code: 2, says: Some("nothing to run: the command's program name is empty") },
];

/// Runs every case on `backend`: (exit status, workcell's last own line on stderr).
fn endings(backend: &str) -> Vec<(i32, Option<String>)> {
    let p = support::Proj::new();
    CASES
        .iter()
        .map(|c| {
            let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
                .current_dir(&p.dir)
                .args(["run", "--backend", backend, "--zone", "in=in:ro"])
                .args(c.args)
                .env_remove("RUST_LOG")
                .output()
                .expect("workcell runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let said = stderr.lines().rfind(|l| l.starts_with("workcell: ") && !l.contains("warning:") && !l.contains("image")).map(str::to_string);
            (out.status.code().unwrap_or(-1), said)
        })
        .collect()
}

#[test]
fn docker_and_bwrap_end_the_same_way() {
    if !support::backend_ready("docker") || !support::backend_ready("bwrap") {
        return;
    }
    let docker = endings("docker");
    let bwrap = endings("bwrap");
    for ((case, d), b) in CASES.iter().zip(&docker).zip(&bwrap) {
        assert_eq!(d, b, "{}: docker and bwrap differ", case.name);
        assert_eq!(d.0, case.code, "{}: {d:?}", case.name);
        match case.says {
            Some(text) => assert!(d.1.as_deref().is_some_and(|l| l.contains(text)), "{}: expected {text:?}, got {:?}", case.name, d.1),
            None => assert_eq!(d.1, None, "{}", case.name),
        }
    }
}
