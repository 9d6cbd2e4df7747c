//! The docker-compose demo servers of `docker-compose.yml` (docs/network.md), as the egress
//! tests and the egress recipe start them on ports of their own.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A port free on 127.0.0.1 now (a compose server binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Waits until `port` on 127.0.0.1 answers `GET /` with 200 (a minute at most).
pub fn wait_until_serving(port: u16) {
    let start = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            let mut got = String::new();
            let _ = s.read_to_string(&mut got);
            if got.starts_with("HTTP/1.0 200") || got.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the compose server on port {port} never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
}
