//! `collab-check set|list`: commit checks (CI results), kept in the
//! database by (repository identity, commit, name) with their history as
//! `check.updated` events (docs/checks.md).
//!
//! ```text
//! collab-check set  '<repo>' '<commit>' '<name>' --state pending|success|failure|error|skipped [--url U] [--description D] [--lease-token N]
//! collab-check list '<repo>' '<commit>|<patch id>'
//! ```
//!
//! `set` needs the `checks` level (or write): a CI key may post results
//! without being able to push. The commit must be in the repository; names,
//! URLs and descriptions are bounded and validated before anything is
//! written. With `--lease-token N` the check is fenced: it is written only
//! if the caller holds, with token N, the live lease of an issue linked to
//! a patch one of whose revisions has this commit as its head (read in the
//! write's transaction), so a CI run that lost its lease (a zombie) cannot
//! overwrite the result of the run that took over. `list` needs read; given a patch it lists the checks of its
//! latest revision's head.

use serde_json::Value;

use super::context::{authorize_repo, Context};
use super::reply::json_line;
use crate::authz::Access;
use crate::repos::RepoEntry;
use collab_proto::replies::check as replies;
use collab_proto::replies::fenced::Fenced;
use collab_proto::verbs::Invocation;
use collab_store::checks::{self as store, Check};
use collab_store::patches;

pub use collab_store::checks::MAX_NAME;
/// Longest `--url`, in bytes.
pub const MAX_URL: usize = 2048;
/// Longest `--description`, in bytes.
pub const MAX_DESCRIPTION: usize = 1024;
/// Most distinct checks on one commit: a runaway CI cannot grow a
/// commit's row set (or `collab-patch show`) without bound.
pub const MAX_PER_COMMIT: i64 = 100;

/// A parsed `collab-check` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckCmd {
    Set {
        repo: String,
        commit: String,
        name: String,
        state: String,
        url: Option<String>,
        description: Option<String>,
        /// `--lease-token`: fence the write by the caller's live tenure.
        fence: Option<i64>,
    },
    List {
        repo: String,
        target: String,
    },
}

impl CheckCmd {
    pub fn repo(&self) -> &str {
        match self {
            CheckCmd::Set { repo, .. } | CheckCmd::List { repo, .. } => repo,
        }
    }

    pub fn verb(&self) -> &'static str {
        match self {
            CheckCmd::Set { .. } => "collab-check set",
            CheckCmd::List { .. } => "collab-check list",
        }
    }

    /// `None` for a row of the family this has no arm for (then
    /// `every_verb_has_a_handler` fails).
    pub fn from_invocation(inv: &Invocation<'_>) -> Option<CheckCmd> {
        let repo = inv.arg("repo").to_string();
        Some(match inv.verb.action {
            "set" => CheckCmd::Set {
                repo,
                commit: inv.arg("commit").to_string(),
                name: inv.arg("name").to_string(),
                state: inv.flag("--state").unwrap_or_default().to_string(),
                url: inv.flag("--url").map(str::to_string),
                description: inv.flag("--description").map(str::to_string),
                fence: inv.int("--lease-token"),
            },
            "list" => CheckCmd::List {
                repo,
                target: inv.arg("target").to_string(),
            },
            _ => return None,
        })
    }

    /// The level its row asks on the repository.
    pub fn needed_access(&self) -> Access {
        collab_proto::verbs::level(self.verb(), |_| None)
    }
}

type Reply = (String, u32);

fn err(message: impl std::fmt::Display) -> Reply {
    (format!("error: {message}"), 1)
}

fn internal(e: anyhow::Error) -> Reply {
    tracing::error!("collab-check: {e:#}");
    super::reply::internal_reply(&e)
}

/// A full commit id: 40 (SHA-1) or 64 (SHA-256) hex digits, lower case.
fn full_commit_id(text: &str) -> Option<String> {
    ((text.len() == 40 || text.len() == 64) && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| text.to_ascii_lowercase())
}

pub use collab_store::checks::valid_name;

/// A `--url`: http or https with a host, no whitespace or control
/// characters, at most [`MAX_URL`] bytes (shown as a link on the web, so
/// no `javascript:` or `data:`).
pub fn valid_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL {
        return Err(format!("invalid --url: at most {MAX_URL} bytes"));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("invalid --url: no spaces or control characters".into());
    }
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .ok_or("invalid --url: only http:// and https:// URLs")?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') || host.contains('@') {
        return Err("invalid --url: it needs a host (and no user name)".into());
    }
    Ok(())
}

/// A `--description`: one line of at most [`MAX_DESCRIPTION`] bytes.
pub fn valid_description(text: &str) -> Result<(), String> {
    if text.len() > MAX_DESCRIPTION {
        return Err(format!(
            "invalid --description: at most {MAX_DESCRIPTION} bytes"
        ));
    }
    if text.chars().any(char::is_control) {
        return Err("invalid --description: no control characters (one line)".into());
    }
    Ok(())
}

