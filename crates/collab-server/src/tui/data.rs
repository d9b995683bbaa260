//! What the screens show, read as the caller: every list, issue, patch,
//! diff and lease comes from the verb a client would run
//! (`ssh::call::call`), so visibility and authorization are the verbs';
//! the repository list adds the web UI's open counts and description for
//! the repositories `collab-repo list` returned, and the events pane reads
//! the event log with `collab-events watch`'s visibility rule.

use std::collections::VecDeque;

use collab_proto::replies::admin::RepoList;
use collab_proto::replies::issue::{IssueList, IssueShown, ReadyList};
use collab_proto::replies::lease::LeaseList;
use serde_json::{json, Value};

use super::view::{DiffLine, EventRow, Seg, ViewKind, MAX_DIFF_LINES, MAX_EVENTS, PAGE};
use crate::service::events::Visibility;
use crate::ssh::call::call;
use crate::ssh::context::ExecContext;

/// Repositories listed at most (the first ones by name).
pub const MAX_REPOS: usize = 200;
/// Repositories whose leases the leases screen reads at most.
pub const MAX_LEASE_REPOS: usize = 50;
/// Open issues the queue screen explains (why each is not ready) at most.
const MAX_EXPLAINED: usize = 30;

/// What a screen loads: its JSON, and for a patch its coloured diff.
pub struct Loaded {
    pub data: Value,
    pub diff: Vec<DiffLine>,
}

impl Loaded {
    fn of(data: Value) -> Loaded {
        Loaded {
            data,
            diff: Vec::new(),
        }
    }
}

/// Load what `kind` shows; `after` is the page cursor of a list.
pub async fn load(
    ctx: &ExecContext,
    kind: &ViewKind,
    after: Option<&str>,
) -> Result<Loaded, String> {
    let limit = PAGE.to_string();
    match kind {
        ViewKind::Repos => repos(ctx).await.map(Loaded::of),
        ViewKind::Issues {
            repo,
            state,
            label,
            queue: false,
        } => {
            let mut argv = vec![
                "collab-issue",
                "list",
                repo,
                "--state",
                state,
                "--limit",
                &limit,
            ];
            if let Some(label) = label {
                argv.extend(["--label", label]);
            }
            if let Some(after) = after {
                argv.extend(["--after", after]);
            }
            call(ctx, &argv, None).await.map(Loaded::of)
        }
        ViewKind::Issues {
            repo,
            label,
            queue: true,
            ..
        } => queue(ctx, repo, label.as_deref()).await.map(Loaded::of),
        ViewKind::Issue { repo, id } => call(ctx, &["collab-issue", "show", repo, id], None)
            .await
            .map(Loaded::of),
        ViewKind::Patches { repo, state } => {
            let mut argv = vec![
                "collab-patch",
                "list",
                repo,
                "--state",
                state,
                "--limit",
                &limit,
            ];
            if let Some(after) = after {
                argv.extend(["--after", after]);
            }
            call(ctx, &argv, None).await.map(Loaded::of)
        }
        ViewKind::Patch {
            repo,
            id,
            interdiff,
        } => patch(ctx, repo, id, *interdiff).await,
        ViewKind::Leases { .. } => leases(ctx).await.map(Loaded::of),
    }
}

/// `collab-repo list`'s reply: the repositories the caller can read.
async fn repo_list(ctx: &ExecContext) -> Result<RepoList, String> {
    let listed = call(ctx, &["collab-repo", "list"], None).await?;
    serde_json::from_value(listed).map_err(|e| e.to_string())
}

