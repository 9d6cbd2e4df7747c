//! A remote engine over ssh (`DOCKER_HOST=ssh://user@host`): bollard runs the system's `ssh`
//! and `docker system dial-stdio` at the other end. The "other host" is an sshd the test
//! starts on 127.0.0.3 port 22 (bollard's ssh transport takes no port from the address),
//! with a host key and an authorized client key of its own, reached through an ssh-agent of
//! its own; its `docker` talks to this machine's daemon, which the zones are shipped to as
//! to any remote engine. The host key goes into a known_hosts file of the test's own: an
//! `ssh` first on workcell's PATH adds `UserKnownHostsFile` (ssh reads `~/.ssh` from the
//! password database, not `$HOME`), so the person's `~/.ssh/known_hosts` is never touched and
//! a run killed half-way leaves nothing in it.

mod support;

use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use support::{backend_ready, BusyboxImage, Proj};

const ADDRESS: &str = "127.0.0.3";

/// sshd, an ssh-agent holding the client key, and a directory with the known_hosts file and
/// the `ssh` wrapper that uses it; all gone on drop.
struct SshHost {
    dir: tempfile::TempDir,
    sshd: Child,
    /// Set once the agent runs: a panic before then still stops sshd (the host is dropped).
    agent_pid: Option<u32>,
    agent_sock: String,
}

impl SshHost {
    fn start() -> SshHost {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for key in ["host_key", "client_key"] {
            let ok = StdCommand::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", ""]).arg("-f").arg(d.join(key)).status().expect("ssh-keygen");
            assert!(ok.success());
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        let opt = |o: String| ["-o".to_string(), o];
        let mut args: Vec<String> = vec!["-D".into(), "-e".into(), "-p".into(), "22".into(), "-h".into(), d.join("host_key").display().to_string()];
        for o in [
            format!("ListenAddress={ADDRESS}"),
            format!("AuthorizedKeysFile={}", d.join("authorized_keys").display()),
            "StrictModes=no".into(),
            "PasswordAuthentication=no".into(),
            "PermitRootLogin=prohibit-password".into(),
            format!("PidFile={}", d.join("sshd.pid").display()),
        ] {
            args.extend(opt(o));
        }
        let sshd =
            StdCommand::new("/usr/sbin/sshd").args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("sshd (apt-get install openssh-server)");
        let agent_sock = d.join("agent.sock").display().to_string();
        let mut host = SshHost { dir, sshd, agent_pid: None, agent_sock };
        let d = host.dir.path().to_path_buf();
        let start = Instant::now();
        while std::net::TcpStream::connect((ADDRESS, 22)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "sshd did not listen on {ADDRESS}:22");
            std::thread::sleep(Duration::from_millis(50));
        }
        let agent_sock = host.agent_sock.clone();
        let out = StdCommand::new("ssh-agent").args(["-a", &agent_sock, "-s"]).output().expect("ssh-agent");
        let text = String::from_utf8_lossy(&out.stdout);
        host.agent_pid = Some(text.split("SSH_AGENT_PID=").nth(1).and_then(|r| r.split(';').next()).and_then(|p| p.parse().ok()).expect("agent pid"));
        let added = StdCommand::new("ssh-add").arg("-q").arg(d.join("client_key")).env("SSH_AUTH_SOCK", &agent_sock).status().expect("ssh-add");
        assert!(added.success());
        let known_hosts = d.join("known_hosts");
        let wrapper = d.join("bin/ssh");
        std::fs::create_dir_all(d.join("bin")).expect("bin");
        std::fs::write(&wrapper, format!("#!/bin/sh\nexec /usr/bin/ssh -o UserKnownHostsFile={} \"$@\"\n", known_hosts.display())).expect("ssh wrapper");
        std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        // The host key, as ssh would be told it by a person (bollard asks ssh to add new ones).
        let known = StdCommand::new(&wrapper)
            .args(["-o", "StrictHostKeyChecking=accept-new", "-o", "BatchMode=yes", &format!("root@{ADDRESS}"), "true"])
            .env("SSH_AUTH_SOCK", &agent_sock)
            .output()
            .expect("ssh");
        assert!(known.status.success(), "ssh to the test's sshd: {}", String::from_utf8_lossy(&known.stderr));
        host
    }
}

impl Drop for SshHost {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
        if let Some(pid) = self.agent_pid {
            let _ = StdCommand::new("kill").arg(pid.to_string()).status();
        }
    }
}

impl SshHost {
    /// PATH for workcell: the test's `ssh` first.
    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().join("bin").display(), std::env::var("PATH").unwrap_or_default())
    }
}

fn ssh_ready() -> bool {
    if !backend_ready("docker") {
        return false;
    }
    let have = support::program_ready("/usr/sbin/sshd", "openssh-server")
        && support::program_ready("/usr/bin/ssh", "openssh-client")
        && support::program_ready("/usr/bin/ssh-agent", "openssh-client");
    if !have {
        return false;
    }
    if std::net::TcpStream::connect((ADDRESS, 22)).is_err() {
        return true;
    }
    assert!(std::env::var("WORKCELL_REQUIRE_DOCKER").as_deref() != Ok("1"), "WORKCELL_REQUIRE_DOCKER=1 but the ssh test cannot run: {ADDRESS}:22 is taken");
    eprintln!("note: skipping the ssh test ({ADDRESS}:22 taken)");
    false
}

#[test]
fn an_engine_over_ssh_gets_its_zones_shipped_and_brought_back() {
    if !ssh_ready() {
        return;
    }
    let host = SshHost::start();
    let image = BusyboxImage::build("ssh");
    let proj = Proj::new();
    let out = proj
        .run(&["--image", &image.tag, "--approve-all"], &["/bin/busybox", "sh", "-c", "cat /in/a.txt && echo over-ssh > /out/s.txt"])
        .env("DOCKER_HOST", format!("ssh://root@{ADDRESS}"))
        .env("SSH_AUTH_SOCK", &host.agent_sock)
        .env("PATH", host.path())
        .output()
        .expect("workcell");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("hello from in"), "{stdout}");
    assert_eq!(std::fs::read_to_string(proj.dir.join("out/s.txt")).expect("published"), "over-ssh\n");
    // Shipped, not bound: the delivery summary of a copy, and nothing left behind.
    assert!(stderr.contains("delivery of zone out"), "{stderr}");
    proj.assert_no_containers();
}
