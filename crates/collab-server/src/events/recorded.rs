//! `Recorded`: an event this crate appends outside the issue and lease
//! code (repository creation, releases, ref updates, a mirror's fetch). A
//! file of its own so that services below `App` (`mirrors`) can record
//! events without importing `events`' background tasks, which take `App`.

use serde_json::{json, Value};

use collab_store::event_log::{self, NewEvent};
use collab_store::sql::Connection;
use collab_store::writer::Writer;

/// An event this crate appends, owned so it can travel to the writer.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub kind: &'static str,
    pub repo: Option<String>,
    pub object_id: Option<String>,
    pub actor: Option<String>,
    pub payload: Value,
}

impl Recorded {
    /// `repo.created {repo}` by `actor`.
    pub fn repo_created(repo: &str, actor: &str) -> Recorded {
        Recorded {
            kind: "repo.created",
            repo: Some(repo.to_string()),
            object_id: None,
            actor: Some(actor.to_string()),
            payload: json!({ "repo": repo }),
        }
    }

    /// `repo.settings_changed {head, reason: "dangling"}`: after a push
    /// the server pointed HEAD at `branch` because the branch it named did
    /// not exist (`repo_admin::repair_dangling_head`); the server's own
    /// change, so no actor.
    pub fn head_repaired(repo: &str, branch: &str) -> Recorded {
        Recorded {
            kind: "repo.settings_changed",
            repo: Some(repo.to_string()),
            object_id: None,
            actor: None,
            payload: json!({ "head": branch, "reason": "dangling" }),
        }
    }

    /// `ref.updated {ref, old, new, pusher}`: one ref moved (or was created
    /// or deleted: the all-zero id) by a push from `pusher`.
    pub fn ref_updated(repo: &str, refname: &str, old: &str, new: &str, pusher: &str) -> Recorded {
        Recorded {
            kind: "ref.updated",
            repo: Some(repo.to_string()),
            object_id: Some(refname.to_string()),
            actor: Some(pusher.to_string()),
            payload: json!({ "ref": refname, "old": old, "new": new, "pusher": pusher }),
        }
    }

    /// `release.uploaded {tag, file, size, sha256}`: a release file stored.
    pub fn release_uploaded(repo: &str, tag: &str, file: &Value, actor: &str) -> Recorded {
        Recorded {
            kind: "release.uploaded",
            repo: Some(repo.to_string()),
            object_id: Some(tag.to_string()),
            actor: Some(actor.to_string()),
            payload: json!({ "tag": tag, "file": file }),
        }
    }

    /// `lfs.uploaded {objects, bytes}`: git-lfs objects one session stored.
    pub fn lfs_uploaded(repo: &str, objects: u64, bytes: u64, actor: &str) -> Recorded {
        Recorded {
            kind: "lfs.uploaded",
            repo: Some(repo.to_string()),
            object_id: None,
            actor: Some(actor.to_string()),
            payload: json!({ "objects": objects, "bytes": bytes }),
        }
    }

    /// `release.deleted {tag, files}`: release files removed.
    pub fn release_deleted(repo: &str, tag: &str, files: &Value, actor: &str) -> Recorded {
        Recorded {
            kind: "release.deleted",
            repo: Some(repo.to_string()),
            object_id: Some(tag.to_string()),
            actor: Some(actor.to_string()),
            payload: json!({ "tag": tag, "files": files }),
        }
    }

    /// Append inside the caller's transaction; returns the seq.
    pub fn append_in(&self, conn: &Connection, now: i64) -> collab_store::sql::Result<i64> {
        event_log::append(
            conn,
            &NewEvent {
                kind: self.kind,
                repo: self.repo.as_deref(),
                object_id: self.object_id.as_deref(),
                actor: self.actor.as_deref(),
                payload: self.payload.clone(),
            },
            now,
        )
    }

    /// Append through the writer (its own transaction); returns the seq
    /// once it is durable. Used for changes that live outside collab.db
    /// (a repository on disk, a release file): the change is durable first,
    /// then its event; a crash in between loses the event, never invents one.
    pub async fn record(self, service: &Writer) -> anyhow::Result<i64> {
        let kind = self.kind;
        let seq = service
            .write(format!("append {kind} event"), move |conn, now| {
                Ok(self.append_in(conn, now)?)
            })
            .await?;
        Ok(service.final_seq(seq))
    }

    /// `record`, logging instead of failing: the change it describes has
    /// already happened and its reply must still go out.
    pub async fn record_or_log(self, service: &Writer) {
        let kind = self.kind;
        if let Err(e) = self.record(service).await {
            tracing::error!("could not append the {kind} event: {e:#}");
        }
    }
}
