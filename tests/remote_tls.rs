//! A remote engine over TLS: the local Docker daemon behind stunnel on a loopback port, which
//! demands a client certificate from the test's own CA. Through `tcp://` workcell treats the
//! engine as remote (zones shipped, results brought back and published) and must speak TLS
//! exactly as Docker's variables say: `DOCKER_TLS_VERIFY`, `DOCKER_CERT_PATH`.

mod support;

use std::path::Path;
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use support::{backend_ready, BusyboxImage, Proj};

/// Runs `openssl` with `args` in `dir`, asserting success.
fn openssl(dir: &Path, args: &[&str]) {
    let out = StdCommand::new("openssl").current_dir(dir).args(args).output().expect("openssl (apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA in `dir` (`ca.pem`, `ca-key.pem`) and a certificate `name`.pem / `name`-key.pem it
/// signs for `usage` (serverAuth or clientAuth).
fn ca(dir: &Path, cn: &str) {
    openssl(dir, &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", &format!("/CN={cn}")]);
}

fn signed(dir: &Path, name: &str, usage: &str) {
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(&ext, format!("subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")).expect("ext");
    openssl(
        dir,
        &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &format!("{name}-key.pem"), "-out", &format!("{name}.csr"), "-subj", &format!("/CN={name}")],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &ext.to_string_lossy(),
        ],
    );
}

/// stunnel on 127.0.0.1:PORT in front of the Docker socket, requiring a client certificate
/// signed by the CA in `dir`. Killed on drop.
struct Terminator {
    child: Child,
    port: u16,
}

impl Terminator {
    fn start(dir: &Path) -> Terminator {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let conf = dir.join("stunnel.conf");
        let text = format!(
            "foreground = yes\npid =\n[docker]\naccept = 127.0.0.1:{port}\nconnect = /var/run/docker.sock\ncert = {d}/server.pem\nkey = {d}/server-key.pem\nCAfile = {d}/ca.pem\nverifyChain = yes\nrequireCert = yes\n",
            d = dir.display()
        );
        std::fs::write(&conf, text).expect("stunnel.conf");
        let child = StdCommand::new("stunnel").arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("stunnel (apt-get install stunnel4)");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "stunnel did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Terminator { child, port }
    }

    fn address(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client's certificate directory (`ca.pem`, `cert.pem`, `key.pem`) for the CA in `ca_dir`.
fn client_dir(ca_dir: &Path, into: &Path) {
    std::fs::create_dir_all(into).expect("mkdir");
    std::fs::copy(ca_dir.join("ca.pem"), into.join("ca.pem")).expect("ca");
    std::fs::copy(ca_dir.join("client.pem"), into.join("cert.pem")).expect("cert");
    std::fs::copy(ca_dir.join("client-key.pem"), into.join("key.pem")).expect("key");
}

/// The volumes workcell made for the shipped zones of runs in `proj` (none may outlive a run).
fn volumes_of(proj: &Proj) -> Vec<String> {
    let out = StdCommand::new("docker")
        .args(["volume", "ls", "-q", "--filter", &format!("label=dev.workcell.project={}", proj.dir.display())])
        .output()
        .expect("docker volume ls");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

fn tls_required() -> bool {
    if !backend_ready("docker") {
        return false;
    }
    support::program_ready("stunnel", "stunnel4") && support::program_ready("openssl", "openssl")
}

/// A CA, the engine's and a client's certificates in `dir`; the client's directory (for
/// DOCKER_CERT_PATH) is returned.
fn certificates(dir: &Path) -> std::path::PathBuf {
    ca(dir, "workcell-test-ca");
    signed(dir, "server", "serverAuth");
    signed(dir, "client", "clientAuth");
    let client = dir.join("client-certs");
    client_dir(dir, &client);
    client
}

#[test]
fn a_remote_engine_over_tls_gets_its_zones_shipped_and_brought_back() {
    if !tls_required() {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    let dir = certs.path();
    let client = certificates(dir);
    // A client certificate from a CA the engine does not trust.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    ca(&other, "someone-else");
    signed(&other, "client", "clientAuth");
    let stranger = dir.join("stranger-certs");
    std::fs::create_dir_all(&stranger).expect("mkdir");
    std::fs::copy(dir.join("ca.pem"), stranger.join("ca.pem")).expect("ca");
    std::fs::copy(other.join("client.pem"), stranger.join("cert.pem")).expect("cert");
    std::fs::copy(other.join("client-key.pem"), stranger.join("key.pem")).expect("key");

    let tls = Terminator::start(dir);
    let image = BusyboxImage::build("tls");
    let proj = Proj::new();
    std::fs::write(proj.dir.join("out/old.txt"), "old\n").expect("write");
    support::give_to_worker(&proj.dir.join("out"));

    let script = "cat /in/a.txt && echo shipped > /out/new.txt && rm /out/old.txt && ! echo no > /in/x 2>/dev/null";
    let run = |certs: Option<&Path>| {
        let mut c = proj.run(&["--image", &image.tag, "--approve-all"], &["/bin/busybox", "sh", "-c", script]);
        c.env("DOCKER_HOST", tls.address());
        match certs {
            Some(p) => c.env("DOCKER_TLS_VERIFY", "1").env("DOCKER_CERT_PATH", p),
            None => c.env_remove("DOCKER_TLS_VERIFY").env_remove("DOCKER_CERT_PATH"),
        };
        c.output().expect("workcell")
    };

    // Plain HTTP to a TLS port: refused, and the message says how to speak TLS.
    let plain = run(None);
    let err = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(plain.status.code(), Some(125), "{err}");
    assert!(err.contains("DOCKER_TLS_VERIFY=1") && err.contains("DOCKER_CERT_PATH"), "{err}");

    // A certificate the engine's CA did not sign: no run.
    let refused = run(Some(&stranger));
    assert_eq!(refused.status.code(), Some(125), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(proj.dir.join("out/old.txt").exists() && !proj.dir.join("out/new.txt").exists(), "nothing may change without a run");

    // The right certificates: the worker read its read-only zone, could not write it, and its
    // changes to the writable zone came back and were published.
    let ok = run(Some(&client));
    let (out, err) = (String::from_utf8_lossy(&ok.stdout), String::from_utf8_lossy(&ok.stderr));
    assert_eq!(ok.status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("hello from in"), "{out}");
    assert_eq!(std::fs::read_to_string(proj.dir.join("out/new.txt")).expect("published"), "shipped\n");
    assert!(!proj.dir.join("out/old.txt").exists(), "the deletion was published");
    assert!(!proj.dir.join("in/x").exists());
    assert!(err.contains("delivery of zone out"), "{err}");
    proj.assert_no_containers();
    assert!(volumes_of(&proj).is_empty(), "volumes left behind: {:?}", volumes_of(&proj));
}

/// A writable zone that is the project directory, shipped: the worker may change its copy of
/// `workcell.yaml`, create `workers/`, plant a git hook; none of it is published, the rest is.
#[test]
fn a_shipped_project_zone_never_publishes_control_files_or_hooks() {
    if !tls_required() {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    let client = certificates(certs.path());
    let tls = Terminator::start(certs.path());
    let image = BusyboxImage::build("tls-control");
    let proj = Proj::new();
    let config = format!("sandbox:\n  zones:\n    proj: {{path: ., mode: rw}}\ndefaults:\n  image: {}\n", image.tag);
    std::fs::write(proj.dir.join("workcell.yaml"), &config).expect("config");
    std::fs::create_dir_all(proj.dir.join(".git/hooks")).expect("git dir");
    std::fs::write(proj.dir.join(".git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::create_dir_all(proj.dir.join(".git/objects")).expect("objects");
    support::give_to_worker(&proj.dir);
    let script = "echo 'defaults: {image: host}' >> /proj/workcell.yaml && mkdir -p /proj/workers && echo 'command: [id]' > /proj/workers/w.worker \
        && echo 'rm -rf ~' > /proj/.git/hooks/pre-commit && echo kept > /proj/result.txt";
    let out = proj
        .workcell()
        .args(["run", "--backend", "docker", "--approve-all", "--", "/bin/busybox", "sh", "-c", script])
        .env("DOCKER_HOST", tls.address())
        .env("DOCKER_TLS_VERIFY", "1")
        .env("DOCKER_CERT_PATH", &client)
        .output()
        .expect("workcell");
    let err = String::from_utf8_lossy(&out.stderr);
    // Something was held back: exit 3, and each refusal named.
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(std::fs::read_to_string(proj.dir.join("workcell.yaml")).expect("config"), config, "the config was published: {err}");
    assert!(!proj.dir.join("workers/w.worker").exists(), "a worker file was published: {err}");
    assert!(!proj.dir.join(".git/hooks/pre-commit").exists(), "a hook was published: {err}");
    assert_eq!(std::fs::read_to_string(proj.dir.join("result.txt")).expect("the rest is published"), "kept\n");
    assert!(err.contains("control file 'workcell.yaml'") && err.contains(".git/hooks/pre-commit"), "{err}");
    proj.assert_no_containers();
    assert!(volumes_of(&proj).is_empty(), "volumes left behind: {:?}", volumes_of(&proj));
}
