//! The walk of a parsed command line: every program found, what is opaque, where redirections
//! go, and which command lines run without a shell.

use super::*;

fn script(text: &str) -> Script {
    analyse_script(text, "/work").expect("parses")
}

/// Every program name the walk found, launchers followed.
fn programs(text: &str) -> Vec<String> {
    script(text).commands.iter().flat_map(|c| c.chain.stages.iter().map(|s| s.name.clone())).collect()
}

#[test]
fn every_program_of_every_construct_is_found() {
    for text in [
        "echo x | rm -f f",
        "echo $(rm -f f)",
        "echo `rm f`",
        "sh -c 'rm f'",
        "bash -c \"echo a; rm f\"",
        "(rm f)",
        "{ rm f; }",
        "f(){ rm x; }; f",
        "function f { rm x; }",
        "true && rm f",
        "false || rm f",
        "true; rm f",
        "true & rm f",
        "if true; then rm f; fi",
        "if false; then :; elif rm f; then :; else :; fi",
        "while rm f; do :; done",
        "until false; do rm f; done",
        "for i in a b; do rm $i; done",
        "case x in x) rm f;; esac",
        "exec rm f",
        "command rm f",
        "command -p rm f",
        "builtin eval 'rm f'",
        "eval 'rm f'",
        "eval rm f",
        "xargs rm",
        "nohup rm f",
        "time rm f",
        "! rm f",
        "coproc rm f",
        "cat <(rm x)",
        "echo ${x:-$(rm y)}",
        "echo \"${x:+`rm y`}\"",
        "cat <<EOF\n$(rm x)\nEOF",
        "cat <<< \"$(rm x)\"",
        "trap 'rm x' EXIT",
        "X=$(rm f) true",
        "echo > \"$(rm f)\"",
        "find . -exec sh -c 'rm \"$1\"' _ {} \\;",
        "nice sh -c 'sh -c \"rm x\"'",
        "echo \"$(echo \"$(rm x)\")\"",
        "[[ $(rm x) == y ]]",
        "a=(1 $(rm x))",
        "echo ${x/a/$(rm y)}",
        // Attacks on the walk itself.
        "cat <<EOF\n`rm x`\nEOF",
        "cat <<-EOF\n\t$(rm x)\n\tEOF",
        "cat <<EOF\nfoo\nEOF\nrm x",
        "r\\m x",
        "\"r\"'m' x",
        "\\rm x",
        "r\\\nm x",
        "eval r''m x",
        "exec -a foo rm x",
        "command -- rm x",
        "(exec rm x) &",
        "{ rm x; } 2>/dev/null",
        "echo $( (rm x) )",
        "echo \"$(cat <<EOF\n$(rm x)\nEOF\n)\"",
        "f() (rm x); f",
        "function f () { rm x; }",
        ": ${x:=$(rm y)}",
        "[ \"$(rm x)\" ]",
        "echo >$(rm x)",
        "case x in $(rm x)) ;; esac",
        "nohup nice -n 1 env FOO=1 rm x",
    ] {
        assert!(programs(text).contains(&"rm".to_string()), "{text:?}: {:?}", script(text));
    }
}

#[test]
fn quoted_metacharacters_are_words() {
    let s = script("python3 -c 'import os; print(1)'");
    assert_eq!(s.argv, Some(vec!["python3".to_string(), "-c".into(), "import os; print(1)".into()]));
    assert!(s.opaque.is_empty());
    assert_eq!(script("ls\t-l").argv, Some(vec!["ls".to_string(), "-l".into()]));
    assert_eq!(script("echo a\\ b \"c d\"").argv, Some(vec!["echo".to_string(), "a b".into(), "c d".into()]));
    // Heredoc with a quoted delimiter: no expansion, nothing runs.
    assert_eq!(programs("cat <<'EOF'\n$(rm x)\nEOF"), ["cat"]);
    // Mentions are not runs.
    assert_eq!(programs("echo rm; git rm --cached x"), ["echo", "git"]);
}

#[test]
fn shell_features_need_a_shell() {
    for text in ["ls | wc -l", "cd /x", "ls > f", "X=1 ls", "ls *.txt", "echo $HOME", "ls; ls", "ls &", "export A=1", "ls\nls", "! ls", "time ls"] {
        assert_eq!(script(text).argv, None, "{text}");
    }
    assert_eq!(script("ls -l # comment").argv, Some(vec!["ls".to_string(), "-l".into()]));
}

