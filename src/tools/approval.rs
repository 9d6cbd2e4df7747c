//! Approvals: what needs a person's yes, how it is asked, and what is remembered for the
//! session. An approval never widens the sandbox; it only lets an allowed operation proceed.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};

use serde::Serialize;

use crate::term::escape;

/// How requests that need consent are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Ask a person on the controlling terminal.
    Interactive,
    /// Approve everything that needs consent (`--approve-all`).
    ApproveAll,
    /// Deny everything that needs consent (`--strict`).
    Strict,
}

/// What the request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Read,
    Write,
    Delete,
    Shell,
    Delegate,
    Expand,
    /// A network connection no rule lists (`network: {ask: true}`).
    Connect,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "write to",
            Action::Delete => "delete",
            Action::Shell => "run",
            Action::Delegate => "call worker",
            Action::Expand => "grant access to",
            Action::Connect => "connect to",
        }
    }
}

/// One request for consent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRequest {
    pub action: Action,
    /// The sandbox path, command line or worker name.
    pub subject: String,
    /// What session approval would cover: a directory for file actions, the rule or command
    /// for shell, the worker for delegation.
    pub scope: String,
}

impl ApprovalRequest {
    /// A file request; a session approval covers the file's directory.
    pub fn file(action: Action, path: &str) -> ApprovalRequest {
        let scope = match path.rfind('/') {
            Some(0) | None => "/".to_string(),
            Some(i) => path[..i].to_string(),
        };
        ApprovalRequest { action, subject: path.to_string(), scope }
    }

    /// Any other request; a session approval covers exactly `scope`.
    pub fn new(action: Action, subject: impl Into<String>, scope: impl Into<String>) -> ApprovalRequest {
        ApprovalRequest { action, subject: subject.into(), scope: scope.into() }
    }
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    Once,
    Session,
    Deny,
}

/// The outcome of a request, with how it was reached (for the audit log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Decision {
    Approved { by: &'static str },
    Denied { reason: String },
}

impl Decision {
    pub fn is_approved(&self) -> bool {
        matches!(self, Decision::Approved { .. })
    }
}

/// Why nobody could be asked (the request is then denied).
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("no terminal to ask on ({0})")]
    NoTerminal(#[source] std::io::Error),
    /// The terminal was there but could not be written to or read from.
    #[error("the terminal failed: {0}")]
    Terminal(#[source] std::io::Error),
    /// A prompter of another kind (a script, a test) had no answer.
    #[error("{0}")]
    NoAnswer(String),
}

/// Something that can ask a person.
pub trait Prompter: Send {
    /// Asks about `req`; `Err` when nobody can be asked.
    fn ask(&mut self, req: &ApprovalRequest) -> Result<Choice, PromptError>;
}

/// The question put to a person about `req`. The subject and scope come from the worker, so
/// they are escaped: no control or layout character of theirs reaches the terminal.
pub fn prompt_text(req: &ApprovalRequest) -> String {
    format!("workcell: allow {} {}? [y]es once / [s]ession (covers {}) / [n]o: ", req.action.verb(), escape(&req.subject), escape(&req.scope))
}

/// Asks on the controlling terminal (`/dev/tty`), never on stdout, so it neither mixes with
/// a worker's streamed output nor with an MCP channel.
#[derive(Debug, Default)]
pub struct TerminalPrompter;

impl Prompter for TerminalPrompter {
    fn ask(&mut self, req: &ApprovalRequest) -> Result<Choice, PromptError> {
        let mut tty = Tty::open()?;
        loop {
            let Some(line) = tty.ask(&prompt_text(req))? else { return Ok(Choice::Deny) };
            match line.as_str() {
                "y" | "yes" => return Ok(Choice::Once),
                "s" | "session" => return Ok(Choice::Session),
                "" | "n" | "no" => return Ok(Choice::Deny),
                _ => continue,
            }
        }
    }
}

/// Something a question can be put to, a line at a time: the controlling terminal
/// ([`Tty`]), or a script in tests. Prompts that are not an [`ApprovalRequest`] (a delivery
/// review has no session choice) use it instead of reading a terminal of their own.
pub trait Ask {
    /// Shows `text` (already escaped by the caller) without asking anything.
    fn say(&mut self, text: &str) -> Result<(), PromptError>;
    /// Puts `question` and returns the answer trimmed and in lower case, except what
    /// follows a first space (a name); `None` at end of input.
    fn ask(&mut self, question: &str) -> Result<Option<String>, PromptError>;
}

/// The controlling terminal (`/dev/tty`), open for one exchange.
#[derive(Debug)]
pub struct Tty {
    out: std::fs::File,
    input: BufReader<std::fs::File>,
}

impl Tty {
    pub fn open() -> Result<Tty, PromptError> {
        let tty = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").map_err(PromptError::NoTerminal)?;
        let out = tty.try_clone().map_err(PromptError::Terminal)?;
        Ok(Tty { out, input: BufReader::new(tty) })
    }

    /// Makes the terminal fit for a question after a worker wrote to it: what was typed
    /// before the question (type-ahead) is discarded, so only an answer given to it counts,
    /// and the input modes a worker may have changed through its copy of the terminal
    /// (`stty inlcr`, `igncr`, `-icrnl`: Enter never ends the line; `-icanon`, `-echo`)
    /// are set back, so an answer can be typed, seen and ended. Best effort: a terminal that
    /// refuses keeps its modes.
    pub fn settle(&self) {
        use rustix::termios::{tcflush, tcgetattr, tcsetattr, InputModes, LocalModes, OptionalActions, QueueSelector};
        if let Ok(mut t) = tcgetattr(&self.out) {
            t.input_modes.insert(InputModes::ICRNL);
            t.input_modes.remove(InputModes::INLCR | InputModes::IGNCR);
            t.local_modes.insert(LocalModes::ICANON | LocalModes::ECHO);
            let _ = tcsetattr(&self.out, OptionalActions::Now, &t);
        }
        let _ = tcflush(&self.out, QueueSelector::IFlush);
    }

    /// How many rows the terminal has.
    pub fn rows(&self) -> u16 {
        crate::term::rows(&self.out)
    }
}

impl Ask for Tty {
    fn say(&mut self, text: &str) -> Result<(), PromptError> {
        // A terminal in raw mode (a worker run with -t that died) needs the carriage returns.
        self.out.write_all(text.replace("\r\n", "\n").replace('\n', "\r\n").as_bytes()).and_then(|_| self.out.flush()).map_err(PromptError::Terminal)
    }

    fn ask(&mut self, question: &str) -> Result<Option<String>, PromptError> {
        // Start on a fresh line so a half-written line of worker output stays readable.
        self.say(&format!("\n{question}"))?;
        let mut line = String::new();
        if self.input.read_line(&mut line).map_err(PromptError::Terminal)? == 0 {
            return Ok(None);
        }
        Ok(Some(answer(&line)))
    }
}

/// An answer as prompts compare it: trimmed, the word before a first space in lower case
/// (`V Notes.md` is `v Notes.md`).
fn answer(line: &str) -> String {
    let line = line.trim();
    match line.split_once(' ') {
        Some((word, rest)) => format!("{} {}", word.to_ascii_lowercase(), rest.trim()),
        None => line.to_ascii_lowercase(),
    }
}

/// Answers requests per mode, remembering session approvals.
pub struct Approver {
    mode: ApprovalMode,
    prompter: Option<Box<dyn Prompter>>,
    session: HashSet<(Action, String)>,
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approver").field("mode", &self.mode).field("session", &self.session).finish()
    }
}

