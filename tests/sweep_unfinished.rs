//! A sweep that cannot finish fails the run (issue 37, finding 6). A worker that fills a
//! zone past the sweep's bound hides what lies beyond it (a repository whose
//! `core.fsmonitor` runs on the person's `git status`): the run exits 4 and says so on
//! workcell's stderr (an MCP `shell` call: in the tool's own error), the next run and call
//! refuse the zone, naming what to do, and after the person has looked and cleared it runs
//! work again. Hard links count once: as many links of one file do not reach the bound. A
//! directory with more names than one may is moved aside whole, not read to its end.
//!
//! Four million entries are not practical in a test: `WORKCELL_SWEEP_MAX_ENTRIES` (testing
//! only; it can only lower the bound) makes it 400 here, and one directory's bound 100.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::scratch::Root;

const BOUND: &str = "400";
/// The status of a run whose check could not finish (docs/commands.md, "Exit statuses").
const EXIT_UNVERIFIED: i32 = 4;

struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    fn new() -> Scratch {
        Scratch(Root::new(&["proj/out", "outside"], |_| {}))
    }

    fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }

    fn out(&self) -> PathBuf {
        self.proj().join("out")
    }

    fn workcell(&self, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(self.proj())
            .env_remove("RUST_LOG")
            .env("WORKCELL_SWEEP_MAX_ENTRIES", BOUND)
            .args(args)
            .output()
            .expect("start workcell");
        eprintln!(
            "workcell {args:?} -> {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn run(&self, backend: &str, script: &str) -> Output {
        self.workcell(&["run", "--backend", backend, "--zone", "out=./out:rw", "--", "sh", "-c", script])
    }
}

/// A worker's script: `kind` (`files`: distinct files, `links`: hard links of one file) in
/// five folders of 90 (450 names, each folder under its own bound of 100), then a repository
/// whose fsmonitor would touch `marker` on the host.
fn filler(kind: &str, marker: &Path) -> String {
    let make = if kind == "links" { "ln /out/one f$d/$i" } else { "echo $i > f$d/$i" };
    format!(
        "set -e; cd /out; echo one > one; for d in 0 1 2 3 4; do mkdir f$d; i=0; while [ $i -lt 90 ]; do {make}; i=$((i+1)); done; done; \
         git init -q zz/sub; git -C zz/sub config core.fsmonitor 'touch {m}; false'; echo filled",
        m = marker.display()
    )
}

/// `git status` in `dir` on the host, as the zone's owner, with no configuration of ours.
fn host_git_status(dir: &Path, home: &Path) {
    let _ = support::as_worker("git").current_dir(dir).arg("status").env("HOME", home).env("GIT_CONFIG_NOSYSTEM", "1").env_remove("GIT_DIR").output();
}

mod body {
    use super::*;

