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
