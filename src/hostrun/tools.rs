//! Protection by tool: the programs a person runs routinely on the host that run code they
//! find in a folder, what they run, every path they read to decide what to run, and the
//! routine command that makes them do it. A protected *file name* means nothing on its own;
//! what matters is that `git commit`, `make` or `cargo --version` in the folder afterwards
//! runs nothing the worker wrote, so each row lists every name its tool reads.
//!
//! [`TOOLS`] is the one table: the default entries are its [`Scope::Always`] rows,
//! `protect: [Makefile]` brings in its [`Scope::Family`] rows ([`family`]), and
//! `docs/configuration.md` shows the same rows (a test keeps the two equal).
//!
//! A path may hold `{a,b}` alternatives (`lefthook{,-local}.{yml,yaml}`): written once here
//! and in the docs, it becomes one plain name per alternative ([`expand`]), which the matcher
//! compares by name instead of building a glob for it.

/// When a row's paths are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In every writable zone, by default (`unprotect:` turns one off for a zone).
    Always,
    /// When the person protects one of these manifests (`protect: [Makefile]`): the row's
    /// paths are what changes how that manifest's commands run, beside it.
    Family(&'static [&'static str]),
    /// Like [`Scope::Family`], for a tool that reads its paths in the manifest's folder *and
    /// every folder above it* (yarn merges each `.yarnrc.yml` up to `/`; a workspace's
    /// `.npmrc`, `.pnpmfile.cjs` and lock file lie in its root): protected at any depth, so a
    /// worker's file one folder up is covered too.
    FamilyAbove(&'static [&'static str]),
    /// Only where a zone is a home directory (start-up files, `PATH` folders, command-line
    /// tools' own configuration).
    Home,
}

/// One tool that runs what it finds in a folder.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// The tool, as the person knows it.
    pub tool: &'static str,
    /// What it runs, and which setting or file makes it.
    pub runs: &'static str,
    /// Every path it reads to decide what to run (entries: relative, at any depth).
    pub paths: &'static [&'static str],
    /// The routine command that makes it run them.
    pub trigger: &'static str,
    pub scope: Scope,
}

/// The manifests of a JavaScript package: protecting one protects how its scripts run.
const PACKAGE: &[&str] = &["package.json"];
/// What GNU make reads, first found first: protecting one protects all three, or a worker's
/// `GNUmakefile` would be read instead of the person's protected `Makefile`.
const MAKEFILES: &[&str] = &["GNUmakefile", "makefile", "Makefile"];

