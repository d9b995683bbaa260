//! The client side of `collab-release`: upload files to a tag's release,
//! list releases, download and delete release files on the server behind a
//! git remote (`git-collab release ...`).
//!
//! Every operation is one or more exec commands run through [`remote_ssh`]
//! with the user's ssh. Uploads stream from the file (never read into
//! memory) and are checked against the SHA-256 the server computed;
//! downloads stream into a temporary file beside the destination, are
//! checked against the size and SHA-256 the server lists, and only then
//! renamed into place. This module also holds the file name rule that the
//! server enforces ([`valid_file_name`]), so both sides agree.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::client::remote::{self, SshRemote};
use crate::client::remote_ssh::{self, run_remote, run_remote_into, RemoteInput};
use collab_proto::verbs::Call;

pub use collab_proto::limits::{valid_file_name, FILE_NAME_RULE};

/// The server's replies (`collab_proto::replies::release`): one stored
/// file, a release, and `list`.
pub use collab_proto::replies::release::{Release, ReleaseFile, ReleaseList};
use collab_proto::replies::release::{ReleaseCreated, ReleaseDeleted};

/// The files one `create` uploaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    pub repo: String,
    pub tag: String,
    pub files: Vec<ReleaseFile>,
}

/// The files one `delete` removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub repo: String,
    pub tag: String,
    pub files: Vec<String>,
}

/// One downloaded file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Downloaded {
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub sha256: String,
}

/// Why a release operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The remote could not be found or ssh could not run.
    #[error(transparent)]
    Remote(#[from] remote::Error),
    /// The server refused: its `error: ...` line, without the prefix.
    #[error("{0}")]
    Server(String),
    /// ssh failed before the server answered (connection, authentication).
    #[error("ssh failed (exit {code}): {stderr}")]
    Ssh { code: i32, stderr: String },
    /// The server's reply is not what the verb promises.
    #[error("unexpected reply from the server: {0}")]
    Reply(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A local file whose name cannot be a release file name.
    #[error("cannot upload {}: its name is not a valid release file name ({})", .0.display(), FILE_NAME_RULE)]
    FileName(PathBuf),
    /// Two files to upload with the same name.
    #[error("two files named {0}")]
    DuplicateName(String),
    #[error("no release {0}")]
    NoRelease(String),
    #[error("release {tag} has no file {file}")]
    NoFile { tag: String, file: String },
    /// The bytes that arrived are not the bytes the server recorded.
    #[error("{file}: checksum mismatch (expected sha256 {expected}, got {actual})")]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
}

type Result<T, E = Error> = std::result::Result<T, E>;

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The error a failed remote command stands for.
fn failure(out: &remote_ssh::RemoteOutput) -> Error {
    let stderr = out.stderr_text();
    match stderr.lines().rev().find_map(|l| l.strip_prefix("error: ")) {
        Some(message) => Error::Server(message.to_string()),
        None => Error::Ssh {
            code: out.code,
            stderr: stderr.trim().replace('\n', " "),
        },
    }
}

/// Run a verb whose success is one JSON object on stdout.
fn call<T: for<'de> Deserialize<'de>>(
    remote: &SshRemote,
    remote_cmd: &str,
    stdin: RemoteInput<'_>,
) -> Result<T> {
    let out = run_remote(remote, remote_cmd, stdin)?;
    if !out.success() {
        return Err(failure(&out));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| Error::Reply(format!("{e}")))
}

/// `collab-release <sub> '<repo>' args...`, from the verb table's row,
/// every argument quoted.
fn command(remote: &SshRemote, sub: &str, args: &[&str]) -> String {
    args.iter()
        .fold(
            Call::new("collab-release", sub).arg(&remote.path),
            |c, a| c.arg(a),
        )
        .line()
}

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    size: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// SHA-256 of a file, streamed.
fn file_sha256(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(io_error(path))?;
    let mut sink = Hashing {
        inner: io::sink(),
        hasher: Sha256::new(),
        size: 0,
    };
    io::copy(&mut file, &mut sink).map_err(io_error(path))?;
    Ok(hex::encode(sink.hasher.finalize()))
}

/// Upload `paths` to the release of `tag`, each under its own file name.
/// Every file is checked first (readable, a valid and unique name); if any
/// upload fails, the files this call already uploaded are deleted again,
/// so the release gets all of them or none.
pub fn create(remote: &SshRemote, tag: &str, paths: &[PathBuf]) -> Result<Created> {
    let mut planned = Vec::new();
    for path in paths {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| valid_file_name(n))
            .ok_or_else(|| Error::FileName(path.clone()))?;
        if planned.iter().any(|(n, _, _)| n == name) {
            return Err(Error::DuplicateName(name.to_string()));
        }
        let meta = fs::metadata(path).map_err(io_error(path))?;
        if !meta.is_file() {
            return Err(Error::Io {
                path: path.clone(),
                source: io::Error::other("not a regular file"),
            });
        }
        planned.push((name.to_string(), path.clone(), file_sha256(path)?));
    }
    let mut created = Created {
        repo: String::new(),
        tag: tag.to_string(),
        files: Vec::new(),
    };
    for (name, path, local_sha) in &planned {
        match upload_one(remote, tag, name, path, local_sha) {
            Ok((repo, record)) => {
                created.repo = repo;
                created.files.push(record);
            }
            Err(e) => {
                for done in &created.files {
                    // Best effort: the error that stopped us matters more.
                    let cmd = command(remote, "delete", &[tag, &done.name]);
                    let _ = run_remote(remote, &cmd, RemoteInput::Empty);
                }
                return Err(e);
            }
        }
    }
    Ok(created)
}

