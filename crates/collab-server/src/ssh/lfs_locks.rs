//! The lock commands of a `git-lfs-transfer` session (`ssh::lfs`):
//! `lock` and `unlock` in an upload session (write access), `list-lock`
//! and git-lfs's `list-locks` (the locks to verify before a push, each
//! marked `ours` or `theirs`) in either. The locks are rows of the
//! collab database by the repository's lasting id
//! (`collab_store::lfs_locks`). A lock held by another principal is given
//! back only by them, or by an administrator (`git lfs unlock --force`).

use tokio::io::{AsyncRead, AsyncWrite};

use super::lfs::{refusal, shown, Broken, Refusal, Request, Session};
use collab_store::lfs_locks::{self, Filter, Lock, Locked, Unlocked};

/// Locks one `list-lock` answers with, unless it asks for fewer.
const DEFAULT_PAGE: i64 = 100;
/// The most it may ask for.
const MAX_PAGE: i64 = 1000;
/// The longest path a lock may name.
const MAX_PATH: usize = 4096;

/// A lock time as git-lfs reads it (RFC 3339).
fn time_text(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A lock as the arguments of a `lock` or `unlock` answer.
fn lock_args(lock: &Lock) -> Vec<String> {
    vec![
        format!("id={}", lock.id),
        format!("path={}", lock.path),
        format!("locked-at={}", time_text(lock.created_at)),
        format!("ownername={}", lock.owner),
    ]
}

fn valid_path(path: &str) -> bool {
    !path.is_empty() && path.len() <= MAX_PATH && !path.chars().any(char::is_control)
}

fn valid_lock_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Session<'_, R, W> {
    /// `lock`, `path=<path>`: `status 201` and the new lock, or `status
    /// 409` and the lock that holds the path.
    pub(super) async fn lock(&mut self, req: &Request) -> Result<(), Broken> {
        self.skip_body(req).await?;
        let path = match req.arg("path") {
            Some(path) if valid_path(path) => path.to_string(),
            Some(path) => {
                return self
                    .refuse(refusal(400, format!("invalid lock path {}", shown(path))))
                    .await
            }
            None => return self.refuse(refusal(400, "missing path argument")).await,
        };
        let (repo_id, owner) = (
            self.repo_id.clone(),
            self.ctx.caller.principal().to_string(),
        );
        let locked = self
            .ctx
            .app
            .writer
            .write("git-lfs lock", move |conn, now| {
                Ok(lfs_locks::lock(conn, &repo_id, &path, &owner, now)?)
            })
            .await;
        match locked {
            Ok(Locked::Created(lock)) => {
                tracing::info!(
                    principal = self.ctx.caller.principal(),
                    repo = self.entry.name,
                    path = lock.path,
                    id = lock.id,
                    "git-lfs lock taken"
                );
                self.status(201, &lock_args(&lock)).await
            }
            Ok(Locked::Held(lock)) => {
                let message = format!("{} is locked by {}", lock.path, lock.owner);
                self.status_with_lines(409, &lock_args(&lock), &[message])
                    .await
            }
            Err(e) => self.refuse(database(e)).await,
        }
    }

    /// `unlock <id>`: `status 200` and the lock given back.
    pub(super) async fn unlock(&mut self, req: &Request, rest: &str) -> Result<(), Broken> {
        self.skip_body(req).await?;
        if !valid_lock_id(rest) {
            return self
                .refuse(refusal(400, format!("invalid lock id {}", shown(rest))))
                .await;
        }
        let principal = self.ctx.caller.principal().to_string();
        // git-lfs 3.3 sends no `force=true` over SSH (its `--force` is
        // checked on the client): an administrator's unlock is a forced
        // one, the argument or not.
        let force = crate::authz::owner_is_admin(&self.ctx.app, &principal);
        let (repo_id, id, who) = (self.repo_id.clone(), rest.to_string(), principal.clone());
        let unlocked = self
            .ctx
            .app
            .writer
            .write("git-lfs unlock", move |conn, _| {
                Ok(lfs_locks::unlock(conn, &repo_id, &id, &who, force)?)
            })
            .await;
        match unlocked {
            Ok(Unlocked::Removed(lock)) => {
                tracing::info!(
                    principal,
                    repo = self.entry.name,
                    path = lock.path,
                    id = lock.id,
                    owner = lock.owner,
                    "git-lfs lock given back"
                );
                self.status(200, &lock_args(&lock)).await
            }
            Ok(Unlocked::NotFound) => self.refuse(refusal(404, format!("no lock {rest}"))).await,
            Ok(Unlocked::HeldBy(lock)) => {
                let message = format!(
                    "{} is locked by {}: only they, or an administrator with --force, may unlock it",
                    lock.path, lock.owner
                );
                self.refuse(refusal(403, message)).await
            }
            Err(e) => self.refuse(database(e)).await,
        }
    }

    /// `list-lock` / `list-locks` [`path=`, `id=`, `cursor=`, `limit=`]:
    /// a page of locks, each as five lines, and `next-cursor=` when there
    /// are more.
    pub(super) async fn list_locks(&mut self, req: &Request) -> Result<(), Broken> {
        self.skip_body(req).await?;
        let page = match page_of(req) {
            Ok(page) => page,
            Err(refused) => return self.refuse(refused).await,
        };
        let (repo_id, path, id) = (
            self.repo_id.clone(),
            req.arg("path").map(str::to_string),
            req.arg("id").map(str::to_string),
        );
        let (offset, limit) = page;
        let found = self
            .ctx
            .app
            .reads
            .read(move |conn| {
                let filter = Filter {
                    path: path.as_deref(),
                    id: id.as_deref(),
                };
                // One more than asked: whether there is a next page.
                Ok(lfs_locks::list(conn, &repo_id, &filter, offset, limit + 1)?)
            })
            .await;
        let mut locks = match found {
            Ok(locks) => locks,
            Err(e) => return self.refuse(database(e)).await,
        };
        let mut args = Vec::new();
        if locks.len() as i64 > limit {
            locks.truncate(limit as usize);
            args.push(format!("next-cursor={}", offset + limit));
        }
        let me = self.ctx.caller.principal();
        let mut lines = Vec::with_capacity(locks.len() * 5);
        for lock in &locks {
            let who = if lock.owner == me { "ours" } else { "theirs" };
            lines.push(format!("lock {}", lock.id));
            lines.push(format!("path {} {}", lock.id, lock.path));
            lines.push(format!(
                "locked-at {} {}",
                lock.id,
                time_text(lock.created_at)
            ));
            lines.push(format!("ownername {} {}", lock.id, lock.owner));
            lines.push(format!("owner {} {who}", lock.id));
        }
        self.status_with_lines(200, &args, &lines).await
    }
}

/// `cursor=` (an offset this server gave) and `limit=`.
fn page_of(req: &Request) -> Result<(i64, i64), Refusal> {
    let offset = match req.arg("cursor").filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => c
            .parse::<i64>()
            .ok()
            .filter(|c| *c >= 0)
            .ok_or_else(|| refusal(400, format!("invalid cursor {}", shown(c))))?,
    };
    let limit = match req.arg("limit").filter(|l| !l.is_empty()) {
        None => DEFAULT_PAGE,
        Some(l) => l
            .parse::<i64>()
            .ok()
            .filter(|l| *l > 0)
            .ok_or_else(|| refusal(400, format!("invalid limit {}", shown(l))))?
            .min(MAX_PAGE),
    };
    Ok((offset, limit))
}

fn database(e: anyhow::Error) -> Refusal {
    tracing::error!("git-lfs locks: {e:#}");
    refusal(500, "internal error")
}
