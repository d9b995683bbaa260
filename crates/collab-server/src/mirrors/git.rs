//! Running the git of one mirror sync: `git fetch` into the repository
//! (pull) or `git push` from it (push), bounded and sealed off.
//!
//! - Transports: `protocol.allow=never` plus the URL's own scheme, and
//!   `GIT_ALLOW_PROTOCOL` naming only it, so no redirect, submodule or
//!   helper reaches `file://`, `ext::` or any other.
//! - Nothing of the server's environment reaches git: no `GIT_*`, no proxy,
//!   no ssh agent, `HOME` is `{state_dir}/mirrors/home`, no system or global
//!   git config, no ssh config (`-F /dev/null`), no prompts.
//! - The connection goes to the address the SSRF guard vetted (`url::Pinned`).
//! - Credentials never reach a command line (other local users could read
//!   it in `/proc`): an http(s) token is an `http.extraHeader` in git's
//!   environment (`GIT_CONFIG_*`); an ssh key is a 0600 file in
//!   `{state_dir}/mirrors/keys/`, removed when the run ends.
//! - Each run has a deadline (`mirrors.timeout_secs`); then its whole
//!   process group (git, ssh, remote-https) is killed.
//! - What git said goes back as the error: its last lines, at most
//!   [`MAX_ERROR`] bytes, with the credential redacted.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};

use super::url::Pinned;
use collab_record::refs;

/// The longest error kept from a failed run.
pub const MAX_ERROR: usize = 600;

/// Most stderr bytes read from git (the rest is drained).
const MAX_STDERR: usize = 64 * 1024;

/// A mirror's credential, opened.
#[derive(Clone)]
pub enum Credential {
    /// For http(s): `user:token` (basic) or a bare token (bearer).
    Token(String),
    /// For ssh: an OpenSSH private key.
    SshKey(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Token(_) => "Token(..)",
            Credential::SshKey(_) => "SshKey(..)",
        })
    }
}

impl Credential {
    /// What a credential file holds.
    pub fn classify(text: &str) -> Credential {
        let text = text.trim();
        if text.starts_with("-----BEGIN") && text.contains("PRIVATE KEY-----") {
            Credential::SshKey(format!("{text}\n"))
        } else {
            Credential::Token(text.to_string())
        }
    }

    /// Whether it fits the URL's transport; the refusal otherwise.
    pub fn fits(&self, scheme: &str) -> Result<(), String> {
        match (self, scheme) {
            // It becomes an HTTP header line: no line breaks or controls.
            (Credential::Token(t), _) if t.chars().any(char::is_control) => {
                Err("the credential is neither a one-line token nor an OpenSSH private key".into())
            }
            (Credential::SshKey(_), "ssh") | (Credential::Token(_), "http" | "https") => Ok(()),
            (Credential::SshKey(_), _) => {
                Err("a private key is a credential for ssh:// URLs only".into())
            }
            (Credential::Token(_), "ssh") => {
                Err("an ssh:// mirror takes an OpenSSH private key as its credential".into())
            }
            (Credential::Token(_), _) => Err("git:// takes no credential".into()),
        }
    }

    /// The strings that must never be shown: the credential, its lines and
    /// the encoded header value.
    fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Credential::Token(t) => {
                out.push(t.clone());
                out.push(B64.encode(basic(t)));
                if let Some((_, pass)) = t.split_once(':') {
                    out.push(pass.to_string());
                }
            }
            Credential::SshKey(k) => {
                out.extend(k.lines().filter(|l| l.len() >= 8).map(str::to_string));
            }
        }
        out.retain(|s| s.len() >= 4);
        out
    }
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// `user:token` as given, a bare token with git's user name.
fn basic(token: &str) -> String {
    if token.contains(':') {
        token.to_string()
    } else {
        format!("git:{token}")
    }
}

/// The `Authorization` header of a token: basic for `user:token`, bearer
/// for a bare token.
fn authorization(token: &str) -> String {
    if token.contains(':') {
        format!("Authorization: Basic {}", B64.encode(token))
    } else {
        format!("Authorization: Bearer {token}")
    }
}

