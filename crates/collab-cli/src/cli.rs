//! The `git-collab` command line, as clap derive types. Parsing only: every
//! command is run by `main.rs`. `IssueCmd` is a plain enum so later
//! subcommands are one variant each; it is run by `issue_cmd.rs`, against
//! the server or the local DAGs as `IssueTarget` and the mode decide
//! (`claim`, `unclaim`, `renew` and `claims` always talk to the server).
//! `PatchCmd` is run by `patch_cmd.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Issues kept in git under refs/collab/*, signed with your git-collab signing key and
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
    /// Open, list, show and change issues: on the remote's git-collab
    /// server when it holds them, else in this clone's DAGs.
    Issue {
        #[command(flatten)]
        target: IssueTarget,
        #[command(subcommand)]
        cmd: IssueCmd,
    },
    /// Propose, review and merge patches (Gerrit-style revisions and votes).
    Patch {
        #[command(flatten)]
        target: IssueTarget,
        #[command(subcommand)]
        cmd: PatchCmd,
    },
    /// Fetch the remote's refs/collab/*, join diverged histories, push back.
    Sync {
        /// The git remote to sync with.
        #[arg(default_value = "origin")]
        remote: String,
    },
    /// Checks on commits (CI results) kept by the server behind an ssh
    /// remote: what a CI step sets and a merge rule can require.
    Check {
        #[command(subcommand)]
        cmd: CheckCmd,
    },
    /// Release files attached to git tags, kept on the server behind an ssh
    /// remote (upload and delete need rewind access; list and download, read).
    Release {
        #[command(subcommand)]
        cmd: ReleaseCmd,
    },
    /// `git push` with `-o collab-lease=<issue>:<token>` for every claim
    /// this clone took on the remote (`issue claim`/`issue next`), so the
    /// server can refuse the push if a claim is no longer yours.
    Push {
        /// The git remote.
        #[arg(default_value = "origin")]
        remote: String,
        /// Refspecs and other arguments, passed to git push.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The server's event log for the remote's repository. Without
    /// --follow: replay and exit (from --since, else everything retained).
    /// With --follow: print new events as they happen, until interrupted
    /// (from --since if given, else only new ones).
    Events {
        /// The git remote whose server and repository to watch.
        #[arg(long, default_value = "origin")]
        remote: String,
        /// Every repository your key can read, not only the remote's.
        #[arg(long)]
        all: bool,
        /// Start after this seq (resume with the last seq you saw); with
        /// --follow, replay from it before following.
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
        /// Follow new events until interrupted; without --since, only new
        /// ones (nothing is replayed first).
        #[arg(long)]
        follow: bool,
        /// Only event types matching this pattern (`lease.*`); repeatable.
        #[arg(long = "type", value_name = "PATTERN")]
        types: Vec<String>,
        /// Print the server's JSON lines unchanged.
        #[arg(long)]
        json: bool,
    },
    /// Search the issues and patches on the remote's server: titles,
    /// bodies and comments, best first (the remote's repository unless
    /// --all or --repo). Every word must match.
    Search {
        /// The words to find.
        query: String,
        /// The git remote whose server to search.
        #[arg(long, default_value = "origin")]
        remote: String,
        /// Every repository your key can read, not only the remote's.
        #[arg(long)]
        all: bool,
        /// Only repositories matching this glob (`team/*`); repeatable.
        #[arg(long = "repo", value_name = "GLOB")]
        repos: Vec<String>,
        /// Only issues, or only patches.
        #[arg(long, value_parser = ["issue", "patch"])]
        kind: Option<String>,
        /// Open ones, or closed and merged ones (default: all).
        #[arg(long, value_parser = ["open", "closed", "all"])]
        state: Option<String>,
        /// At most N results.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// The page after this cursor (printed after a full page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Report events dropped by replay (bad or untrusted signatures,
    /// malformed events); exit 1 if there are any.
    Verify {
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Write the man pages (git-collab.1 and one per subcommand) into a
    /// directory; packages install them so `git collab --help` finds them.
    #[command(hide = true)]
    Man {
        /// Directory to write the pages into (created if missing).
        dir: PathBuf,
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
        /// Read the server's export fetched by `issue fetch` or `sync`
        /// (no network).
        #[arg(long)]
        offline: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Show one issue with its comments.
    Show {
        /// Issue id or unique prefix (4+ hex digits).
        id: String,
        /// Read the server's export fetched by `issue fetch` or `sync`
        /// (no network).
        #[arg(long)]
        offline: bool,
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
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Change the title and/or the description.
    Edit {
        /// Issue id or unique prefix.
        id: String,
        /// New one-line title.
        #[arg(short, long)]
        title: Option<String>,
        /// New description (`-` reads it from stdin).
        #[arg(short, long)]
        body: Option<String>,
        #[command(flatten)]
        fence: FenceFlag,
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
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Close an issue.
    Close {
        /// Issue id or unique prefix.
        id: String,
        /// Why it is closed (e.g. "fixed in 9c1e0d2", "duplicate of 4f2a").
        #[arg(short, long)]
        reason: Option<String>,
        #[command(flatten)]
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Reopen a closed issue.
    Reopen {
        /// Issue id or unique prefix.
        id: String,
        #[command(flatten)]
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Say that an issue blocks, or relates to, another (server mode);
    /// OTHER is an id or prefix, or REPO#ID for another repository of
    /// the same server.
    Link {
        /// Issue id or unique prefix.
        id: String,
        /// `blocks` (this issue blocks the other) or `relates`.
        #[arg(value_parser = ["blocks", "relates"])]
        kind: String,
        /// The other issue: an id or prefix here, or `repo#id` in another
        /// repository of the same server.
        other: String,
        #[command(flatten)]
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Remove a link made by `link` (server mode).
    Unlink {
        /// Issue id or unique prefix.
        id: String,
        /// `blocks` (this issue blocks the other) or `relates`.
        #[arg(value_parser = ["blocks", "relates"])]
        kind: String,
        /// The other issue: an id or prefix here, or `repo#id` in another
        /// repository of the same server.
        other: String,
        #[command(flatten)]
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Fetch the server's signed export of its issues, for `--offline`
    /// and `verify`.
    Fetch {
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Claim an issue on the server: with --ttl a lease that expires unless
    /// renewed, without it an open-ended assignment. Exit 4 if someone else
    /// holds it.
    Claim {
        /// Issue id or unique prefix (4+ hex digits).
        id: String,
        /// Lease length in seconds (renew before it runs out).
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=collab_cli::client::lease::MAX_TTL_SECS))]
        ttl: Option<u64>,
        /// What you are doing, shown with the claim (at most 500 bytes).
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// If someone holds it, wait up to SECS for it (first come, first
        /// served); exit 4 naming the holder if the time runs out.
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=collab_cli::client::lease::MAX_WAIT_SECS))]
        wait: Option<u64>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Claim the next ready issue (open, unclaimed, not blocked, with every
    /// --label), by priority then age. Exit 3 if nothing is ready.
    Next {
        /// Only issues with this label (repeat for several: all must match).
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// Lease length in seconds (renew before it runs out).
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=collab_cli::client::lease::MAX_TTL_SECS))]
        ttl: Option<u64>,
        /// What you are doing, shown with the claim (at most 500 bytes).
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// If nothing is ready, wait up to SECS for something to be.
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=collab_cli::client::lease::MAX_WAIT_SECS))]
        wait: Option<u64>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List the ready issues in the order `issue next` takes them.
    Ready {
        /// Only issues with this label (repeat for several: all must match).
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// End someone's claim by force, recording why (needs rewind access).
    Break {
        /// Issue id or unique prefix (4+ hex digits).
        id: String,
        /// Why (recorded with the event).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Give up your claim on an issue (succeeds if you hold none). Exit 4 if
    /// someone else holds it.
    Unclaim {
        /// Issue id or unique prefix (4+ hex digits).
        id: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Extend your claim to SECS from now. Exit 4 if you do not hold it.
    Renew {
        /// Issue id or unique prefix (4+ hex digits).
        id: String,
        /// New lease length in seconds, from now.
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=collab_cli::client::lease::MAX_TTL_SECS))]
        ttl: u64,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List the live claims on the server's copy of this repository.
    Claims {
        #[command(flatten)]
        out: JsonFlag,
    },
}

/// Which remote's issues, and where they live (flags of every `issue`
/// subcommand, accepted before or after it).
#[derive(Debug, Clone, Args)]
pub struct IssueTarget {
    /// The git remote whose server holds the issues, patches and claims.
    #[arg(long, global = true, default_value = "origin")]
    pub remote: String,
    /// `server`: the remote's git-collab server holds the issues and
    /// patches; `local`: signed DAGs in this clone, shared with `sync`.
    /// Default: git config collab.mode, else detected once per remote and
    /// remembered.
    #[arg(long, global = true, value_parser = ["server", "local"])]
    pub mode: Option<String>,
}

/// `--lease-token N`: fence a server write on a live lease.
#[derive(Debug, Clone, Copy, Args)]
pub struct FenceFlag {
    /// Refuse the write (exit 4) unless N is the token of the issue's live
    /// lease (server mode only).
    #[arg(long, value_name = "N")]
    pub lease_token: Option<i64>,
}

#[derive(Debug, Subcommand)]
pub enum PatchCmd {
    /// Propose a commit (and its history since the base) for a base branch.
    Create {
        /// The branch the patch targets (default: the remote's default
        /// branch, else init.defaultBranch, else main).
        #[arg(long)]
        base: Option<String>,
        /// The commit to propose.
        #[arg(long, default_value = "HEAD")]
        head: String,
        /// One-line title (default: the head commit's subject).
        #[arg(short, long)]
        title: Option<String>,
        /// Description (`-` reads it from stdin; default: the head commit's body).
        #[arg(short, long)]
        body: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List patches (open ones unless --all).
    List {
        /// Open, merged and closed patches.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Show a patch: revisions, votes, comments and its timeline.
    Show {
        /// Patch id or unique prefix (4+ hex digits).
        id: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Record a new revision (your current commit) of a patch; `sync` shares it.
    Revise {
        /// Patch id or unique prefix.
        id: String,
        /// The commit the patch now proposes.
        #[arg(long, default_value = "HEAD")]
        head: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Print a revision's diff against its base.
    Diff {
        /// Patch id or unique prefix.
        id: String,
        /// Revision number (default: the latest).
        #[arg(long)]
        rev: Option<u32>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Print what changed from revision A to revision B, leaving out what a
    /// rebase onto a newer base brought in.
    Interdiff {
        /// Patch id or unique prefix.
        id: String,
        /// The older revision number.
        from: u32,
        /// The newer revision number.
        to: u32,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Vote on a revision; a later vote of yours on it replaces this one.
    Review {
        /// Patch id or unique prefix.
        id: String,
        #[command(flatten)]
        verdict: VerdictFlags,
        /// What you have to say (`-` reads it from stdin).
        #[arg(short, long = "message", default_value = "")]
        message: String,
        /// Revision number (default: the latest).
        #[arg(long)]
        rev: Option<u32>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Comment on a patch, or inline on a file of a revision.
    Comment {
        /// Patch id or unique prefix.
        id: String,
        /// The comment (`-` reads it from stdin).
        #[arg(short, long = "message")]
        message: String,
        /// A file of the revision (inline comment).
        #[arg(long)]
        path: Option<String>,
        /// A line of that file (1-based).
        #[arg(long, requires = "path")]
        line: Option<u32>,
        /// Revision number (default: the latest when --path is given).
        #[arg(long)]
        rev: Option<u32>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Check a revision out on the local branch patch/<id>.
    Checkout {
        /// Patch id or unique prefix.
        id: String,
        /// Revision number (default: the latest).
        #[arg(long)]
        rev: Option<u32>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Close a patch without merging it.
    Close {
        /// Patch id or unique prefix.
        id: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Merge the latest revision into the base branch (fast-forward, else a
    /// merge commit): on the server by its merge rule, or in this clone
    /// (push the branch yourself) for a plain git remote.
    Merge {
        /// Patch id or unique prefix.
        id: String,
        /// Queue the merge on the server: it merges the latest revision as
        /// soon as the merge rule allows (checks green, votes in), with no
        /// client connected (server mode).
        #[arg(long, conflicts_with = "cancel")]
        when_green: bool,
        /// Drop a merge queued with --when-green (server mode).
        #[arg(long)]
        cancel: bool,
        #[command(flatten)]
        fence: FenceFlag,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Push a commit for review (`git push <remote> HEAD:refs/for/<base>`):
    /// opens a patch, or adds a revision to --patch (server mode only).
    Push {
        /// The branch the patch targets (default: the remote's default
        /// branch, else init.defaultBranch, else main).
        #[arg(long)]
        base: Option<String>,
        /// The commit to propose.
        #[arg(long, default_value = "HEAD")]
        head: String,
        /// Add a revision to this patch instead of opening a new one.
        #[arg(long, value_name = "ID")]
        patch: Option<String>,
        /// Link an issue (repeatable).
        #[arg(long = "issue", value_name = "ID")]
        issues: Vec<String>,
        /// One-line title of a new patch (default: the head commit's subject).
        #[arg(short, long)]
        title: Option<String>,
        /// One-line description of a new patch (default: the head commit's body).
        #[arg(short, long)]
        body: Option<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
}

/// Exactly one review verdict.
#[derive(Debug, Clone, Copy, Args)]
#[group(required = true, multiple = false)]
pub struct VerdictFlags {
    /// Approve the revision.
    #[arg(long)]
    pub approve: bool,
    /// Ask for changes.
    #[arg(long)]
    pub request_changes: bool,
    /// Neither: a review comment.
    #[arg(long)]
    pub comment: bool,
}

#[derive(Debug, Subcommand)]
pub enum CheckCmd {
    /// Set a check on a commit (needs the `checks` access level or write):
    /// `git collab check set HEAD ci/test --state success`.
    Set {
        /// The commit: any revision this clone knows (`HEAD`, a branch, an
        /// id); its full id is sent.
        commit: String,
        /// The check's name: `ci/test`, `lint` (letters, digits, `/._-`).
        name: String,
        /// pending, success, failure, error or skipped.
        #[arg(long)]
        state: String,
        /// One line about the run (spaces need no extra quoting here).
        #[arg(long)]
        description: Option<String>,
        /// Where the run is (http or https).
        #[arg(long)]
        url: Option<String>,
        /// The git remote whose server keeps the checks.
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// The checks on a commit (a revision this clone knows) or on a patch
    /// (its id: the latest revision's head); HEAD when omitted.
    List {
        /// A commit (any revision this clone knows) or a patch id.
        target: Option<String>,
        /// The git remote whose server keeps the checks.
        #[arg(long, default_value = "origin")]
        remote: String,
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
        /// The git remote whose server keeps the releases.
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Download one file of a release, or all of them; checksums are verified.
    Download {
        /// The release's tag.
        tag: String,
        /// One file; all files of the release when omitted.
        file: Option<String>,
        /// Directory to write into (created if missing; files are replaced).
        #[arg(short = 'o', long = "output", default_value = ".")]
        dir: PathBuf,
        /// The git remote whose server keeps the release.
        #[arg(long, default_value = "origin")]
        remote: String,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Delete one file of a release, or the whole release.
    Delete {
        /// The release's tag.
        tag: String,
        /// One file; the whole release when omitted.
        file: Option<String>,
        /// The git remote whose server keeps the release.
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every subcommand says what it is for in `--help`.
    #[test]
    fn every_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "git-collab", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }
}
