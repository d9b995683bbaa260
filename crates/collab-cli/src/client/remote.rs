//! A remote's description, as every way of reaching the server uses it:
//! where the server is and which ssh reaches it ([`SshRemote`]), the
//! options each ssh program takes ([`SshVariant`]), the process that runs
//! that ssh ([`ssh_process`]), and what can go wrong on the way
//! ([`Error`]). `remote_ssh` reads a remote's description from a git
//! remote and runs commands with it; `ssh_reuse` adds the options that
//! reuse one connection. Neither is needed here.

use std::process::Command;

/// Everything that can stop a remote command from running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The named remote is not configured.
    #[error("no remote named '{0}'")]
    NoRemote(String),
    /// The remote has no URL.
    #[error("remote '{0}' has no url")]
    NoUrl(String),
    /// The remote's URL is not an SSH URL (https, a local path, ...).
    #[error("remote '{remote}' is not an ssh remote ({url}); server commands need ssh")]
    NotSsh { remote: String, url: String },
    /// An SSH URL that cannot be used.
    #[error("invalid ssh url '{url}': {reason}")]
    BadUrl { url: String, reason: String },
    /// `GIT_SSH_VARIANT` or `ssh.variant` names no variant git knows.
    #[error("{setting} is '{value}': expected auto, ssh, plink, putty, tortoiseplink or simple")]
    BadVariant {
        setting: &'static str,
        value: String,
    },
    /// The `simple` ssh variant takes no options, so no port.
    #[error(
        "ssh variant 'simple' does not support setting port {0}: set GIT_SSH_VARIANT \
         (or git config ssh.variant) to ssh, plink, putty or tortoiseplink"
    )]
    SimpleWithPort(u16),
    /// Reading the repository's configuration failed.
    #[error("git: {}", .0.message())]
    Git(#[from] git2::Error),
    /// The ssh command could not be started or waited for.
    #[error("cannot run ssh ({command}): {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The remote command's output could not be written where it was sent
    /// (`remote_ssh::run_remote_into`).
    #[error("cannot write the output of the remote command: {0}")]
    Output(#[source] std::io::Error),
}

/// Where a remote's server is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshRemote {
    /// Login name, if the URL gives one (`git@...`).
    pub user: Option<String>,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port, if the URL gives one (only `ssh://` URLs can).
    pub port: Option<u16>,
    /// The repository as the server names it: the URL path without its
    /// leading `/` (`team/app.git`).
    pub path: String,
    /// The shell command that runs ssh (see `remote_ssh::ssh_command`).
    pub ssh_command: String,
    /// Which options that command takes (see [`SshVariant`]).
    pub variant: SshVariant,
    /// OpenSSH options that reuse one connection across commands
    /// (`super::ssh_reuse`); empty when reuse is off or not ours to set.
    pub reuse: Vec<String>,
}

/// The ssh programs whose options differ, by git's own rules
/// (`GIT_SSH_VARIANT`, `ssh.variant`, else the program's name): OpenSSH
/// takes `-p PORT`; PuTTY's `plink` and `putty` take `-P PORT`;
/// TortoisePlink takes `-P PORT` and needs `-batch` (else it asks in a
/// window); `simple` takes no options at all, so it cannot reach a port
/// other than 22.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SshVariant {
    #[default]
    Ssh,
    Plink,
    Putty,
    TortoisePlink,
    Simple,
}

impl SshVariant {
    /// A variant's name as git spells it (`ssh.variant`); `auto` is
    /// decided from the command.
    pub fn parse(name: &str) -> Option<Option<SshVariant>> {
        Some(Some(match name.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => return Some(None),
            "ssh" => SshVariant::Ssh,
            "plink" => SshVariant::Plink,
            "putty" => SshVariant::Putty,
            "tortoiseplink" => SshVariant::TortoisePlink,
            "simple" => SshVariant::Simple,
            _ => return None,
        }))
    }

    /// The variant git guesses from the program's name: the base name of
    /// the first word, without `.exe`, case-insensitive. Anything not
    /// PuTTY's is taken to be OpenSSH-compatible (git's `auto` checks that
    /// with `ssh -G`; an incompatible program says so on its first use).
    pub fn of_command(ssh_command: &str) -> SshVariant {
        // The first word as a shell reads it (a quoted path may hold spaces).
        let words = collab_proto::tokens::shell_tokens(ssh_command).unwrap_or_default();
        let program = words.first().map(String::as_str).unwrap_or("ssh");
        let base = program.rsplit(['/', '\\']).next().unwrap_or(program);
        let base = base.to_ascii_lowercase();
        match base.strip_suffix(".exe").unwrap_or(&base) {
            "plink" => SshVariant::Plink,
            "putty" => SshVariant::Putty,
            "tortoiseplink" => SshVariant::TortoisePlink,
            _ => SshVariant::Ssh,
        }
    }

    /// `GIT_SSH_VARIANT`, else git config `ssh.variant`, else the name of
    /// `ssh_command`'s program.
    pub fn resolve(config: &git2::Config, ssh_command: &str) -> Result<SshVariant, Error> {
        let chosen = std::env::var("GIT_SSH_VARIANT")
            .ok()
            .map(|v| ("GIT_SSH_VARIANT", v))
            .or_else(|| {
                config
                    .get_string("ssh.variant")
                    .ok()
                    .map(|v| ("ssh.variant", v))
            });
        match chosen {
            None => Ok(SshVariant::of_command(ssh_command)),
            Some((source, value)) => match SshVariant::parse(&value) {
                Some(Some(variant)) => Ok(variant),
                Some(None) => Ok(SshVariant::of_command(ssh_command)),
                None => Err(Error::BadVariant {
                    setting: source,
                    value,
                }),
            },
        }
    }
}

impl SshRemote {
    /// `user@host` or `host`: the destination argument of ssh.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}", self.host),
            None => self.host.clone(),
        }
    }

    /// The arguments appended to the ssh command for `remote_cmd`, in
    /// the spelling of its [`SshVariant`].
    pub fn ssh_args(&self, remote_cmd: &str) -> Result<Vec<String>, Error> {
        let mut args = Vec::new();
        if self.variant == SshVariant::TortoisePlink {
            args.push("-batch".to_string());
        }
        if self.variant == SshVariant::Ssh {
            args.extend(self.reuse.iter().cloned());
        }
        if let Some(port) = self.port {
            let flag = match self.variant {
                SshVariant::Ssh => "-p",
                SshVariant::Plink | SshVariant::Putty | SshVariant::TortoisePlink => "-P",
                SshVariant::Simple => return Err(Error::SimpleWithPort(port)),
            };
            args.push(flag.to_string());
            args.push(port.to_string());
        }
        args.push(self.destination());
        args.push(remote_cmd.to_string());
        Ok(args)
    }
}

/// The process for `ssh_command`: run directly when it is plain words
/// (`ssh -i key -p 22`), else through `sh -c '<ssh_command> "$@"'` as git
/// does, so a configured command may carry its own quoting. Skipping the
/// shell saves a process per round trip.
pub(crate) fn ssh_process(ssh_command: &str) -> Command {
    let plain = |c: char| c.is_ascii_alphanumeric() || " \t-_./,:@+=".contains(c);
    let words: Vec<&str> = ssh_command.split_whitespace().collect();
    if !words.is_empty() && ssh_command.chars().all(plain) && !words[0].contains('=') {
        let mut cmd = Command::new(words[0]);
        cmd.args(&words[1..]);
        return cmd;
    }
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{ssh_command} \"$@\""))
        .arg(ssh_command);
    cmd
}
