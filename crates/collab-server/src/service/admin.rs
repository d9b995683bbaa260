//! The identity and administration verbs: `collab-whoami` (who the server
//! thinks you are), `help` (the verbs open to you), `info` (what you may
//! read, gitolite-style) and `collab-repo
//! create|list|gc|describe|visibility|set-head|rename|delete`. Access
//! decisions are `authz`'s, the disk work `repo_admin`'s and the database
//! side `collab_store::repos`'; this module checks arguments and formats replies.

use collab_proto::replies::admin as wire;
use serde_json::json;

use super::command::RepoCmd;
use super::context::{authorize_repo, Context};
use super::reply::reply_line;

/// A reply line and its exit status.
type Reply = (String, u32);

fn done(line: &str, code: u32) -> Reply {
    (line.to_string(), code)
}
use crate::authz::{self, Access, Regime};
use crate::repo_admin;
use crate::repos::{self, CreateError, RepoEntry};
use collab_proto::verbs::Need;

/// How to get the access `collab-repo create` needs, in the refusal.
const CREATE_HINT: &str = "error: permission denied: creating repositories needs rewind access \
     (an admin key: add yours to initial_admin_keys, or run `git-collab-server repo create` \
     on the host; see docs/access-control.md)";

/// `collab-whoami` -> `{"principal", "regime", "name", "fingerprint",
/// "admin", "key", "server_key"}` (and `certificate` for a certificate
/// login); `key` is the OpenSSH line to enroll in
/// governance, `server_key` the server's signing key (webhook `v1a,`
/// signatures are made with it).
pub async fn whoami(ctx: &Context) -> Reply {
    let caller = &ctx.caller;
    let mut key = caller.identity.key.clone();
    key.set_comment("");
    // A key the server knows (authorized_keys) that governance has not
    // enrolled gets no repository access; say so, and how to fix it.
    let closed = matches!(caller.regime, Regime::Closed);
    let reply = wire::Whoami {
        key: key.to_openssh().ok(),
        principal: caller.principal().to_string(),
        regime: caller.regime.as_str().to_string(),
        name: caller.name().map(str::to_string),
        fingerprint: caller.identity.fingerprint.clone(),
        admin: caller.identity.admin,
        server_key: ctx.app.signing_key.public_key_line(),
        // A certificate login: which certificate, so an agent can tell
        // which of its credentials the server saw.
        certificate: caller
            .identity
            .certificate
            .as_ref()
            .map(|cert| wire::CertificateShown {
                principal: cert.principal.clone(),
                key_id: cert.key_id.clone(),
                serial: cert.serial,
                ca: cert.ca.clone(),
                valid_before: cert.certificate.valid_before(),
            }),
        enrolled: closed.then_some(false),
        hint: closed.then(|| {
            "this key is admitted but not enrolled: ask a governance admin to add the `key` \
             line to a principal in governance.toml (_governance.git)"
                .to_string()
        }),
    };
    done(&reply_line(&reply), 0)
}

/// `collab-repo create '<name>'` (needs Rewind on the name) and
/// `collab-repo list` (the repositories the caller can read).
pub async fn repo(ctx: &Context, cmd: RepoCmd) -> Reply {
    // The level its row of the verb table asks (a setting shown: read; set:
    // rewind); `create` and `list` have rules of their own.
    let needed = cmd.needed_access();
    match cmd {
        RepoCmd::Create { name } => create(ctx, &name).await,
        RepoCmd::List => list(ctx).await,
        RepoCmd::Describe { repo, text } => describe(ctx, needed, &repo, text).await,
        RepoCmd::Visibility { repo, public } => visibility(ctx, needed, &repo, public).await,
        RepoCmd::SetHead { repo, branch } => set_head(ctx, needed, &repo, &branch).await,
        RepoCmd::Rename { repo, new_name } => rename(ctx, needed, &repo, &new_name).await,
        RepoCmd::Delete { repo, confirm } => delete(ctx, needed, &repo, &confirm).await,
        RepoCmd::Gc { name } => gc(ctx, needed, &name).await,
    }
}