/// The message when consent is needed but nobody can give it.
pub const NO_TERMINAL: &str =
    "this operation needs approval, but there is no terminal to ask on; run with --approve-all to approve such requests or --strict to deny them without asking";

impl Approver {
    pub fn new(mode: ApprovalMode, prompter: Option<Box<dyn Prompter>>) -> Approver {
        Approver { mode, prompter, session: HashSet::new() }
    }

    /// True when some request could ever be approved in this session: `--approve-all`, or a
    /// terminal to ask on. Tools that always need consent are not offered otherwise.
    pub fn can_approve(&self) -> bool {
        match self.mode {
            ApprovalMode::ApproveAll => true,
            ApprovalMode::Strict => false,
            ApprovalMode::Interactive => self.prompter.is_some(),
        }
    }

    /// True when a session approval already covers `req`: the same action on the same
    /// scope, or, for file actions, on a directory containing it.
    pub fn remembered(&self, req: &ApprovalRequest) -> bool {
        self.session.iter().any(|(action, scope)| {
            *action == req.action
                && (scope == &req.scope
                    || (matches!(action, Action::Read | Action::Write | Action::Delete | Action::Expand)
                        && (scope == "/" || req.scope.starts_with(&format!("{scope}/")))))
        })
    }

    /// Decides `req`, asking when the mode says so.
    pub fn decide(&mut self, req: &ApprovalRequest) -> Decision {
        if self.remembered(req) {
            return Decision::Approved { by: "session" };
        }
        match self.mode {
            ApprovalMode::ApproveAll => Decision::Approved { by: "approve_all" },
            ApprovalMode::Strict => {
                Decision::Denied { reason: format!("denied: {} {} needs approval and --strict denies every approval", req.action.verb(), escape(&req.subject)) }
            }
            ApprovalMode::Interactive => {
                let Some(p) = self.prompter.as_mut() else {
                    return Decision::Denied { reason: NO_TERMINAL.into() };
                };
                match p.ask(req) {
                    Ok(Choice::Once) => Decision::Approved { by: "user_once" },
                    Ok(Choice::Session) => {
                        self.session.insert((req.action, req.scope.clone()));
                        Decision::Approved { by: "user_session" }
                    }
                    Ok(Choice::Deny) => Decision::Denied { reason: format!("the user denied: {} {}", req.action.verb(), escape(&req.subject)) },
                    Err(e) => Decision::Denied { reason: format!("{NO_TERMINAL} ({e})") },
                }
            }
        }
    }
}