/// Every tool workcell protects a folder against.
pub const TOOLS: &[Tool] = &[
    Tool {
        tool: "git",
        runs: "hooks, and the commands its config names (`core.fsmonitor`, `core.sshCommand`, `core.pager`, filters); a `.git` file or `commondir` sends it to another git directory",
        paths: &[
            ".git",
            ".git/hooks",
            ".git/config",
            ".git/config.worktree",
            ".git/commondir",
            ".git/worktrees/*/commondir",
            ".git/worktrees/*/config.worktree",
            ".git/modules/**/config",
            ".git/modules/**/hooks",
        ],
        trigger: "`git status`, `git commit`, a prompt that shows the branch",
        scope: Scope::Always,
    },
    Tool {
        tool: "git (submodules, user configuration)",
        runs: "`submodule.*.update = !command`; a user configuration's commands",
        paths: &[".gitmodules", ".gitconfig", ".config/git"],
        trigger: "`git submodule update`; any git command with the folder as `HOME`",
        scope: Scope::Always,
    },
    Tool {
        tool: "husky",
        runs: "`.husky/<hook>`: husky 9 sets `core.hooksPath = .husky/_`, whose stubs source `.husky/_/h`, which runs the hook one folder up",
        paths: &[".husky"],
        trigger: "`git commit`, `git push`",
        scope: Scope::Always,
    },
    Tool {
        tool: "pre-commit",
        runs: "the hooks its configuration lists (a `repo: local` hook runs any command)",
        paths: &[".pre-commit-config.yaml"],
        trigger: "`git commit` once `pre-commit install` ran",
        scope: Scope::Always,
    },
    Tool {
        tool: "lefthook",
        runs: "the commands and scripts its configuration lists, the local one merged in, scripts from `.lefthook/` and `.lefthook-local/`",
        paths: &[
            "lefthook{,-local}.{yml,yaml,toml,json,jsonc}",
            ".lefthook{,-local}.{yml,yaml,toml,json,jsonc}",
            ".config/lefthook{,-local}.{yml,yaml,toml,json,jsonc}",
            ".lefthook",
            ".lefthook-local",
        ],
        trigger: "`git commit` once `lefthook install` ran",
        scope: Scope::Always,
    },
    Tool {
        tool: "rustup",
        runs: "`[toolchain] path = DIR`: `DIR/bin/cargo`, `rustc` instead of the installed ones",
        paths: &["rust-toolchain", "rust-toolchain.toml"],
        trigger: "`cargo --version`, any `cargo` or `rustc` in the folder or below, rust-analyzer opening it",
        scope: Scope::Always,
    },
    Tool {
        tool: "cargo",
        runs: "`build.rustc-wrapper`, `build.rustc`, `target.*.runner`, `[alias]`, `[env]`",
        paths: &[".cargo/config.toml", ".cargo/config"],
        trigger: "`cargo build`, `cargo check`, `cargo run` in the folder or below (rust-analyzer runs `cargo check`)",
        scope: Scope::Always,
    },
    Tool {
        tool: "direnv",
        runs: "`.envrc` as shell code, once allowed (a changed file is asked again)",
        paths: &[".envrc"],
        trigger: "`cd` into the folder",
        scope: Scope::Always,
    },
    Tool {
        tool: "VS Code",
        runs: "tasks with `runOn: folderOpen`, programs its settings name",
        paths: &[".vscode"],
        trigger: "opening the folder",
        scope: Scope::Always,
    },
    Tool {
        tool: "JetBrains IDEs",
        runs: "startup tasks, run configurations, tools its settings name",
        paths: &[".idea"],
        trigger: "opening the project",
        scope: Scope::Always,
    },
    Tool {
        tool: "vim, neovim",
        runs: "Ex commands and Lua from the folder when `exrc` is set (neovim asks to trust a file first)",
        paths: &[".exrc", "_exrc", ".vimrc", "_vimrc", ".nvimrc", ".nvim.lua"],
        trigger: "`vim` or `nvim` in the folder",
        scope: Scope::Always,
    },
    Tool {
        tool: "Claude Code",
        runs: "hooks in its settings, MCP servers' commands",
        paths: &[".claude", ".mcp.json"],
        trigger: "`claude` in the folder",
        scope: Scope::Always,
    },
    Tool {
        tool: "OpenAI Codex",
        runs: "MCP servers, `notify` and other commands of a project's `config.toml`",
        paths: &[".codex"],
        trigger: "`codex` in the folder",
        scope: Scope::Always,
    },
    Tool {
        tool: "Gemini CLI, Cursor",
        runs: "MCP servers' commands, hooks in their settings",
        paths: &[".gemini", ".cursor"],
        trigger: "`gemini` in the folder, opening it in Cursor",
        scope: Scope::Always,
    },
    Tool {
        tool: "Dev Containers (VS Code, `devcontainer` CLI)",
        runs: "`initializeCommand` on the host, before the container is made",
        paths: &[".devcontainer", ".devcontainer.json"],
        trigger: "opening the folder in VS Code (it offers to reopen it in the container), `devcontainer up`",
        scope: Scope::Always,
    },
    Tool {
        tool: "Zed",
        runs: "language servers and tasks its project settings name",
        paths: &[".zed"],
        trigger: "opening the folder in Zed",
        scope: Scope::Always,
    },
    Tool {
        tool: "mise",
        runs: "`_.source` scripts of `[env]`, `[hooks]` and tasks of its configuration (once the file is trusted; trust is by path)",
        paths: &["mise.toml", "mise.*.toml", ".mise.toml", ".mise.*.toml", "mise/config.toml", ".mise", ".config/mise", ".config/mise.toml"],
        trigger: "`cd` into the folder with mise active in the shell",
        scope: Scope::Always,
    },
    Tool {
        tool: "bash, zsh, fish",
        runs: "their start-up files",
        paths: &[
            ".bashrc",
            // Debian's and Ubuntu's `.bashrc` source it; Fedora's sources every file of `.bashrc.d`.
            ".bash_aliases",
            ".bashrc.d",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".profile",
            ".zshrc",
            ".zprofile",
            ".zshenv",
            ".zlogin",
            ".zlogout",
            // fish runs `config.fish`, `conf.d/*` and autoloads `functions/*`.
            ".config/fish",
        ],
        trigger: "a new shell with the folder as `HOME`",
        scope: Scope::Always,
    },
    Tool {
        tool: "ssh",
        runs: "`ProxyCommand`, `LocalCommand`, `Match exec` of `config`; sshd runs `rc` at login; `authorized_keys` lets in",
        paths: &[".ssh"],
        trigger: "`git fetch` over ssh, `ssh`",
        scope: Scope::Always,
    },
    Tool {
        tool: "make",
        runs: "the recipes of the first of `GNUmakefile`, `makefile`, `Makefile` it finds",
        paths: MAKEFILES,
        trigger: "`make`",
        scope: Scope::Family(MAKEFILES),
    },
    Tool {
        tool: "npm",
        runs: "`script-shell=` runs every script, `node-options=--require`; the lock file names the tarball whose install scripts `npm ci` runs",
        paths: &[".npmrc", "package-lock.json", "npm-shrinkwrap.json"],
        trigger: "`npm test`, `npm run`, `npm ci`",
        scope: Scope::FamilyAbove(PACKAGE),
    },
    Tool {
        tool: "yarn",
        runs: "`yarnPath` / `yarn-path`: a JavaScript file instead of yarn itself; plugins; the PnP loader every script requires",
        paths: &[".yarnrc", ".yarnrc.yml", ".yarn/releases", ".yarn/plugins", ".pnp.cjs", ".pnp.loader.mjs", "yarn.lock"],
        trigger: "any `yarn` command",
        scope: Scope::FamilyAbove(PACKAGE),
    },
    Tool {
        tool: "pnpm",
        runs: "`.pnpmfile.cjs` hooks; settings of `pnpm-workspace.yaml` (a pnpmfile elsewhere)",
        paths: &[".pnpmfile.cjs", "pnpm-workspace.yaml", "pnpm-lock.yaml"],
        trigger: "`pnpm install`",
        scope: Scope::FamilyAbove(PACKAGE),
    },
    Tool {
        tool: "bun",
        runs: "`preload` scripts of `bunfig.toml`",
        paths: &["bunfig.toml", "bun.lock", "bun.lockb"],
        trigger: "`bun run`, `bun test`",
        scope: Scope::FamilyAbove(PACKAGE),
    },
    // Rows that matter only in a home directory (`Scope::Home`, `super::home`).
    Tool {
        tool: "login shells' `PATH`",
        runs: "programs in the folders the stock `~/.profile` (Debian, Ubuntu) and `~/.bashrc` (Fedora) put first on `PATH` when they exist, and the one `go install` fills",
        paths: &["bin", ".local/bin", "go/bin"],
        trigger: "any command in a new login shell (`git`, `ls`)",
        scope: Scope::Home,
    },
    Tool {
        tool: "rustup (home)",
        runs: "`~/.cargo/env`, sourced by the start-up files rustup edits, puts `~/.cargo/bin` first on `PATH`",
        paths: &[".cargo/bin", ".cargo/env", ".cargo/env.fish"],
        trigger: "a new shell, then `cargo`, `rustc`",
        scope: Scope::Home,
    },
    Tool {
        tool: "husky (home)",
        runs: "`~/.config/husky/init.sh`, sourced by husky 9's `.husky/_/h` before every hook; `~/.huskyrc`, sourced by husky 7 and 8's `husky.sh`",
        paths: &[".config/husky", ".huskyrc"],
        trigger: "`git commit`, `git push` in any repository that uses husky",
        scope: Scope::Home,
    },
    Tool {
        tool: "nvm",
        runs: "`nvm.sh`, sourced by the line nvm adds to `~/.bashrc`",
        paths: &[".nvm/nvm.sh"],
        trigger: "a new shell",
        scope: Scope::Home,
    },
    Tool {
        tool: "bash-completion",
        runs: "`~/.bash_completion` in every interactive bash; a command's completion file on its first Tab",
        paths: &[".bash_completion", ".local/share/bash-completion"],
        trigger: "a new shell, Tab",
        scope: Scope::Home,
    },
    Tool {
        tool: "ksh, mksh, csh, tcsh",
        runs: "their start-up files",
        paths: &[".kshrc", ".mkshrc", ".cshrc", ".tcshrc", ".login"],
        trigger: "a new shell of theirs",
        scope: Scope::Home,
    },
    Tool {
        tool: "readline",
        runs: "a key bound to a macro types the worker's command line",
        paths: &[".inputrc"],
        trigger: "a key in bash, python, psql",
        scope: Scope::Home,
    },
    Tool {
        tool: "vim, neovim (home)",
        runs: "`~/.vim/vimrc`, every `plugin/` script, neovim's `init.lua` and packages, gvim's `.gvimrc`",
        paths: &[".vim", ".gvimrc", ".config/vim", ".config/nvim", ".local/share/nvim/site"],
        trigger: "`vim`, `nvim` anywhere",
        scope: Scope::Home,
    },
    Tool {
        tool: "emacs",
        runs: "its init file",
        paths: &[".emacs", ".emacs.d", ".config/emacs"],
        trigger: "`emacs` anywhere",
        scope: Scope::Home,
    },
    Tool {
        tool: "tmux",
        runs: "`run-shell`, `if-shell` of its configuration",
        paths: &[".tmux.conf", ".config/tmux"],
        trigger: "`tmux` (a new server)",
        scope: Scope::Home,
    },
    Tool {
        tool: "GNU screen",
        runs: "`exec` and `screen cmd` of `.screenrc`",
        paths: &[".screenrc"],
        trigger: "`screen`",
        scope: Scope::Home,
    },
    Tool {
        tool: "aws CLI",
        runs: "`credential_process` of `config`",
        paths: &[".aws"],
        trigger: "any `aws` command, an SDK's first call",
        scope: Scope::Home,
    },
    Tool {
        tool: "kubectl",
        runs: "a kube config's `exec` credential plugin",
        paths: &[".kube"],
        trigger: "any `kubectl` command",
        scope: Scope::Home,
    },
    Tool {
        tool: "docker CLI",
        runs: "the credential helper `config.json` names; plugins in `cli-plugins/`",
        paths: &[".docker"],
        trigger: "`docker pull`, `docker compose`, `docker buildx`",
        scope: Scope::Home,
    },
    Tool {
        tool: "gpg",
        runs: "`pinentry-program` of `gpg-agent.conf`; the keyrings decide whom it trusts",
        paths: &[".gnupg"],
        trigger: "a signed `git commit`, `gpg --verify`",
        scope: Scope::Home,
    },
    Tool {
        tool: "npm, yarn (home)",
        runs: "`script-shell`, `node-options` of the user's `.npmrc`; `yarnPath` of the user's `.yarnrc.yml`",
        paths: &[".npmrc", ".yarnrc.yml", ".yarnrc"],
        trigger: "`npm test`, any `yarn` command, in every project",
        scope: Scope::Home,
    },
    Tool {
        tool: "direnv (home)",
        runs: "`direnvrc`, sourced before every `.envrc`",
        paths: &[".config/direnv", ".direnvrc"],
        trigger: "`cd` into any folder with an allowed `.envrc`",
        scope: Scope::Home,
    },
    Tool {
        tool: "login and desktop session",
        runs: "autostart entries' `Exec`, enabled user units, variables (`LD_PRELOAD`, `PATH`) of `environment.d` and `.pam_environment`, X session scripts, KDE's `env/`",
        paths: &[".config/autostart", ".config/systemd/user", ".config/environment.d", ".pam_environment", ".xprofile", ".xinitrc", ".xsession", ".xsessionrc", ".config/plasma-workspace"],
        trigger: "logging in",
        scope: Scope::Home,
    },
];