/// Replace every secret and every URL's user, password and query in `text`
/// (`url::scrub`), and keep its last lines, bounded.
pub fn redact(text: &str, credential: Option<&Credential>) -> String {
    let mut text = super::url::scrub(text);
    if let Some(c) = credential {
        for secret in c.secrets() {
            text = text.replace(&secret, "[redacted]");
        }
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut out = lines[lines.len().saturating_sub(4)..].join(" | ");
    if out.len() > MAX_ERROR {
        let mut cut = out.len() - MAX_ERROR;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("…{}", &out[cut..]);
    }
    if out.is_empty() {
        out = "git failed without a message".into();
    }
    out
}

/// Where one run happens.
pub struct Run<'a> {
    /// The repository on disk.
    pub repo: &'a Path,
    pub pinned: &'a Pinned,
    pub credential: Option<&'a Credential>,
    pub timeout: Duration,
    /// `{state_dir}/mirrors`.
    pub work_dir: &'a Path,
    /// The mirror synced before: an ssh host key it was checked against
    /// under the bare host name (before `[host]:port`) is kept for it.
    pub synced_before: bool,
}

/// The name an ssh host's key is kept under in the mirrors' known_hosts:
/// the host for port 22, `[host]:port` for any other, as OpenSSH names
/// them, so two servers on one host keep a key each.
pub fn host_key_alias(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// Keys were kept under the bare host name whatever the port before
/// `[host]:port`. A mirror that synced with such a key keeps checking
/// against it: its lines are copied under `alias` once, when the file has
/// none for `alias` yet. Returns whether it copied any.
pub fn adopt_legacy_host_key(known_hosts: &Path, host: &str, alias: &str) -> std::io::Result<bool> {
    if alias == host {
        return Ok(false);
    }
    let text = match std::fs::read_to_string(known_hosts) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let names = |line: &str| -> Option<(Vec<String>, String)> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('@') {
            return None;
        }
        let (hosts, key) = line.split_once(char::is_whitespace)?;
        Some((
            hosts.split(',').map(str::to_string).collect(),
            key.trim().to_string(),
        ))
    };
    if text
        .lines()
        .filter_map(names)
        .any(|(hosts, _)| hosts.iter().any(|h| h == alias))
    {
        return Ok(false);
    }
    let adopted: Vec<String> = text
        .lines()
        .filter_map(names)
        .filter(|(hosts, _)| hosts.iter().any(|h| h == host))
        .map(|(_, key)| format!("{alias} {key}\n"))
        .collect();
    if adopted.is_empty() {
        return Ok(false);
    }
    let mut file = std::fs::OpenOptions::new().append(true).open(known_hosts)?;
    let mut out = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        out.push('\n');
    }
    out.extend(adopted);
    std::io::Write::write_all(&mut file, out.as_bytes())?;
    Ok(true)
}

/// `+refs/*:refs/*` except the forge's own record (`refs/collab/*`), which
/// an upstream never overwrites and a downstream never gets.
fn refspecs() -> [String; 2] {
    [
        "+refs/*:refs/*".to_string(),
        format!("^{}", refs::COLLAB_GLOB),
    ]
}

/// Fetch the upstream into the repository: every ref but `refs/collab/*`,
/// forced, pruned.
pub async fn fetch(run: &Run<'_>) -> Result<(), String> {
    let mut args: Vec<String> = vec![
        "fetch".into(),
        "--prune".into(),
        "--no-write-fetch-head".into(),
        "--no-recurse-submodules".into(),
        "--no-auto-gc".into(),
        "--quiet".into(),
        "--end-of-options".into(),
        run.pinned.git_url(),
    ];
    args.extend(refspecs());
    git(run, &args).await.map(|_| ())
}

/// Push the repository to the downstream: every ref but `refs/collab/*`,
/// forced, pruned (what `--mirror` does, without the record). Returns how
/// many refs it created, moved or deleted there.
pub async fn push(run: &Run<'_>) -> Result<usize, String> {
    // Not `--quiet`: it silences `--porcelain`'s ref lines, which are
    // what is counted.
    let mut args: Vec<String> = vec![
        "push".into(),
        "--prune".into(),
        "--porcelain".into(),
        "--no-verify".into(),
        "--end-of-options".into(),
        run.pinned.git_url(),
    ];
    args.extend(refspecs());
    git(run, &args).await
}

/// Whether a line of `git push --porcelain` is a ref the push changed:
/// `<flag>\t<from>:<to>\t<summary>` with flag ` ` (fast-forward), `+`
/// (forced), `-` (deleted) or `*` (new); not `=` (up to date), `!`
/// (rejected), the `To` line or `Done`.
fn is_pushed_ref(line: &str) -> bool {
    matches!(line.as_bytes(), [b' ' | b'+' | b'-' | b'*', b'\t', ..])
}