fn upload_one(
    remote: &SshRemote,
    tag: &str,
    name: &str,
    path: &Path,
    local_sha: &str,
) -> Result<(String, ReleaseFile)> {
    let file = File::open(path).map_err(io_error(path))?;
    let reply: ReleaseCreated = call(
        remote,
        &command(remote, "create", &[tag, name]),
        RemoteInput::File(file),
    )?;
    if reply.file.sha256 != local_sha {
        let cmd = command(remote, "delete", &[tag, name]);
        let _ = run_remote(remote, &cmd, RemoteInput::Empty);
        return Err(Error::Checksum {
            file: name.to_string(),
            expected: local_sha.to_string(),
            actual: reply.file.sha256,
        });
    }
    Ok((reply.repo, reply.file))
}

/// Every release of the remote's repository.
pub fn list(remote: &SshRemote) -> Result<ReleaseList> {
    call(remote, &command(remote, "list", &[]), RemoteInput::Empty)
}

/// Delete one file of a release, or the whole release.
pub fn delete(remote: &SshRemote, tag: &str, file: Option<&str>) -> Result<Deleted> {
    let mut args = vec![tag];
    args.extend(file);
    let reply: ReleaseDeleted = call(
        remote,
        &command(remote, "delete", &args),
        RemoteInput::Empty,
    )?;
    Ok(Deleted {
        repo: reply.repo,
        tag: reply.tag,
        files: reply.files,
    })
}

/// Download one file of a release (or all of them) into `dir`, creating it
/// if needed. Each file is streamed to a temporary file in `dir`, checked
/// against the listed size and SHA-256, then renamed over `dir/<name>`;
/// on any failure the temporary file is removed.
pub fn download(
    remote: &SshRemote,
    tag: &str,
    file: Option<&str>,
    dir: &Path,
) -> Result<Vec<Downloaded>> {
    let listing = list(remote)?;
    let release = listing
        .releases
        .into_iter()
        .find(|r| r.tag == tag)
        .ok_or_else(|| Error::NoRelease(tag.to_string()))?;
    let wanted: Vec<ReleaseFile> = match file {
        Some(name) => vec![release
            .files
            .into_iter()
            .find(|f| f.name == name)
            .ok_or_else(|| Error::NoFile {
                tag: tag.to_string(),
                file: name.to_string(),
            })?],
        None => release.files,
    };
    // The names come from the server: never let one leave `dir`.
    if let Some(bad) = wanted.iter().find(|f| !valid_file_name(&f.name)) {
        return Err(Error::Reply(format!("invalid file name {:?}", bad.name)));
    }
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    wanted
        .iter()
        .map(|record| download_one(remote, tag, record, dir))
        .collect()
}

