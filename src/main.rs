//! The `workcell` binary: parse the command line, hand it to the library, map the outcome
//! to an exit status.

fn main() {
    // First, before any thread or child exists: nothing workcell inherited may reach a
    // process it starts (see `workcell::fds`).
    workcell::fds::mark_inherited_cloexec();
    let code = workcell::cli::main();
    std::process::exit(code);
}
