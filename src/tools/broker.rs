//! The broker: the tool service as HTTP+JSON on a Unix socket, mounted into a worker at
//! `/run/workcell/broker.sock` and authenticated by a per-run token in the worker's env.
//!
//! ```text
//! GET  /v1/tools          → {"tools": ["read_file", ...]}
//! POST /v1/tools/{name}   body: the tool's JSON arguments
//!                         → 200 {"ok": true, "result": ...}
//!                         → 4xx {"ok": false, "error": {"kind": ..., "message": ...}}
//! Header: Authorization: Bearer $WORKCELL_TOKEN
//! ```

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::service::{ToolError, ToolService, TOOL_NAMES};

/// The socket's file name inside that directory.
pub const SOCKET_NAME: &str = "broker.sock";
/// Tool calls one broker reads and carries out at once; more wait their turn.
pub const MAX_CONCURRENT_CALLS: usize = 8;
/// Largest request body the broker accepts (2 MiB): a tool call's JSON arguments, e.g. the
/// content of a `write_file`. A larger request is answered 413 with a JSON error.
pub const MAX_REQUEST_BYTES: usize = 2 << 20;

/// A broker; dropping it stops the server and removes the socket directory.
///
/// [`Broker::bind`] only creates the socket: the server (a thread with its own runtime)
/// starts when [`Broker::serve`] is called, which the bwrap supervisor does on the first
/// connection. Most runs never ask the host for anything, and so never pay for the server.
pub struct Broker {
    dir: tempfile::TempDir,
    token: String,
    listener: std::os::unix::net::UnixListener,
    state: AppState,
    running: std::sync::Mutex<Option<Running>>,
}

/// The serving thread and the way to stop it.
struct Running {
    shutdown: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("dir", &self.dir.path()).finish()
    }
}

/// Why a broker could not be set up, or a file not staged for the worker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("no randomness for the broker token: {0}")]
    Token(getrandom::Error),
    /// Every base directory was tried; `base` is the last one, `source` its error.
    #[error("cannot create the broker directory ({}: {source})", base.display())]
    Dir { base: PathBuf, source: std::io::Error },
    #[error("cannot restrict the broker directory {} to its owner: {source}", path.display())]
    Restrict { path: PathBuf, source: std::io::Error },
    #[error("cannot bind the broker socket {}: {source}", path.display())]
    Bind { path: PathBuf, source: std::io::Error },
    #[error("cannot share the broker socket: {0}")]
    Share(#[source] std::io::Error),
    #[error("cannot start the broker thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("cannot open the broker directory {}: {source}", path.display())]
    OpenDir { path: PathBuf, source: std::io::Error },
    /// `name` is the file or directory's path inside the broker directory.
    #[error("cannot stage {name}: {source}")]
    Stage { name: String, source: std::io::Error },
    #[error("cannot give the worker access to the broker socket: {0}")]
    Grant(#[source] std::io::Error),
}

/// A fresh random token: 32 bytes from the OS, hex.
pub fn new_token() -> Result<String, BrokerError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(BrokerError::Token)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The broker's private directory (mode 0700, random name, removed with the broker), on a
/// tmpfs where there is one: it lives for one run, and creating and removing it on a disk
/// file system was a third of the broker's cost per run (≈ 0.3 ms of ≈ 1 ms on ext4). In
/// order: `$XDG_RUNTIME_DIR` (per user; not for root, whose workers run as another uid),
/// `$TMPDIR` when set, `/dev/shm`, the system default.
pub(crate) fn private_dir() -> Result<tempfile::TempDir, BrokerError> {
    let mut last = None;
    for base in private_dir_bases() {
        match tempfile::Builder::new().prefix("workcell-broker-").tempdir_in(&base) {
            Ok(dir) => return Ok(dir),
            Err(source) => last = Some(BrokerError::Dir { base, source }),
        }
    }
    // private_dir_bases always holds the system temporary directory.
    Err(last.unwrap_or_else(|| BrokerError::Dir { base: std::env::temp_dir(), source: std::io::ErrorKind::NotFound.into() }))
}

/// Where broker directories may be, in the order [`private_dir`] tries them.
fn private_dir_bases() -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = Vec::new();
    // Only a runtime directory of this user's own, closed to others: under `su` it can be
    // another user's, who could swap what is created there.
    let own = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o077 == 0)
    };
    // Not for root: a root workcell's workers run as another uid, which cannot enter root's
    // 0700 runtime directory to reach the socket.
    let root = rustix::process::geteuid().as_raw() == 0;
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| !root && p.is_absolute() && own(p)) {
        bases.push(x);
    }
    if std::env::var_os("TMPDIR").is_none() {
        bases.push(PathBuf::from("/dev/shm"));
    }
    bases.push(std::env::temp_dir());
    bases
}