/// The default entries: every path of the [`Scope::Always`] rows, alternatives expanded, in
/// the table's order.
pub fn defaults() -> Vec<String> {
    TOOLS.iter().filter(|t| t.scope == Scope::Always).flat_map(|t| t.paths.iter().flat_map(|p| expand(p))).collect()
}

/// One path a protected manifest brings in, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FamilyEntry {
    /// The entry added (beside the manifest: `sub/Makefile` brings `sub/GNUmakefile`).
    pub entry: String,
    /// The person's entry that brought it.
    pub from: String,
    /// The tool that reads it.
    pub tool: &'static str,
}

/// The paths that protecting `entry` brings in: for each [`Scope::Family`] row one of whose
/// manifests is `entry`'s last name, the row's paths in `entry`'s folder; for each
/// [`Scope::FamilyAbove`] row, its paths at any depth (the manifest itself left out).
pub fn family(entry: &str) -> Vec<FamilyEntry> {
    let (folder, name) = match entry.rsplit_once('/') {
        Some((folder, name)) => (format!("{folder}/"), name),
        None => (String::new(), entry),
    };
    let mut out: Vec<FamilyEntry> = Vec::new();
    for t in TOOLS {
        let (manifests, folder) = match t.scope {
            Scope::Family(manifests) => (manifests, folder.as_str()),
            Scope::FamilyAbove(manifests) => (manifests, ""),
            Scope::Always | Scope::Home => continue,
        };
        if !manifests.contains(&name) {
            continue;
        }
        for p in t.paths.iter().flat_map(|p| expand(p)) {
            let added = format!("{folder}{p}");
            if added != entry && !out.iter().any(|f| f.entry == added) {
                out.push(FamilyEntry { entry: added, from: entry.to_string(), tool: t.tool });
            }
        }
    }
    out
}

