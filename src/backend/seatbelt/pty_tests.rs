//! The session and pty preparation and the relay, on Linux (the same code runs on macOS):
//! the worker is the leader of a new session, with no controlling terminal unless `-t`
//! gives it a pty of its own, and bytes go both ways through the relay.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

/// `(session, tty_nr)` of process `pid` from `/proc/PID/stat` text (fields 6 and 7).
fn session_and_tty(stat: &str) -> (i32, i32) {
    let after_comm = &stat[stat.rfind(')').expect("stat has (comm)") + 2..];
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    (f[3].parse().expect("session"), f[4].parse().expect("tty_nr"))
}

/// A deadline for a step that would otherwise hang the test (never a timing threshold).
const HANG: Duration = Duration::from_secs(120);

#[test]
fn worker_without_tty_leads_a_new_session_with_no_terminal() {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "cat /proc/$$/stat"]).stdin(Stdio::null()).stdout(Stdio::piped());
    assert!(prepare(&mut cmd, false).expect("prepare").is_none());
    let child = cmd.spawn().expect("spawn sh");
    let pid = child.id() as i32;
    let out = child.wait_with_output().expect("wait");
    let (session, tty) = session_and_tty(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(session, pid, "the worker must lead a session of its own");
    assert_eq!(tty, 0, "the worker must have no controlling terminal");
}

#[test]
fn tty_worker_gets_a_pty_of_its_own_relayed_both_ways() {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "read line; echo \"got:$line\"; test -t 0 && test -t 1 && echo both-tty; cat /proc/$$/stat"]);
    let pty = prepare(&mut cmd, true).expect("prepare").expect("a pty");
    let mut child = cmd.spawn().expect("spawn sh");
    let pid = child.id() as i32;
    // The relay ends only when every holder of the slave has closed it.
    drop(cmd);
    let (in_read, in_write) = rustix::pipe::pipe().expect("pipe");
    let (out_read, out_write) = rustix::pipe::pipe().expect("pipe");
    rustix::io::write(&in_write, b"hello\n").expect("write input");
    drop(in_write);
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = pty.relay(in_read, &out_write);
        drop(out_write);
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
    });
    let (text_tx, text_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::fs::File::from(out_read).read_to_string(&mut text);
        let _ = text_tx.send(text);
    });
    let relayed = done_rx.recv_timeout(HANG);
    let _ = child.kill();
    let _ = child.wait();
    relayed.expect("the relay ends when the worker exits").expect("relay");
    let text = text_rx.recv_timeout(HANG).expect("output read");
    assert!(text.contains("got:hello"), "input reaches the worker through the pty: {text:?}");
    assert!(text.contains("both-tty"), "stdin and stdout are the pty: {text:?}");
    let stat = &text[text.rfind(&format!("{pid} (")).expect("stat line")..];
    let (session, tty) = session_and_tty(stat);
    assert_eq!(session, pid, "the worker must lead a session of its own");
    assert_ne!(tty, 0, "the pty must be the worker's controlling terminal");
}

#[test]
fn raw_mode_is_restored() {
    let master = rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY).expect("openpt");
    rustix::pty::grantpt(&master).expect("grantpt");
    rustix::pty::unlockpt(&master).expect("unlockpt");
    let name = rustix::pty::ptsname(&master, Vec::new()).expect("ptsname");
    let slave = rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty()).expect("open slave");
    let before = rustix::termios::tcgetattr(&slave).expect("tcgetattr");
    {
        let _raw = RawMode::enter(&slave).expect("a terminal");
        let now = rustix::termios::tcgetattr(&slave).expect("tcgetattr");
        assert!(!now.local_modes.contains(rustix::termios::LocalModes::ICANON), "raw while relaying");
    }
    let after = rustix::termios::tcgetattr(&slave).expect("tcgetattr");
    assert_eq!(before.local_modes, after.local_modes);
}
