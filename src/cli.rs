//! The `git-collab` command line, as clap derive types. Parsing only: every
//! command is run by `main.rs`. `IssueCmd` is a plain enum so later
//! subcommands (`claim`, `unclaim`, `renew`, `claims`) are one variant each.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Issues kept in git under refs/collab/*, signed with your SSH key and
/// synced with plain git fetch/push.
#[derive(Debug, Parser)]
#[command(name = "git-collab", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Set up this repository: the collab directory and a fetch refspec for
    /// refs/collab/* on every remote.
    Init,
    /// Your signing key.
    Key {
        #[command(subcommand)]
        cmd: KeyCmd,
    },
    /// The trust allowlist ($GIT_DIR/collab/trusted_keys).
    Trust {
        #[command(subcommand)]
        cmd: TrustCmd,
    },
    /// Open, list, show and change issues.
    Issue {
        #[command(subcommand)]
        cmd: IssueCmd,
    },
    /// Fetch the remote's refs/collab/*, join diverged histories, push back.
    Sync {
        /// The git remote to sync with.
        #[arg(default_value = "origin")]
        remote: String,
    },
    /// Release files attached to git tags, kept on the server behind an ssh
    /// remote (upload and delete need rewind access; list and download, read).
    Release {
        #[command(subcommand)]
        cmd: ReleaseCmd,
    },
    /// Report events dropped by replay (bad or untrusted signatures,
    /// malformed events); exit 1 if there are any.
    Verify {
        #[command(flatten)]
        out: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Create an Ed25519 signing key (at collab.signingKey, else
    /// $XDG_CONFIG_HOME/git-collab/signing_key).
    Generate {
        /// Replace an existing key.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Print the signing key's public half and fingerprint.
    Show {
        #[command(flatten)]
        out: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum TrustCmd {
    /// Trust a key: a public key file (every key in it) or one key line.
    Add {
        /// A path to a .pub / authorized_keys file, or an OpenSSH key line.
        key: String,
    },
    /// List the trusted keys.
    List {
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Stop trusting a key, by SHA256: fingerprint, key line or key file.
    Remove {
        /// A `SHA256:...` fingerprint, a key line, or a key file.
        key: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum IssueCmd {
    /// Open a new issue.
    Open {
        /// One-line title.
        #[arg(short, long)]
        title: String,
        /// Description (`-` reads it from stdin).
        #[arg(short, long, default_value = "")]
        body: String,
        /// A label (repeatable).
        #[arg(short = 'l', long = "label")]
        labels: Vec<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List issues (open ones unless --all or --closed).
    List {
        /// Open and closed issues.
        #[arg(long, conflicts_with = "closed")]
        all: bool,
        /// Closed issues only.
        #[arg(long)]
        closed: bool,
        /// Only issues with this label (repeat: all of them).
        #[arg(long = "label")]
        labels: Vec<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Show one issue with its comments.
    Show {
        /// Issue id or unique prefix (4+ hex digits).
        id: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Comment on an issue.
    Comment {
        /// Issue id or unique prefix.
        id: String,
        /// The comment (`-` reads it from stdin).
        #[arg(short, long = "message")]
        message: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Change the title and/or the description.
    Edit {
        /// Issue id or unique prefix.
        id: String,
        #[arg(short, long)]
        title: Option<String>,
        /// New description (`-` reads it from stdin).
        #[arg(short, long)]
        body: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Add and remove labels.
    Label {
        /// Issue id or unique prefix.
        id: String,
        /// Label to add (repeatable).
        #[arg(long)]
        add: Vec<String>,
        /// Label to remove (repeatable).
        #[arg(long)]
        remove: Vec<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Close an issue.
    Close {
        /// Issue id or unique prefix.
        id: String,
        #[arg(short, long)]
        reason: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Reopen a closed issue.
    Reopen {
        /// Issue id or unique prefix.
        id: String,
        #[command(flatten)]
        out: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReleaseCmd {
    /// Upload files to the release of an existing tag (all or none).
    Create {
        /// The tag; it must exist on the server.
        tag: String,
        /// Files to upload, each stored under its own file name.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The git remote whose server keeps the release.
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List the releases with their files, sizes and SHA-256 checksums.
    List {
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Download one file of a release, or all of them; checksums are verified.
    Download {
        tag: String,
        /// One file; all files of the release when omitted.
        file: Option<String>,
        /// Directory to write into (created if missing; files are replaced).
        #[arg(short = 'o', long = "output", default_value = ".")]
        dir: PathBuf,
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Delete one file of a release, or the whole release.
    Delete {
        tag: String,
        /// One file; the whole release when omitted.
        file: Option<String>,
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
}

/// `--json`: print one JSON document instead of text.
#[derive(Debug, Clone, Copy, Args)]
pub struct JsonFlag {
    /// Print JSON (shapes documented in docs/cli.md).
    #[arg(long)]
    pub json: bool,
}