/// `collab-repo list`, each with its open issues and patches (the web
/// UI's counts), description and last ref change.
async fn repos(ctx: &ExecContext) -> Result<Value, String> {
    let listed = repo_list(ctx).await?;
    let names: Vec<String> = listed
        .repos
        .into_iter()
        .map(|r| r.name)
        .take(MAX_REPOS)
        .collect();
    let repos_dir = ctx.app.config.repos_dir.clone();
    let reads = ctx.app.reads.clone();
    let rows = tokio::task::spawn_blocking(move || {
        names
            .iter()
            .map(|name| {
                let dir = crate::repos::find_repo(&repos_dir, name).map(|e| e.path);
                let r = name.clone();
                let (open_issues, open_patches) = reads
                    .read_blocking(move |conn| {
                        use collab_store::{issues, patches};
                        Ok((
                            issues::count(conn, &r, issues::StateFilter::Open, &[])?,
                            patches::count(conn, &r, patches::StateFilter::Open)?,
                        ))
                    })
                    .unwrap_or_default();
                json!({
                    "name": name,
                    "description": dir.as_deref().and_then(crate::repo_admin::description).unwrap_or_default(),
                    "open_issues": open_issues,
                    "open_patches": open_patches,
                    "last_push": dir.as_deref().and_then(last_ref_change),
                })
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|_| "internal error".to_string())?;
    Ok(json!({ "repos": rows }))
}

/// When a ref of the repository last changed (a push, a merge), as Unix
/// seconds: the newest of `packed-refs` and the loose refs under
/// `refs/heads` and `refs/tags` (at most a few thousand looked at).
fn last_ref_change(dir: &std::path::Path) -> Option<i64> {
    let mut newest: Option<std::time::SystemTime> = None;
    let mut seen = 0;
    let mut note = |path: &std::path::Path| {
        if let Ok(modified) = std::fs::metadata(path).and_then(|m| m.modified()) {
            newest = Some(newest.map_or(modified, |n| n.max(modified)));
        }
    };
    note(&dir.join("packed-refs"));
    let mut pending = vec![dir.join("refs/heads"), dir.join("refs/tags")];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 5000 {
                break;
            }
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                note(&path);
            }
        }
    }
    let newest = newest?;
    let secs = newest.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

/// The work queue: `collab-issue ready`, then the first open issues that
/// are not ready with why (`collab-issue show`'s `not_ready`: blocked by,
/// held by).
async fn queue(ctx: &ExecContext, repo: &str, label: Option<&str>) -> Result<Value, String> {
    let limit = PAGE.to_string();
    let mut argv = vec!["collab-issue", "ready", repo, "--limit", &limit];
    if let Some(label) = label {
        argv.extend(["--label", label]);
    }
    let ready = call(ctx, &argv, None).await?;
    let ready: ReadyList = serde_json::from_value(ready).map_err(|e| e.to_string())?;
    let ready_ids: Vec<&str> = ready.issues.iter().map(|i| i.id.as_str()).collect();
    let limit = MAX_EXPLAINED.to_string();
    let mut argv = vec![
        "collab-issue",
        "list",
        repo,
        "--state",
        "open",
        "--limit",
        &limit,
    ];
    if let Some(label) = label {
        argv.extend(["--label", label]);
    }
    let open = call(ctx, &argv, None).await?;
    let open: IssueList = serde_json::from_value(open).map_err(|e| e.to_string())?;
    let mut not_ready = Vec::new();
    for issue in &open.issues {
        let id = issue.id.as_str();
        if ready_ids.contains(&id) {
            continue;
        }
        let shown = call(ctx, &["collab-issue", "show", repo, id], None).await;
        if let Ok(shown) =
            shown.and_then(|v| serde_json::from_value::<IssueShown>(v).map_err(|e| e.to_string()))
        {
            not_ready.push(json!({
                "id": id,
                "title": shown.title,
                "why": shown.not_ready,
                "lease": shown.lease,
            }));
        }
    }
    Ok(json!({ "ready": ready.issues, "not_ready": not_ready }))
}

async fn patch(ctx: &ExecContext, repo: &str, id: &str, interdiff: bool) -> Result<Loaded, String> {
    let shown = call(ctx, &["collab-patch", "show", repo, id], None).await?;
    let revisions = shown["revisions"].as_array().map_or(0, Vec::len);
    let (title, diff) = if interdiff && revisions >= 2 {
        let (a, b) = ((revisions - 1).to_string(), revisions.to_string());
        let d = call(ctx, &["collab-patch", "interdiff", repo, id, &a, &b], None).await;
        (format!("interdiff r{a}..r{b}"), d)
    } else {
        let d = call(ctx, &["collab-patch", "diff", repo, id], None).await;
        (format!("diff r{revisions}"), d)
    };
    let (diff_title, lines) = match diff {
        Ok(d) => {
            let text = d["text"].as_str().unwrap_or("").to_string();
            let lines = tokio::task::spawn_blocking(move || colour_diff(&text))
                .await
                .unwrap_or_default();
            (title, lines)
        }
        Err(e) => (format!("{title}: {e}"), Vec::new()),
    };
    let mut data = shown;
    data["diff_title"] = json!(diff_title);
    Ok(Loaded { data, diff: lines })
}

/// A unified diff's lines, each cut into coloured pieces: the server's own
/// highlighter (`crate::highlight`, the web UI's, with its limits and time
/// budget) colours the code; `+`/`-` lines get a green/red sign.
pub fn colour_diff(text: &str) -> Vec<DiffLine> {
    use crate::highlight::{Deadline, Highlighter};
    let deadline = Deadline::start();
    let mut out = Vec::new();
    let mut current: Option<Highlighter> = None;
    for line in text.lines().take(MAX_DIFF_LINES) {
        let line = collab_record::text::escape_line(line).into_owned();
        let kind = line.chars().next().unwrap_or(' ');
        let header = line.starts_with("diff ")
            || line.starts_with("index ")
            || line.starts_with("--- ")
            || line.starts_with("+++ ");
        if line.starts_with("diff --git ") {
            let path = line.rsplit(" b/").next().unwrap_or("");
            current = Highlighter::for_path(path, "", deadline);
        }
        if header {
            out.push(DiffLine {
                sign: ' ',
                segs: vec![Seg {
                    class: "header".into(),
                    text: line,
                }],
            });
            continue;
        }
        if line.starts_with("@@") {
            out.push(DiffLine {
                sign: ' ',
                segs: vec![Seg {
                    class: "hunk".into(),
                    text: line,
                }],
            });
            continue;
        }
        let (sign, code) = match kind {
            '+' | '-' | ' ' => (kind, &line[1..]),
            _ => (' ', line.as_str()),
        };
        let segs = match current.as_mut() {
            Some(h) => segments(&h.line(code)),
            None => vec![Seg {
                class: String::new(),
                text: code.to_string(),
            }],
        };
        out.push(DiffLine { sign, segs });
    }
    out
}

/// The highlighter's HTML for one line (`<span class="hl-…">`, escaped
/// text; made by us, never by the user) as pieces with the innermost
/// class list.
fn segments(html: &str) -> Vec<Seg> {
    let mut segs = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut rest = html;
    let flush = |text: &mut String, stack: &Vec<String>, segs: &mut Vec<Seg>| {
        if !text.is_empty() {
            segs.push(Seg {
                class: stack.last().cloned().unwrap_or_default(),
                text: std::mem::take(text),
            });
        }
    };
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("<span class=\"") {
            flush(&mut text, &stack, &mut segs);
            let end = after.find("\">").unwrap_or(after.len());
            stack.push(after[..end].to_string());
            rest = after.get(end + 2..).unwrap_or("");
        } else if let Some(after) = rest.strip_prefix("</span>") {
            flush(&mut text, &stack, &mut segs);
            stack.pop();
            rest = after;
        } else if let Some(after) = rest.strip_prefix('&') {
            let end = after.find(';').unwrap_or(0);
            let c = match &after[..end] {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "#39" => '\'',
                _ => '&',
            };
            text.push(c);
            rest = if end > 0 { &after[end + 1..] } else { after };
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            text.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    flush(&mut text, &stack, &mut segs);
    segs
}

/// The live leases of the repositories the caller can read (the first
/// [`MAX_LEASE_REPOS`]), each through `collab-lease list`.
async fn leases(ctx: &ExecContext) -> Result<Value, String> {
    let listed = repo_list(ctx).await?;
    let mut rows = Vec::new();
    for repo in listed.repos.iter().take(MAX_LEASE_REPOS) {
        let name = repo.name.as_str();
        let listed = call(ctx, &["collab-lease", "list", name], None).await;
        if let Ok(listed) =
            listed.and_then(|v| serde_json::from_value::<LeaseList>(v).map_err(|e| e.to_string()))
        {
            for lease in listed.leases {
                let mut row = json!(lease);
                row["repo"] = json!(name);
                rows.push(row);
            }
        }
    }
    Ok(json!({ "leases": rows }))
}

/// The events pane: what the caller may see of the log after `after`
/// (at most [`MAX_EVENTS`] read per call), appended to `rows` (which keeps
/// the newest [`MAX_EVENTS`]). Returns the last seq looked at.
pub async fn events_after(
    ctx: &ExecContext,
    visibility: &mut Visibility,
    after: i64,
    rows: &mut VecDeque<EventRow>,
) -> i64 {
    let limit = MAX_EVENTS as i64;
    let read = ctx
        .app
        .reads
        .read(move |conn| Ok(collab_store::event_log::after(conn, after, limit)?))
        .await;
    let Ok(events) = read else {
        return after;
    };
    let names = crate::people::DisplayNames::of(&ctx.app);
    let mut last = after;
    for event in events {
        last = event.seq;
        if !visibility.sees(ctx, &event) {
            continue;
        }
        rows.push_back(EventRow {
            seq: event.seq,
            at: event.at,
            kind: event.kind.clone(),
            repo: event.repo.clone().unwrap_or_default(),
            object: event.object_id.clone().unwrap_or_default(),
            // The display name, as replies show people (docs/access-control.md).
            actor: event
                .actor
                .as_deref()
                .map(|a| names.name(a))
                .unwrap_or_default(),
        });
        while rows.len() > MAX_EVENTS {
            rows.pop_front();
        }
    }
    last
}

/// The log's head now.
pub async fn event_head(ctx: &ExecContext) -> i64 {
    ctx.app
        .reads
        .read(|conn| Ok(collab_store::event_log::head(conn)?))
        .await
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlighter_html_becomes_pieces() {
        let segs = segments("<span class=\"hl-source hl-rust\"><span class=\"hl-keyword\">fn</span> a&lt;b&gt;</span>");
        let texts: Vec<_> = segs
            .iter()
            .map(|s| (s.class.as_str(), s.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            vec![("hl-keyword", "fn"), ("hl-source hl-rust", " a<b>")]
        );
    }

    #[test]
    fn diffs_are_coloured_and_hostile_bytes_escaped() {
        let lines = colour_diff(
            "diff --git a/x.rs b/x.rs\n@@ -1 +1 @@\n-fn a() {}\n+fn b() {} // \x1b[2J\n",
        );
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[2].sign, '-');
        assert_eq!(lines[3].sign, '+');
        assert!(
            lines[3].segs.iter().any(|s| s.class.contains("hl-storage")),
            "{:?}",
            lines[3]
        );
        let all: String = lines
            .iter()
            .flat_map(|l| l.segs.iter().map(|s| s.text.clone()))
            .collect();
        assert!(!all.contains('\x1b') && all.contains("\\x1b[2J"), "{all}");
    }
}
