//! A body for the files the host runs (`tests/protected_bind.rs` has the full set): an
//! existing `.git/config` and `.git/hooks` in a rw zone stay as they were, whatever the
//! worker tries, while the rest of the zone takes writes.

use super::*;

pub fn protected_git_stays_read_only(backend: &str) {
    let s = Scratch::new();
    let zone = s.mkdir("out");
    std::fs::create_dir_all(zone.join(".git/hooks")).expect("mkdir");
    std::fs::write(zone.join(".git/config"), "[core]\n\tbare = false\n").expect("write");
    support::give_to_worker(&zone);
    let script = "cd /out; \
        for a in 'echo evil >> .git/config' 'echo evil > .git/hooks/post-checkout' 'mv .git/config c' 'rm -rf .git/hooks' 'mv .git g' 'mv -T .git/hooks h'; do \
          if sh -c \"$a\" 2>/dev/null; then echo \"WROTE:$a\"; fi; done; echo fine > ok; exit 0";
    let out = run(backend, &s.root, &["--zone", "out=./out:rw", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(!text.contains("WROTE:"), "a protected path changed:\n{text}");
    assert_eq!(std::fs::read_to_string(zone.join(".git/config")).expect("config"), "[core]\n\tbare = false\n");
    assert!(!zone.join(".git/hooks/post-checkout").exists());
    assert_eq!(std::fs::read_to_string(zone.join("ok")).expect("the rest of the zone is writable"), "fine\n");
}
