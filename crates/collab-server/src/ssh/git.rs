//! `git-upload-pack` and `git-receive-pack`: authorize, then run
//! `git upload-pack|receive-pack <dir>` with its stdin and stdout streamed
//! over the SSH channel in both directions with backpressure, its stderr sent
//! as extended data, and its exit status forwarded.
//!
//! Backpressure: output goes through `ChannelWriteHalf::make_writer`, which
//! waits for the client's window; input is written to the child from its own
//! task, which drains the channel until it closes (an undrained channel
//! stalls the whole connection).
//!
//! receive-pack runs the server's hooks (`hooks/`), which get the pusher,
//! the repository and the access level `authz` decided through
//! `HookContext`'s environment; the `pre-receive` access check enforces the
//! per-ref rules. Below Rewind, receive-pack also refuses non-fast-forward
//! updates and deletions of branches (`receive.denyNonFastForwards`,
//! `receive.denyDeletes` on the command line, above any repository config):
//! defense in depth, not the rule.
//!
//! A git process whose client went away (the connection dropped, the
//! channel closed, the session ended) is sent SIGTERM, never SIGKILL first
//! ([`GitChild`]): git then removes the push's quarantine directory
//! (`objects/tmp_objdir-incoming-*`) itself, instead of leaving it to the
//! hourly sweep (`maintenance::quarantine`). SIGKILL follows only if it has
//! not ended after [`TERM_GRACE`].
//!
//! Each git process takes a slot from the git process gate
//! (`git.max_processes`, `git.max_processes_per_principal`) before it
//! starts; without one the client gets a one-line `error: …` and exit 1.
//! A protocol v2 conversation answered by the server (`git_v2`) holds no
//! slot while it idles, only while a git process of it runs.

use std::process::Stdio;

use russh::server::Msg;
use russh::{Channel, ChannelMsg};
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::process::Command;

use super::context::{fenced_ref_issue, fenced_refs, git_process_slot, ExecContext};
use super::reply::{reply_and_close, NOT_FOUND};
use crate::authz::{self, Access};
use crate::hooks::HookContext;
use crate::service::command::GitService;
use crate::upload_pack;

/// Copy buffer: one SSH packet's worth.
const CHUNK: usize = 32 * 1024;
/// The largest single allocation `git receive-pack` and its `index-pack`
/// may make (`GIT_ALLOC_LIMIT`): bounds the object a delta resolves to,
/// so one push cannot make the server hold gigabytes. Above any file a
/// forge should take in git (GitHub refuses files over 100 MiB) and
/// above index-pack's own tables for a pack of 20 million objects.
pub const PUSH_ALLOC_LIMIT: u64 = 2 * 1024 * 1024 * 1024;

/// How long a git process told to end (SIGTERM) has before SIGKILL.
const TERM_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A running git process that, when dropped before it was waited for
/// (the client went away mid-push, or the session's task was dropped), is
/// told to end with SIGTERM and reaped in the background: git's signal
/// handler removes the push's quarantine, which a SIGKILL would leave.
struct GitChild(Option<tokio::process::Child>);

impl GitChild {
    fn get(&mut self) -> &mut tokio::process::Child {
        self.0
            .as_mut()
            .expect("a GitChild holds its child until dropped")
    }
}

impl Drop for GitChild {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        // Where this push keeps its objects, read before it ends: if git
        // does not get to remove it (SIGKILL after the grace), we do.
        let quarantines = pid.map(quarantines_of).unwrap_or_default();
        if let Some(pid) = pid {
            // SAFETY: kill(2) on our own child, which has not been reaped
            // (try_wait said it runs), so the pid is still ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if tokio::time::timeout(TERM_GRACE, child.wait())
                        .await
                        .is_err()
                    {
                        let _ = child.kill().await;
                    }
                    for dir in quarantines {
                        // Still there: its objects never reached the
                        // repository, so no ref can point at them.
                        if let Err(e) = std::fs::remove_dir_all(&dir) {
                            if e.kind() != std::io::ErrorKind::NotFound {
                                tracing::warn!("removing {}: {e}", dir.display());
                            }
                        }
                    }
                });
            }
            // No runtime left (shutdown): kill_on_drop ends it.
            Err(_) => drop(child),
        }
    }
}

/// Whether `child` (receive-pack) still holds a push in quarantine.
fn in_quarantine(child: &tokio::process::Child) -> bool {
    child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .is_some_and(|pid| quarantines_of(pid).iter().any(|q| q.exists()))
}