/// Removes the broker directories of runs that were killed before they could remove their
/// own (`workcell gc`): `workcell-broker-*` directories older than a minute whose socket no
/// longer accepts connections, in every place a run may have created one — this
/// environment's bases, and `/dev/shm`, `/tmp`, `/var/tmp` and the users' runtime directories
/// whatever this environment says (a run started with another `TMPDIR` or
/// `XDG_RUNTIME_DIR` may have used them). A user removes their own; root removes any.
/// Returns the removed directories.
pub fn remove_stale_dirs() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::geteuid().as_raw();
    let mut removed = Vec::new();
    let mut bases = private_dir_bases();
    bases.extend(["/dev/shm", "/tmp", "/var/tmp"].map(PathBuf::from));
    if let Ok(users) = std::fs::read_dir("/run/user") {
        bases.extend(users.flatten().map(|e| e.path()));
    }
    bases.sort();
    bases.dedup();
    for base in bases {
        let Ok(entries) = std::fs::read_dir(&base) else { continue };
        for e in entries.flatten() {
            if !e.file_name().to_string_lossy().starts_with("workcell-broker-") {
                continue;
            }
            let path = e.path();
            // Not followed: a symlink or somebody else's directory is left alone.
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let old = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age > std::time::Duration::from_secs(60));
            if !meta.is_dir() || (uid != 0 && meta.uid() != uid) || !old {
                continue;
            }
            // A live run answers on its socket; a dead one's socket refuses (or is gone).
            if std::os::unix::net::UnixStream::connect(path.join(SOCKET_NAME)).is_ok() {
                continue;
            }
            // Never follows a link inside (std's remove_dir_all works beneath handles).
            if std::fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

#[derive(Clone)]
struct AppState {
    service: Arc<ToolService>,
    token: Arc<String>,
    /// Calls being read or carried out at once: each may hold a request body and a result,
    /// so a worker opening many connections waits instead of growing workcell's memory.
    calls: Arc<tokio::sync::Semaphore>,
}

impl Broker {
    /// Binds a new socket for `service` in a private directory and starts serving it.
    pub fn start(service: Arc<ToolService>) -> Result<Broker, BrokerError> {
        let broker = Broker::bind(service)?;
        broker.serve()?;
        Ok(broker)
    }

    /// Binds a new socket for `service` in a private directory, without serving it yet:
    /// connections wait in the socket's backlog until [`Broker::serve`].
    pub fn bind(service: Arc<ToolService>) -> Result<Broker, BrokerError> {
        let dir = private_dir()?;
        // Owner only: the worker runs as the same uid; nobody else needs to connect.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|source| BrokerError::Restrict { path: dir.path().to_path_buf(), source })?;
        let token = new_token()?;
        let socket = dir.path().join(SOCKET_NAME);
        let listener = std::os::unix::net::UnixListener::bind(&socket).map_err(|source| BrokerError::Bind { path: socket.clone(), source })?;
        listener.set_nonblocking(true).map_err(|source| BrokerError::Bind { path: socket, source })?;
        let state = AppState { service, token: Arc::new(token.clone()), calls: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_CALLS)) };
        Ok(Broker { dir, token, listener, state, running: std::sync::Mutex::new(None) })
    }

    /// Starts the server if it is not running yet.
    pub fn serve(&self) -> Result<(), BrokerError> {
        // The server gets its own descriptor; ours stays valid for `wake_fd`.
        self.serve_on(self.listener.try_clone().map_err(BrokerError::Share)?)
    }

    /// Serves on a socket of its own in `dir` instead (a pooled sandbox's broker directory,
    /// bound into it when it was filled, [`crate::pool`]), with copies of the files staged
    /// so far; shared with `user` as [`Broker::share_with`] shares its own.
    pub fn serve_in(&self, dir: &Path, user: crate::plan::UserSpec) -> Result<(), BrokerError> {
        let target =
            cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority()).map_err(|source| BrokerError::OpenDir { path: dir.to_path_buf(), source })?;
        let own = self.open_dir()?;
        for entry in own.entries().map_err(|source| BrokerError::OpenDir { path: self.dir.path().to_path_buf(), source })?.flatten() {
            let name = entry.file_name();
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let stage = |source| BrokerError::Stage { name: name.to_string_lossy().into_owned(), source };
            let mut from = own.open(&name).map_err(stage)?;
            let mut to = target.open_with(&name, cap_std::fs::OpenOptions::new().write(true).create_new(true)).map_err(stage)?;
            std::io::copy(&mut from, &mut to).map_err(stage)?;
        }
        let socket = dir.join(SOCKET_NAME);
        let listener = std::os::unix::net::UnixListener::bind(&socket).map_err(|source| BrokerError::Bind { path: socket.clone(), source })?;
        listener.set_nonblocking(true).map_err(|source| BrokerError::Bind { path: socket.clone(), source })?;
        if rustix::process::geteuid().as_raw() == 0 && user.uid != 0 {
            rustix::fs::chown(&socket, None, Some(rustix::process::Gid::from_raw(user.gid))).map_err(|e| BrokerError::Grant(e.into()))?;
            std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660)).map_err(BrokerError::Grant)?;
        }
        self.serve_on(listener)
    }

    fn serve_on(&self, std_listener: std::os::unix::net::UnixListener) -> Result<(), BrokerError> {
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if running.is_some() {
            return Ok(());
        }
        let state = self.state.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("workcell-broker".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("broker runtime: {e}");
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::UnixListener::from_std(std_listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("broker listener: {e}");
                            return;
                        }
                    };
                    let app = Router::new().route("/v1/tools", get(list)).route("/v1/tools/{name}", post(call)).with_state(state);
                    let server = axum::serve(listener, app).with_graceful_shutdown(async {
                        let _ = rx.await;
                    });
                    if let Err(e) = server.await {
                        tracing::error!("broker: {e}");
                    }
                });
            })
            .map_err(BrokerError::Thread)?;
        *running = Some(Running { shutdown: tx, thread });
        Ok(())
    }

    /// The host directory holding the socket (bind it at [`crate::plan::BROKER_MOUNT_POINT`]).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a new file for the worker to read into the broker directory: `rel` is a name,
    /// or `dir/name` below a directory made with [`Broker::stage_dir`]. Opened beneath the
    /// directory's handle with `O_EXCL`, so nothing already there (a link, a file) is
    /// followed or replaced.
    pub fn stage(&self, rel: &str, bytes: &[u8]) -> Result<(), BrokerError> {
        use std::io::Write;
        let mut f = self.create(rel)?;
        f.write_all(bytes).map_err(|source| BrokerError::Stage { name: rel.into(), source })
    }

    /// [`Broker::stage`] from a reader, copied a piece at a time; returns the bytes copied.
    pub fn stage_from(&self, rel: &str, reader: &mut dyn std::io::Read) -> Result<u64, BrokerError> {
        let mut f = self.create(rel)?;
        std::io::copy(reader, &mut f).map_err(|source| BrokerError::Stage { name: rel.into(), source })
    }

    /// Makes a new directory `name` in the broker directory (see [`Broker::stage`]).
    pub fn stage_dir(&self, name: &str) -> Result<(), BrokerError> {
        self.open_dir()?.create_dir(name).map_err(|source| BrokerError::Stage { name: name.into(), source })
    }

    fn open_dir(&self) -> Result<cap_std::fs::Dir, BrokerError> {
        cap_std::fs::Dir::open_ambient_dir(self.dir.path(), cap_std::ambient_authority())
            .map_err(|source| BrokerError::OpenDir { path: self.dir.path().to_path_buf(), source })
    }

    /// A new file `rel` beneath the broker directory, never one already there.
    fn create(&self, rel: &str) -> Result<cap_std::fs::File, BrokerError> {
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        self.open_dir()?.open_with(rel, &opts).map_err(|source| BrokerError::Stage { name: rel.into(), source })
    }

    /// The socket's host path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join(SOCKET_NAME)
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Lets a worker running as another host user (root workcell, unprivileged worker) reach
    /// the socket and the files beside it: the directory and socket go to the worker's group
    /// (0750 / 0660) and stay root's. Nothing changes when the worker is this process's user.
    pub fn share_with(&self, user: crate::plan::UserSpec) -> Result<(), BrokerError> {
        if rustix::process::geteuid().as_raw() != 0 || user.uid == 0 {
            return Ok(());
        }
        let gid = rustix::process::Gid::from_raw(user.gid);
        let share = |p: &Path, mode: u32| -> std::io::Result<()> {
            rustix::fs::chown(p, None, Some(gid))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        };
        share(self.dir.path(), 0o750).and_then(|()| share(&self.socket(), 0o660)).map_err(BrokerError::Grant)
    }
}

