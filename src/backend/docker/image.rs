//! Images: the local `image: host` base image, named local images and `build:` folders.
//!
//! Nothing here ever pulls: workcell must work on machines without a registry. The host
//! base image is assembled in memory as a tar (the `tar` crate) and built `FROM scratch`;
//! it is tagged by the hash of its content so an unchanged layout is never rebuilt.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use bollard::Docker;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::render::LABEL_MANAGED;
use super::DockerError;
use crate::config::ImageRef;
use crate::plan::accounts::{group_text, passwd_text};
use crate::plan::{LaunchPlan, SystemEntry, UserSpec};

/// Repository of the host base images.
pub const HOST_REPO: &str = "workcell-host";
/// Label saying what kind of image workcell made: `host-base` or `build`.
pub const LABEL_KIND: &str = "dev.workcell.kind";
/// Label naming the folder a `build:` image came from.
pub const LABEL_SOURCE: &str = "dev.workcell.source";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Directories the base image provides, beyond the bind targets: mount points Docker and
/// programs expect, and `/etc` for the passwd/group files.
const BASE_DIRS: &[&str] = &["dev", "etc", "proc", "sys", "run"];

/// The root file system of the host base image, as a deterministic tar (fixed order,
/// zero mtimes, root ownership), so equal layouts give byte-equal tars and equal tags.
///
/// It mirrors the host's top level: the symlinks of `system` (`/bin → usr/bin`), empty
/// directories for the system binds, `/tmp` (1777), and an `/etc/passwd` and
/// `/etc/group` that know root, nobody and the invoking user, so tools that look up the
/// current user (`id`, `whoami`, Python's `getpass`) work.
pub fn host_rootfs_tar(system: &[SystemEntry], user: UserSpec) -> Result<Vec<u8>, std::io::Error> {
    let mut dirs: Vec<String> = BASE_DIRS.iter().map(|d| d.to_string()).collect();
    let mut links: Vec<(String, String)> = Vec::new();
    for e in system {
        match e {
            SystemEntry::Bind { path } => {
                // Every parent of a bind target must exist in the image; the target itself
                // Docker creates (as a file or a directory, whatever the source is).
                let rel = path.trim_start_matches('/');
                let mut acc = String::new();
                let parts: Vec<&str> = rel.split('/').collect();
                for part in &parts[..parts.len().saturating_sub(1)] {
                    if !acc.is_empty() {
                        acc.push('/');
                    }
                    acc.push_str(part);
                    dirs.push(acc.clone());
                }
            }
            SystemEntry::Symlink { path, target } => links.push((path.trim_start_matches('/').to_string(), target.clone())),
        }
    }
    dirs.sort();
    dirs.dedup();
    links.sort();

    let passwd = passwd_text(user);
    let group = group_text(user);
    let mut b = tar::Builder::new(Vec::new());
    let add_dir = |b: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32| -> std::io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_size(0);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, format!("{name}/"), std::io::empty())
    };
    add_dir(&mut b, "tmp", 0o1777)?;
    for d in &dirs {
        add_dir(&mut b, d, 0o755)?;
    }
    for (path, target) in &links {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        h.set_mtime(0);
        b.append_link(&mut h, path, target)?;
    }
    // nsswitch.conf: files before DNS, so `localhost` resolves without a network.
    let nsswitch = crate::plan::accounts::NSSWITCH_TEXT.to_string();
    for (name, text) in [("etc/passwd", passwd), ("etc/group", group), ("etc/nsswitch.conf", nsswitch)] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(text.len() as u64);
        h.set_mtime(0);
        b.append_data(&mut h, name, text.as_bytes())?;
    }
    b.into_inner()
}

/// The Dockerfile of the host base image: the tar's content, nothing else.
const HOST_DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\n";

/// The build context (a tar holding a Dockerfile and `rootfs/`) and the tag of the host
/// base image for this layout and user. Pure: `workcell plan` shows the tag without a
/// daemon.
pub fn host_base(system: &[SystemEntry], user: UserSpec) -> Result<(String, Vec<u8>), std::io::Error> {
    let rootfs = host_rootfs_tar(system, user)?;
    let tag = format!("{HOST_REPO}:{}", &hex(&Sha256::digest(&rootfs))[..16]);
    // Re-root the rootfs entries under rootfs/ next to the Dockerfile.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(HOST_DOCKERFILE.len() as u64);
    h.set_mtime(0);
    b.append_data(&mut h, "Dockerfile", HOST_DOCKERFILE.as_bytes())?;
    let mut archive = tar::Archive::new(rootfs.as_slice());
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let mut header = entry.header().clone();
        let name = Path::new("rootfs").join(&path);
        if header.entry_type() == tar::EntryType::Symlink {
            let target = entry.link_name()?.map(|t| t.into_owned()).unwrap_or_default();
            b.append_link(&mut header, &name, &target)?;
        } else {
            b.append_data(&mut header, &name, &mut entry)?;
        }
    }
    Ok((tag, b.into_inner()?))
}