/// A file holding an ssh key for one run, removed when dropped.
struct KeyFile(PathBuf);

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Run git; returns how many of its stdout lines are refs a push changed
/// ([`is_pushed_ref`]; a fetch prints none).
async fn git(run: &Run<'_>, args: &[String]) -> Result<usize, String> {
    let scheme = run.pinned.checked.scheme;
    let home = run.work_dir.join("home");
    let keys = run.work_dir.join("keys");
    for dir in [&home, &keys] {
        std::fs::create_dir_all(dir).map_err(|e| {
            tracing::error!("mirrors: creating {}: {e}", dir.display());
            "internal error preparing the run".to_string()
        })?;
    }
    // git-args: `fetch` and `push` put `--end-of-options` before the URL;
    // everything before it here is the server's own.
    let mut cmd = tokio::process::Command::new("git");
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("GIT_")
            || k.starts_with("SSH_")
            || k.to_ascii_lowercase().ends_with("_proxy")
        {
            cmd.env_remove(&key);
        }
    }
    cmd.env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "/bin/false")
        .env("GIT_ALLOW_PROTOCOL", scheme)
        .env("GIT_PROTOCOL_FROM_USER", "0");
    cmd.args(["-c", "protocol.allow=never"])
        .arg("-c")
        .arg(format!("protocol.{scheme}.allow=always"))
        .args(["-c", "credential.helper=", "-c", "core.askPass=/bin/false"])
        .args(["-c", "http.proxy=", "-c", "core.fsmonitor=false"])
        // A stalled transfer ends long before the deadline.
        .args(["-c", "http.lowSpeedLimit=1", "-c", "http.lowSpeedTime=60"]);
    for setting in run.pinned.git_config() {
        cmd.arg("-c").arg(setting);
    }
    let mut _key_file = None;
    match (scheme, run.credential) {
        ("http" | "https", Some(Credential::Token(token))) => {
            // In the environment, never on the command line.
            cmd.env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env("GIT_CONFIG_VALUE_0", authorization(token));
        }
        ("ssh", credential) => {
            let known_hosts = run.work_dir.join("known_hosts");
            let host = &run.pinned.checked.host;
            let alias = host_key_alias(host, run.pinned.checked.port);
            if run.synced_before {
                if let Err(e) = adopt_legacy_host_key(&known_hosts, host, &alias) {
                    tracing::error!("mirrors: updating {}: {e}", known_hosts.display());
                    return Err("internal error preparing the run".into());
                }
            }
            let mut ssh = format!(
                "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
                 -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={} \
                 -o HostName={} -o HostKeyAlias={} -o ConnectTimeout=30",
                shell_quote(&known_hosts.to_string_lossy()),
                run.pinned.addr.ip(),
                shell_quote(&alias),
            );
            if let Some(Credential::SshKey(key)) = credential {
                let path = keys.join(format!("key-{:016x}", rand::random::<u64>()));
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, key.as_bytes()));
                let file = KeyFile(path);
                if let Err(e) = written {
                    tracing::error!("mirrors: writing a key file: {e}");
                    return Err("internal error preparing the run".into());
                }
                ssh.push_str(&format!(" -i {}", shell_quote(&file.0.to_string_lossy())));
                _key_file = Some(file);
            }
            cmd.env("GIT_SSH_COMMAND", ssh)
                .env("GIT_SSH_VARIANT", "ssh");
        }
        _ => {}
    }
    cmd.arg("-C")
        .arg(run.repo)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        tracing::error!("mirrors: cannot run git: {e}");
        "internal error: cannot run git".to_string()
    })?;
    let pgid = child.id();
    let stdout = child.stdout.take().expect("piped");
    // Counted as it comes, line by line: nothing is kept.
    let counter = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut n = 0;
        while let Ok(Some(line)) = lines.next_line().await {
            n += usize::from(is_pushed_ref(&line));
        }
        n
    });
    let mut stderr = child.stderr.take().expect("piped");
    let reader = tokio::spawn(async move {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = MAX_STDERR.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        kept
    });
    let status = match tokio::time::timeout(run.timeout, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            if let Some(pgid) = pgid.and_then(|p| i32::try_from(p).ok()) {
                // SAFETY: kill(2) on the process group of our own child,
                // which has not been reaped yet.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
            let _ = child.wait().await;
            reader.abort();
            counter.abort();
            return Err(format!(
                "timed out after {}s (mirrors.timeout_secs)",
                run.timeout.as_secs()
            ));
        }
    };
    let stderr = reader.await.unwrap_or_default();
    let changed = counter.await.unwrap_or_default();
    match status {
        Ok(s) if s.success() => Ok(changed),
        Ok(_) => Err(redact(&String::from_utf8_lossy(&stderr), run.credential)),
        Err(e) => {
            tracing::error!("mirrors: waiting for git: {e}");
            Err("internal error: git did not finish".into())
        }
    }
}

