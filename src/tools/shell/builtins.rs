//! Shell builtins that run, or change how the shell runs, other words (`exec`, `command`,
//! `eval`, `trap`, `source`, `cd`), redirections, `[[ … ]]` tests and compound commands
//! (`if`, loops, `case`, groups), for the walk of `script`; and which command lines
//! are one program run without a shell.

use brush_parser::ast::{self, CompoundCommand as CC};

use super::script::{dangerous_name, options, Cwd, Redirect, Script, Walker, Word, NAME_BUILTINS, NONLITERAL};
use crate::tools::launchers::program_name;

/// Builtins that only a shell can run (or that change the shell itself).
const SHELL_ONLY: &[&str] = &[
    "cd",
    "pushd",
    "popd",
    "dirs",
    "export",
    "unset",
    "set",
    "shopt",
    "exit",
    "return",
    "break",
    "continue",
    "shift",
    "read",
    "eval",
    "exec",
    ".",
    "source",
    "alias",
    "unalias",
    "ulimit",
    "umask",
    "trap",
    "wait",
    "jobs",
    "fg",
    "bg",
    "local",
    "declare",
    "typeset",
    "readonly",
    "hash",
    "type",
    "command",
    "builtin",
    "getopts",
    "let",
    "history",
    "times",
    "enable",
    "mapfile",
    "readarray",
    "caller",
    "fc",
    "bind",
    "complete",
    "compgen",
    "disown",
    "suspend",
    "logout",
    ":",
];

/// The argv of a command line that is exactly one simple command of literal words with no
/// redirection, assignment or builtin: run without a shell, as before shell syntax existed.
pub(super) fn direct_argv(program: &ast::Program, script: &Script) -> Option<Vec<String>> {
    let [list] = program.complete_commands.as_slice() else { return None };
    let [ast::CompoundListItem(and_or, ast::SeparatorOperator::Sequence)] = list.0.as_slice() else { return None };
    let p = &and_or.first;
    if !and_or.additional.is_empty() || p.bang || p.timed.is_some() || p.seq.len() != 1 {
        return None;
    }
    let ast::Command::Simple(simple) = &p.seq[0] else { return None };
    let [cmd] = script.commands.as_slice() else { return None };
    let plain = simple.prefix.is_none()
        && script.opaque.is_empty()
        && script.redirects.is_empty()
        && script.assigns.is_empty()
        && !cmd.assigned
        && cmd.words.iter().all(|w| !w.starts_with(NONLITERAL))
        && simple.suffix.as_ref().is_none_or(|s| s.0.iter().all(|i| matches!(i, ast::CommandPrefixOrSuffixItem::Word(_))))
        && !SHELL_ONLY.contains(&cmd.words[0].as_str());
    plain.then(|| cmd.words.clone())
}

