//! A worker that moves a file, through the real `workcell` binary on bwrap and docker: when
//! the host makes the new name while the (large) moved file is being published, the new
//! name is a conflict, and the old name is kept (listed in `failed`), so the content is not
//! left nowhere.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{give_to_worker, write_project};

mod body {
    use super::*;

    pub fn a_moved_file_keeps_its_old_name_when_the_host_takes_the_new_one(backend: &str) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        let z = dir.join("z");
        std::fs::create_dir_all(&z).expect("mkdir z");
        let config = "sandbox:\n  zones:\n    z: {path: ./z, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}\n";
        write_project(&dir, config, &[]);
        std::fs::write(z.join("a.md"), "the only copy").expect("write");
        give_to_worker(&dir);
        let target = z.join("b.bin");
        let watch = z.clone();
        // The host makes b.bin while workcell is still copying the worker's b.bin into place.
        let host = std::thread::spawn(move || {
            let give_up = Instant::now() + Duration::from_secs(300);
            while Instant::now() < give_up {
                let publishing =
                    std::fs::read_dir(&watch).map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".workcell-publish-"))).unwrap_or(false);
                if publishing {
                    std::fs::write(&target, "the host's").expect("host file");
                    return true;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            false
        });
        let out = Command::new(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&dir)
            .env_remove("RUST_LOG")
            .args(["run", "--backend", backend, "--json", "--", "sh", "-c"])
            .arg("{ cat /z/a.md; head -c 134217728 /dev/zero | tr '\\0' x; } > /z/b.bin && rm /z/a.md")
            .stdin(Stdio::null())
            .output()
            .expect("run workcell");
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("exit {:?}\n{}", out.status.code(), err.chars().take(4000).collect::<String>());
        assert!(host.join().expect("watcher"), "the publish never wrote a temporary file");
        assert_eq!(std::fs::read(z.join("b.bin")).expect("read b.bin"), b"the host's", "the host's new file was replaced");
        assert_eq!(std::fs::read_to_string(z.join("a.md")).expect("the moved file vanished"), "the only copy");
        let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).expect("a delivery summary");
        let sum = &serde_json::from_str::<Value>(line).expect("json")["delivery"];
        assert_eq!(sum["conflicts"], serde_json::json!(["b.bin"]), "{sum}");
        assert_eq!(sum["failed"][0]["path"], "a.md", "{sum}");
        assert_eq!(sum["deleted"], serde_json::json!([]), "{sum}");
        let left: Vec<PathBuf> =
            std::fs::read_dir(&z).expect("read zone").flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().contains(".workcell-")).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

support::backend_suite!(bwrap, "bwrap", [a_moved_file_keeps_its_old_name_when_the_host_takes_the_new_one]);
support::backend_suite!(docker, "docker", [a_moved_file_keeps_its_old_name_when_the_host_takes_the_new_one]);