/// The refs of `repo` outside `refs/collab/*`, name → id.
pub fn ref_snapshot(repo: &Path) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let repo = git2::Repository::open_bare(repo)?;
    let mut out = std::collections::BTreeMap::new();
    for r in repo.references()? {
        let r = r?;
        let (Ok(name), Some(target)) = (r.name(), r.target()) else {
            continue;
        };
        if !name.starts_with(refs::COLLAB_PREFIX) {
            out.insert(name.to_string(), target.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_told_apart_and_fit_their_transport_only() {
        let key = Credential::classify(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n",
        );
        assert!(matches!(key, Credential::SshKey(_)));
        assert!(key.fits("ssh").is_ok());
        assert!(key.fits("https").is_err());
        let token = Credential::classify("  ghp_abcdef \n");
        assert!(matches!(&token, Credential::Token(t) if t == "ghp_abcdef"));
        assert!(token.fits("https").is_ok());
        assert!(token.fits("ssh").is_err());
        assert!(token.fits("git").is_err());
        assert!(!format!("{token:?}").contains("ghp"));
        // A token is one header value: no second line smuggled in.
        let two_lines = Credential::classify("tok\r\nX-Injected: 1");
        assert!(two_lines.fits("https").is_err());
        assert!(Credential::classify("a\u{7}b").fits("http").is_err());
    }

    #[test]
    fn only_refs_a_push_changed_are_counted() {
        let out = "To git://127.0.0.1:1/x.git\n \trefs/heads/a:refs/heads/a\t1..2\n\
                   +\trefs/heads/b:refs/heads/b\t1...3 (forced update)\n\
                   -\t:refs/heads/c\t[deleted]\n*\trefs/tags/v:refs/tags/v\t[new tag]\n\
                   =\trefs/heads/d:refs/heads/d\t[up to date]\n\
                   !\trefs/heads/e:refs/heads/e\t[rejected] (fetch first)\nDone\n";
        assert_eq!(out.lines().filter(|l| is_pushed_ref(l)).count(), 4);
    }

    #[test]
    fn host_keys_are_kept_per_port_and_a_synced_mirrors_old_key_is_adopted() {
        assert_eq!(host_key_alias("forge.example", 22), "forge.example");
        assert_eq!(
            host_key_alias("forge.example", 2222),
            "[forge.example]:2222"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        // Nothing kept yet: nothing to adopt.
        assert!(!adopt_legacy_host_key(&file, "h", "[h]:2222").unwrap());
        std::fs::write(&file, "h ssh-ed25519 AAAAold\nother ssh-ed25519 AAAAx").unwrap();
        assert!(adopt_legacy_host_key(&file, "h", "[h]:2222").unwrap());
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "h ssh-ed25519 AAAAold\nother ssh-ed25519 AAAAx\n[h]:2222 ssh-ed25519 AAAAold\n"
        );
        // Once: the alias has its own key now (and port 22 has no alias).
        assert!(!adopt_legacy_host_key(&file, "h", "[h]:2222").unwrap());
        assert!(!adopt_legacy_host_key(&file, "h", "h").unwrap());
    }

    #[test]
    fn errors_keep_the_last_lines_without_the_credential() {
        let token = Credential::Token("alice:s3cr3t-token".into());
        let header = B64.encode("alice:s3cr3t-token");
        let text = format!(
            "line one\n\nfatal: auth s3cr3t-token failed\nheader {header}\nremote: a\nremote: b\n"
        );
        let out = redact(&text, Some(&token));
        assert!(!out.contains("s3cr3t"), "{out}");
        assert!(!out.contains(&header), "{out}");
        assert!(!out.contains("line one"), "{out}");
        assert!(out.ends_with("remote: b"), "{out}");
        let long = "x".repeat(5000);
        assert!(redact(&long, None).len() <= MAX_ERROR + 4);
        assert_eq!(redact("", None), "git failed without a message");
    }
}