/// A check as its replies show it (`collab-check list`, `collab-patch show`).
pub fn check_row(c: &Check) -> replies::CheckRow {
    replies::CheckRow {
        name: c.name.clone(),
        state: c.state.clone(),
        url: c.url.clone(),
        description: c.description.clone(),
        updated_by: c.updated_by.clone(),
        updated_at: crate::events::rfc3339(c.updated_at),
    }
}

/// A typed reply as the JSON value the reply line is written from.
fn to_json(reply: impl serde::Serialize) -> Value {
    serde_json::to_value(reply).expect("a reply serializes")
}

/// Run one `collab-check` command.
pub async fn reply(ctx: &Context, cmd: CheckCmd) -> (String, u32) {
    let needed = cmd.needed_access();
    let entry = match authorize_repo(ctx, cmd.repo(), needed, "posting checks needs") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    match cmd {
        CheckCmd::Set {
            commit,
            name,
            state,
            url,
            description,
            fence,
            ..
        } => set(ctx, &entry, commit, name, state, url, description, fence).await,
        CheckCmd::List { target, .. } => list(ctx, &entry, target).await,
    }
}

/// Whether `commit` is a commit of the repository at `path` that a ref
/// reaches.
async fn has_commit(entry: &RepoEntry, commit: &str) -> bool {
    let (path, commit) = (entry.path.clone(), commit.to_string());
    tokio::task::spawn_blocking(move || {
        let Ok(repo) = git2::Repository::open_bare(&path) else {
            return false;
        };
        // Reachable from a ref too: a commit deleted or force-pushed away
        // is no commit of the repository's any more (`crate::wants`).
        let found = git2::Oid::from_str(&commit)
            .ok()
            .and_then(|oid| repo.find_commit(oid).ok())
            .is_some_and(|c| crate::wants::reachable(&repo, c.id()));
        found
    })
    .await
    .unwrap_or(false)
}

/// What the write of a `set` did.
enum SetOutcome {
    Written(store::Set),
    /// The commit has [`MAX_PER_COMMIT`] checks and this would be a new one.
    Full,
    /// `--lease-token` is not the caller's live tenure.
    Fenced(Value),
}

/// The fencing of a check by `token`: `Ok` when the caller holds the live
/// lease, with that token, of an issue linked to a patch whose revision has
/// `commit` as its head; else the `fenced` reply's JSON.
fn fence_check(
    conn: &collab_store::sql::Connection,
    repo: &str,
    commit: &str,
    principal: &str,
    token: i64,
    now: i64,
) -> anyhow::Result<Result<(), Value>> {
    let issues = store::linked_issues_of_head(conn, repo, commit)?;
    if issues.is_empty() {
        let message = format!(
            "commit {} is the head of no patch linked to an issue, so lease token {token} fences nothing",
            &commit[..8]
        );
        return Ok(Err(to_json(Fenced::new(
            repo,
            None,
            None,
            None,
            Some(message),
        ))));
    }
    let held = crate::patch_merge::holds_one_of(conn, repo, &issues, principal, token, now)?;
    Ok(held.map_err(|f| {
        to_json(Fenced::new(
            repo,
            Some(f.issue),
            f.holder,
            f.token,
            Some(f.message),
        ))
    }))
}

#[allow(clippy::too_many_arguments)]
async fn set(
    ctx: &Context,
    entry: &RepoEntry,
    commit: String,
    name: String,
    state: String,
    url: Option<String>,
    description: Option<String>,
    fence: Option<i64>,
) -> Reply {
    let Some(commit) = full_commit_id(&commit) else {
        return err("invalid commit: a full commit id (40 hex digits)");
    };
    if let Err(e) = valid_name(&name) {
        return err(e);
    }
    if let Some(Err(e)) = url.as_deref().map(valid_url) {
        return err(e);
    }
    if let Some(Err(e)) = description.as_deref().map(valid_description) {
        return err(e);
    }
    if !has_commit(entry, &commit).await {
        return err(format!("no commit {commit} in {}", entry.name));
    }
    let repo = entry.name.clone();
    let check = Check {
        commit,
        name,
        state,
        url,
        description,
        updated_by: ctx.caller.principal().to_string(),
        updated_at: 0,
    };
    let written = {
        let (repo, check) = (repo.clone(), check.clone());
        ctx.app
            .writer
            .write_in(repo.clone(), "collab-check set", move |conn, now| {
                if let Some(token) = fence {
                    let principal = check.updated_by.clone();
                    if let Err(reply) =
                        fence_check(conn, &repo, &check.commit, &principal, token, now)?
                    {
                        return Ok(SetOutcome::Fenced(reply));
                    }
                }
                let known = store::list(conn, &repo, &check.commit)?
                    .iter()
                    .any(|c| c.name == check.name);
                if !known && store::count(conn, &repo, &check.commit)? >= MAX_PER_COMMIT {
                    return Ok(SetOutcome::Full);
                }
                Ok(SetOutcome::Written(store::set(conn, &repo, &check, now)?))
            })
            .await
    };
    match written {
        Ok(SetOutcome::Written(w)) => {
            tracing::info!(
                repo,
                commit = check.commit,
                check = check.name,
                state = check.state,
                by = ctx.caller.principal(),
                "check set"
            );
            let reply = replies::CheckSet {
                status: "set".into(),
                repo,
                commit: check.commit,
                name: check.name,
                state: check.state,
                previous_state: w.previous,
                event: "check.updated".into(),
                seq: ctx.app.writer.final_seq(w.seq),
            };
            (json_line(&to_json(reply)), 0)
        }
        Ok(SetOutcome::Fenced(reply)) => (json_line(&reply), collab_proto::exit::FENCED),
        Ok(SetOutcome::Full) => err(format!(
            "commit {} has {MAX_PER_COMMIT} checks already",
            check.commit
        )),
        Err(e) => internal(e),
    }
}