impl Walker {
    /// What the builtin `prog` (with `rest`) does to the walk: `Some` directories after it
    /// when it decides them (`cd`, `eval`, `exec …`), else `None`.
    pub(super) fn builtin(&mut self, prog: &str, rest: &[Word], cwd: &Cwd, shown: &str) -> Option<(Cwd, Cwd)> {
        let name = program_name(prog).to_string();
        match name.as_str() {
            "cd" | "pushd" => return Some(self.cd(rest, cwd)),
            "popd" => {
                self.cds += 1;
                let u = Cwd::unknown("after 'popd'");
                return Some((u, cwd.clone()));
            }
            "exec" | "command" | "builtin" => {
                // Options: exec's -c -l -a NAME, command's -p -v -V.
                let mut i = 0;
                while let Some((src, lit)) = rest.get(i) {
                    match lit.as_deref() {
                        Some("--") => {
                            i += 1;
                            break;
                        }
                        Some("-a") if name == "exec" => i += 2,
                        Some(o) if o.starts_with('-') && o.len() > 1 => i += 1,
                        Some(_) => break,
                        None => {
                            self.opaque(format!("the option '{src}' of '{name}' is a shell expansion"));
                            return Some((cwd.clone(), cwd.clone()));
                        }
                    }
                }
                if i < rest.len() {
                    return Some(self.run(&rest[i..], false, cwd, false));
                }
            }
            "eval" => {
                if let Some(parts) = rest.iter().map(|(_, l)| l.clone()).collect::<Option<Vec<String>>>() {
                    let end = self.nested(&parts.join(" "), cwd, "the eval string");
                    return Some((end.clone(), end));
                }
                self.opaque(format!("'{}' evaluates a shell expansion as a command", shown));
            }
            "trap" => match rest.first() {
                Some((_, Some(action))) if !action.starts_with('-') && rest.len() > 1 => {
                    self.nested(action, &Cwd::unknown("in a trap"), "the trap action");
                }
                Some((_, Some(_))) | None => {}
                Some((src, None)) => self.opaque(format!("the trap action '{src}' is a shell expansion")),
            },
            "." | "source" => self.opaque(format!("'{}' runs a file as a script", shown)),
            "alias" | "enable" | "fc" if !rest.is_empty() => {
                if name == "alias" {
                    self.foreign("`alias`", "write the command out (sh expands aliases in the rest of the line; bash -c does not)");
                }
                self.opaque(format!("'{}' changes or reruns what the shell runs", shown))
            }
            "hash" if rest.iter().any(|(_, l)| l.as_deref().is_none_or(|l| l.starts_with("-p"))) => {
                self.opaque(format!("'{}' names the file the shell runs for a program", shown))
            }
            "mapfile" | "readarray" if rest.iter().any(|(_, l)| l.as_deref().is_none_or(|l| l.starts_with("-C"))) => {
                self.opaque(format!("'{}' may run a callback", shown))
            }
            "let" => {
                for (src, _) in rest {
                    self.arithmetic(src);
                }
            }
            _ => {}
        }
        let sets = match name.as_str() {
            "test" | "[" | "wait" => false,
            "printf" => rest.iter().any(|(_, l)| l.as_deref() == Some("-v")),
            n => NAME_BUILTINS.contains(&n),
        };
        if sets {
            // They set variables (`read PATH`, `export X=…`): no allow rule pre-approves that.
            self.out.assigns.push(format!("'{shown}' sets variables"));
        }
        if NAME_BUILTINS.contains(&name.as_str()) {
            for (src, lit) in rest {
                match lit {
                    Some(l) if l.contains('[') && name != "printf" || l.starts_with("-v") && l.contains('[') => {
                        self.opaque(format!("'{}' names the variable '{src}' with a subscript, which bash evaluates as arithmetic", shown))
                    }
                    Some(l) if !l.starts_with('-') && dangerous_name(l.split('=').next().unwrap_or_default()) && name != "test" && name != "[" => {
                        self.opaque(format!("'{}' sets {l}, which the shell or the loader reads as code", shown))
                    }
                    _ => {}
                }
            }
            if name == "printf" {
                // `printf -v NAME`: the value after -v is a name.
                for pair in rest.windows(2) {
                    if pair[0].1.as_deref() == Some("-v") && pair[1].1.as_deref().is_none_or(|n| n.contains('[') || dangerous_name(n)) {
                        self.opaque(format!("'{}' sets the variable '{}'", shown, pair[1].0));
                    }
                }
            }
        }
        None
    }

    /// `cd [-L|-P|-e|-@] [--] DIR`: where later commands run when it succeeded.
    pub(super) fn cd(&mut self, args: &[Word], cwd: &Cwd) -> (Cwd, Cwd) {
        self.cds += 1;
        let mut i = 0;
        while let Some((_, Some(o))) = args.get(i) {
            if o == "--" {
                i += 1;
                break;
            }
            if !(o.starts_with('-') && o.len() > 1) {
                break;
            }
            i += 1;
        }
        let new = match args.get(i) {
            None => Cwd::unknown("after 'cd' to the home directory"),
            Some((src, None)) => Cwd::unknown(format!("after 'cd {src}'")),
            Some((_, Some(t))) if t == "-" || t.is_empty() => Cwd::unknown(format!("after 'cd {t}'")),
            Some((_, Some(t))) => cwd.join(t),
        };
        (new, cwd.clone())
    }

    pub(super) fn redirect(&mut self, r: &ast::IoRedirect, cwd: &Cwd, command: Option<usize>) {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        self.posix_redirect(r);
        let text = r.to_string();
        let file = |w: &mut Walker, word: &str, write: bool| {
            let target = w.word(word, cwd);
            w.out.redirects.push(Redirect { text: text.clone(), target, write, cwd: cwd.clone(), command });
        };
        match r {
            ast::IoRedirect::File(_, kind, target) => {
                let write = !matches!(kind, K::Read | K::DuplicateInput);
                match target {
                    T::Filename(w) => file(self, &w.value, write),
                    T::Fd(_) => {}
                    T::ProcessSubstitution(_, s) => {
                        self.list(&s.list, cwd);
                    }
                    // `>&2`, `<&-`: descriptors; `>&file` is `&>file` in bash.
                    T::Duplicate(w) => {
                        let lit = self.word(&w.value, cwd);
                        if lit.as_deref().is_none_or(|t| !(t == "-" || (!t.is_empty() && t.trim_end_matches('-').chars().all(|c| c.is_ascii_digit())))) {
                            file(self, &w.value, write);
                        }
                    }
                }
            }
            ast::IoRedirect::HereDocument(_, h) => {
                if h.requires_expansion {
                    match brush_parser::word::parse_heredoc(&h.doc.value, &options()) {
                        Ok(pieces) => {
                            self.pieces(&pieces, true, cwd);
                        }
                        Err(e) => self.opaque(format!("a here-document cannot be parsed ({e})")),
                    }
                }
            }
            ast::IoRedirect::HereString(_, w) => {
                self.word(&w.value, cwd);
            }
            ast::IoRedirect::OutputAndError(w, _) => file(self, &w.value, true),
        }
    }

