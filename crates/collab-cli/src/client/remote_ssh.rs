//! How the client reaches the server's exec verbs (`collab-lease`,
//! `collab-release`, ...): it reads the SSH address of a git remote and runs
//! one command there with the user's own `ssh`, the way git does.
//!
//! This module owns remote URL parsing ([`parse_ssh_remote`]: `ssh://` URLs
//! and scp-like `user@host:path`), choosing the ssh command
//! (`GIT_COLLAB_SSH_COMMAND` > `GIT_SSH_COMMAND` > git config
//! `core.sshCommand` > `ssh`), and running it ([`run_remote`]) through
//! `sh -c` with the arguments appended, exactly as git runs
//! `GIT_SSH_COMMAND`, so the user's keys, agent, `~/.ssh/config` and wrapper
//! scripts apply. It knows nothing of any verb: callers build the remote
//! command (quoting arguments with [`quote_arg`]) and interpret the reply.
//!
//! [`run_remote_retrying`] runs a command again when ssh failed before the
//! server could run anything (the connection was dropped during the key
//! exchange, as a server over its `ssh.max_startups` limits does when a
//! fleet connects at once): retrying then can never run a write twice.
//! It also runs a command again that the server answered busy
//! (`collab_proto::exit::BUSY`: a lock another node held past the server's
//! own wait, nothing written), up to `BUSY_ATTEMPTS` runs with jittered
//! pauses of about two seconds in all.

use std::fs::File;
use std::io::{Read as _, Write};
use std::process::Stdio;

use git2::Repository;

use super::remote::{ssh_process, Error, SshRemote, SshVariant};

/// The ssh command used when nothing else is configured.
pub const DEFAULT_SSH_COMMAND: &str = "ssh";

/// What the remote command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit status the server sent (ssh exits with it); 255 is ssh's own
    /// failure (connection, authentication); -1 if ssh died by a signal.
    pub code: i32,
}

impl RemoteOutput {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    pub fn success(&self) -> bool {
        self.code == 0
    }
}

/// What to feed the remote command on stdin.
#[derive(Debug)]
pub enum RemoteInput<'a> {
    /// Nothing (`/dev/null`).
    Empty,
    /// These bytes, then EOF.
    Bytes(&'a [u8]),
    /// A file's contents, streamed (release uploads).
    File(File),
}

/// Parse a remote URL into an [`SshRemote`] that uses the default ssh
/// command. Accepts `ssh://[user@]host[:port]/path` (also `git+ssh://` and
/// `ssh+git://`) and scp-like `[user@]host:path`. Anything else (https,
/// file paths, `host:` without a path) is refused.
pub fn parse_ssh_remote(url: &str) -> Result<SshRemote, Error> {
    let bad = |reason: &str| Error::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let (user, host, port, path) = if let Some((scheme, _)) = url.split_once("://") {
        if !matches!(scheme, "ssh" | "git+ssh" | "ssh+git") {
            return Err(bad("not an ssh url"));
        }
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        let host = match parsed.host() {
            Some(url::Host::Ipv6(addr)) => addr.to_string(),
            Some(host) => host.to_string(),
            None => return Err(bad("no host")),
        };
        let user = match parsed.username() {
            "" => None,
            u => Some(percent_decode(u).ok_or_else(|| bad("user is not UTF-8"))?),
        };
        let path = percent_decode(parsed.path()).ok_or_else(|| bad("path is not UTF-8"))?;
        (user, host, parsed.port(), path)
    } else {
        // scp-like: `[user@]host:path`. As in git, a `/` before the first
        // `:` makes it a local path, and so does no `:` at all.
        let split = match (url.find('['), url.find(':')) {
            // `[::1]:path`, `user@[::1]:path`: the host's colons are bracketed.
            (Some(open), Some(colon)) if open < colon => url[open..]
                .find("]:")
                .map(|close| (&url[..open + close + 1], &url[open + close + 2..])),
            _ => url.split_once(':'),
        };
        let Some((login, path)) = split else {
            return Err(bad("not an ssh url"));
        };
        if login.contains('/') || login.is_empty() {
            return Err(bad("not an ssh url"));
        }
        let (user, host) = match login.rsplit_once('@') {
            Some((user, host)) => (Some(user.to_string()), host),
            None => (None, login),
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        (user, host.to_string(), None, path.to_string())
    };
    let path = path.strip_prefix('/').unwrap_or(&path).to_string();
    if path.is_empty() {
        return Err(bad("no repository path"));
    }
    // Host names and addresses (IPv6 without brackets) only: nothing ssh
    // could read as an option or a second argument.
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
    {
        return Err(bad("not a host name or address"));
    }
    // A host or user starting with '-' would be read by ssh as an option
    // (CVE-2017-1000117); control characters have no business in either.
    for (what, value) in [("host", Some(host.as_str())), ("user", user.as_deref())] {
        let Some(value) = value else { continue };
        if value.is_empty() || value.starts_with('-') {
            return Err(bad(&format!("{what} may not be empty or start with '-'")));
        }
        if value.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad(&format!(
                "{what} contains whitespace or control characters"
            )));
        }
    }
    if path.chars().any(char::is_control) {
        return Err(bad("path contains control characters"));
    }
    Ok(SshRemote {
        user,
        host,
        port,
        path,
        ssh_command: DEFAULT_SSH_COMMAND.to_string(),
        variant: SshVariant::Ssh,
        reuse: Vec::new(),
    })
}

