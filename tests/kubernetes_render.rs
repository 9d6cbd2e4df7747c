//! `workcell plan --backend kubernetes`, no cluster needed (none is ever contacted): snapshots
//! of the manifests several workers get (zones ro/rw, network off / rules / on, a derived
//! child's narrowed zones, gVisor, copy delivery, a named image), the refusals, and the
//! YAML checked against Kubernetes' own schemas, strictly, for several versions, by the
//! PyPI package `kubernetes-validate` (required in CI; `.ci/run` installs it).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use support::write_project;

/// The Kubernetes versions the manifests must validate against (the package ships 1.25 to
/// its own release's; these are two still in wide use and the newest it knows here).
const VERSIONS: &[&str] = &["1.29.0", "1.31.0", "1.37.0"];

const PROJECT: &str = "\
sandbox:
  zones:
    data: {path: ./data, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
    scratch: {path: ./scratch, mode: rw, delivery: copy}
  network: {allow: [pypi.org, \"*.pythonhosted.org\"], deny: [upload.pypi.org]}
kubernetes:
  namespace: agents
  image: registry.example/workcell-tools:1.0
  zones:
    data: {claim: project-data}
    out: {claim: project-out}
    scratch: {claim: project-scratch}
  runtime_classes: {runsc: gvisor}
";

const WORKERS: &[(&str, &str)] = &[
    ("reader", "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\nnetwork: false\ncommand: [ls, /data]\n---\n"),
    (
        "writer",
        "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\nnetwork: false\ncommand: [sh, -c, 'echo \"$HOME $(id -u)\" > /out/who']\nenv: {MODE: fast, PRICE: \"$(NOT_EXPANDED)\"}\nlimits: {timeout: 90s, memory: 128m, cpus: 0.5, pids: 32}\n---\n",
    ),
    ("child", "---\nsandbox:\n  allow_read: [/data/docs]\n  allow_write: [/out/results]\nnetwork: false\ncommand: [ls, /data/docs]\n---\n"),
    ("grower", "---\nsandbox:\n  allow_read: [/data/docs]\n  allow_write: [/out/later]\nnetwork: false\ncommand: [touch, /out/later/x]\n---\n"),
    ("fetcher", "---\nsandbox:\n  zones:\n    - {name: out, mode: rw}\ncommand: [pip, download, -d, /out, requests]\n---\n"),
    ("gvisor", "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\nnetwork: false\nruntime: runsc\ncommand: [uname, -a]\n---\n"),
    ("copier", "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: scratch, mode: rw}\nnetwork: false\ncommand: [make, -C, /scratch]\n---\n"),
    ("named", "---\nimage: python:3.12-slim\nsandbox:\n  zones:\n    - {name: data, mode: ro}\nnetwork: false\ncommand: [python3, -V]\n---\n"),
];

/// A second project: the network on, no image for `host` workers, a zone without a claim.
const OPEN_PROJECT: &str = "\
sandbox:
  zones:
    logs: {path: ./logs, mode: ro}
  network: true
";

const OPEN_WORKERS: &[(&str, &str)] = &[
    ("online", "---\nimage: alpine:3.20\ncommand: [wget, -qO-, https://example.com]\n---\n"),
    ("host", "---\ncommand: [true]\n---\n"),
    ("logs", "---\nimage: alpine:3.20\nsandbox:\n  zones:\n    - {name: logs, mode: ro}\ncommand: [ls, /logs]\n---\n"),
];

fn project(config: &str, workers: &[(&str, &str)], dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    for d in dirs {
        std::fs::create_dir_all(dir.join(d)).expect("mkdir");
    }
    write_project(&dir, config, workers);
    (tmp, dir)
}

fn main_project() -> (tempfile::TempDir, PathBuf) {
    project(PROJECT, WORKERS, &["data/docs", "out/results", "scratch"])
}

fn workcell(dir: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("workcell").expect("bin").current_dir(dir).args(args).output().expect("run workcell")
}

/// The manifests of `worker` as YAML text and as the `--json` List.
fn render(dir: &Path, worker: &str) -> (String, serde_json::Value) {
    let yaml = workcell(dir, &["plan", "--backend", "kubernetes", worker]);
    assert!(yaml.status.success(), "{worker}: {}", String::from_utf8_lossy(&yaml.stderr));
    let json = workcell(dir, &["plan", "--backend", "kubernetes", "--json", worker]);
    assert!(json.status.success(), "{worker}: {}", String::from_utf8_lossy(&json.stderr));
    (String::from_utf8(yaml.stdout).expect("utf-8"), serde_json::from_slice(&json.stdout).expect("json"))
}

/// What differs between machines and runs: the run id, the project directory and its name,
/// the worker's uid and gid.
fn redact(v: &mut serde_json::Value, dir: &str) {
    use serde_json::Value;
    match v {
        Value::String(s) if s.contains(dir) => *s = s.replace(dir, "[PROJECT]"),
        Value::Array(a) => a.iter_mut().for_each(|x| redact(x, dir)),
        Value::Object(o) => {
            for k in ["runAsUser", "runAsGroup"] {
                if o.contains_key(k) {
                    o.insert(k.into(), "[ID]".into());
                }
            }
            if o.contains_key("workcell.dev/project") {
                o.insert("workcell.dev/project".into(), "[PROJECT NAME]".into());
            }
            o.values_mut().for_each(|x| redact(x, dir));
        }
        _ => {}
    }
}

/// The run id of a rendered List (its Job's run label).
fn run_id(list: &serde_json::Value) -> String {
    let job = job(list);
    job["metadata"]["labels"]["workcell.dev/run"].as_str().expect("run label").to_string()
}

fn job(list: &serde_json::Value) -> &serde_json::Value {
    list["items"].as_array().expect("items").iter().find(|o| o["kind"] == "Job").expect("a Job")
}

fn redacted(list: &serde_json::Value, dir: &Path) -> serde_json::Value {
    let id = run_id(list);
    let text = serde_json::to_string(list).expect("json").replace(&id, "[RUN_ID]");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    redact(&mut v, &dir.display().to_string());
    v
}

#[test]
fn manifests_of_each_worker() {
    let (_tmp, dir) = main_project();
    for (w, _) in WORKERS {
        let (_, list) = render(&dir, w);
        insta::assert_json_snapshot!(format!("k8s_{w}"), redacted(&list, &dir));
    }
    let (_tmp2, open) = project(OPEN_PROJECT, OPEN_WORKERS, &["logs"]);
    let (_, list) = render(&open, "online");
    insta::assert_json_snapshot!("k8s_online", redacted(&list, &open));
}

/// The text a person pipes into `kubectl apply`, for one worker.
#[test]
fn yaml_as_printed() {
    let (_tmp, dir) = main_project();
    let (yaml, list) = render(&dir, "writer");
    let pod = &job(&list)["spec"]["template"]["spec"]["securityContext"];
    let (uid, gid) = (pod["runAsUser"].to_string(), pod["runAsGroup"].to_string());
    let project_name = job(&list)["metadata"]["labels"]["workcell.dev/project"].as_str().expect("project label").to_string();
    // Each render has a run id of its own: the YAML's is named in its first comment.
    let yaml_id = yaml.split("job/workcell-writer-").nth(1).expect("job name in the header")[..16].to_string();
    let text = yaml
        .replace(&yaml_id, "[RUN_ID]")
        .replace(&dir.display().to_string(), "[PROJECT]")
        .replace(&format!("workcell.dev/project: {project_name}"), "workcell.dev/project: '[PROJECT NAME]'")
        .replace(&format!("runAsUser: {uid}"), "runAsUser: '[ID]'")
        .replace(&format!("runAsGroup: {gid}"), "runAsGroup: '[ID]'");
    insta::assert_snapshot!("k8s_writer_yaml", text);
}

/// The hardening every Job carries, whatever the worker.
#[test]
fn every_job_is_hardened() {
    let (_tmp, dir) = main_project();
    for (w, _) in WORKERS {
        let (_, list) = render(&dir, w);
        let job = job(&list);
        assert_eq!(job["spec"]["backoffLimit"], 0, "{w}");
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never", "{w}");
        assert_eq!(pod["automountServiceAccountToken"], false, "{w}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{w}");
        assert_ne!(pod["securityContext"]["runAsUser"], 0, "{w}");
        let containers = pod["containers"].as_array().into_iter().flatten().chain(pod["initContainers"].as_array().into_iter().flatten());
        for c in containers {
            let s = &c["securityContext"];
            assert_eq!(s["allowPrivilegeEscalation"], false, "{w}");
            assert_eq!(s["capabilities"]["drop"], serde_json::json!(["ALL"]), "{w}");
            assert_eq!(s["readOnlyRootFilesystem"], true, "{w}");
            assert_eq!(s["runAsNonRoot"], true, "{w}");
            assert_eq!(s["seccompProfile"]["type"], "RuntimeDefault", "{w}");
        }
        let tmp = pod["volumes"].as_array().expect("volumes").iter().find(|v| v["name"] == "tmp-0").expect("/tmp volume");
        assert_eq!(tmp["emptyDir"]["medium"], "Memory", "{w}");
    }
}

#[test]
fn network_policy_follows_the_plan() {
    let (_tmp, dir) = main_project();
    let policy = |list: &serde_json::Value| list["items"].as_array().expect("items").iter().find(|o| o["kind"] == "NetworkPolicy").expect("policy").clone();
    let (_, off) = render(&dir, "reader");
    assert_eq!(policy(&off)["spec"]["egress"], serde_json::json!([]));
    assert_eq!(policy(&off)["spec"]["ingress"], serde_json::json!([]));
    let (_, rules) = render(&dir, "fetcher");
    let kinds: Vec<&str> = rules["items"].as_array().expect("items").iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(kinds, ["Service", "NetworkPolicy", "Job"], "the Service first: its variables reach only pods started after it");
    let egress = &policy(&rules)["spec"]["egress"];
    assert_eq!(egress[0]["to"][0]["podSelector"]["matchLabels"]["workcell.dev/egress-proxy"], "true");
    assert_eq!(egress[0]["ports"], serde_json::json!([{"protocol": "TCP", "port": 3128}]));
    assert_eq!(egress.as_array().map(Vec::len), Some(1), "nothing but the proxy: {egress}");
    let annotations = &job(&rules)["metadata"]["annotations"];
    let described = annotations["workcell.dev/egress-rules"].as_str().expect("rules annotation");
    assert!(described.contains("pypi.org") && described.contains("upload.pypi.org"), "{described}");
    let (_tmp2, open) = project(OPEN_PROJECT, OPEN_WORKERS, &["logs"]);
    let (_, on) = render(&open, "online");
    assert_eq!(policy(&on)["spec"]["egress"], serde_json::json!([{}]));
}

#[test]
fn a_derived_child_mounts_only_its_subdirectories() {
    let (_tmp, dir) = main_project();
    let (_, list) = render(&dir, "child");
    let mounts = &job(&list)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    let zones: Vec<(String, String, bool)> = mounts
        .as_array()
        .expect("mounts")
        .iter()
        .filter(|m| m["name"] != "tmp-0")
        .map(|m| (m["mountPath"].as_str().unwrap_or("").into(), m["subPath"].as_str().unwrap_or("").into(), m["readOnly"].as_bool().unwrap_or(false)))
        .collect();
    assert_eq!(zones, [("/data/docs".into(), "docs".into(), true), ("/out/results".into(), "results".into(), false)]);
}

/// A directory granted for writing that does not exist on the host yet (a run would create
/// it) is mounted all the same: on a cluster the claim decides, and the kubelet makes a
/// missing `subPath`.
#[test]
fn a_granted_directory_not_made_yet_is_mounted() {
    let (_tmp, dir) = main_project();
    assert!(!dir.join("out/later").exists());
    let (_, list) = render(&dir, "grower");
    let mounts = &job(&list)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    let later = mounts.as_array().expect("mounts").iter().find(|m| m["mountPath"] == "/out/later").expect("/out/later mounted");
    assert_eq!(later["subPath"], "later");
    assert_eq!(later["readOnly"], false);
    let env = job(&list)["spec"]["template"]["spec"]["containers"][0]["env"].as_array().expect("env").clone();
    let zones = env.iter().find(|e| e["name"] == "WORKCELL_ZONES").expect("WORKCELL_ZONES");
    assert_eq!(zones["value"], "/data/docs:ro,/out/later:rw");
    assert!(!dir.join("out/later").exists(), "plan creates nothing");
}

/// A person's text stays literal: the kubelet would expand `$(NAME)` in args and env.
#[test]
fn dollars_reach_the_worker_unexpanded() {
    let (_tmp, dir) = main_project();
    let (_, list) = render(&dir, "writer");
    let c = &job(&list)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"][2], "echo \"$$HOME $$(id -u)\" > /out/who");
    let price = c["env"].as_array().expect("env").iter().find(|e| e["name"] == "PRICE").expect("PRICE");
    assert_eq!(price["value"], "$$(NOT_EXPANDED)");
}

/// The copy delivery's init container, run here for real on two directories: it copies the
/// claim's contents, hidden files and subdirectories included.
#[test]
fn the_copy_command_copies_everything() {
    let (_tmp, dir) = main_project();
    let (_, list) = render(&dir, "copier");
    let init = &job(&list)["spec"]["template"]["spec"]["initContainers"][0];
    let mounts = init["volumeMounts"].as_array().expect("mounts");
    assert_eq!(mounts[0]["readOnly"], true, "the claim is read-only to the copy");
    let (source_at, copy_at) = (mounts[0]["mountPath"].as_str().expect("source"), mounts[1]["mountPath"].as_str().expect("copy"));
    let work = tempfile::tempdir().expect("tempdir");
    let (source, copy) = (work.path().join("source"), work.path().join("copy"));
    std::fs::create_dir_all(source.join("sub")).expect("mkdir");
    std::fs::create_dir_all(&copy).expect("mkdir");
    std::fs::write(source.join(".hidden"), "h").expect("write");
    std::fs::write(source.join("sub/file"), "f").expect("write");
    let argv: Vec<String> = init["command"]
        .as_array()
        .expect("command")
        .iter()
        .map(|a| a.as_str().expect("arg").replace(source_at, &source.display().to_string()).replace(copy_at, &copy.display().to_string()))
        .collect();
    let status = StdCommand::new(&argv[0]).args(&argv[1..]).status().expect("cp");
    assert!(status.success(), "{argv:?}");
    assert_eq!(std::fs::read_to_string(copy.join(".hidden")).expect("hidden copied"), "h");
    assert_eq!(std::fs::read_to_string(copy.join("sub/file")).expect("subdirectory copied"), "f");
    let worker_mount = job(&list)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == "/scratch")
        .expect("/scratch")
        .clone();
    assert_eq!(worker_mount["name"], mounts[1]["name"], "the worker gets the copy, not the claim");
}

#[test]
fn refusals_say_what_to_set() {
    let (_tmp, open) = project(OPEN_PROJECT, OPEN_WORKERS, &["logs"]);
    let out = workcell(&open, &["plan", "--backend", "kubernetes", "host"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("image: host") && err.contains("kubernetes: {image: IMAGE}"), "{err}");
    let out = workcell(&open, &["plan", "--backend", "kubernetes", "logs"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("zone 'logs' has no volume") && err.contains("claim: PVC_NAME"), "{err}");
    for args in [&["run", "--backend", "kubernetes", "online"][..], &["mcp", "--backend", "kubernetes"][..]] {
        let out = workcell(&open, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("rendered only") && err.contains("workcell plan --backend kubernetes"), "{args:?}: {err}");
    }
}

#[test]
fn config_errors_point_at_the_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    let load = |text: &str| workcell::config::Project::from_text(text, &dir.join("workcell.yaml"), dir).expect_err("refused");
    let zones = "sandbox:\n  zones:\n    data: {path: ./data}\n";
    let cases = [
        ("kubernetes:\n  zones:\n    nope: {claim: c}\n", 6, "not a zone of this project; zones: data"),
        ("kubernetes:\n  namespace: Team_A\n", 5, "kubernetes.namespace 'Team_A' may hold only lowercase"),
        ("kubernetes:\n  zones:\n    data: {claim: \"\"}\n", 6, "is empty"),
        ("kubernetes:\n  image: host\n", 5, "a cluster does not have"),
        ("kubernetes:\n  runtime_classes: {runsc: gVisor}\n", 5, "RuntimeClass name 'gVisor'"),
        ("kubernetes:\n  bogus: 1\n", 5, "unknown field `bogus`"),
        ("defaults:\n  backend: kubernetes\n", 5, "unknown variant `kubernetes`"),
    ];
    for (text, line, words) in cases {
        let e = load(&format!("{zones}{text}"));
        assert_eq!(e.line, line, "{text}: {e}");
        assert!(e.message.contains(words), "{text}: {e}");
    }
}

#[test]
fn schema_has_the_kubernetes_section() {
    let out = workcell(Path::new("."), &["schema"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("schema json");
    let defs = &v["workcell.yaml"]["$defs"];
    for key in ["namespace", "image", "zones", "runtime_classes"] {
        assert!(defs["RawKubernetes"]["properties"].get(key).is_some(), "{key} in {}", defs["RawKubernetes"]);
    }
    assert_eq!(defs["RawKubernetesZone"]["required"], serde_json::json!(["claim"]));
}

/// Whether `kubernetes-validate` can be imported; in CI it must be.
fn validator_ready() -> bool {
    support::python_ready(&["kubernetes_validate", "yaml"])
}

/// Runs `kubernetes-validate --strict` on `file` for every version; its output on failure.
fn validate(file: &Path) -> Result<(), String> {
    let mut cmd = StdCommand::new(support::python());
    cmd.args(["-m", "kubernetes_validate", "--strict"]);
    for v in VERSIONS {
        cmd.args(["-k", v]);
    }
    let out = cmd.arg(file).output().expect("python3");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(())
    } else {
        Err(text)
    }
}

#[test]
fn manifests_validate_against_kubernetes_schemas() {
    if !validator_ready() {
        return;
    }
    let (_tmp, dir) = main_project();
    let (_tmp2, open) = project(OPEN_PROJECT, OPEN_WORKERS, &["logs"]);
    let out = tempfile::tempdir().expect("tempdir");
    let rendered = WORKERS.iter().map(|(w, _)| (&dir, *w)).chain([(&open, "online")]);
    for (project, w) in rendered {
        let (yaml, list) = render(project, w);
        let file = out.path().join(format!("{w}.yaml"));
        std::fs::write(&file, &yaml).expect("write yaml");
        validate(&file).unwrap_or_else(|e| panic!("{w}: the rendered YAML does not validate:\n{e}\n{yaml}"));
        // The --json List too: its items, one document each.
        let items: Vec<String> = list["items"].as_array().expect("items").iter().map(|o| serde_json::to_string(o).expect("json")).collect();
        let file = out.path().join(format!("{w}.json.yaml"));
        std::fs::write(&file, items.join("\n---\n")).expect("write");
        validate(&file).unwrap_or_else(|e| panic!("{w}: the --json items do not validate:\n{e}"));
    }
}

/// The validator is able to fail: a field the schema does not have is refused in strict mode.
#[test]
fn the_validator_refuses_an_unknown_field() {
    if !validator_ready() {
        return;
    }
    let (_tmp, dir) = main_project();
    let (yaml, _) = render(&dir, "writer");
    let out = tempfile::tempdir().expect("tempdir");
    let file = out.path().join("bad.yaml");
    std::fs::write(&file, yaml.replace("backoffLimit: 0", "backoffLimit: 0\n  retries: 3")).expect("write");
    let e = validate(&file).expect_err("an unknown field must not validate");
    assert!(e.contains("retries"), "{e}");
}

/// Values a YAML 1.1 reader (kubectl's, PyYAML) would take for booleans, numbers, dates or
/// nulls, long lines and several lines: read back with PyYAML, the YAML is exactly the
/// `--json` List, every value still a string.
#[test]
fn yaml_reads_back_as_rendered() {
    if !validator_ready() {
        return;
    }
    let tricky = [
        "yes",
        "on",
        "off",
        "y",
        "n",
        "no",
        "null",
        "~",
        "true",
        "0o17",
        "010",
        "0x1f",
        "1_000",
        "1:20",
        "1e3",
        ".inf",
        "2001-12-14",
        "-",
        "- a",
        "a: b",
        "#c",
        "*x",
        "&x",
        "!x",
        "%x",
        "@x",
        " lead",
        "trail ",
        "",
    ];
    let env: Vec<String> = tricky.iter().enumerate().map(|(i, v)| format!("  V{i}: {}\n", serde_json::to_string(v).expect("json"))).collect();
    let long = "word ".repeat(40);
    let worker = format!("---\nimage: \"yes\"\ncommand: [sh, -c, \"{long}\", \"two\\nlines\\n\", \"0123\"]\nenv:\n{}---\n", env.concat());
    let (_tmp, dir) = project("kubernetes: {namespace: \"on\"}\n", &[("y", &worker)], &[]);
    let (yaml, list) = render(&dir, "y");
    // Two renders, two run ids: the YAML's (named in its header) becomes the List's.
    let yaml_id = yaml.split("job/workcell-y-").nth(1).expect("job name in the header")[..16].to_string();
    let yaml = yaml.replace(&yaml_id, &run_id(&list));
    let out = StdCommand::new(support::python())
        .args(["-c", "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d is not None]))"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(yaml.as_bytes())?;
            child.wait_with_output()
        })
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(&read, &list["items"], "the YAML reads back differently:\n{yaml}");
}