    pub fn an_unfinished_sweep_fails_and_the_zone_waits(backend: &str) {
        let s = Scratch::new();
        let marker = s.root.join("outside/RAN");
        let o = s.run(backend, &filler("files", &marker));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(String::from_utf8_lossy(&o.stdout).contains("filled"), "the worker's script ran");
        assert_eq!(o.status.code(), Some(EXIT_UNVERIFIED), "a sweep that stopped fails the run: {stderr}");
        assert!(stderr.contains("could not finish in /out") && stderr.contains("more than 400 files and directories"), "{stderr}");
        assert!(stderr.contains("workcell unverified --clear"), "what to do is named: {stderr}");
        // The next run does not start: the zone waits for a person.
        let o = s.run(backend, "touch /out/NEXT");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(EXIT_UNVERIFIED), "{stderr}");
        assert!(stderr.contains("is unverified") && stderr.contains(s.out().to_str().expect("utf8")), "{stderr}");
        assert!(!s.out().join("NEXT").exists(), "the refused run ran");
        let listed = s.workcell(&["unverified"]);
        assert!(String::from_utf8_lossy(&listed.stdout).contains("could not finish"), "`workcell unverified` lists it");
        // What the message says: look, remove what you did not make, clear it.
        for d in ["f0", "f1", "f2", "f3", "f4", "zz", "one"] {
            let _ = Command::new("rm").arg("-rf").arg(s.out().join(d)).status();
        }
        let cleared = s.workcell(&["unverified", "--clear", "out"]);
        assert_eq!(cleared.status.code(), Some(0));
        let o = s.run(backend, "touch /out/NEXT");
        assert_eq!(o.status.code(), Some(0), "runs work again");
        assert!(s.out().join("NEXT").exists());
        assert!(!marker.exists());
    }

    pub fn hard_links_count_once(backend: &str) {
        let s = Scratch::new();
        let marker = s.root.join("outside/RAN");
        let o = s.run(backend, &filler("links", &marker));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "450 names of one file are one entry: {stderr}");
        assert!(stderr.contains("moved aside zz/sub/.git/config in "), "the repository beyond them was looked at: {stderr}");
        host_git_status(&s.out().join("zz/sub"), &s.root);
        assert!(!marker.exists(), "git status on the host ran the worker's fsmonitor");
        assert_eq!(s.run(backend, "true").status.code(), Some(0), "and the zone is not unverified");
    }

    pub fn a_crowded_directory_is_moved_aside_whole(backend: &str) {
        let s = Scratch::new();
        let script = "set -e; cd /out; mkdir big; i=0; while [ $i -lt 150 ]; do : > big/$i; i=$((i+1)); done; echo evil > big/.envrc; echo done";
        let o = s.run(backend, script);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("moved aside big in ") && stderr.contains("holding more than 100 names"), "{stderr}");
        assert!(!s.out().join("big").exists());
    }

    pub fn an_mcp_call_that_fills_the_zone_fails(backend: &str) {
        if !support::python_ready(&["mcp"]) {
            return;
        }
        let s = Scratch::new();
        std::fs::write(
            s.proj().join("workcell.yaml"),
            "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        )
        .expect("config");
        // Files only: the shell tool's own rules are not what this test is about.
        let fill = "cd /out && for d in 0 1 2 3 4; do mkdir f$d && (cd f$d && seq 1 90 | xargs touch); done && echo filled";
        let client = format!(
            "import asyncio, json, os, sys\nfrom mcp import ClientSession, StdioServerParameters\nfrom mcp.client.stdio import stdio_client\n\
             async def main():\n    p = StdioServerParameters(command={bin:?}, args=['mcp', '--backend', {backend:?}, '--approve-all'], cwd={cwd:?}, env={{**os.environ, 'WORKCELL_SWEEP_MAX_ENTRIES': {BOUND:?}}})\n\
             \x20   async with stdio_client(p) as (r, w):\n        async with ClientSession(r, w) as session:\n            await session.initialize()\n\
             \x20           out = []\n\
             \x20           for cmd in [{fill:?}, 'touch /out/NEXT']:\n\
             \x20               res = await session.call_tool('shell', {{'command': cmd}})\n\
             \x20               out.append({{'error': res.is_error, 'text': ''.join(getattr(c, 'text', '') for c in res.content)}})\n\
             \x20           print(json.dumps(out))\n\
             asyncio.run(main())\n",
            bin = env!("CARGO_BIN_EXE_workcell"),
            cwd = s.proj().display().to_string(),
        );
        let o = Command::new(support::python()).arg("-c").arg(&client).output().expect("python");
        assert!(o.status.success(), "client: {}", String::from_utf8_lossy(&o.stderr));
        let v: Vec<Value> = serde_json::from_slice(&o.stdout).expect("json");
        let (first, second) = (&v[0], &v[1]);
        let text = first["text"].as_str().unwrap_or("");
        assert_eq!(first["error"], true, "the call that filled the zone is an error: {text}");
        assert!(text.contains("could not finish in /out"), "the tool's own error says why: {text}");
        let text = second["text"].as_str().unwrap_or("");
        assert_eq!(second["error"], true, "the next call is refused: {text}");
        assert!(text.contains("is unverified"), "{text}");
        assert!(!s.out().join("NEXT").exists(), "the refused call ran");
        // And a new session is refused before it serves.
        let o = s.workcell(&["mcp", "--backend", backend]);
        assert_eq!(o.status.code(), Some(EXIT_UNVERIFIED), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [an_unfinished_sweep_fails_and_the_zone_waits, hard_links_count_once, a_crowded_directory_is_moved_aside_whole, an_mcp_call_that_fills_the_zone_fails]
);
support::backend_suite!(
    docker,
    "docker",
    [an_unfinished_sweep_fails_and_the_zone_waits, hard_links_count_once, a_crowded_directory_is_moved_aside_whole, an_mcp_call_that_fills_the_zone_fails]
);