#[test]
fn what_cannot_be_told_is_opaque_and_named() {
    for (text, part) in [
        ("$CMD args", "$CMD"),
        ("\"$(echo rm)\" x", "$(echo rm)"),
        ("eval \"$X\"", "eval"),
        ("exec $X", "$X"),
        ("source ./s.sh", "runs a file"),
        (". ./s.sh", "runs a file"),
        ("alias x=rm", "alias"),
        ("/bin/r? x", "/bin/r?"),
        ("{rm,x}", "{rm,x}"),
        ("~/bin/rm x", "~/bin/rm"),
        ("$'\\x72m' x", "$'"),
        ("nice $X true", "launcher 'nice'"),
        ("find . $X", "launcher 'find'"),
        ("echo $((x+1))", "arithmetic"),
        ("(( x = 1 ))", "arithmetic"),
        ("((rm x))", "arithmetic"),
        ("echo ${!x}", "indirect"),
        ("echo ${x@P}", "prompt"),
        ("echo ${a[$i]}", "arithmetic"),
        ("declare 'a[$(rm x)]=1'", "subscript"),
        ("read 'a[i]'", "subscript"),
        ("printf -v 'a[i]' x", "a[i]"),
        ("PS4='$(rm x)' bash -xc true", "PS4"),
        ("export BASH_ENV=/out/x", "BASH_ENV"),
        ("env LD_PRELOAD=/out/x.so ls", "LD_PRELOAD"),
        ("[[ $x -eq 1 ]]", "arithmetic comparison"),
        ("let i++", "arithmetic"),
        ("echo x | sh", "standard input"),
        ("trap \"$X\" EXIT", "trap action"),
        ("hash -p /bin/rm ls", "hash"),
        ("sh -c 'echo \"'", "cannot be parsed"),
        ("X=rm env -S '${X} f'", "env's own rules"),
        ("env -S 'rm f'", "env's own rules"),
        ("echo x | xargs -I{} rm {}", "only known at run time"),
        ("cd $D; echo > f", ""),
    ] {
        let s = script(text);
        let all = s.opaque.iter().cloned().chain(s.commands.iter().filter_map(|c| c.chain.opaque.clone())).collect::<Vec<_>>().join(" | ");
        assert!(all.contains(part), "{text:?} should be opaque naming {part:?}: {all:?}");
    }
    for text in ["echo $X", "echo \"$(date)\" > /dev/null", "echo $((1 + 2))", "for i in 1 2; do echo $i; done", "[ -f x ] && cat x", "cat <<'EOF'\n$X\nEOF"] {
        assert!(script(text).opaque.is_empty(), "{text}: {:?}", script(text).opaque);
    }
}

fn redirect_dirs(text: &str) -> Vec<(Option<String>, Vec<String>, bool)> {
    script(text).redirects.iter().map(|r| (r.target.clone(), r.cwd.dirs.iter().cloned().collect(), r.cwd.unknown.is_some())).collect()
}

#[test]
fn redirections_know_where_they_run() {
    assert_eq!(redirect_dirs("cd /a && echo x > f"), [(Some("f".into()), vec!["/a".to_string()], false)]);
    // `cd` may fail: both directories.
    assert_eq!(redirect_dirs("cd /a; echo x > f"), [(Some("f".into()), vec!["/a".to_string(), "/work".into()], false)]);
    assert_eq!(redirect_dirs("cd sub || echo x > f"), [(Some("f".into()), vec!["/work".to_string()], false)]);
    assert_eq!(redirect_dirs("(cd /a); echo x > f"), [(Some("f".into()), vec!["/work".to_string()], false)]);
    assert_eq!(redirect_dirs("cd link/.. && echo x > f"), [(Some("f".into()), vec!["/work".to_string(), "/work/link/..".into()], false)]);
    assert!(redirect_dirs("cd $D && echo x > f")[0].2);
    assert!(redirect_dirs("for d in a b; do cd $d; done; echo > f")[0].2);
    assert!(redirect_dirs("for d in a b; do cd a; done; echo > f")[0].2);
    assert!(redirect_dirs("g(){ cd /x; }; g; echo > f")[0].2);
    assert_eq!(redirect_dirs("echo > $F")[0].0, None);
    let s = script("ls 2>&1 >/dev/null 2>>log <in &>all >&2");
    let writes: Vec<_> = s.redirects.iter().map(|r| (r.target.clone().unwrap_or_default(), r.write)).collect();
    assert_eq!(writes, [("/dev/null".to_string(), true), ("log".into(), true), ("in".into(), false), ("all".into(), true)]);
}

#[test]
fn builtins_that_set_variables_are_assignments() {
    for text in ["read PATH", "export GIT_DIR=/x", "X=1", "for PATH in a; do :; done", "printf -v PATH x", "echo ${PATH:=/x}"] {
        assert!(!script(text).assigns.is_empty(), "{text}");
    }
    for text in ["echo x", "[ -f x ]", "printf '%s' x", "test -n x"] {
        assert!(script(text).assigns.is_empty(), "{text}");
    }
}

#[test]
fn unparseable_text_is_an_error() {
    for text in ["echo 'x", "(ls", "ls |", "if true; then"] {
        assert!(analyse_script(text, "/w").is_err(), "{text}");
    }
}
