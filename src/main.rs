//! The `workcell` binary: parse the command line, hand it to the library, map the outcome
//! to an exit status.

fn main() {
    let code = workcell::cli::main();
    std::process::exit(code);
}