/// The head of `id`'s latest revision, `Ok(None)` when no patch matches.
pub async fn patch_head(
    ctx: &Context,
    repo: &str,
    id: &str,
) -> Result<Option<(String, String)>, Reply> {
    let (r, id) = (repo.to_string(), id.to_string());
    let read = ctx
        .app
        .reads
        .read(move |conn| Ok(patches::show(conn, &r, &id)))
        .await;
    match read {
        Ok(Ok(detail)) => Ok(detail
            .latest()
            .map(|rev| (detail.patch.id.clone(), rev.head.clone()))),
        Ok(Err(patches::PatchError::NotFound(_) | patches::PatchError::InvalidId(_))) => Ok(None),
        Ok(Err(patches::PatchError::Sql(e))) => Err(internal(e.into())),
        Ok(Err(e)) => Err(err(e)),
        Err(e) => Err(internal(e)),
    }
}

async fn list(ctx: &Context, entry: &RepoEntry, target: String) -> Reply {
    let repo = entry.name.clone();
    // A patch first (ids are 40 hex digits too, and prefixes are shorter);
    // otherwise a full commit id.
    let (patch, commit) = match patch_head(ctx, &repo, &target).await {
        Err(reply) => return reply,
        Ok(Some((patch, head))) => (Some(patch), head),
        Ok(None) => match full_commit_id(&target) {
            Some(commit) => (None, commit),
            None => {
                return err(format!(
                    "no patch matches '{}', and it is not a full commit id",
                    target.escape_default()
                ))
            }
        },
    };
    let (r, c) = (repo.clone(), commit.clone());
    match ctx
        .app
        .reads
        .read(move |conn| Ok(store::list(conn, &r, &c)?))
        .await
    {
        Ok(checks) => {
            let reply = replies::CheckList {
                repo,
                commit,
                patch,
                checks: checks.iter().map(check_row).collect(),
            };
            (json_line(&to_json(reply)), 0)
        }
        Err(e) => internal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name's help (the `check_set` tool's schema, `help`, the verb
    /// reference) names exactly the characters the server takes, and its
    /// length: issue 50 found `:` accepted but not listed.
    #[test]
    fn the_name_help_says_what_the_server_accepts() {
        let verb = collab_proto::verbs::find("collab-check", "set").unwrap();
        let doc = verb.args.iter().find(|a| a.name == "name").unwrap().doc;
        let listed = doc
            .split("letters, digits and `")
            .nth(1)
            .and_then(|rest| rest.split('`').next())
            .unwrap_or_else(|| panic!("no character list in {doc:?}"));
        for b in 0x21u8..0x7f {
            let c = b as char;
            let said = c.is_ascii_alphanumeric() || listed.contains(c);
            assert_eq!(
                valid_name(&format!("a{c}")).is_ok(),
                said,
                "{c:?}: the help says {doc:?}"
            );
        }
        assert!(doc.contains(&format!("1 to {MAX_NAME} bytes")), "{doc}");
        assert!(doc.contains("starting with a letter or digit"), "{doc}");
    }

    #[test]
    fn names_urls_and_descriptions_are_validated() {
        assert!(valid_name("ci/test").is_ok());
        assert!(valid_name("lint:rust-1.80").is_ok());
        for bad in [
            "",
            "/x",
            "a b",
            "a\u{1b}[31m",
            "a\nb",
            "é",
            &"a".repeat(MAX_NAME + 1),
        ] {
            assert!(valid_name(bad).is_err(), "{bad:?}");
        }
        assert!(valid_url("https://ci.example/run/1?x=1#y").is_ok());
        assert!(valid_url("HTTP://ci.example").is_ok());
        for bad in [
            "javascript:alert(1)",
            "data:text/html,x",
            "ftp://x",
            "https://",
            "https://a b",
            "https://x\u{7}",
            "https://user@host/",
            "//x",
        ] {
            assert!(valid_url(bad).is_err(), "{bad:?}");
        }
        assert!(valid_description("tests passed: 120/120").is_ok());
        assert!(valid_description("a\nb").is_err());
        assert!(valid_description(&"x".repeat(MAX_DESCRIPTION + 1)).is_err());
        assert_eq!(full_commit_id(&"A".repeat(40)), Some("a".repeat(40)));
        assert_eq!(full_commit_id("abcd"), None);
    }
}
