//! The issue operations the CLI runs: open, comment, edit, label, close and
//! reopen. Each one checks its input and the issue's current state, builds
//! one event, signs it and appends it to the issue's DAG through `store`
//! (compare-and-swap on the ref). Nothing is written when a check fails.

use chrono::Utc;
use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::event::{
    Action, Author, Event, IssueClose, IssueComment, IssueEdit, IssueLabel, IssueOpen,
};
use crate::refs;
use crate::sign::{self, SigningKey};
use crate::state::{resolve_issue_ref, IssueState, IssueStatus};
use crate::store;

/// Who signs new events: the signing key and the display name.
#[derive(Debug)]
pub struct Identity {
    pub key: SigningKey,
    pub name: String,
}

impl Identity {
    /// Loads the signing key named by `config` (`collab.signingKey`, else
    /// the XDG default) and takes the name from `user.name`, else the key's
    /// comment, else the key's fingerprint.
    pub fn load(config: &git2::Config) -> Result<Identity> {
        let key = SigningKey::load(&sign::key_path(config)?)?;
        let name = config
            .get_string("user.name")
            .ok()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .or_else(|| Some(key.comment()).filter(|c| !c.is_empty()))
            .unwrap_or_else(|| key.fingerprint());
        Ok(Identity { key, name })
    }

    /// The `author` of events signed by this identity.
    pub fn author(&self) -> Author {
        Author {
            name: self.name.clone(),
            key: self.key.public_key_line(),
        }
    }

    fn event(&self, action: Action) -> Event {
        Event::new(self.author(), Utc::now(), action)
    }
}

/// What a write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The issue's full id.
    pub issue: String,
    /// The new event commit.
    pub event: Oid,
}

/// Opens a new issue; its id is the root commit's id.
pub fn open(
    repo: &Repository,
    who: &Identity,
    title: &str,
    body: &str,
    labels: &[String],
) -> Result<Written> {
    check_title(title)?;
    for label in labels {
        check_label(label)?;
    }
    let mut labels = labels.to_vec();
    labels.sort();
    labels.dedup();
    let nonce: [u8; 16] = rand::random();
    let event = who.event(Action::IssueOpen(IssueOpen {
        title: title.trim().to_string(),
        body: body.to_string(),
        labels,
        nonce: hex::encode(nonce),
    }));
    let oid = store::create_dag(repo, &event, &who.key, refs::issue_ref)?;
    Ok(Written {
        issue: oid.to_string(),
        event: oid,
    })
}

/// Adds a comment.
pub fn comment(repo: &Repository, who: &Identity, issue: &str, body: &str) -> Result<Written> {
    if body.trim().is_empty() {
        return Err(Error::Invalid("comment body is empty".into()));
    }
    append(repo, who, issue, |_| {
        Ok(Action::IssueComment(IssueComment {
            body: body.to_string(),
        }))
    })
}

/// Replaces the title and/or body.
pub fn edit(
    repo: &Repository,
    who: &Identity,
    issue: &str,
    title: Option<&str>,
    body: Option<&str>,
) -> Result<Written> {
    if title.is_none() && body.is_none() {
        return Err(Error::Invalid(
            "nothing to edit: give a title or a body".into(),
        ));
    }
    if let Some(t) = title {
        check_title(t)?;
    }
    append(repo, who, issue, |_| {
        Ok(Action::IssueEdit(IssueEdit {
            title: title.map(|t| t.trim().to_string()),
            body: body.map(str::to_string),
        }))
    })
}

/// Adds and removes labels. Only real changes are recorded; asking for no
/// change is an error.
pub fn label(
    repo: &Repository,
    who: &Identity,
    issue: &str,
    add: &[String],
    remove: &[String],
) -> Result<Written> {
    for l in add.iter().chain(remove) {
        check_label(l)?;
    }
    if let Some(both) = add.iter().find(|l| remove.contains(l)) {
        return Err(Error::Invalid(format!(
            "label '{both}' is both added and removed"
        )));
    }
    append(repo, who, issue, |state| {
        let mut add: Vec<String> = add
            .iter()
            .filter(|l| !state.labels.contains(l))
            .cloned()
            .collect();
        let mut remove: Vec<String> = remove
            .iter()
            .filter(|l| state.labels.contains(l))
            .cloned()
            .collect();
        for list in [&mut add, &mut remove] {
            list.sort();
            list.dedup();
        }
        if add.is_empty() && remove.is_empty() {
            return Err(Error::Invalid("labels already as requested".into()));
        }
        Ok(Action::IssueLabel(IssueLabel { add, remove }))
    })
}

/// Closes an open issue.
pub fn close(
    repo: &Repository,
    who: &Identity,
    issue: &str,
    reason: Option<&str>,
) -> Result<Written> {
    append(repo, who, issue, |state| {
        if state.status == IssueStatus::Closed {
            return Err(Error::Invalid(format!(
                "issue {} is already closed",
                short_id(&state.id)
            )));
        }
        Ok(Action::IssueClose(IssueClose {
            reason: reason.map(str::to_string).filter(|r| !r.trim().is_empty()),
        }))
    })
}

/// Reopens a closed issue.
pub fn reopen(repo: &Repository, who: &Identity, issue: &str) -> Result<Written> {
    append(repo, who, issue, |state| {
        if state.status == IssueStatus::Open {
            return Err(Error::Invalid(format!(
                "issue {} is already open",
                short_id(&state.id)
            )));
        }
        Ok(Action::IssueReopen)
    })
}

/// The 8-hex form of an id shown in human output.
pub fn short_id(id: &str) -> &str {
    // By characters: ids from a server reply are not trusted to be hex.
    id.char_indices().nth(8).map_or(id, |(end, _)| &id[..end])
}

/// Resolves `issue`, materializes it, lets `make` decide the event from the
/// current state, and appends it.
fn append(
    repo: &Repository,
    who: &Identity,
    issue: &str,
    make: impl FnOnce(&IssueState) -> Result<Action>,
) -> Result<Written> {
    let (ref_name, full_id) = resolve_issue_ref(repo, issue)?;
    let state = IssueState::from_ref(repo, &ref_name, &full_id)?;
    let event = who.event(make(&state)?);
    let oid = store::append_event(repo, &ref_name, &event, &who.key)?;
    Ok(Written {
        issue: full_id,
        event: oid,
    })
}

fn check_title(title: &str) -> Result<()> {
    if title.trim().is_empty() {
        return Err(Error::Invalid("title is empty".into()));
    }
    if title.contains(['\n', '\r']) {
        return Err(Error::Invalid("title must be one line".into()));
    }
    crate::text::check_line("title", title).map_err(Error::Invalid)
}

fn check_label(label: &str) -> Result<()> {
    if label.is_empty()
        || label
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(Error::Invalid(format!(
            "invalid label '{label}': labels are non-empty, without spaces or commas"
        )));
    }
    crate::text::check_line("label", label).map_err(Error::Invalid)
}