/// The quarantine directories (`GIT_QUARANTINE_PATH`, which receive-pack
/// gives index-pack and the hooks) of `pid`'s descendants, read from
/// `/proc`. Only `tmp_objdir-*` directories inside an `objects` directory
/// are taken. Best effort: empty where there is no `/proc`.
fn quarantines_of(pid: i32) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = entries
        .flatten()
        .filter_map(|e| {
            let child: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((child, ppid))
        })
        .collect();
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(parent) = todo.pop() {
        for &(child, _) in parents.iter().filter(|(_, p)| *p == parent) {
            todo.push(child);
            let Ok(environ) = std::fs::read(format!("/proc/{child}/environ")) else {
                continue;
            };
            for var in environ.split(|&b| b == 0) {
                let Some(path) = var.strip_prefix(b"GIT_QUARANTINE_PATH=") else {
                    continue;
                };
                let mut path = std::path::PathBuf::from(String::from_utf8_lossy(path).into_owned());
                if path.is_relative() {
                    match std::fs::read_link(format!("/proc/{child}/cwd")) {
                        Ok(cwd) => path = cwd.join(path),
                        Err(_) => continue,
                    }
                }
                let is_quarantine = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(crate::maintenance::quarantine::is_quarantine)
                    && path
                        .parent()
                        .and_then(|p| p.file_name())
                        .is_some_and(|n| n == "objects");
                if is_quarantine && !found.contains(&path) {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// Serve one git transport request on `channel`.
pub async fn run(ctx: &ExecContext, channel: Channel<Msg>, service: GitService, requested: &str) {
    // Its row's level (a push's ref updates may need more, per ref).
    let needed = service.needed_access();
    let (entry, level) = match authz::authorize(&ctx.app, &ctx.caller, requested, needed) {
        Ok(found) => found,
        Err(_) => match push_to_create(ctx, service, requested).await {
            Some(found) => found,
            None => return reply_and_close(channel, NOT_FOUND, 1).await,
        },
    };
    // The pack cache (after authorization: the caller may read this
    // repository).
    let cache = match service {
        GitService::UploadPack => ctx.app.config.pack_cache_settings(&entry.path),
        _ => None,
    };
    let protocol = ctx
        .env
        .git_protocol
        .as_deref()
        .filter(|p| upload_pack::sane_protocol(p));
    // A protocol v2 fetch with the pack cache on: the server answers the
    // conversation itself (ssh/git_v2.rs), taking a process slot only for
    // each git process it runs, never for the conversation.
    if let (Some(protocol), Some(settings)) = (protocol.filter(|p| upload_pack::is_v2(p)), &cache) {
        if super::git_v2::enabled() {
            let (settings, protocol) = (settings.clone(), protocol.to_string());
            return super::git_v2::serve(ctx, channel, &entry, settings, protocol).await;
        }
    }
    // git runs for the whole conversation: it holds a slot as long.
    let _slot = match git_process_slot(ctx, service.subcommand()).await {
        Ok(slot) => slot,
        Err(message) => return reply_and_close(channel, &message, 1).await,
    };

    let mut cmd = Command::from(crate::maintenance::git::clean());
    match service {
        GitService::UploadPack => {
            upload_pack::configure(&mut cmd, ctx.app.config.git.nice, cache.as_ref());
        }
        GitService::UploadArchive => {}
        GitService::ReceivePack => {
            let hooks = ctx.app.config.hooks_dir();
            cmd.arg("-c")
                .arg(format!("core.hooksPath={}", hooks.display()));
            // Push options reach the hooks (`-o collab-lease=<issue>:<token>`).
            cmd.args(["-c", "receive.advertisePushOptions=true"]);
            // Push-to-review: `refs/for/*` updates go to the proc-receive
            // hook (`hooks::review`), which records them and never stores
            // the ref.
            cmd.args(["-c", "receive.procReceiveRefs=refs/for"]);
            // The refs only the server writes (revision pins, the signed
            // export) are not advertised to pushers: no client may update
            // them, and leaving them out keeps a push from reading and
            // sending thousands of them (and out of git's connectivity
            // check). A push naming one is refused by git itself.
            for prefix in crate::hooks::access::SERVER_MAINTAINED_PREFIXES {
                cmd.arg("-c")
                    .arg(format!("receive.hideRefs={}", prefix.trim_end_matches('/')));
            }
            // Repacking is the server's maintenance (single-flight, under
            // the repository's lock), never a `gc --auto` after a push.
            cmd.args(["-c", "receive.autogc=false"]);
            // Every push is kept as a pack (`index-pack`), never unpacked
            // into loose objects: moving loose objects out of the push's
            // quarantine needs the fan-out directories `objects/xx/`, which
            // maintenance's `repack -d` (`prune-packed`) removes when it has
            // emptied them, so a push landing then failed with `unable to
            // write file ./objects/xx/…`. Packs go to `objects/pack/`, which
            // nothing removes. The small packs are what the geometric repack
            // rolls up (see maintenance::run, docs/operations.md).
            cmd.args(["-c", "receive.unpackLimit=1"]);
            // Every pushed object is checked as `git fsck` checks it
            // (malformed trees, commits and tags, `.gitmodules` names and
            // URLs that attack clients): a push holding one is refused
            // before any ref moves. `hooks::gitmodules` adds what fsck
            // does not catch (CVE-2025-48384).
            cmd.args(["-c", "receive.fsckObjects=true"]);
            // A delta whose header declares a multi-GiB result (a few KiB
            // of copy instructions can really produce it) makes
            // `index-pack` allocate that much to resolve it: git refuses
            // any one allocation past `GIT_ALLOC_LIMIT` before making it,
            // and the push fails whole (issue 44, the libgit2 1.9.5
            // advisory's pack).
            cmd.env("GIT_ALLOC_LIMIT", PUSH_ALLOC_LIMIT.to_string());
            if level < Access::Rewind {
                cmd.args([
                    "-c",
                    "receive.denyNonFastForwards=true",
                    "-c",
                    "receive.denyDeletes=true",
                ]);
            }
            let hook = HookContext {
                principal: ctx.caller.principal().to_string(),
                fingerprint: ctx.caller.identity.fingerprint.clone(),
                repo: entry.name.clone(),
                access: level,
                state_dir: ctx.app.config.state_dir.clone(),
                collab_db: ctx.app.config.collab_db_location(),
                fenced_refs: fenced_refs(ctx, &entry),
                fenced_ref_issue: fenced_ref_issue(ctx, &entry),
                others_may_revise: crate::authz::merge_rule(&ctx.app, &entry).others_may_revise,
                max_body: ctx.app.config.max_issue_body as usize,
                web_url: web_url(&ctx.app.config.http.listen),
            };
            cmd.envs(hook.to_env());
        }
    }
    cmd.arg(service.subcommand());
    // The path is the server's own (absolute), but no value reaches git
    // where it could be read as an option. `upload-archive` takes exactly
    // one argument and no options, so it gets none.
    if !matches!(service, GitService::UploadArchive) {
        cmd.arg("--end-of-options");
    }
    cmd.arg(&entry.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(protocol) = protocol {
        cmd.env("GIT_PROTOCOL", protocol);
    }

    let mut child = match cmd.spawn() {
        Ok(c) => GitChild(Some(c)),
        Err(e) => {
            tracing::error!("cannot run git {}: {e}", service.subcommand());
            return reply_and_close(channel, "error: internal error", 1).await;
        }
    };
    let (mut stdin, stdout, stderr) = match (
        child.get().stdin.take(),
        child.get().stdout.take(),
        child.get().stderr.take(),
    ) {
        (Some(i), Some(o), Some(e)) => (Some(i), o, e),
        _ => return reply_and_close(channel, "error: internal error", 1).await,
    };

    let (mut rx, tx) = channel.split();
    // Resolves when the client has closed the channel (or the session
    // ended): nobody will read git's answer any more.
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    // Client -> child stdin, in its own task; keeps draining after the child
    // stops reading so the session never blocks on this channel.
    tokio::spawn(async move {
        while let Some(msg) = rx.wait().await {
            match msg {
                ChannelMsg::Data { data } => {
                    if let Some(w) = stdin.as_mut() {
                        if w.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                ChannelMsg::Eof => stdin = None,
                ChannelMsg::Close => break,
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });

    let mut out = tx.make_writer();
    let mut err = tx.make_writer_ext(Some(1));
    let mut stdout = BufReader::with_capacity(CHUNK, stdout);
    let mut stderr = BufReader::with_capacity(CHUNK, stderr);
    let copied = {
        let copies = async {
            tokio::join!(
                tokio::io::copy_buf(&mut stdout, &mut out),
                tokio::io::copy_buf(&mut stderr, &mut err)
            )
        };
        tokio::pin!(copies);
        // The channel closed (its read half ended), or the verb's caller
        // left (`ssh::leaving`): whichever is seen first.
        let gone = async {
            tokio::select! {
                _ = &mut gone => {}
                _ = super::reply::unless_caller_left(std::future::pending::<()>()) => {}
            }
        };
        tokio::select! {
            done = &mut copies => Some(done),
            _ = gone => {
                // A push whose client went away while its objects are still
                // in quarantine (receiving, or in pre-receive) can never be
                // answered: end it now, so that git removes the quarantine,
                // rather than leave it to a slow hook and the hourly sweep.
                if service == GitService::ReceivePack && in_quarantine(child.get()) {
                    tracing::info!(
                        "git receive-pack for {}: the client went away before the push was in; \
                         ending it",
                        entry.name
                    );
                    return;
                }
                // Past the quarantine the refs are moving: let git finish,
                // but nobody reads its answer any more, and a write to the
                // closed channel would wait forever for window space
                // (issue 44): what git still says is thrown away.
                None
            }
        }
    };
    let left = copied.is_none();
    match copied {
        Some((a, b)) => {
            if let Err(e) = a.and(b) {
                // The client went away; dropping `child` ends git gently
                // (SIGTERM) so that it removes its quarantine.
                tracing::info!("git {} for {}: {e}", service.subcommand(), entry.name);
                return;
            }
            // Never shutdown() the writers: that sends EOF before the exit
            // status.
            let _ = out.flush().await;
            let _ = err.flush().await;
        }
        None => {
            let mut sink = tokio::io::sink();
            let mut sink_err = tokio::io::sink();
            let _ = tokio::join!(
                tokio::io::copy_buf(&mut stdout, &mut sink),
                tokio::io::copy_buf(&mut stderr, &mut sink_err)
            );
        }
    }
    let code = match child.get().wait().await {
        Ok(status) => status.code().unwrap_or(255) as u32,
        Err(_) => 255,
    };
    if service == GitService::ReceivePack && entry.is_governance() {
        ctx.app.governance.reload();
        // Its `[[webhooks]]` may have changed.
        ctx.app.webhooks.poke();
    }
    if service == GitService::ReceivePack {
        repair_head(ctx, &entry.path, &entry.name).await;
        // The hooks ran in other processes; their event rows are committed.
        crate::events::refresh_head(&ctx.app).await;
        // The merge scan may have closed issues (`Fixes:`): export them.
        ctx.app.export.touch(&entry.name);
    }
    if service == GitService::ReceivePack && code == 0 {
        // The push is in: count it towards the repository's next maintenance.
        let public = crate::authz::anonymous_can_read(&ctx.app, &entry);
        ctx.app
            .maintenance
            .push_finished(&entry.path, &entry.name, public);
    }
    tracing::info!(
        principal = ctx.caller.principal(),
        repo = entry.name,
        "git {} exited {code}",
        service.subcommand()
    );
    if left {
        // Nobody to tell: the channel is closed.
        return;
    }
    super::reply::note_exit_status(code);
    let _ = tx.exit_status(code).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

/// A push to a repository that does not exist creates it, when the
/// operator enabled `push_to_create` and the caller may create it by that
/// name. Anything else stays "not found".
async fn push_to_create(
    ctx: &ExecContext,
    service: GitService,
    requested: &str,
) -> Option<(crate::repos::RepoEntry, Access)> {
    if service != GitService::ReceivePack
        || !ctx.app.config.push_to_create
        || !authz::can_create_repo(&ctx.app, &ctx.caller, requested)
        || crate::repos::find_repo(&ctx.app.config.repos_dir, requested).is_some()
    {
        return None;
    }
    let repos_dir = ctx.app.config.repos_dir.clone();
    let name = requested.trim_start_matches('/').to_string();
    let created =
        tokio::task::spawn_blocking(move || crate::repos::create_repo_in(&repos_dir, &name))
            .await
            .ok()?;
    match created {
        Ok((name, _)) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = name,
                "repository created by push"
            );
            crate::events::Recorded::repo_created(&name, ctx.caller.principal())
                .record_or_log(&ctx.app.writer)
                .await;
        }
        // A concurrent push may have created it first: fine, use it.
        Err(crate::repos::CreateError::Exists(_)) => {}
        Err(e) => {
            tracing::info!(requested, "push-to-create refused: {e}");
            return None;
        }
    }
    authz::authorize(&ctx.app, &ctx.caller, requested, Access::Write).ok()
}

/// After a push, make HEAD name a branch that exists (see
/// `repo_admin::repair_dangling_head`).
async fn repair_head(ctx: &ExecContext, path: &std::path::Path, name: &str) {
    let path = path.to_path_buf();
    match tokio::task::spawn_blocking(move || crate::repo_admin::repair_dangling_head(&path)).await
    {
        Ok(Ok(Some(branch))) => {
            tracing::info!(repo = name, branch, "HEAD now names {branch}");
            crate::events::Recorded::head_repaired(name, &branch)
                .record_or_log(&ctx.app.writer)
                .await;
        }
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::warn!(repo = name, "checking HEAD after a push: {e}"),
        Err(e) => tracing::warn!(repo = name, "checking HEAD after a push: {e}"),
    }
}

/// The web UI's address as the push hook prints it: the HTTP listen
/// address, with `localhost` for an unspecified (all interfaces) host.
fn web_url(listen: &str) -> String {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => format!("http://localhost:{}", addr.port()),
        Ok(addr) => format!("http://{addr}"),
        Err(_) => format!("http://{listen}"),
    }
}
