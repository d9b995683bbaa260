//! `git-collab-server`: see [`collab_server::cli`]; this file only calls it.

fn main() -> std::process::ExitCode {
    collab_server::cli::main()
}