/// Most repositories `info` reports on; past it the reply says it was cut
/// (each one costs a few index reads, and the answer must stay one line).
pub const INFO_MAX_REPOS: usize = 1000;

/// `info [--json]`: every repository the caller may read, with its access.
///
/// Text (gitolite's `info`): a greeting line naming the principal and the
/// server version, a blank line, then ` R    name`, ` RW   name` or
/// ` RW+  name` per repository (Read, Write, Rewind), sorted by name.
/// `--json`: `{"principal", "regime", "server": {"version", "features"},
/// "repos": [{"name", "access", "open_issues", "open_patches"}],
/// "leases": [{"repo", "issue", "token", "expires_at", "note"}],
/// "truncated"}`, the leases being the caller's own live ones. Only
/// repositories `authz` says the caller may read are ever named.
pub async fn info(ctx: &Context, json: bool) -> Reply {
    let repos_dir = ctx.app.config.repos_dir.clone();
    let entries = tokio::task::spawn_blocking(move || repos::list_repos(&repos_dir))
        .await
        .unwrap_or_default();
    let mut visible: Vec<(RepoEntry, Access)> = entries
        .into_iter()
        .filter_map(|entry| {
            let level = authz::repo_access(&ctx.app, &ctx.caller, &entry)?;
            Some((entry, level))
        })
        .collect();
    visible.sort_by(|a, b| a.0.short_name().cmp(b.0.short_name()));
    let truncated = visible.len() > INFO_MAX_REPOS;
    visible.truncate(INFO_MAX_REPOS);
    let principal = ctx.caller.principal().to_string();
    let version = env!("CARGO_PKG_VERSION");
    if !json {
        let mut out = format!("hello {principal}, this is git-collab-server {version}\n\n");
        for (entry, level) in &visible {
            let letters = letters(*level);
            out.push_str(&format!(" {letters:<4} {}\n", entry.short_name()));
        }
        if truncated {
            out.push_str(&format!("(only the first {INFO_MAX_REPOS} are shown)\n"));
        }
        return done(&out, 0);
    }
    let names: Vec<String> = visible.iter().map(|(e, _)| e.name.clone()).collect();
    let holder = principal.clone();
    let now = chrono::Utc::now().timestamp();
    let counted = ctx
        .app
        .reads
        .read(move |conn| {
            let mut counts = Vec::with_capacity(names.len());
            let mut leases = Vec::new();
            for name in &names {
                let issues = collab_store::issues::count(
                    conn,
                    name,
                    collab_store::issues::StateFilter::Open,
                    &[],
                )?;
                let patches = collab_store::patches::count(
                    conn,
                    name,
                    collab_store::patches::StateFilter::Open,
                )?;
                let id = collab_store::repo_ids::live_id(conn, name)?;
                counts.push((issues, patches, id));
                leases.extend(
                    collab_store::leases::list(conn, name, now)?
                        .into_iter()
                        .filter(|l| l.holder == holder),
                );
            }
            Ok((counts, leases))
        })
        .await;
    let (counts, leases) = match counted {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("info: reading the collab database: {e:#}");
            return done("error: internal error", 1);
        }
    };
    // What each holds in git-lfs, counted on disk as `/metrics` does.
    let store = crate::lfs::store::LfsStore::new(&ctx.app.config.state_dir);
    let ids: Vec<Option<String>> = counts.iter().map(|c| c.2.clone()).collect();
    let usage = tokio::task::spawn_blocking(move || {
        ids.iter()
            .map(|id| {
                id.as_deref()
                    .and_then(|id| store.usage(id).ok())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let repos: Vec<_> = visible
        .iter()
        .zip(&counts)
        .enumerate()
        .map(|(i, ((entry, level), (issues, patches, _)))| {
            let lfs = usage.get(i).copied().unwrap_or_default();
            wire::InfoRepo {
                name: entry.short_name().to_string(),
                access: level.as_str().to_string(),
                letters: letters(*level).to_string(),
                open_issues: *issues,
                open_patches: *patches,
                lfs_objects: lfs.objects,
                lfs_bytes: lfs.bytes,
            }
        })
        .collect();
    let leases: Vec<_> = leases
        .iter()
        .map(|l| wire::InfoLease {
            repo: l.repo.strip_suffix(".git").unwrap_or(&l.repo).to_string(),
            issue: l.issue_id.clone(),
            token: l.token,
            expires_at: l.expires_at,
            note: l.note.clone(),
        })
        .collect();
    let mut features = vec![
        "issues",
        "patches",
        "leases",
        "work-queue",
        "releases",
        "events",
        "webhooks",
    ];
    if ctx.app.certs.enabled() {
        features.push("ssh-certificates");
    }
    if matches!(
        ctx.app.governance.state().as_ref(),
        crate::governance::GovState::Active(_)
    ) {
        features.push("governance");
    }
    let reply = wire::Info {
        principal,
        regime: ctx.caller.regime.as_str().to_string(),
        server: wire::ServerShown {
            version: version.to_string(),
            features: features.into_iter().map(str::to_string).collect(),
        },
        repos,
        leases,
        truncated,
    };
    done(&reply_line(&reply), 0)
}

/// gitolite's letters for a level.
fn letters(level: Access) -> &'static str {
    match level {
        Access::Read => "R",
        // Read plus posting checks; gitolite has no letter for it.
        Access::Checks => "RC",
        Access::Write => "RW",
        Access::Rewind => "RW+",
    }
}

/// `help`: one JSON object listing the verbs this caller may use, each
/// with its usage and the access it needs.
pub async fn help(ctx: &Context) -> Reply {
    let closed = matches!(ctx.caller.regime, Regime::Closed);
    let may_create = match &ctx.caller.regime {
        Regime::Ungoverned { admin } => *admin,
        Regime::Governed { .. } => true, // per name: rewind on it
        Regime::Closed => false,
    };
    // The verb table's rows, grouped by family and access; a closed key
    // sees only what any caller may run.
    let verbs = collab_proto::verbs::help_groups(|verb| match verb.need {
        Need::Anyone => true,
        _ if closed => false,
        _ if verb.family == "collab-repo" && verb.action == "create" => may_create,
        _ => true,
    });
    let reply = wire::Help {
        principal: ctx.caller.principal().to_string(),
        regime: ctx.caller.regime.as_str().to_string(),
        verbs: verbs
            .into_iter()
            .map(|group| wire::HelpVerb {
                verb: group.verb,
                access: group.access.to_string(),
            })
            .collect(),
        docs: "docs/ssh-verbs.md".to_string(),
    };
    done(&reply_line(&reply), 0)
}

/// Resolve `repo` with at least `needed` for `what_needs` (see
/// `authorize_or_reply`).
fn resolve(
    ctx: &Context,
    repo: &str,
    needed: Access,
    what_needs: &str,
) -> Result<RepoEntry, Reply> {
    authorize_repo(ctx, repo, needed, what_needs)
}

async fn describe(ctx: &Context, needed: Access, repo: &str, text: Option<String>) -> Reply {
    let entry = match resolve(ctx, repo, needed, "repository settings need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    if let Some(text) = text {
        if let Err(e) = repo_admin::check_description(&text) {
            return done(&format!("error: {e}"), 1);
        }
        if let Err(e) = repo_admin::set_description(&entry.path, &text) {
            tracing::error!(repo = entry.name, "collab-repo describe: {e:#}");
            return done("error: internal error", 1);
        }
        record_settings(ctx, &entry.name, json!({"description": text})).await;
    }
    let reply = wire::RepoDescription {
        description: repo_admin::description(&entry.path),
        repo: entry.name,
    };
    done(&reply_line(&reply), 0)
}

async fn visibility(ctx: &Context, needed: Access, repo: &str, public: Option<bool>) -> Reply {
    let entry = match resolve(ctx, repo, needed, "repository settings need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    if let Some(public) = public {
        if !matches!(ctx.caller.regime, Regime::Ungoverned { .. }) {
            return done(
                "error: this server is governed: set `public` for the repository in \
                 governance.toml (_governance.git), see docs/access-control.md",
                1,
            );
        }
        if entry.policy.broken.is_some() {
            return done(
                "error: the repository's collab-policy.toml does not parse; fix it by hand first",
                1,
            );
        }
        if let Err(e) = repo_admin::set_public(&entry.path, public) {
            tracing::error!(repo = entry.name, "collab-repo visibility: {e:#}");
            return done("error: internal error", 1);
        }
        record_settings(ctx, &entry.name, json!({"public": public})).await;
    }
    let now_public = match public {
        Some(p) => p,
        None => authz::anonymous_can_read(&ctx.app, &entry),
    };
    let reply = wire::RepoVisibility {
        repo: entry.name,
        visibility: if now_public { "public" } else { "private" }.to_string(),
    };
    done(&reply_line(&reply), 0)
}

async fn set_head(ctx: &Context, needed: Access, repo: &str, branch: &str) -> Reply {
    let entry = match resolve(ctx, repo, needed, "repository settings need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    let branch = branch
        .strip_prefix("refs/heads/")
        .unwrap_or(branch)
        .to_string();
    let path = entry.path.clone();
    let wanted = branch.clone();
    let result = tokio::task::spawn_blocking(move || repo_admin::set_head(&path, &wanted))
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")));
    if let Err(e) = result {
        return done(&format!("error: {e}"), 1);
    }
    record_settings(ctx, &entry.name, json!({"head": branch})).await;
    let reply = wire::RepoHead {
        repo: entry.name,
        head: branch.to_string(),
    };
    done(&reply_line(&reply), 0)
}

async fn rename(ctx: &Context, needed: Access, repo: &str, new_name: &str) -> Reply {
    let entry = match resolve(ctx, repo, needed, "repository settings need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    if entry.is_governance() {
        return done("error: the governance repository cannot be renamed", 1);
    }
    if let Err(e) = repos::normalize_repo_name(new_name) {
        return done(&format!("error: invalid repository name: {e}"), 1);
    }
    if !authz::can_create_repo(&ctx.app, &ctx.caller, new_name) {
        return done(
            "error: permission denied: the new name needs rewind access (creating a repository)",
            1,
        );
    }
    let repos_dir = ctx.app.config.repos_dir.clone();
    let moved = entry.clone();
    let target = new_name.to_string();
    let renamed =
        tokio::task::spawn_blocking(move || repo_admin::rename(&repos_dir, &moved, &target))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")));
    let new_canonical = match renamed {
        Ok(name) => name,
        Err(e) => return done(&format!("error: {e:#}"), 1),
    };
    // Leases, fencing high-water marks and everything else keyed by the name
    // follow the repository; if that fails, the move is undone.
    let (old, new, actor) = (
        entry.name.clone(),
        new_canonical.clone(),
        ctx.caller.principal().to_string(),
    );
    let db = ctx
        .app
        .writer
        .write_exclusive("rename repository", move |conn, now| {
            Ok(collab_store::repos::rename(conn, &old, &new, &actor, now)?)
        })
        .await;
    if let Err(e) = db {
        tracing::error!(repo = entry.name, "collab-repo rename: database: {e:#}");
        let back = ctx.app.config.repos_dir.join(&new_canonical);
        if let Err(e) = std::fs::rename(&back, &entry.path) {
            tracing::error!(repo = entry.name, "collab-repo rename: moving back: {e}");
        }
        return done("error: internal error", 1);
    }
    move_release_dir(ctx, &entry.name, Some(&new_canonical));
    tracing::info!(
        principal = ctx.caller.principal(),
        from = entry.name,
        to = new_canonical,
        "repository renamed"
    );
    let reply = wire::RepoRenamed {
        status: "renamed".to_string(),
        from: entry.name,
        repo: new_canonical,
    };
    done(&reply_line(&reply), 0)
}

async fn delete(ctx: &Context, needed: Access, repo: &str, confirm: &str) -> Reply {
    let entry = match resolve(ctx, repo, needed, "repository settings need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    let same = |a: &str| {
        repos::normalize_repo_name(a)
            .map(|n| n.trim_end_matches(".git").to_string())
            .ok()
    };
    if same(confirm) != Some(entry.short_name().to_string()) {
        return done(
            &format!(
                "error: to delete {}, repeat its name: --confirm '{}'",
                entry.name,
                entry.short_name()
            ),
            1,
        );
    }
    if entry.is_governance() {
        return done("error: the governance repository cannot be deleted", 1);
    }
    let trash = ctx.app.config.state_dir.join("trash");
    let gone = entry.clone();
    let removed = tokio::task::spawn_blocking(move || repo_admin::delete(&gone, &trash))
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")));
    if let Err(e) = removed {
        tracing::error!(repo = entry.name, "collab-repo delete: {e:#}");
        if entry.path.exists() {
            return done("error: internal error", 1);
        }
    }
    let (name, actor) = (entry.name.clone(), ctx.caller.principal().to_string());
    match ctx
        .app
        .writer
        .write("delete repository", move |conn, now| {
            // Its git-lfs objects are kept by its lasting id, read before
            // the delete takes the name from it.
            let lfs_id = collab_store::repo_ids::live_id(conn, &name)?;
            collab_store::repos::delete(conn, &name, &actor, now)?;
            Ok(lfs_id)
        })
        .await
    {
        Ok(lfs_id) => remove_lfs_objects(ctx, &entry.name, lfs_id).await,
        // The repository is gone from disk; stale rows only name a missing
        // repository and are dropped again by a later delete.
        Err(e) => tracing::error!(repo = entry.name, "collab-repo delete: database: {e:#}"),
    }
    move_release_dir(ctx, &entry.name, None);
    tracing::info!(
        principal = ctx.caller.principal(),
        repo = entry.name,
        "repository deleted"
    );
    let reply = wire::RepoChanged {
        status: "deleted".to_string(),
        repo: entry.name,
    };
    done(&reply_line(&reply), 0)
}

/// A deleted repository's git-lfs objects go with it.
async fn remove_lfs_objects(ctx: &Context, repo: &str, lfs_id: Option<String>) {
    let Some(id) = lfs_id else { return };
    let store = crate::lfs::store::LfsStore::new(&ctx.app.config.state_dir);
    let removed = tokio::task::spawn_blocking(move || store.remove_repo(&id)).await;
    if let Ok(Err(e)) | Err(e) = removed.map_err(std::io::Error::other) {
        tracing::error!(repo, "removing git-lfs objects: {e}");
    }
}

/// Release files live beside the repositories, by repository name: move
/// them with a rename, drop them with a delete.
fn move_release_dir(ctx: &Context, old: &str, new: Option<&str>) {
    let releases = ctx.app.config.releases_dir();
    let from = releases.join(old);
    if !from.exists() {
        return;
    }
    let result = match new {
        Some(new) => {
            let to = releases.join(new);
            to.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::rename(&from, &to))
        }
        None => std::fs::remove_dir_all(&from),
    };
    if let Err(e) = result {
        tracing::error!(repo = old, "moving release files: {e}");
    }
}

/// Append `repo.settings_changed`; a failure is logged, the change stands.
async fn record_settings(ctx: &Context, repo: &str, payload: serde_json::Value) {
    let (repo_name, actor) = (repo.to_string(), ctx.caller.principal().to_string());
    if let Err(e) = ctx
        .app
        .writer
        .write("record repository settings", move |conn, now| {
            Ok(collab_store::repos::settings_changed(
                conn, &repo_name, &actor, payload, now,
            )?)
        })
        .await
    {
        tracing::error!(repo, "recording a settings change: {e:#}");
    }
}

/// `collab-repo gc '<repo>'`: run maintenance now and wait for it (after a
/// run or backup in progress on the repository). Needs Rewind; a reader is
/// told so, anyone else gets "not found".
async fn gc(ctx: &Context, needed: Access, name: &str) -> Reply {
    let entry = match resolve(ctx, name, needed, "collab-repo gc needs") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    let public = authz::anonymous_can_read(&ctx.app, &entry);
    match ctx
        .app
        .maintenance
        .run_now(&entry.path, &entry.name, public)
        .await
    {
        Ok(report) => {
            let reply = wire::GcDone {
                status: "done".to_string(),
                repo: entry.name.clone(),
                started_at: report.started_at,
                seconds: report.seconds,
                packs_before: report.packs_before,
                packs_after: report.packs_after,
                loose_before: report.loose_before,
                loose_after: report.loose_after,
                leftovers_removed: report.leftovers_removed as u64,
                bitmap: report.bitmap,
                lfs_objects_removed: report.lfs_objects_removed,
                lfs_bytes_removed: report.lfs_bytes_removed,
            };
            done(&reply_line(&reply), 0)
        }
        Err(e) => {
            tracing::error!(repo = entry.name, "collab-repo gc: {e:#}");
            done("error: maintenance failed", 1)
        }
    }
}

async fn create(ctx: &Context, name: &str) -> Reply {
    if let Err(e) = repos::normalize_repo_name(name) {
        return done(&format!("error: invalid repository name: {e}"), 1);
    }
    // Refused before looking at the disk, so it says nothing about whether
    // the repository exists.
    if !authz::can_create_repo(&ctx.app, &ctx.caller, name) {
        return done(CREATE_HINT, 1);
    }
    let repos_dir = ctx.app.config.repos_dir.clone();
    let owned = name.to_string();
    let result = tokio::task::spawn_blocking(move || repos::create_repo_in(&repos_dir, &owned))
        .await
        .unwrap_or_else(|e| Err(CreateError::Io(anyhow::anyhow!("{e}"))));
    match result {
        Ok((created, _path)) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = created,
                "repository created"
            );
            crate::events::Recorded::repo_created(&created, ctx.caller.principal())
                .record_or_log(&ctx.app.writer)
                .await;
            let reply = wire::RepoChanged {
                status: "created".to_string(),
                repo: created,
            };
            done(&reply_line(&reply), 0)
        }
        Err(CreateError::Io(e)) => {
            tracing::error!("creating repository {name}: {e:#}");
            done("error: internal error", 1)
        }
        Err(e) => done(&format!("error: {e}"), 1),
    }
}

async fn list(ctx: &Context) -> Reply {
    let visible = visible_repos(ctx).await;
    done(&reply_line(&visible), 0)
}

/// `collab-repo list`'s reply: the repositories the caller can read, each
/// with the caller's access (the terminal UI lists the same).
pub async fn visible_repos(ctx: &Context) -> wire::RepoList {
    let repos_dir = ctx.app.config.repos_dir.clone();
    let entries = tokio::task::spawn_blocking(move || repos::list_repos(&repos_dir))
        .await
        .unwrap_or_default();
    let repos = entries
        .iter()
        .filter_map(|entry| {
            let level = authz::repo_access(&ctx.app, &ctx.caller, entry)?;
            Some(wire::RepoAccess {
                name: entry.name.clone(),
                access: level.as_str().to_string(),
            })
        })
        .collect();
    wire::RepoList { repos }
}