/// The supervision loop of a host-process run (bwrap, none, Seatbelt) polls the listening
/// socket and starts the server on the first connection.
impl crate::backend::OnDemand for Broker {
    fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.listener)
    }

    fn start(&self) -> Result<(), crate::backend::ServiceError> {
        self.serve().map_err(Into::into)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let running = self.running.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(Running { shutdown, thread }) = running {
            let _ = shutdown.send(());
            let _ = thread.join();
        }
    }
}

fn authorised(state: &AppState, headers: &HeaderMap) -> bool {
    let expected = format!("Bearer {}", state.token);
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // Constant-time comparison: the token is a secret.
        .is_some_and(|v| v.len() == expected.len() && v.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0)
}

fn unauthorised() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"ok": false, "error": {"kind": "unauthorised", "message": "missing or wrong token: send 'Authorization: Bearer $WORKCELL_TOKEN'"}})),
    )
        .into_response()
}

async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !authorised(&state, &headers) {
        return unauthorised();
    }
    Json(json!({"tools": TOOL_NAMES})).into_response()
}

async fn call(State(state): State<AppState>, UrlPath(name): UrlPath<String>, headers: HeaderMap, body: axum::body::Body) -> Response {
    if !authorised(&state, &headers) {
        return unauthorised();
    }
    // The body is read only under a permit, and never beyond the limit.
    let Ok(_permit) = state.calls.clone().acquire_owned().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"ok": false, "error": {"kind": "failed", "message": "the broker is shutting down"}})))
            .into_response();
    };
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            // to_bytes reports the limit as http-body-util's LengthLimitError ("length limit
            // exceeded"), wrapped; its type is not ours to name, its words are stable.
            let too_large = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source()).any(|e| e.to_string().contains("length limit exceeded"));
            let (status, kind, message) = if too_large {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!(
                        "the request is larger than the broker accepts ({MAX_REQUEST_BYTES} bytes, 2 MiB); write large content in parts (several write_file calls to separate files) or produce it with the shell tool"
                    ),
                )
            } else {
                (StatusCode::BAD_REQUEST, "bad_request", format!("the request body could not be read: {e}"))
            };
            return (status, Json(json!({"ok": false, "error": {"kind": kind, "message": message}}))).into_response();
        }
    };
    let args: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return (StatusCode::BAD_REQUEST, Json(json!({"ok": false, "error": {"kind": "bad_request", "message": format!("the body is not JSON: {e}")}})))
                    .into_response()
            }
        }
    };
    let service = state.service.clone();
    // Tool calls block (file I/O, prompts on the terminal, child runs).
    let result = tokio::task::spawn_blocking(move || service.call(&name, args)).await;
    match result {
        Ok(Ok(v)) => Json(json!({"ok": true, "result": v})).into_response(),
        Ok(Err(e)) => {
            let status = match &e {
                ToolError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
                ToolError::Denied(_) => StatusCode::FORBIDDEN,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            };
            (status, Json(json!({"ok": false, "error": {"kind": e.kind(), "message": e.to_string()}}))).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"ok": false, "error": {"kind": "failed", "message": e.to_string()}}))).into_response(),
    }
}
