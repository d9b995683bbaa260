//! Archives with the content of LFS files: `git archive` runs the
//! `filter=lfs` smudge filter of the archived tree's `.gitattributes` on
//! each such file, and the web's archive download points that filter at
//! `git-collab-server lfs-smudge <state dir> <repo id>`, which answers
//! with the stored object a pointer names, or with what it was given (a
//! pointer to an object the server does not hold, a file that is not a
//! pointer). Never more than a pointer's size in memory.

use std::io::{self, Read as _};
use std::path::Path;
use std::process::ExitCode;

use super::pointer::{self, MAX_POINTER};
use super::store::LfsStore;

/// The `-c` arguments for `git` that make `git archive` smudge LFS files
/// through this binary; `None` when the binary's path is not UTF-8.
pub fn archive_config(state_dir: &Path, repo_id: &str) -> Option<Vec<String>> {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let exe = std::env::current_exe().ok()?;
    let command = format!(
        "{} lfs-smudge {} {}",
        quote(exe.to_str()?),
        quote(state_dir.to_str()?),
        quote(repo_id)
    );
    Some(vec![
        "-c".into(),
        format!("filter.lfs.smudge={command}"),
        "-c".into(),
        // A failed smudge leaves the blob as git holds it (the pointer).
        "filter.lfs.required=false".into(),
    ])
}

/// `git-collab-server lfs-smudge <state dir> <repo id>`: stdin to stdout,
/// a held object in place of its pointer.
pub fn run(state_dir: &Path, repo_id: &str) -> ExitCode {
    match smudge(
        state_dir,
        repo_id,
        &mut io::stdin().lock(),
        &mut io::stdout().lock(),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: lfs-smudge: {e}");
            ExitCode::from(1)
        }
    }
}

fn smudge(
    state_dir: &Path,
    repo_id: &str,
    input: &mut impl io::Read,
    out: &mut impl io::Write,
) -> io::Result<()> {
    let mut head = Vec::with_capacity(MAX_POINTER + 1);
    input.take(MAX_POINTER as u64 + 1).read_to_end(&mut head)?;
    if let Some((oid, size)) = pointer::parse(&head) {
        if let Some((mut file, stored)) = LfsStore::new(state_dir).open(repo_id, &oid)? {
            if stored == size {
                io::copy(&mut file, out)?;
                // git writes the whole blob; read the rest (none) so it
                // never sees a closed pipe.
                io::copy(input, &mut io::sink())?;
                return out.flush();
            }
        }
    }
    out.write_all(&head)?;
    io::copy(input, out)?;
    out.flush()
}
