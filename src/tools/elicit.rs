//! Approvals through the MCP client (elicitation): when the client of `workcell mcp` said at
//! initialisation that it takes form elicitations, a request that needs consent is put to it
//! as a form with one choice — allow once, allow for the session, deny — and the same escaped
//! question the terminal shows. Whoever the client routes the form to answers: a person in
//! most clients, possibly a model in an agent framework's callback (docs/agents.md, "How approvals reach the person").
//!
//! Prompters are synchronous and run on blocking threads (a tool call's, or the egress
//! proxy's); the question is sent from the server's runtime and the answer waited for on a
//! channel, so no runtime is entered from inside another.

use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, EnumSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer, ServiceError};

/// Defined with the prompts ([`PromptError::Client`]), below this module.
pub use super::approval::ElicitError;
use super::approval::{question_text, terminal_available, ApprovalRequest, Choice, PromptError, Prompter, Reach, TerminalPrompter, Via};
use super::approval::{ANSWER_DENY as DENY, ANSWER_ONCE as ONCE, ANSWER_SESSION as SESSION};

/// How long a question waits for its answer; no answer by then is a denial. Bounded so a
/// client that never answers cannot hold the approver (and every call waiting on it).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The form's one field and its values.
const FIELD: &str = "answer";

/// The session's client, once it is known to take form elicitations.
struct Client {
    handle: tokio::runtime::Handle,
    peer: Peer<RoleServer>,
}

/// Where approvals of one `workcell mcp` session can be elicited. Shared by the session's
/// tool service and every nested one (a shell command's egress `ask`, a child worker's own
/// tools), which all run on its behalf: set once, when the client has initialised.
#[derive(Clone, Default)]
pub struct Elicitation(Arc<OnceLock<Client>>);

impl std::fmt::Debug for Elicitation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elicitation").field("ready", &self.ready()).finish()
    }
}

impl Elicitation {
    /// Takes `peer` as the place to ask when it declared form elicitation at initialisation
    /// (called from the server's runtime); true when questions now go there.
    pub fn connect(&self, peer: &Peer<RoleServer>) -> bool {
        if self.0.get().is_none() && peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let _ = self.0.set(Client { handle, peer: peer.clone() });
            }
        }
        self.ready()
    }

    /// Whether questions go to the client.
    pub fn ready(&self) -> bool {
        self.0.get().is_some()
    }

    /// Puts `req` to the client and waits (on this blocking thread) for the answer.
    pub fn ask(&self, req: &ApprovalRequest) -> Result<Choice, ElicitError> {
        let client = self.0.get().ok_or(ElicitError::Gone)?;
        let params = ElicitRequestParams::FormElicitationParams { meta: None, message: question_text(req), requested_schema: form()? };
        let (tx, rx) = sync_channel(1);
        let peer = client.peer.clone();
        client.handle.spawn(async move {
            let _ = tx.send(peer.create_elicitation_with_timeout(params, Some(ANSWER_TIMEOUT)).await);
        });
        // The request's own timeout answers first; this one only covers a runtime that stops
        // running the task (the session ending), which drops the sender.
        match rx.recv_timeout(ANSWER_TIMEOUT + Duration::from_secs(10)) {
            Ok(Ok(result)) => choice(result),
            Ok(Err(ServiceError::Timeout { .. })) | Err(RecvTimeoutError::Timeout) => Err(ElicitError::TimedOut(ANSWER_TIMEOUT)),
            Ok(Err(ServiceError::TransportClosed)) | Err(RecvTimeoutError::Disconnected) => Err(ElicitError::Gone),
            Ok(Err(e)) => Err(ElicitError::Failed(e)),
        }
    }
}

/// The form: one required choice.
fn form() -> Result<ElicitationSchema, ElicitError> {
    let values = [ONCE, SESSION, DENY].map(String::from).to_vec();
    let choice = EnumSchema::builder(values)
        .description("allow_once: this request only; allow_for_session: this and later requests the question's 'for the session' part covers, until the MCP session ends; deny: refuse it")
        .build();
    ElicitationSchema::builder().required_enum_schema(FIELD, choice).description("workcell needs an approval").build().map_err(ElicitError::Schema)
}