/// The temporary name a download of `name` streams into:
/// `.<name>.<random>.part`, with `name` cut short so that the whole stays
/// within the 255-byte limit on a file name.
fn partial_name(name: &str, random: u64) -> String {
    const SUFFIX_LEN: usize = 1 + 1 + 16 + 5; // "." name "." hex ".part"
    let mut keep = name.len().min(255 - SUFFIX_LEN);
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!(".{}.{random:016x}.part", &name[..keep])
}

fn download_one(
    remote: &SshRemote,
    tag: &str,
    record: &ReleaseFile,
    dir: &Path,
) -> Result<Downloaded> {
    let target = dir.join(&record.name);
    let tmp = dir.join(partial_name(&record.name, rand::random::<u64>()));
    let result = (|| {
        let out = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io_error(&tmp))?;
        let mut sink = Hashing {
            inner: io::BufWriter::new(out),
            hasher: Sha256::new(),
            size: 0,
        };
        let cmd = command(remote, "download", &[tag, &record.name]);
        let out = run_remote_into(remote, &cmd, RemoteInput::Empty, &mut sink)?;
        if !out.success() {
            return Err(failure(&out));
        }
        let sha256 = hex::encode(sink.hasher.clone().finalize());
        let size = sink.size;
        let file = sink.inner.into_inner().map_err(|e| Error::Io {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        if sha256 != record.sha256 || size != record.size {
            return Err(Error::Checksum {
                file: record.name.clone(),
                expected: record.sha256.clone(),
                actual: sha256,
            });
        }
        file.sync_all().map_err(io_error(&tmp))?;
        fs::rename(&tmp, &target).map_err(io_error(&target))?;
        Ok(Downloaded {
            name: record.name.clone(),
            path: target.clone(),
            size,
            sha256,
        })
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names_fit_in_a_file_name() {
        assert_eq!(partial_name("a.bin", 1), ".a.bin.0000000000000001.part");
        for len in [1, 200, 232, 233, 254, 255] {
            let name = "x".repeat(len);
            let partial = partial_name(&name, u64::MAX);
            assert!(partial.len() <= 255, "{len}: {}", partial.len());
            assert!(partial.starts_with(&format!(".{}", &name[..len.min(232)])));
        }
    }

    #[test]
    fn file_names() {
        for good in ["app.tar.gz", "x", "v1.0+build_2-linux", "SHA256SUMS"] {
            assert!(valid_file_name(good), "{good:?}");
        }
        for bad in ["", ".", "..", ".hidden", "-rf", "a/b", "a b", "a\0b", "é"] {
            assert!(!valid_file_name(bad), "{bad:?}");
        }
        assert!(!valid_file_name(&"a".repeat(256)));
    }

    #[test]
    fn commands_quote_every_argument() {
        let mut remote = remote_ssh::parse_ssh_remote("ssh://git@h:22/team/app.git").unwrap();
        remote.path = "it's".into();
        assert_eq!(
            command(&remote, "delete", &["v1", "a b"]),
            "collab-release delete 'it'\\''s' 'v1' 'a b'"
        );
    }

    #[test]
    fn server_errors_and_ssh_failures_are_told_apart() {
        let out = |code, stderr: &str| remote_ssh::RemoteOutput {
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
            code,
        };
        assert_eq!(
            failure(&out(1, "error: repository not found\n")).to_string(),
            "repository not found"
        );
        assert_eq!(
            failure(&out(
                255,
                "ssh: connect to host h port 22: Connection refused\r\n"
            ))
            .to_string(),
            "ssh failed (exit 255): ssh: connect to host h port 22: Connection refused"
        );
    }
}
