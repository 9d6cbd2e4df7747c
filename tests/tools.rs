//! Shell-rule matching and precedence, approval memory and the audit log.

use workcell::audit::{read_all, AuditLog};
use workcell::config::{Project, Rule, ShellRule};
use workcell::tools::approval::{Action, ApprovalMode, ApprovalRequest, Approver, Choice, Decision, Preapproved, PromptError, Prompter};
use workcell::tools::shell::{matches, ShellDecision, ShellPolicy};

fn project() -> (tempfile::TempDir, Project) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["data", "out"] {
        std::fs::create_dir(tmp.path().join(d)).expect("mkdir");
    }
    let yaml = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw}\n";
    let p = Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project");
    (tmp, p)
}

fn rule(pattern: &str, paths: &[&str], approval_required: bool, allowed: bool) -> ShellRule {
    ShellRule { pattern: pattern.into(), sandbox_paths: paths.iter().map(|s| s.to_string()).collect(), approval_required, allowed }
}

fn refused(d: &ShellDecision) -> &str {
    match d {
        ShellDecision::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn shell_syntax_is_parsed_and_broken_syntax_refused() {
    let (_t, p) = project();
    let policy = ShellPolicy::default();
    // Shell features are no longer refused: the command runs under `bash -c` (the judge's
    // dialect), after approval.
    for cmd in ["ls; ls -l", "true && ls", "echo $(whoami)", "echo ${HOME}", "cat a | wc -l", "echo `id`", "echo hi > /out/x", "sleep 10 &"] {
        match policy.decide(cmd, &p.sandbox) {
            ShellDecision::Allowed { args, approval_required: true, .. } => assert_eq!(args, ["/bin/bash", "-p", "-c", cmd]),
            other => panic!("{cmd}: {other:?}"),
        }
    }
    for cmd in ["echo 'x", "ls |", "(ls"] {
        let d = policy.decide(cmd, &p.sandbox);
        let reason = refused(&d);
        assert!(reason.contains("cannot be parsed"), "{cmd}: {reason}");
    }
}

#[test]
fn patterns_match_whole_words_only() {
    let args = |s: &str| shlex::split(s).expect("split");
    assert!(matches("git ", &args("git status")));
    assert!(matches("git status", &args("git status --short")));
    assert!(!matches("git ", &args("gitx status")));
    assert!(!matches("git status", &args("git stat")));
    assert!(!matches("", &args("ls")));
}

#[test]
fn precedence_tool_rules_then_rule_then_default_then_tool_approval() {
    let (_t, p) = project();
    let sb = &p.sandbox;
    // 1. tool_rules.shell.allowed: false wins over everything.
    let off = ShellPolicy { tool: Rule { allowed: Some(false), approval_required: None }, rules: vec![rule("ls", &[], false, true)], default: Rule::default() };
    assert!(refused(&off.decide("ls", sb)).contains("disabled"));
    // 2. A matching rule decides approval.
    let policy = ShellPolicy {
        tool: Rule { allowed: Some(true), approval_required: Some(false) },
        rules: vec![rule("git status", &[], false, true), rule("rm", &[], true, false), rule("cat", &["/data"], false, true)],
        default: Rule { allowed: Some(true), approval_required: Some(true) },
    };
    assert_eq!(
        policy.decide("git status", sb),
        ShellDecision::Allowed { args: vec!["git".into(), "status".into()], approval_required: false, rule: Some("git status".into()) }
    );
    assert!(refused(&policy.decide("rm -rf /out", sb)).contains("not allowed"));
    // 3. No rule: shell_default decides.
    match policy.decide("gitx status", sb) {
        ShellDecision::Allowed { approval_required, rule, .. } => {
            assert!(approval_required);
            assert_eq!(rule, None);
        }
        other => panic!("{other:?}"),
    }
    // 4. shell_default silent: tool_rules.shell.approval_required.
    let fallback = ShellPolicy { tool: Rule { allowed: None, approval_required: Some(false) }, rules: vec![], default: Rule::default() };
    assert!(matches!(fallback.decide("ls", sb), ShellDecision::Allowed { approval_required: false, .. }));
    // Nothing set anywhere: ask.
    assert!(matches!(ShellPolicy::default().decide("ls", sb), ShellDecision::Allowed { approval_required: true, .. }));
    // shell_default.allowed: false refuses unmatched commands and lists what is allowed.
    let strict = ShellPolicy {
        tool: Rule::default(),
        rules: vec![rule("git status", &[], false, true)],
        default: Rule { allowed: Some(false), approval_required: None },
    };
    assert!(refused(&strict.decide("curl x", sb)).contains("git status"));
}

#[test]
fn sandbox_paths_confine_path_arguments() {
    let (_t, p) = project();
    let policy = ShellPolicy { rules: vec![rule("cat", &["/data"], false, true)], ..ShellPolicy::default() };
    assert!(matches!(policy.decide("cat /data/a.txt", &p.sandbox), ShellDecision::Allowed { .. }));
    assert!(refused(&policy.decide("cat /etc/passwd", &p.sandbox)).contains("/etc/passwd"));
    assert!(refused(&policy.decide("cat /data/../out/x", &p.sandbox)).contains("outside"));
    assert!(refused(&policy.decide("cat ../secret", &p.sandbox)).contains("outside"));
    assert!(refused(&policy.decide("cat /out/x", &p.sandbox)).contains("/data"));
}

struct Scripted(Vec<Choice>, usize);
impl Prompter for Scripted {
    fn ask(&mut self, _req: &ApprovalRequest) -> Result<Choice, PromptError> {
        self.1 += 1;
        self.0.pop().ok_or_else(|| PromptError::NoAnswer("no more answers".into()))
    }
}

#[test]
fn session_approval_covers_the_directory_and_below_only() {
    let mut a = Approver::new(ApprovalMode::Interactive, Some(Box::new(Scripted(vec![Choice::Session], 0))));
    let first = ApprovalRequest::file(Action::Write, "/out/reports/a.md");
    assert_eq!(a.decide(&first), Decision::Approved { by: "user_session" });
    // Later writes in that directory and below need nobody.
    assert_eq!(a.decide(&ApprovalRequest::file(Action::Write, "/out/reports/b.md")), Decision::Approved { by: "session" });
    assert_eq!(a.decide(&ApprovalRequest::file(Action::Write, "/out/reports/2026/c.md")), Decision::Approved { by: "session" });
    // A sibling directory, a prefix lookalike and another action are not covered: the
    // scripted prompter has no answers left, so they are denied.
    assert!(!a.remembered(&ApprovalRequest::file(Action::Write, "/out/other.md")));
    assert!(!a.remembered(&ApprovalRequest::file(Action::Write, "/out/reports-old/x.md")));
    assert!(!a.remembered(&ApprovalRequest::file(Action::Delete, "/out/reports/a.md")));
    assert!(!a.decide(&ApprovalRequest::file(Action::Delete, "/out/reports/a.md")).is_approved());
}

#[test]
fn once_is_not_remembered_and_modes_decide_without_asking() {
    let mut a = Approver::new(ApprovalMode::Interactive, Some(Box::new(Scripted(vec![Choice::Deny, Choice::Once], 0))));
    let req = ApprovalRequest::new(Action::Shell, "git status", "git status");
    assert_eq!(a.decide(&req), Decision::Approved { by: "user_once" });
    assert!(!a.decide(&req).is_approved(), "the second request asks again and is denied");

    let mut all = Approver::new(ApprovalMode::ApproveAll, None);
    assert_eq!(all.decide(&req), Decision::Approved { by: "approve_all" });
    let mut strict = Approver::new(ApprovalMode::Strict, None);
    assert!(matches!(strict.decide(&req), Decision::Denied { reason } if reason.contains("--strict")));
    // Interactive without a terminal: refused, naming the flags.
    let mut none = Approver::new(ApprovalMode::Interactive, None);
    match none.decide(&req) {
        Decision::Denied { reason } => assert!(reason.contains("--approve-all") && reason.contains("--strict"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// `--approve shell` approves shell commands only, without asking, in any mode; every other
/// kind of request is still asked (here: the scripted person says no) or refused.
#[test]
fn the_shell_preset_approves_commands_and_nothing_else() {
    let preset = Preapproved { shell: true };
    let cmd = ApprovalRequest::new(Action::Shell, "make test", "make test");
    let others = [
        ApprovalRequest::file(Action::Write, "/out/a.md"),
        ApprovalRequest::file(Action::Delete, "/out/a.md"),
        ApprovalRequest::file(Action::Read, "/data/a.md"),
        ApprovalRequest::new(Action::Delegate, "child (chain child)", "child"),
        ApprovalRequest::new(Action::Connect, "example.com:443", "example.com:443"),
        ApprovalRequest::new(Action::Expand, "/home/me/x", "/home/me/x"),
    ];
    let answers = vec![Choice::Deny; others.len()];
    let mut a = Approver::new(ApprovalMode::Interactive, Some(Box::new(Scripted(answers, 0)))).preapproving(preset);
    assert_eq!(a.decide(&cmd), Decision::Approved { by: "preset_shell" });
    for req in &others {
        assert!(matches!(a.decide(req), Decision::Denied { reason } if reason.contains("the user denied")), "{req:?} was not asked");
    }
    // With nobody to ask, and under --strict, the preset still approves commands alone.
    for mode in [ApprovalMode::Interactive, ApprovalMode::Strict] {
        let mut a = Approver::new(mode, None).preapproving(preset);
        assert!(a.decide(&cmd).is_approved());
        assert!(others.iter().all(|r| !a.decide(r).is_approved()), "{mode:?}");
        // A preset is not a way to approve the tools that always need consent.
        assert!(!a.can_approve());
    }
    // Without the preset, a refused command names it.
    let mut none = Approver::new(ApprovalMode::Interactive, None);
    assert!(matches!(none.decide(&cmd), Decision::Denied { reason } if reason.contains("--approve shell")));
}

#[test]
fn audit_log_appends_json_lines() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = AuditLog::new(tmp.path(), "run1");
    log.record("run_start", serde_json::json!({"worker": "w"})).expect("record");
    log.record("decision", serde_json::json!({"action": "write", "path": "/out/a", "outcome": "denied"})).expect("record");
    let events = read_all(tmp.path()).expect("read");
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["event"], "run_start");
    assert_eq!(events[1]["run_id"], "run1");
    assert_eq!(events[1]["outcome"], "denied");
}