/// A Dockerfile folder's content hash and build context tar. Files are visited in sorted
/// order and hashed by relative path, mode and content (or link target), so a touched but
/// unchanged folder keeps its tag. `.git` is left out of the context.
pub fn folder_context(dir: &Path) -> Result<(String, Vec<u8>), std::io::Error> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    for rel in &files {
        let full = dir.join(rel);
        let meta = std::fs::symlink_metadata(&full)?;
        hasher.update(rel.to_string_lossy().as_bytes());
        hasher.update([0]);
        use std::os::unix::fs::PermissionsExt;
        hasher.update(meta.permissions().mode().to_le_bytes());
        if meta.file_type().is_symlink() {
            hasher.update(std::fs::read_link(&full)?.to_string_lossy().as_bytes());
        } else if meta.is_file() {
            hasher.update(std::fs::read(&full)?);
        }
        hasher.update([0]);
        b.append_path_with_name(&full, rel)?;
    }
    Ok((hex(&hasher.finalize())[..16].to_string(), b.into_inner()?))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), std::io::Error> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_name() == ".git" {
            continue;
        }
        let rel = path.strip_prefix(root).map(Path::to_path_buf).unwrap_or_else(|_| path.clone());
        let ft = entry.file_type()?;
        out.push(rel);
        if ft.is_dir() {
            collect(root, &path, out)?;
        }
    }
    Ok(())
}

/// Tag of the image built from `dir`: `workcell-build-<folder name>:<content hash>`.
pub fn folder_tag(dir: &Path, hash: &str) -> String {
    let base: String = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '-' })
        .collect();
    let base = base.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if base.is_empty() {
        format!("workcell-build:{hash}")
    } else {
        format!("workcell-build-{base}:{hash}")
    }
}

/// The image reference a plan will use, without contacting Docker (for `workcell plan`).
/// Reads a `build:` folder to hash it.
pub fn planned_image(plan: &LaunchPlan) -> Result<String, DockerError> {
    match &plan.image {
        ImageRef::Host => host_base(&plan.system, plan.user).map(|(t, _)| t).map_err(DockerError::HostBase),
        ImageRef::Named(n) => Ok(n.clone()),
        ImageRef::Build(dir) => folder_context(dir).map(|(h, _)| folder_tag(dir, &h)).map_err(|e| build_dir_error(dir, e)),
    }
}

fn build_dir_error(dir: &Path, source: std::io::Error) -> DockerError {
    DockerError::BuildFolder { dir: dir.to_path_buf(), source }
}

async fn exists(docker: &Docker, tag: &str) -> Result<bool, DockerError> {
    match docker.inspect_image(tag).await {
        Ok(_) => Ok(true),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(false),
        Err(e) => Err(DockerError::Api { what: format!("inspect image {tag}"), source: e }),
    }
}

/// Makes sure the plan's image exists locally and returns its reference: builds the host
/// base image or the `build:` folder when missing; refuses (never pulls) a missing named
/// image.
pub async fn ensure(docker: &Docker, plan: &LaunchPlan) -> Result<String, DockerError> {
    match &plan.image {
        ImageRef::Host => {
            let (tag, context) = host_base(&plan.system, plan.user).map_err(DockerError::HostBase)?;
            if !exists(docker, &tag).await? {
                build(docker, &tag, context, "host-base", None, "preparing the host base image").await?;
            }
            Ok(tag)
        }
        ImageRef::Named(name) => {
            if exists(docker, name).await? {
                Ok(name.clone())
            } else {
                Err(DockerError::Image(format!(
                    "the image '{name}' is not available locally, and workcell never pulls images (this machine may have no registry access). \
                     Build it with `docker build -t {name} DIR`, load it with `docker load -i FILE.tar`, \
                     or give the worker `build: images/NAME` (a Dockerfile folder) instead of `image:`"
                )))
            }
        }
        ImageRef::Build(dir) => {
            let (hash, context) = folder_context(dir).map_err(|e| build_dir_error(dir, e))?;
            let tag = folder_tag(dir, &hash);
            if !exists(docker, &tag).await? {
                if !dir.join("Dockerfile").is_file() {
                    return Err(DockerError::Image(format!("{} has no Dockerfile; a `build:` folder needs one", dir.display())));
                }
                let msg = format!("building {tag} from {}", dir.display());
                build(docker, &tag, context, "build", Some(dir), &msg).await?;
            }
            Ok(tag)
        }
    }
}

