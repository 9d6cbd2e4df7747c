//! Adversarial review of the shell rules: command lines whose words hide a denied program from
//! the analysis, and paths that `sandbox_paths` judged inside while the command reaches outside.

use workcell::config::{Project, ShellRule};
use workcell::tools::shell::{ShellDecision, ShellPolicy};

fn project() -> (tempfile::TempDir, Project) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    for d in ["out/pub", "out/secret"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    std::os::unix::fs::symlink("../secret", root.join("out/pub/link")).expect("symlink");
    let yaml = "sandbox:\n  zones:\n    out: {path: ./out, mode: rw}\n";
    let p = Project::from_text(yaml, &root.join("workcell.yaml"), &root).expect("project");
    (tmp, p)
}

fn rule(pattern: &str, paths: &[&str], allowed: bool) -> ShellRule {
    ShellRule { pattern: pattern.into(), sandbox_paths: paths.iter().map(|s| s.to_string()).collect(), approval_required: false, allowed }
}

#[test]
fn a_denied_program_hidden_in_launcher_options_is_still_refused() {
    let (_t, p) = project();
    let policy = ShellPolicy { rules: vec![rule("rm", &[], false)], ..ShellPolicy::default() };
    let sb = &p.sandbox;
    for cmd in [
        // env: a cluster ending in a letter that takes a value (-iu NAME) eats the next word.
        "env -iu -S rm x",
        "env -iC -S rm x",
        // env -S treats `\_` as a word separator; shlex does not.
        r"env -S 'rm\_x'",
        r"env -S 'nice\_rm\_x'",
        // sh: `o` inside a cluster takes the next word as an option name.
        "sh -oc errexit 'rm x'",
        "bash -Oc extglob 'rm x'",
        // sh: a lone `+` is an empty option word, not the end of options.
        "sh + -c 'rm x'",
        "find /out -exec sh + -c 'rm x' {} +",
    ] {
        let d = policy.decide(cmd, sb);
        assert!(matches!(d, ShellDecision::Refused { .. }), "{cmd} should be refused, got {d:?}");
    }
}

#[test]
fn sandbox_paths_follow_a_link_reached_after_a_directory_the_command_creates() {
    let (_t, p) = project();
    let policy = ShellPolicy { rules: vec![rule("mkdir -p", &["/out/pub"], true)], ..ShellPolicy::default() };
    // `mkdir -p` creates `new`, then `new/..` is /out/pub again and `link` leads to /out/secret.
    for cmd in ["mkdir -p /out/pub/new/../link/evil", "mkdir -p new/../link/evil"] {
        let d = policy.decide_in(cmd, &p.sandbox, "/out/pub");
        assert!(matches!(d, ShellDecision::Refused { .. }), "{cmd}: {d:?}");
    }
    assert!(matches!(policy.decide_in("mkdir -p new/../x/y", &p.sandbox, "/out/pub"), ShellDecision::Allowed { .. }));
}

#[test]
fn sandbox_paths_check_the_value_of_a_name_value_word() {
    let (_t, p) = project();
    let policy = ShellPolicy { rules: vec![rule("dd", &["/out/pub"], true)], ..ShellPolicy::default() };
    // dd reads `if=` and writes `of=`: the text after `=` is the file.
    for cmd in ["dd if=/out/secret/x of=copy", "dd if=a of=/out/secret/y", "dd if=link/x"] {
        let d = policy.decide_in(cmd, &p.sandbox, "/out/pub");
        assert!(matches!(d, ShellDecision::Refused { .. }), "{cmd}: {d:?}");
    }
    assert!(matches!(policy.decide_in("dd if=a of=b bs=4k", &p.sandbox, "/out/pub"), ShellDecision::Allowed { .. }));
}

/// Runs `cmd` as the shell tool would (hardened argv, the guard's environment) in `dir`.
fn guarded_git(dir: &std::path::Path, cmd: &str) -> std::process::Output {
    use workcell::tools::{git_guard, launchers::analyse};
    let args = shlex::split(cmd).expect("split");
    let argv = git_guard::harden_argv(&args, &analyse(&args));
    std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .envs(git_guard::env())
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("git")
}

#[test]
fn pre_approvable_git_commands_run_no_program_the_repository_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    let repo = root.join("repo");
    let marker = root.join("RAN");
    let evil = root.join("evil.sh");
    std::fs::write(&evil, format!("#!/bin/sh\necho \"$*\" >> {}\ncat\n", marker.display())).expect("write");
    std::fs::set_permissions(&evil, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let git = |dir: &std::path::Path, args: &[&str]| {
        let st = std::process::Command::new("git").args(args).current_dir(dir).env("GIT_CONFIG_NOSYSTEM", "1").env("HOME", &root).status().expect("git");
        assert!(st.success(), "git {args:?}");
    };
    std::fs::create_dir_all(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "."]);
    std::fs::write(repo.join("f"), "one\n").expect("write");
    std::fs::write(repo.join(".gitattributes"), "f diff=evil\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["-c", "user.name=w", "-c", "user.email=w@example.invalid", "commit", "-qm", "one"]);
    std::fs::write(repo.join("f"), "two\n").expect("write");
    git(&repo, &["-c", "user.name=w", "-c", "user.email=w@example.invalid", "commit", "-qam", "two"]);
    std::fs::write(repo.join("f"), "three\n").expect("write");
    let e = evil.display().to_string();
    for (k, v) in [
        ("user.name", "w".to_string()),
        ("user.email", "w@example.invalid".to_string()),
        ("diff.external", format!("{e} external")),
        ("diff.evil.textconv", format!("{e} textconv")),
        ("commit.gpgSign", "true".to_string()),
        ("gpg.format", "ssh".to_string()),
        ("gpg.ssh.defaultKeyCommand", format!("{e} defaultKeyCommand")),
        ("color.ui", "always".to_string()),
        ("interactive.diffFilter", format!("{e} diffFilter")),
        ("core.alternateRefsCommand", format!("{e} alternateRefsCommand")),
    ] {
        git(&repo, &["config", k, &v]);
    }
    // An alternate, so that a fetch asks it for its refs.
    let other = root.join("other");
    git(&root, &["clone", "-q", repo.to_str().expect("utf-8"), other.to_str().expect("utf-8")]);
    std::fs::write(repo.join(".git/objects/info/alternates"), format!("{}/.git/objects\n", other.display())).expect("write");
    for cmd in [
        "git log -p --ext-diff -1",
        "git show --textconv HEAD",
        "git diff --ext-diff --textconv",
        "git commit -qam three",
        "git add -p",
        "git fetch -q ../other",
    ] {
        let out = guarded_git(&repo, cmd);
        let ran = std::fs::read_to_string(&marker).unwrap_or_default();
        assert!(ran.is_empty(), "{cmd} ran a program from the repository's config: {ran}\n{}", String::from_utf8_lossy(&out.stderr));
    }
}
