//! Test servers on loopback addresses of the host, for the egress tests: each binds port 0
//! and serves every connection on a thread of its own until the test process ends.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// A deadline that only turns a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

/// An HTTP server on `ip`: each request gets `200` and `hello <path> (host <Host header>)`.
pub fn web_server(ip: &str) -> SocketAddr {
    let l = TcpListener::bind((ip, 0)).expect("bind a test server on loopback");
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(HANG));
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    return;
                }
                let mut host = String::new();
                loop {
                    let mut line = String::new();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if line == "\r\n" => break,
                        Ok(_) if line.to_ascii_lowercase().starts_with("host:") => host = line[5..].trim().to_string(),
                        Ok(_) => {}
                    }
                }
                let body = format!("hello {} (host {host})", first.split_whitespace().nth(1).unwrap_or(""));
                let mut s = s;
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            });
        }
    });
    addr
}

/// A server on `ip` that answers each line `X` with `pong:X`, until the peer closes.
pub fn echo_server(ip: &str) -> SocketAddr {
    let l = TcpListener::bind((ip, 0)).expect("bind a test server on loopback");
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(HANG));
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).lines() {
                    let Ok(line) = line else { return };
                    if writeln!(w, "pong:{line}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}
