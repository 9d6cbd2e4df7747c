//! Approvals: what needs a person's yes, how it is asked, and what is remembered for the
//! session. An approval never widens the sandbox; it only lets an allowed operation proceed.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;

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

/// Kinds of request approved in advance, whatever the mode (`--approve shell`). Deny rules
/// still deny: only requests that would otherwise be asked about are covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Preapproved {
    /// Shell commands whose rules ask ([`Action::Shell`]); never writes to `ask` zones,
    /// delegation, network connections or access requests.
    pub shell: bool,
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
    /// The request was put to the MCP client (elicitation) and no yes came back: declined,
    /// cancelled, not answered in time, or the exchange failed.
    #[error(transparent)]
    Client(#[from] ElicitError),
}

/// The answers an elicited question offers (`tools::elicit`), as the client sends them back.
pub const ANSWER_ONCE: &str = "allow_once";
pub const ANSWER_SESSION: &str = "allow_for_session";
pub const ANSWER_DENY: &str = "deny";

/// Why an elicited question brought no yes. Each reads after "it was asked through the MCP
/// client and".
#[derive(Debug, thiserror::Error)]
pub enum ElicitError {
    #[error("the request was declined there")]
    Declined,
    #[error("the request was cancelled (dismissed) there")]
    Cancelled,
    #[error("no answer came within {} s", .0.as_secs())]
    TimedOut(std::time::Duration),
    #[error("the answer was not one of {ANSWER_ONCE}, {ANSWER_SESSION}, {ANSWER_DENY} (it was {0})")]
    Malformed(String),
    #[error("the MCP session ended before an answer came")]
    Gone,
    /// The client's own words are in it: escaped, like everything a peer chose.
    #[error("the exchange failed: {}", crate::term::escape(&.0.to_string()))]
    Failed(#[source] rmcp::service::ServiceError),
    #[error("the question could not be built: {0}")]
    Schema(&'static str),
}

/// Whether a prompter can ask now; read without the approver's lock, which a prompt holds
/// while a person answers. (An MCP client's elicitation support is known only once it has
/// connected, after the session's tools exist.)
pub type Reach = Arc<dyn Fn() -> bool + Send + Sync>;

/// Who answered (for the audit log): a person at workcell's terminal, or whoever the MCP
/// client routed an elicitation to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Terminal,
    Client,
}

/// Something that can ask a person.
pub trait Prompter: Send {
    /// Asks about `req`; `Err` when nobody can be asked.
    fn ask(&mut self, req: &ApprovalRequest) -> Result<Choice, PromptError>;
    /// Whether asking can work now (see [`Reach`]).
    fn reach(&self) -> Reach {
        Arc::new(|| true)
    }
    /// Through what the last answer came.
    fn via(&self) -> Via {
        Via::Terminal
    }
}

/// The question about `req`, as both the terminal and an MCP client show it: what would be
/// done, and what a session approval would cover. The subject and scope come from the
/// worker, so they are escaped: no control or layout character of theirs reaches the person.
pub fn question_text(req: &ApprovalRequest) -> String {
    format!("workcell: allow {} {}? (for the session: covers {})", req.action.verb(), escape(&req.subject), escape(&req.scope))
}

/// The question put to a person on the terminal about `req`: [`question_text`] with the keys
/// to answer.
pub fn prompt_text(req: &ApprovalRequest) -> String {
    format!("{} [y]es once / [s]ession / [n]o: ", question_text(req))
}

/// Whether a controlling terminal can be opened to ask on.
pub fn terminal_available() -> bool {
    std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").is_ok()
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
    preapproved: Preapproved,
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approver").field("mode", &self.mode).field("preapproved", &self.preapproved).field("session", &self.session).finish()
    }
}

/// The message when consent is needed but nobody can give it.
pub const NO_TERMINAL: &str =
    "this operation needs approval, but there is no terminal to ask on (and no MCP client that takes elicitations); run with --approve-all to approve such requests or --strict to deny them without asking";

/// Added to [`NO_TERMINAL`] for a shell command: the preset that approves those alone.
const SHELL_HINT: &str = "; --approve shell approves shell commands only";

impl Approver {
    pub fn new(mode: ApprovalMode, prompter: Option<Box<dyn Prompter>>) -> Approver {
        Approver { mode, prompter, session: HashSet::new(), preapproved: Preapproved::default() }
    }

    /// This approver with `preapproved` kinds of request approved without asking.
    pub fn preapproving(self, preapproved: Preapproved) -> Approver {
        Approver { preapproved, ..self }
    }

    /// True when some request could be approved now: `--approve-all`, a terminal to ask on,
    /// or an MCP client that takes elicitations. Tools that always need consent are not
    /// offered otherwise. (A preset covers shell commands only, which are offered anyway.)
    pub fn can_approve(&self) -> bool {
        (self.reach())()
    }

    /// [`Approver::can_approve`], readable later without this approver.
    pub fn reach(&self) -> Reach {
        match (self.mode, &self.prompter) {
            (ApprovalMode::ApproveAll, _) => Arc::new(|| true),
            (ApprovalMode::Interactive, Some(p)) => p.reach(),
            (ApprovalMode::Strict, _) | (ApprovalMode::Interactive, None) => Arc::new(|| false),
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
        if req.action == Action::Shell && self.preapproved.shell {
            return Decision::Approved { by: "preset_shell" };
        }
        match self.mode {
            ApprovalMode::ApproveAll => Decision::Approved { by: "approve_all" },
            ApprovalMode::Strict => {
                Decision::Denied { reason: format!("denied: {} {} needs approval and --strict denies every approval", req.action.verb(), escape(&req.subject)) }
            }
            ApprovalMode::Interactive => {
                let hint = if req.action == Action::Shell { SHELL_HINT } else { "" };
                let Some(p) = self.prompter.as_mut() else {
                    return Decision::Denied { reason: format!("{NO_TERMINAL}{hint}") };
                };
                let answer = p.ask(req);
                let client = p.via() == Via::Client;
                match answer {
                    Ok(Choice::Once) => Decision::Approved { by: if client { "client_once" } else { "user_once" } },
                    Ok(Choice::Session) => {
                        self.session.insert((req.action, req.scope.clone()));
                        Decision::Approved { by: if client { "client_session" } else { "user_session" } }
                    }
                    Ok(Choice::Deny) => Decision::Denied {
                        reason: format!(
                            "the user denied{}: {} {}",
                            if client { " (through the MCP client)" } else { "" },
                            req.action.verb(),
                            escape(&req.subject)
                        ),
                    },
                    Err(PromptError::Client(e)) => Decision::Denied {
                        reason: format!("denied: {} {} needs approval; it was asked through the MCP client and {e}", req.action.verb(), escape(&req.subject)),
                    },
                    Err(e) => Decision::Denied { reason: format!("{NO_TERMINAL}{hint} ({e})") },
                }
            }
        }
    }
}