/// `path` with every `{a,b,…}` group (not nested) replaced by each alternative in turn.
pub fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else { return vec![path.to_string()] };
    let Some(close) = path[open..].find('}').map(|c| open + c) else { return vec![path.to_string()] };
    let (head, tail) = (&path[..open], &path[close + 1..]);
    path[open + 1..close].split(',').flat_map(|alt| expand(&format!("{head}{alt}{tail}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternatives_expand_to_plain_names() {
        assert_eq!(expand("a{,-b}.{x,y}"), ["a.x", "a.y", "a-b.x", "a-b.y"]);
        assert_eq!(expand(".git/hooks"), [".git/hooks"]);
        let d = defaults();
        assert!(d.contains(&"lefthook-local.jsonc".to_string()) && d.contains(&".config/lefthook.yml".to_string()));
        assert!(d.iter().all(|e| !e.contains(['{', '}'])), "{d:?}");
    }

    #[test]
    fn a_manifest_brings_its_family_beside_it() {
        let names = |e: &str| family(e).into_iter().map(|f| f.entry).collect::<Vec<_>>();
        assert_eq!(names("Makefile"), ["GNUmakefile", "makefile"]);
        assert_eq!(names("sub/makefile"), ["sub/GNUmakefile", "sub/Makefile"]);
        assert!(names("package.json").contains(&".npmrc".to_string()));
        // yarn reads `.yarnrc.yml` in every folder above too: at any depth, not only `web/`.
        assert!(names("web/package.json").contains(&".yarnrc.yml".to_string()));
        assert!(!names("web/package.json").iter().any(|n| n.starts_with("web/")));
        assert!(names("Makefile.am").is_empty() && names(".github/workflows").is_empty());
        assert_eq!(family("package.json")[0].tool, "npm");
    }

    /// A default entry that is also a family's would make `unprotect:` of it ambiguous.
    #[test]
    fn no_path_is_both_default_and_family() {
        let d = defaults();
        for t in TOOLS.iter().filter(|t| matches!(t.scope, Scope::Family(_) | Scope::FamilyAbove(_))) {
            for p in t.paths.iter().flat_map(|p| expand(p)) {
                assert!(!d.contains(&p), "{p} of {} is a default too", t.tool);
            }
        }
    }

    /// Every row of the table is a row of the docs' table (docs/configuration.md, "Protection
    /// by tool"), with each of its paths and its scope, so the two cannot drift apart.
    #[test]
    fn the_docs_table_has_every_row() {
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).expect("docs/configuration.md");
        let start = docs.find("### Protection by tool").expect("the section");
        // The section ends at the next paragraph that is not its own (bold, or a heading of
        // another section).
        let section = &docs[start..];
        let end = section.find("\n**").or_else(|| section.find("\n## ")).unwrap_or(section.len());
        let rows: Vec<&str> = section[..end].lines().filter(|l| l.starts_with("| ")).collect();
        for t in TOOLS {
            let row = rows.iter().find(|r| r.starts_with(&format!("| {} |", t.tool))).unwrap_or_else(|| panic!("no row for {} in the docs", t.tool));
            let cells: Vec<&str> = row.split(" | ").collect();
            for p in t.paths {
                assert!(cells[2].split(", ").any(|c| c == format!("`{p}`")), "the docs' row for {} lacks `{p}`: {row}", t.tool);
            }
            let scope = match t.scope {
                Scope::Always => "default",
                Scope::Family(_) => "with ",
                Scope::FamilyAbove(_) => "with ",
                Scope::Home => "home",
            };
            assert!(cells[4].starts_with(scope), "the docs' row for {} says {}, not {scope}", t.tool, cells[4]);
        }
        // And no row in the docs that the code does not hold (the header aside).
        for row in rows.iter().filter(|r| !r.starts_with("| Tool |")) {
            assert!(TOOLS.iter().any(|t| row.starts_with(&format!("| {} |", t.tool))), "the docs' row {row} is no tool of the table");
        }
    }
}
