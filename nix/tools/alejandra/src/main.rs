//! `alejandra [--check] [PATH ...]`: formats Nix files with the alejandra
//! library, or with `--check` only reports the files it would change.
//!
//! The alejandra crate on crates.io is the formatter's library; its command
//! line lives only in the upstream repository. This is the small part of that
//! command CI needs, with the same exit codes: 0 clean, 1 error, 2 a file
//! needs formatting (with `--check`). Directories are walked with the `ignore`
//! crate, so .gitignore'd and hidden paths (target/, result) are skipped.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(name = "alejandra", version = alejandra::version::VERSION, about = "The Uncompromising Nix Code Formatter")]
struct Args {
    /// Only check: list the files that would change and exit 2 if any.
    #[arg(short, long)]
    check: bool,
    /// Print only errors and the files that (would) change.
    #[arg(short, long)]
    quiet: bool,
    /// Files or directories; directories are searched for *.nix files.
    #[arg(default_value = ".")]
    paths: Vec<PathBuf>,
}

fn nix_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_file() {
            files.push(path.clone());
            continue;
        }
        if !path.is_dir() {
            return Err(format!("{}: no such file or directory", path.display()));
        }
        for entry in ignore::WalkBuilder::new(path).build() {
            let entry = entry.map_err(|e| e.to_string())?;
            let is_nix = entry.path().extension().is_some_and(|ext| ext == "nix");
            if is_nix && entry.file_type().is_some_and(|t| t.is_file()) {
                files.push(entry.into_path());
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Formats one file; `Ok(true)` when its formatting differs.
fn format_file(path: &Path, in_place: bool) -> Result<bool, String> {
    let before = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (status, after) = alejandra::format::in_memory(path.display().to_string(), before);
    match status {
        alejandra::format::Status::Error(e) => Err(format!("{}: {e}", path.display())),
        alejandra::format::Status::Changed(false) => Ok(false),
        alejandra::format::Status::Changed(true) => {
            if in_place {
                std::fs::write(path, after).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok(true)
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let files = match nix_files(&args.paths) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let (mut changed, mut failed) = (0usize, 0usize);
    for file in &files {
        match format_file(file, !args.check) {
            Ok(true) => {
                changed += 1;
                let verb = if args.check {
                    "needs formatting"
                } else {
                    "formatted"
                };
                println!("{}: {verb}", file.display());
            }
            Ok(false) => {}
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
        }
    }
    if !args.quiet {
        println!(
            "alejandra {}: {} file(s), {changed} changed or to change, {failed} failed",
            alejandra::version::VERSION,
            files.len()
        );
    }
    if failed > 0 {
        ExitCode::from(1)
    } else if args.check && changed > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