/// The answer in a client's result. Only an accepted form naming a value allows anything.
fn choice(result: ElicitResult) -> Result<Choice, ElicitError> {
    match result.action {
        ElicitationAction::Accept => {
            let value = result.content.as_ref().and_then(|c| c.get(FIELD)).cloned().unwrap_or_default();
            match value.as_str() {
                Some(ONCE) => Ok(Choice::Once),
                Some(SESSION) => Ok(Choice::Session),
                Some(DENY) => Ok(Choice::Deny),
                _ => Err(ElicitError::Malformed(crate::term::escape(&value.to_string()).into_owned())),
            }
        }
        ElicitationAction::Decline => Err(ElicitError::Declined),
        // Cancel, and any action a later protocol adds: no yes.
        _ => Err(ElicitError::Cancelled),
    }
}

/// Asks through the client once it takes elicitations, else on the terminal as
/// [`TerminalPrompter`] does.
pub struct ElicitPrompter {
    elicitation: Elicitation,
    /// Whether a controlling terminal existed when the session started.
    terminal: bool,
    via: Via,
}

impl ElicitPrompter {
    pub fn new(elicitation: Elicitation) -> ElicitPrompter {
        ElicitPrompter { elicitation, terminal: terminal_available(), via: Via::Terminal }
    }
}

impl Prompter for ElicitPrompter {
    fn ask(&mut self, req: &ApprovalRequest) -> Result<Choice, PromptError> {
        if self.elicitation.ready() {
            self.via = Via::Client;
            return Ok(self.elicitation.ask(req)?);
        }
        self.via = Via::Terminal;
        TerminalPrompter.ask(req)
    }

    fn reach(&self) -> Reach {
        let (elicitation, terminal) = (self.elicitation.clone(), self.terminal);
        Arc::new(move || terminal || elicitation.ready())
    }

    fn via(&self) -> Via {
        self.via
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(action: ElicitationAction, content: Option<serde_json::Value>) -> ElicitResult {
        let mut r = ElicitResult::new(action);
        r.content = content;
        r
    }

    #[test]
    fn only_an_accepted_choice_allows() {
        let accept = |v: serde_json::Value| choice(result(ElicitationAction::Accept, Some(serde_json::json!({ FIELD: v }))));
        assert!(matches!(accept(ONCE.into()), Ok(Choice::Once)));
        assert!(matches!(accept(SESSION.into()), Ok(Choice::Session)));
        assert!(matches!(accept(DENY.into()), Ok(Choice::Deny)));
        assert!(matches!(accept("yes".into()), Err(ElicitError::Malformed(_))));
        assert!(matches!(accept(true.into()), Err(ElicitError::Malformed(_))));
        assert!(matches!(choice(result(ElicitationAction::Accept, None)), Err(ElicitError::Malformed(_))));
        assert!(matches!(choice(result(ElicitationAction::Decline, Some(serde_json::json!({ FIELD: ONCE })))), Err(ElicitError::Declined)));
        assert!(matches!(choice(result(ElicitationAction::Cancel, None)), Err(ElicitError::Cancelled)));
    }

    #[test]
    fn a_malformed_answer_is_quoted_escaped() {
        let r = choice(result(ElicitationAction::Accept, Some(serde_json::json!({ FIELD: "a\u{1b}[2Kb\u{202e}" }))));
        let text = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'), "{text:?}");
    }

    #[test]
    fn the_form_is_one_required_choice_of_three() {
        let v = serde_json::to_value(form().expect("form")).expect("json");
        assert_eq!(v["type"], "object");
        assert_eq!(v["required"], serde_json::json!([FIELD]));
        assert_eq!(v["properties"][FIELD]["type"], "string");
        assert_eq!(v["properties"][FIELD]["enum"], serde_json::json!([ONCE, SESSION, DENY]));
    }
}