/// Builds `context` as `tag` with the classic builder, showing progress on stderr
/// (a spinner on a terminal, plain lines otherwise).
async fn build(docker: &Docker, tag: &str, context: Vec<u8>, kind: &str, source: Option<&Path>, message: &str) -> Result<(), DockerError> {
    let mut labels = HashMap::new();
    labels.insert(LABEL_MANAGED.to_string(), "true".to_string());
    labels.insert(LABEL_KIND.to_string(), kind.to_string());
    if let Some(s) = source {
        labels.insert(LABEL_SOURCE.to_string(), s.display().to_string());
    }
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(tag.to_string()),
        rm: true,
        forcerm: true,
        labels: Some(labels),
        // BuildKit needs a session; the classic builder works on every 20.10+ engine.
        version: BuilderVersion::BuilderV1,
        ..Default::default()
    };
    let term = std::io::stderr().is_terminal();
    let bar = if term { indicatif::ProgressBar::new_spinner() } else { indicatif::ProgressBar::hidden() };
    bar.set_message(message.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    if !term && kind == "build" {
        eprintln!("workcell: {message}");
    }
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    let mut log = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                    bar.finish_and_clear();
                    return Err(DockerError::Image(format!("building {tag} failed: {detail}\n{log}")));
                }
                if let Some(line) = info.stream {
                    let line = line.trim_end();
                    if !line.is_empty() {
                        if line.starts_with("Step ") {
                            bar.set_message(format!("{message}: {line}"));
                        }
                        log.push_str(line);
                        log.push('\n');
                    }
                }
            }
            Err(e) => {
                bar.finish_and_clear();
                return Err(DockerError::Image(format!("building {tag} failed: {}\n{log}", super::api_message(&e))));
            }
        }
    }
    bar.finish_and_clear();
    if !term && kind == "build" {
        eprintln!("workcell: built {tag}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Vec<SystemEntry> {
        vec![
            SystemEntry::Bind { path: "/usr".into() },
            SystemEntry::Symlink { path: "/bin".into(), target: "usr/bin".into() },
            SystemEntry::Bind { path: "/etc/ssl".into() },
            SystemEntry::Bind { path: "/etc/ld.so.cache".into() },
        ]
    }

    fn names(tar_bytes: &[u8]) -> Vec<String> {
        let mut a = tar::Archive::new(tar_bytes);
        a.entries().map(|es| es.filter_map(|e| e.ok()).map(|e| e.path().map(|p| p.display().to_string()).unwrap_or_default()).collect()).unwrap_or_default()
    }

    #[test]
    fn rootfs_has_layout_and_users() {
        let t = host_rootfs_tar(&layout(), UserSpec { uid: 1000, gid: 1001 }).unwrap();
        let n = names(&t);
        for want in ["tmp/", "etc/", "proc/", "dev/", "sys/", "bin", "etc/passwd", "etc/group"] {
            assert!(n.iter().any(|x| x == want), "{want} missing from {n:?}");
        }
        // The bind target /usr itself is left to Docker; its parent / exists anyway.
        assert!(!n.iter().any(|x| x == "usr/"));
        let mut a = tar::Archive::new(t.as_slice());
        let mut passwd = String::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            if e.path().unwrap().to_str() == Some("etc/passwd") {
                std::io::Read::read_to_string(&mut e, &mut passwd).unwrap();
            }
        }
        assert!(passwd.contains(":1000:1001:"), "{passwd}");
        assert!(passwd.starts_with("root:"));
        assert!(passwd.contains("nobody"));
    }

    #[test]
    fn tag_is_stable_and_depends_on_content() {
        let u = UserSpec { uid: 1000, gid: 1000 };
        let (a, _) = host_base(&layout(), u).unwrap();
        let (b, _) = host_base(&layout(), u).unwrap();
        assert_eq!(a, b);
        let (c, _) = host_base(&layout(), UserSpec { uid: 1001, gid: 1000 }).unwrap();
        assert_ne!(a, c);
        assert!(a.starts_with("workcell-host:"));
    }

    #[test]
    fn folder_hash_ignores_mtime_but_not_content() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        let (h1, ctx) = folder_context(d.path()).unwrap();
        assert!(names(&ctx).contains(&"Dockerfile".to_string()));
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        assert_eq!(folder_context(d.path()).unwrap().0, h1);
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\nENV A=1\n").unwrap();
        assert_ne!(folder_context(d.path()).unwrap().0, h1);
    }

    #[test]
    fn folder_tags_are_valid_references() {
        assert_eq!(folder_tag(Path::new("/p/images/My Python"), "abc"), "workcell-build-my-python:abc");
        assert_eq!(folder_tag(Path::new("/"), "abc"), "workcell-build:abc");
    }
}