fn percent_decode(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// The SSH remote behind the git remote `remote_name` of `repo`, with the
/// ssh command resolved from the environment and `repo`'s git config.
pub fn ssh_remote(repo: &Repository, remote_name: &str) -> Result<SshRemote, Error> {
    let remote = repo.find_remote(remote_name).map_err(|e| match e.code() {
        git2::ErrorCode::NotFound | git2::ErrorCode::InvalidSpec => {
            Error::NoRemote(remote_name.to_string())
        }
        _ => Error::Git(e),
    })?;
    let url = remote.url()?;
    if url.is_empty() {
        return Err(Error::NoUrl(remote_name.to_string()));
    }
    let mut ssh = parse_ssh_remote(url).map_err(|e| match e {
        Error::BadUrl { reason, .. } if reason == "not an ssh url" => Error::NotSsh {
            remote: remote_name.to_string(),
            url: url.to_string(),
        },
        other => other,
    })?;
    let config = repo.config()?;
    ssh.ssh_command = ssh_command(&config);
    ssh.variant = SshVariant::resolve(&config, &ssh.ssh_command)?;
    ssh.reuse = super::ssh_reuse::options(&ssh, &config);
    Ok(ssh)
}

/// The ssh command: `GIT_COLLAB_SSH_COMMAND`, else `GIT_SSH_COMMAND`, else
/// git config `core.sshCommand`, else `ssh`. Empty values count as unset.
pub fn ssh_command(config: &git2::Config) -> String {
    choose_ssh_command(
        std::env::var("GIT_COLLAB_SSH_COMMAND").ok(),
        std::env::var("GIT_SSH_COMMAND").ok(),
        config.get_string("core.sshCommand").ok(),
    )
}

/// The precedence rule of [`ssh_command`], without the environment.
pub fn choose_ssh_command(
    collab_env: Option<String>,
    git_env: Option<String>,
    core_ssh_command: Option<String>,
) -> String {
    [collab_env, git_env, core_ssh_command]
        .into_iter()
        .flatten()
        .find(|c| !c.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_SSH_COMMAND.to_string())
}

/// Quote one argument of a remote command for the server's tokenizer (and
/// any POSIX shell): `'it'\''s'`.
pub fn quote_arg(arg: &str) -> String {
    collab_proto::tokens::shell_quote(arg)
}

/// Run `remote_cmd` on the server with `remote.ssh_command`, feeding
/// `stdin`, and collect its output and exit status. Like git, a command
/// with shell syntax runs as `sh -c '<ssh_command> "$@"' <ssh_command>
/// [-p PORT] DEST CMD`, so it may carry its own options and quoting; plain
/// words run directly ([`ssh_process`]).
pub fn run_remote(
    remote: &SshRemote,
    remote_cmd: &str,
    stdin: RemoteInput<'_>,
) -> Result<RemoteOutput, Error> {
    let mut stdout = Vec::new();
    let mut output = run_remote_into(remote, remote_cmd, stdin, &mut stdout)?;
    output.stdout = stdout;
    Ok(output)
}

/// [`run_remote`], with the command's stdout copied into `stdout` as it
/// arrives instead of collected (a release download goes straight to its
/// file, whatever its size); the returned `stdout` is empty. If writing
/// fails, ssh is killed and the error is [`Error::Output`].
pub fn run_remote_into(
    remote: &SshRemote,
    remote_cmd: &str,
    stdin: RemoteInput<'_>,
    stdout: &mut dyn Write,
) -> Result<RemoteOutput, Error> {
    let retry_input = match &stdin {
        RemoteInput::Empty => Some(RemoteInput::Empty),
        RemoteInput::Bytes(b) => Some(RemoteInput::Bytes(b)),
        RemoteInput::File(_) => None,
    };
    let (out, copied) = run_once(remote, remote_cmd, stdin, stdout)?;
    // A shared connection that could not take one more session: the
    // command never ran, so it runs once more on a connection of its own.
    if copied == 0
        && !remote.reuse.is_empty()
        && super::ssh_reuse::failed_before_exec(out.code, &out.stderr_text())
    {
        if let Some(input) = retry_input {
            let alone = SshRemote {
                reuse: Vec::new(),
                ..remote.clone()
            };
            return run_once(&alone, remote_cmd, input, stdout).map(|(out, _)| out);
        }
    }
    Ok(out)
}

/// One run of ssh for [`run_remote_into`]; also how many bytes of stdout
/// it copied.
fn run_once(
    remote: &SshRemote,
    remote_cmd: &str,
    stdin: RemoteInput<'_>,
    stdout: &mut dyn Write,
) -> Result<(RemoteOutput, u64), Error> {
    let spawn_error = |source| Error::Spawn {
        command: remote.ssh_command.clone(),
        source,
    };
    let mut cmd = ssh_process(&remote.ssh_command);
    cmd.args(remote.ssh_args(remote_cmd)?)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut bytes = None;
    match stdin {
        RemoteInput::Empty => {
            cmd.stdin(Stdio::null());
        }
        RemoteInput::File(file) => {
            cmd.stdin(Stdio::from(file));
        }
        RemoteInput::Bytes(b) => {
            cmd.stdin(Stdio::piped());
            bytes = Some(b);
        }
    }
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let (mut out_pipe, mut err_pipe) = match (child.stdout.take(), child.stderr.take()) {
        (Some(o), Some(e)) => (o, e),
        _ => unreachable!("stdout and stderr are piped"),
    };
    let (copied, status, stderr) = std::thread::scope(|scope| {
        if let (Some(data), Some(mut input)) = (bytes, child.stdin.take()) {
            // Written from its own thread while the output is read, so a
            // large input cannot deadlock against a full output pipe. A
            // server that stops reading early is not an error here: its
            // reply says what happened.
            scope.spawn(move || {
                let _ = input.write_all(data);
            });
        }
        let stderr = scope.spawn(move || {
            let mut buf = Vec::new();
            let _ = err_pipe.read_to_end(&mut buf);
            buf
        });
        let copied = std::io::copy(&mut out_pipe, stdout).and_then(|n| stdout.flush().map(|()| n));
        if copied.is_err() {
            let _ = child.kill();
        }
        drop(out_pipe);
        let status = child.wait();
        (copied, status, stderr.join().unwrap_or_default())
    });
    let status = status.map_err(spawn_error)?;
    let copied = copied.map_err(Error::Output)?;
    let out = RemoteOutput {
        stdout: Vec::new(),
        stderr: super::ssh_reuse::without_mux_notices(stderr),
        code: status.code().unwrap_or(-1),
    };
    Ok((out, copied))
}

/// How often, at most, [`run_remote_retrying`] runs a command.
pub const MAX_ATTEMPTS: u32 = 6;

/// The first pause before a retry; it doubles each time (with jitter).
const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// True when ssh gave up before authentication finished, so the server
/// cannot have run the command: OpenSSH reports a connection closed or
/// reset during the banner exchange as `kex_exchange_identification: …`
/// (`ssh_exchange_identification: …` before OpenSSH 8.2).
pub fn dropped_before_exec(out: &RemoteOutput) -> bool {
    if out.code != 255 {
        return false;
    }
    let stderr = out.stderr_text();
    stderr.contains("kex_exchange_identification") || stderr.contains("ssh_exchange_identification")
}

/// Whether the server answered busy (`collab_proto::exit::BUSY`): the
/// write met a lock held elsewhere past the server's own wait, and nothing
/// was written, so running it again is safe.
pub fn answered_busy(out: &RemoteOutput) -> bool {
    out.code == collab_proto::exit::BUSY as i32
}

/// [`run_remote`] with `stdin` bytes (empty: no input), run again, after a
/// growing pause with jitter, while ssh was dropped before the server ran
/// anything ([`dropped_before_exec`]; at most [`MAX_ATTEMPTS`] runs), or
/// while the server answered busy ([`answered_busy`]; at most
/// `collab_proto::exit::BUSY_ATTEMPTS` runs, paced by `busy_backoff_ms`).
/// The last answer is returned as it is.
pub fn run_remote_retrying(
    remote: &SshRemote,
    remote_cmd: &str,
    stdin: &[u8],
) -> Result<RemoteOutput, Error> {
    use collab_proto::exit::{busy_backoff_ms, BUSY_ATTEMPTS};
    let mut backoff = FIRST_BACKOFF;
    let mut dropped = 1;
    let mut busy = 1;
    loop {
        let input = if stdin.is_empty() {
            RemoteInput::Empty
        } else {
            RemoteInput::Bytes(stdin)
        };
        let out = run_remote(remote, remote_cmd, input)?;
        if dropped_before_exec(&out) && dropped < MAX_ATTEMPTS {
            let jitter = rand::random_range(0..=backoff.as_millis() as u64 / 2);
            std::thread::sleep(backoff + std::time::Duration::from_millis(jitter));
            backoff *= 2;
            dropped += 1;
        } else if answered_busy(&out) && busy < BUSY_ATTEMPTS {
            busy += 1;
            let pause = busy_backoff_ms(busy, rand::random_range(0.0..=1.0));
            std::thread::sleep(std::time::Duration::from_millis(pause));
        } else {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn plain_ssh_commands_skip_the_shell() {
        let direct = ssh_process("ssh -i /k/id -o StrictHostKeyChecking=no -p 22");
        assert_eq!(direct.get_program(), "ssh");
        assert_eq!(direct.get_args().count(), 6);
        for shelly in [
            "ssh -i '/a b/key'",
            "FOO=1 ssh",
            "ssh $OPTS",
            "ssh -i ~/k",
            "ssh;id",
        ] {
            assert_eq!(ssh_process(shelly).get_program(), "sh", "{shelly}");
        }
    }

    fn remote(user: Option<&str>, host: &str, port: Option<u16>, path: &str) -> SshRemote {
        SshRemote {
            user: user.map(str::to_string),
            host: host.to_string(),
            port,
            path: path.to_string(),
            ssh_command: DEFAULT_SSH_COMMAND.to_string(),
            variant: SshVariant::Ssh,
            reuse: Vec::new(),
        }
    }

    #[test]
    fn parses_ssh_urls() {
        assert_eq!(
            parse_ssh_remote("ssh://git@example.com:2222/team/app.git").unwrap(),
            remote(Some("git"), "example.com", Some(2222), "team/app.git")
        );
        assert_eq!(
            parse_ssh_remote("ssh://example.com/app").unwrap(),
            remote(None, "example.com", None, "app")
        );
        assert_eq!(
            parse_ssh_remote("git+ssh://git@127.0.0.1:22/r.git").unwrap(),
            remote(Some("git"), "127.0.0.1", Some(22), "r.git")
        );
        assert_eq!(
            parse_ssh_remote("ssh://git@[::1]:2222/r.git").unwrap(),
            remote(Some("git"), "::1", Some(2222), "r.git")
        );
        assert_eq!(
            parse_ssh_remote("ssh://git@example.com/my%20repo.git").unwrap(),
            remote(Some("git"), "example.com", None, "my repo.git")
        );
    }

    #[test]
    fn parses_scp_like_urls() {
        assert_eq!(
            parse_ssh_remote("git@example.com:team/app.git").unwrap(),
            remote(Some("git"), "example.com", None, "team/app.git")
        );
        assert_eq!(
            parse_ssh_remote("example.com:/app.git").unwrap(),
            remote(None, "example.com", None, "app.git")
        );
        assert_eq!(
            parse_ssh_remote("git@[::1]:r.git").unwrap(),
            remote(Some("git"), "::1", None, "r.git")
        );
    }

    #[test]
    fn refuses_what_is_not_ssh() {
        for url in [
            "https://example.com/app.git",
            "file:///srv/app.git",
            "/srv/app.git",
            "./app.git",
            "../x:y",
            "app.git",
            "git@example.com:",
            "ssh://example.com",
            "ssh://example.com/",
            "ssh://-oProxyCommand=touch%20x/app",
            "-oProxyCommand=x:app",
            "ssh://-u@example.com/app",
            "ssh://git@exa%0Amples.com/app",
            "git@host:a\nb",
        ] {
            assert!(parse_ssh_remote(url).is_err(), "{url:?} must be refused");
        }
    }

    #[test]
    fn ssh_args_carry_port_and_destination() {
        let r = remote(Some("git"), "h", Some(2222), "r.git");
        assert_eq!(
            r.ssh_args("collab-whoami").unwrap(),
            ["-p", "2222", "git@h", "collab-whoami"]
        );
        let r = remote(None, "h", None, "r.git");
        assert_eq!(r.ssh_args("x").unwrap(), ["h", "x"]);
    }

    /// git's rules for PuTTY and friends (connect.c): `-P` for the port,
    /// `-batch` for TortoisePlink, no options at all for `simple`.
    #[test]
    fn ssh_args_follow_the_variant() {
        let mut r = remote(Some("git"), "h", Some(2222), "r.git");
        for (variant, want) in [
            (SshVariant::Plink, vec!["-P", "2222", "git@h", "x"]),
            (SshVariant::Putty, vec!["-P", "2222", "git@h", "x"]),
            (
                SshVariant::TortoisePlink,
                vec!["-batch", "-P", "2222", "git@h", "x"],
            ),
        ] {
            r.variant = variant;
            assert_eq!(r.ssh_args("x").unwrap(), want, "{variant:?}");
        }
        r.variant = SshVariant::Simple;
        assert!(matches!(r.ssh_args("x"), Err(Error::SimpleWithPort(2222))));
        r.port = None;
        assert_eq!(r.ssh_args("x").unwrap(), ["git@h", "x"]);
    }

    #[test]
    fn the_variant_comes_from_the_program_name() {
        for (command, want) in [
            ("ssh -i key", SshVariant::Ssh),
            ("/usr/bin/plink -v", SshVariant::Plink),
            (
                "'C:\\Program Files\\PuTTY\\PLINK.EXE' -v",
                SshVariant::Plink,
            ),
            ("tortoiseplink.exe", SshVariant::TortoisePlink),
            ("putty", SshVariant::Putty),
            ("my-wrapper", SshVariant::Ssh),
        ] {
            assert_eq!(SshVariant::of_command(command), want, "{command}");
        }
        assert_eq!(SshVariant::parse("Simple"), Some(Some(SshVariant::Simple)));
        assert_eq!(SshVariant::parse("auto"), Some(None));
        assert_eq!(SshVariant::parse("openssh"), None);
    }

    #[test]
    fn ssh_command_precedence() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(choose_ssh_command(s("a"), s("b"), s("c")), "a");
        assert_eq!(choose_ssh_command(None, s("b"), s("c")), "b");
        assert_eq!(choose_ssh_command(s(""), s(" "), s("c")), "c");
        assert_eq!(choose_ssh_command(None, None, None), "ssh");
    }

    #[test]
    fn quote_arg_survives_a_shell() {
        let arg = "it's a \"test\" $HOME `x`";
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote_arg(arg)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), arg);
    }

    /// A stand-in for ssh, run the way git runs GIT_SSH_COMMAND: prints its
    /// arguments one per line, then its stdin, then exits 3.
    const FAKE_SSH: &str = "f() { printf '<%s>\\n' \"$@\"; cat; echo oops >&2; exit 3; }; f";

    #[test]
    fn run_remote_passes_arguments_stdin_and_exit_code() {
        let mut r = remote(Some("git"), "example.com", Some(2222), "r.git");
        r.ssh_command = FAKE_SSH.to_string();
        let out = run_remote(
            &r,
            "collab-lease list 'r.git'",
            RemoteInput::Bytes(b"input"),
        )
        .unwrap();
        assert_eq!(
            out.stdout_text(),
            "<-p>\n<2222>\n<git@example.com>\n<collab-lease list 'r.git'>\ninput"
        );
        assert_eq!(out.stderr_text(), "oops\n");
        assert_eq!(out.code, 3);
        assert!(!out.success());
    }

    #[test]
    fn retries_only_what_never_reached_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let mut r = remote(None, "h", None, "r.git");
        // Dropped during the key exchange twice, then answers.
        r.ssh_command = format!(
            "f() {{ echo x >> '{0}'; n=$(wc -l < '{0}'); cat >/dev/null; \
             if [ $n -lt 3 ]; then echo 'kex_exchange_identification: read: Connection reset by peer' >&2; exit 255; fi; \
             echo ok; }}; f",
            count.display()
        );
        let out = run_remote_retrying(&r, "x", b"body").unwrap();
        assert_eq!((out.code, out.stdout_text().as_str()), (0, "ok\n"));
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);
        // Any other failure is final at once: the command may have run.
        std::fs::remove_file(&count).unwrap();
        r.ssh_command = format!(
            "f() {{ echo x >> '{}'; echo 'Connection to h closed by remote host.' >&2; exit 255; }}; f",
            count.display()
        );
        let out = run_remote_retrying(&r, "x", b"").unwrap();
        assert_eq!(out.code, 255);
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);
    }

    #[test]
    fn runs_a_busy_answer_again_a_few_times() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        let mut r = remote(None, "h", None, "r.git");
        // Busy twice, then answers.
        r.ssh_command = format!(
            "f() {{ echo x >> '{0}'; n=$(wc -l < '{0}'); cat >/dev/null; \
             if [ $n -lt 3 ]; then echo 'error: busy; try again' >&2; exit 5; fi; \
             echo ok; }}; f",
            count.display()
        );
        let out = run_remote_retrying(&r, "x", b"body").unwrap();
        assert_eq!((out.code, out.stdout_text().as_str()), (0, "ok\n"));
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);
        // Busy every time: the last answer after BUSY_ATTEMPTS runs, whose
        // pauses stay within about two seconds.
        std::fs::remove_file(&count).unwrap();
        r.ssh_command = format!(
            "f() {{ echo x >> '{}'; echo 'error: busy; try again' >&2; exit 5; }}; f",
            count.display()
        );
        let started = std::time::Instant::now();
        let out = run_remote_retrying(&r, "x", b"").unwrap();
        assert_eq!(out.code, 5);
        assert_eq!(out.stderr_text(), "error: busy; try again\n");
        let runs = std::fs::read_to_string(&count).unwrap().lines().count();
        assert_eq!(runs as u32, collab_proto::exit::BUSY_ATTEMPTS);
        let took = started.elapsed();
        assert!(took >= std::time::Duration::from_millis(1500), "{took:?}");
    }

    #[test]
    fn run_remote_streams_a_file_and_large_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let big = vec![b'x'; 4 << 20];
        std::fs::write(&path, &big).unwrap();
        let mut r = remote(None, "h", None, "r.git");
        r.ssh_command = "f() { wc -c; }; f".to_string();
        let file = File::open(&path).unwrap();
        let out = run_remote(&r, "x", RemoteInput::File(file)).unwrap();
        assert_eq!(out.stdout_text().trim(), (4 << 20).to_string());
        // Bytes larger than a pipe buffer, echoed back: no deadlock.
        r.ssh_command = "f() { cat; }; f".to_string();
        let out = run_remote(&r, "x", RemoteInput::Bytes(&big)).unwrap();
        assert_eq!(out.stdout.len(), big.len());
        assert!(out.success());
    }

    #[test]
    fn run_remote_into_streams_stdout_to_a_writer() {
        let big: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
        let mut r = remote(None, "h", None, "r.git");
        r.ssh_command = "f() { cat; echo done >&2; }; f".to_string();
        let mut sink = Vec::new();
        let out = run_remote_into(&r, "x", RemoteInput::Bytes(&big), &mut sink).unwrap();
        assert!(sink == big, "stdout differs");
        assert!(out.stdout.is_empty());
        assert_eq!((out.stderr_text().as_str(), out.code), ("done\n", 0));

        /// A writer that is always full.
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        r.ssh_command = "f() { yes; }; f".to_string();
        let err = run_remote_into(&r, "x", RemoteInput::Empty, &mut Full).unwrap_err();
        assert!(matches!(err, Error::Output(_)), "{err}");
    }

    #[test]
    fn ssh_remote_reads_the_remote_and_core_ssh_command() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        repo.remote("origin", "ssh://git@127.0.0.1:2222/r.git")
            .unwrap();
        repo.remote("web", "https://example.com/r.git").unwrap();
        let found = ssh_remote(&repo, "origin").unwrap();
        assert_eq!((found.port, found.path.as_str()), (Some(2222), "r.git"));
        assert!(matches!(
            ssh_remote(&repo, "web"),
            Err(Error::NotSsh { .. })
        ));
        assert!(matches!(ssh_remote(&repo, "nope"), Err(Error::NoRemote(_))));
        let config = repo.config().unwrap();
        let mut local = config.open_level(git2::ConfigLevel::Local).unwrap();
        local.set_str("core.sshCommand", "ssh -i /k").unwrap();
        // The environment still wins over core.sshCommand (the tests may
        // run under GIT_SSH_COMMAND): the same rule, with the real values.
        assert_eq!(
            ssh_command(&repo.config().unwrap()),
            choose_ssh_command(
                std::env::var("GIT_COLLAB_SSH_COMMAND").ok(),
                std::env::var("GIT_SSH_COMMAND").ok(),
                Some("ssh -i /k".into())
            )
        );
        assert_eq!(
            ssh_remote(&repo, "origin").unwrap().ssh_command,
            ssh_command(&repo.config().unwrap())
        );
    }
}