    pub(super) fn extended_test(&mut self, e: &ast::ExtendedTestExpr, cwd: &Cwd) {
        use ast::BinaryPredicate as B;
        use ast::ExtendedTestExpr as E;
        match e {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a, cwd);
                self.extended_test(b, cwd);
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a, cwd),
            E::UnaryTest(p, w) => {
                let lit = self.word(&w.value, cwd);
                let names_var = matches!(p, ast::UnaryPredicate::ShellVariableIsSetAndAssigned | ast::UnaryPredicate::ShellVariableIsSetAndNameRef);
                if names_var && lit.is_none_or(|l| l.contains('[')) {
                    self.opaque(format!("'[[ {p} {} ]]' names a variable bash may evaluate as arithmetic", w.value));
                }
            }
            E::BinaryTest(p, a, b) => {
                let la = self.word(&a.value, cwd);
                let lb = self.word(&b.value, cwd);
                let arith = matches!(
                    p,
                    B::ArithmeticEqualTo
                        | B::ArithmeticNotEqualTo
                        | B::ArithmeticLessThan
                        | B::ArithmeticLessThanOrEqualTo
                        | B::ArithmeticGreaterThan
                        | B::ArithmeticGreaterThanOrEqualTo
                );
                if arith {
                    for (lit, src) in [(la, &a.value), (lb, &b.value)] {
                        if lit.is_none_or(|l| !l.trim().trim_start_matches('-').chars().all(|c| c.is_ascii_digit())) {
                            self.opaque(format!("the arithmetic comparison of '{src}' in '[[ … ]]' evaluates its value, which can run commands"));
                        }
                    }
                }
            }
        }
    }

    pub(super) fn compound(&mut self, cc: &CC, cwd: &Cwd) -> (Cwd, Cwd) {
        let end = match cc {
            CC::Arithmetic(a) => {
                self.arithmetic(&a.expr.value);
                cwd.clone()
            }
            CC::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater].into_iter().flatten() {
                    self.arithmetic(&e.value);
                }
                self.looped(&[&f.body.list], cwd)
            }
            CC::BraceGroup(b) => self.list(&b.list, cwd),
            CC::Subshell(s) => {
                self.list(&s.list, cwd);
                cwd.clone()
            }
            CC::ForClause(f) => {
                self.assign_name(&f.variable_name, "a for loop");
                for w in f.values.iter().flatten() {
                    self.word(&w.value, cwd);
                }
                self.looped(&[&f.body.list], cwd)
            }
            CC::CaseClause(c) => {
                self.word(&c.value.value, cwd);
                let mut end = cwd.clone();
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, cwd);
                    }
                    if let Some(body) = &item.cmd {
                        let e = self.list(body, cwd);
                        end = end.union(&e);
                    }
                }
                end
            }
            CC::IfClause(i) => {
                let after_cond = self.list(&i.condition, cwd);
                let mut end = self.list(&i.then, &after_cond);
                let mut from = after_cond.clone();
                let mut has_else = false;
                for e in i.elses.iter().flatten() {
                    if let Some(cond) = &e.condition {
                        from = self.list(cond, &from);
                    } else {
                        has_else = true;
                    }
                    let b = self.list(&e.body, &from);
                    end = end.union(&b);
                }
                if !has_else {
                    end = end.union(&from);
                }
                end
            }
            CC::WhileClause(w) | CC::UntilClause(w) => self.looped(&[&w.0, &w.1.list], cwd),
            CC::Coprocess(c) => {
                self.command(&c.body, cwd);
                cwd.clone()
            }
        };
        (end.clone(), end)
    }

    /// A loop body may run many times: when it changes directory, where it runs after the
    /// first time is not known.
    fn looped(&mut self, lists: &[&ast::CompoundList], cwd: &Cwd) -> Cwd {
        let mut end = cwd.clone();
        for l in lists {
            end = self.list(l, &end);
        }
        if end == *cwd {
            return cwd.clone();
        }
        let u = Cwd::unknown("after a loop that changes directory");
        for l in lists {
            self.list(l, &u);
        }
        u
    }
}
