//! Push-to-review: `git push origin HEAD:refs/for/<base>` opens a patch
//! against branch `<base>`, or adds a revision to one (`-o patch=<id>`, or a
//! `Patch-Id: <id>` trailer in the head commit).
//!
//! `ssh/git.rs` runs receive-pack with `receive.procReceiveRefs=refs/for`,
//! so git hands every `refs/for/*` update to this `proc-receive` hook
//! instead of storing it (git >= 2.29; the protocol is git's, described in
//! githooks(5), and is what Gitea's AGit flow uses). By then `pre-receive`
//! has passed the push (access: creating a ref needs write) and the pushed
//! objects are in the repository. For each update the hook:
//!
//! 1. reads git: the head commit, the server's `refs/heads/<base>` (the
//!    revision forks from it as the server has it now, never from a
//!    client's possibly stale local branch), the commit's title and body;
//! 2. decides in `collab.db` (`collab_store::patches::open` or `revise`, with its
//!    event, in one IMMEDIATE transaction of the hook's own connection);
//! 3. writes `refs/collab/revisions/<patch>/<n>` (create-only) before the
//!    transaction commits, and deletes it again if the commit fails;
//! 4. reports the update as done under that name (`option refname`), and
//!    tells the pusher the patch id, revision number and web address.
//!
//! `refs/for/<base>` itself is never stored. A refused update is reported
//! as `ng` with the reason, which git shows the pusher as
//! `! [remote rejected] HEAD -> refs/for/main (<reason>)`.
//!
//! The revision refs are the server's: `access` refuses every client push
//! touching `refs/collab/revisions/*` (a server-maintained prefix since the
//! client-written patch DAGs are imported, `objects::import::patch`), and
//! [`check`] still names the way to add a revision for a patch the server
//! holds.
//!
//! Push options: `title=`, `description=`, `patch=<id>`, `issue=<id>`
//! (repeatable). Others are left to other checks.
//!
//! Change ids and stacks (docs/patches.md, "Stacks"): without `-o patch=`
//! or a `Patch-Id:` trailer, the commits of the push that carry a change
//! id (a Gerrit `Change-Id: I<40 hex>` trailer, or a Jujutsu `change-id`
//! header), from the tip down its first parents until the first commit
//! without one or already in the base, are a stack: each is one patch,
//! found by its change id among the repository's open patches for that
//! base (a new revision when its commit changed, nothing when not) or
//! opened, and each records the patch below it (`depends_on`). All of
//! them are written in the one transaction. A stack deeper than
//! [`MAX_STACK`] is refused; a malformed change id is ignored with a note.

use std::io::{Read, Write};

use collab_store::sql::TransactionBehavior;
use git2::{Oid, Repository};

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use collab_record::refs;
use collab_store::patches::{self, NewPatch, NewRevision, Person, Written};

/// Deepest stack one push may open or revise: commits carrying change ids,
/// counted from the tip down (docs/patches.md).
pub const MAX_STACK: usize = 64;

/// Largest pkt-line payload git sends (65520 bytes minus the header).
const MAX_PKT: usize = 65516;
/// Most commands and push options one push may carry into this hook.
const MAX_LINES: usize = 10_000;

/// What the pusher asked for, from the push options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewOptions {
    pub title: Option<String>,
    pub description: Option<String>,
    pub patch: Option<String>,
    pub issues: Vec<String>,
}

/// Parse the push options this hook understands; ignore the others.
pub fn review_options(options: &[String]) -> ReviewOptions {
    let mut out = ReviewOptions::default();
    for option in options {
        let Some((key, value)) = option.split_once('=') else {
            continue;
        };
        match key {
            "title" => out.title = Some(value.to_string()),
            "description" => out.description = Some(value.to_string()),
            "patch" => out.patch = Some(value.to_string()),
            "issue" => out.issues.push(value.to_string()),
            _ => {}
        }
    }
    out
}

/// The `pre-receive` check: revision refs of patches the server holds are
/// written by the server alone.
pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let pins: Vec<(&str, &str)> = updates
        .iter()
        .filter_map(|u| {
            let (id, _) = refs::revision_of(&u.refname)?;
            Some((u.refname.as_str(), id))
        })
        .collect();
    if pins.is_empty() {
        return Ok(());
    }
    let conn = collab_store::open_reader(&ctx.collab_db)
        .map_err(|e| Refusal::one(format!("reading the collab database: {e}")))?;
    let mut refused = Vec::new();
    for (refname, id) in pins {
        // A database without the patches table (never migrated this far)
        // holds no patch.
        if patches::exists(&conn, &ctx.repo, id).unwrap_or(false) {
            refused.push(format!(
                "{refname}: maintained by the server; push to refs/for/<base> with -o patch={} to add a revision",
                &id[..8]
            ));
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal(refused))
    }
}

// ---------------------------------------------------------------- pkt-line

fn read_pkt(input: &mut impl Read) -> Result<Option<String>, String> {
    let mut len = [0u8; 4];
    input
        .read_exact(&mut len)
        .map_err(|e| format!("proc-receive: reading from receive-pack: {e}"))?;
    let len = std::str::from_utf8(&len)
        .ok()
        .and_then(|s| usize::from_str_radix(s, 16).ok())
        .ok_or("proc-receive: malformed pkt-line")?;
    if len == 0 {
        return Ok(None);
    }
    if !(4..=MAX_PKT + 4).contains(&len) {
        return Err("proc-receive: malformed pkt-line".into());
    }
    let mut data = vec![0u8; len - 4];
    input
        .read_exact(&mut data)
        .map_err(|e| format!("proc-receive: reading from receive-pack: {e}"))?;
    if data.last() == Some(&b'\n') {
        data.pop();
    }
    String::from_utf8(data)
        .map(Some)
        .map_err(|_| "proc-receive: a pkt-line is not UTF-8".into())
}

/// Every pkt-line up to the next flush. Public for the fuzz target
/// (fuzz/fuzz_targets/pkt_line.rs): what receive-pack sends is input.
pub fn read_section(input: &mut impl Read) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    while let Some(line) = read_pkt(input)? {
        if lines.len() == MAX_LINES {
            return Err("proc-receive: too many lines".into());
        }
        lines.push(line);
    }
    Ok(lines)
}

fn write_pkt(out: &mut impl Write, line: &str) -> std::io::Result<()> {
    let mut end = line.len().min(MAX_PKT - 1);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let line = &line[..end];
    writeln!(out, "{:04x}{line}", line.len() + 5)
}

fn flush_pkt(out: &mut impl Write) -> std::io::Result<()> {
    out.write_all(b"0000")?;
    out.flush()
}

// ---------------------------------------------------------------- the hook

/// How one `refs/for/*` update ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Recorded as revision `n` of `patch`, pinned at `pin`.
    Done {
        pin: String,
        head: Oid,
    },
    Refused(String),
}

/// Run the `proc-receive` hook over stdin/stdout; returns the exit code.
pub fn run() -> u8 {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    match serve(&mut input, &mut output) {
        Ok(()) => 0,
        Err(line) => {
            eprintln!("error: {line}");
            1
        }
    }
}

fn serve(input: &mut impl Read, output: &mut impl Write) -> Result<(), String> {
    let io = |e: std::io::Error| format!("proc-receive: writing to receive-pack: {e}");
    let hello = read_section(input)?;
    let first = hello.first().ok_or("proc-receive: no version line")?;
    let (version, features) = first.split_once('\0').unwrap_or((first.as_str(), ""));
    if version != "version=1" {
        return Err(format!("proc-receive: unsupported protocol {version:?}"));
    }
    let push_options = features.split(' ').any(|f| f == "push-options");
    let reply = if push_options {
        "version=1\0push-options"
    } else {
        "version=1"
    };
    write_pkt(output, reply).map_err(io)?;
    flush_pkt(output).map_err(io)?;

    let commands = read_section(input)?;
    let options = if push_options {
        read_section(input)?
    } else {
        Vec::new()
    };
    let commands: Vec<RefUpdate> = super::updates::parse(&commands.join("\n"))?;

    let outcomes: Vec<Outcome> = match HookContext::from_env() {
        Ok(ctx) => {
            let options = review_options(&options);
            commands
                .iter()
                .map(|c| match propose(&ctx, c, &options) {
                    Ok(outcome) => outcome,
                    Err(reason) => Outcome::Refused(reason),
                })
                .collect()
        }
        Err(line) => commands
            .iter()
            .map(|_| Outcome::Refused(line.clone()))
            .collect(),
    };
    for (command, outcome) in commands.iter().zip(outcomes) {
        match outcome {
            Outcome::Done { pin, head } => {
                write_pkt(output, &format!("ok {}", command.refname)).map_err(io)?;
                write_pkt(output, &format!("option refname {pin}")).map_err(io)?;
                write_pkt(output, &format!("option new-oid {head}")).map_err(io)?;
            }
            Outcome::Refused(reason) => {
                // One line of text, whatever a value echoed in it held
                // (`push_options` refuses such values first).
                let reason: String = reason
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                write_pkt(output, &format!("ng {} {reason}", command.refname)).map_err(io)?;
            }
        }
    }
    flush_pkt(output).map_err(io)
}

/// Where a revision starts, as the server sees its base branch now.
struct Fork {
    head: Oid,
    base_tip: Oid,
    base_commit: Oid,
}

fn fork_point(repo: &Repository, base: &str, new: Oid) -> Result<Fork, String> {
    let head = repo
        .find_object(new, None)
        .and_then(|o| o.peel_to_commit())
        .map_err(|_| "refs/for/* takes a commit".to_string())?
        .id();
    let base_tip = repo
        .find_reference(&refs::branch_ref(base))
        .and_then(|r| r.peel_to_commit())
        .map_err(|_| format!("no branch '{base}' on the server to propose against"))?
        .id();
    if head == base_tip || repo.graph_descendant_of(base_tip, head).unwrap_or(false) {
        return Err(format!(
            "nothing to propose: {} is already in {base}",
            short(&head.to_string())
        ));
    }
    let base_commit = repo
        .merge_base(head, base_tip)
        .map_err(|_| format!("{} shares no history with {base}", short(&head.to_string())))?;
    Ok(Fork {
        head,
        base_tip,
        base_commit,
    })
}

/// The `Patch-Id:` trailer of a commit message, if there is one.
pub fn patch_id_trailer(message: &str) -> Option<String> {
    let trailers = git2::message_trailers_strs(message).ok()?;
    let found = trailers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("Patch-Id"))
        .map(|(_, value)| value.trim().to_string());
    found
}

/// Whether `value` is a Gerrit change id: `I` and 40 lowercase hex digits.
fn gerrit_change_id(value: &str) -> bool {
    value.len() == 41
        && value.starts_with('I')
        && value[1..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `value` is a Jujutsu change id: 32 letters `k` to `z` (its
/// "reverse hex" of 16 bytes).
fn jujutsu_change_id(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| (b'k'..=b'z').contains(&b))
}

/// The change id a commit carries: its `Change-Id:` trailer (Gerrit), else
/// its `change-id` header (Jujutsu). `Err` is the note for one that is
/// there but malformed (the commit then counts as having none).
pub fn change_id_of(message: &str, header: Option<&[u8]>) -> Result<Option<String>, String> {
    let trailers: Vec<String> = git2::message_trailers_strs(message)
        .map(|t| {
            t.iter()
                .filter(|(key, _)| key.eq_ignore_ascii_case("Change-Id"))
                .map(|(_, value)| value.trim().to_string())
                .collect()
        })
        .unwrap_or_default();
    match trailers.as_slice() {
        [] => {}
        [one] if gerrit_change_id(one) => return Ok(Some(one.clone())),
        [one] => {
            return Err(format!(
                "Change-Id: {:?} is not I and 40 hex digits",
                one.chars().take(64).collect::<String>()
            ))
        }
        _ => return Err("it has more than one Change-Id: trailer".to_string()),
    }
    let Some(header) = header else {
        return Ok(None);
    };
    match std::str::from_utf8(header).map(str::trim) {
        Ok(value) if jujutsu_change_id(value) => Ok(Some(value.to_string())),
        _ => Err(format!(
            "its change-id header {:?} is not 32 letters k to z",
            String::from_utf8_lossy(&header[..header.len().min(64)])
        )),
    }
}

/// One commit of a stack, with its change id.
struct Stacked {
    head: Oid,
    change_id: String,
    message: String,
}

/// The stack of a push: from the tip down its first parents, the commits
/// not in the base that carry a change id, tip first (empty when the tip
/// carries none). Notes on malformed change ids go to the pusher.
fn stack_of(repo: &Repository, fork: &Fork) -> Result<Vec<Stacked>, String> {
    let git = |e: git2::Error| format!("reading the pushed commits: {}", e.message());
    let mut walk = repo.revwalk().map_err(git)?;
    walk.simplify_first_parent().map_err(git)?;
    walk.push(fork.head).map_err(git)?;
    walk.hide(fork.base_tip).map_err(git)?;
    let mut stack: Vec<Stacked> = Vec::new();
    for oid in walk {
        let oid = oid.map_err(git)?;
        let commit = repo.find_commit(oid).map_err(git)?;
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        let header = commit.header_field_bytes("change-id").ok();
        let change_id = match change_id_of(&message, header.as_deref()) {
            Ok(Some(id)) => id,
            Ok(None) => break,
            Err(note) => {
                eprintln!(
                    "note: ignoring the change id of {}: {note}",
                    short(&oid.to_string())
                );
                break;
            }
        };
        if let Some(other) = stack.iter().find(|s| s.change_id == change_id) {
            return Err(format!(
                "change id {change_id} is on two pushed commits ({} and {}): give each its own",
                short(&other.head.to_string()),
                short(&oid.to_string())
            ));
        }
        if stack.len() == MAX_STACK {
            return Err(format!(
                "a stack of more than {MAX_STACK} commits with change ids is refused: merge its \
                 lower part first, or push fewer"
            ));
        }
        stack.push(Stacked {
            head: oid,
            change_id,
            message,
        });
    }
    Ok(stack)
}

/// Handle one `refs/for/*` update.
fn propose(
    ctx: &HookContext,
    update: &RefUpdate,
    options: &ReviewOptions,
) -> Result<Outcome, String> {
    let base = refs::for_review_base(&update.refname)
        .ok_or_else(|| format!("{}: push to refs/for/<branch>", update.refname))?;
    let new = update
        .new
        .ok_or("refs/for/* is not a ref that can be deleted")?;
    let repo = ctx.open_repo()?;
    let fork = fork_point(&repo, base, new)?;
    let commit = repo
        .find_commit(fork.head)
        .map_err(|e| format!("reading the head commit: {e}"))?;
    let message = commit.message().unwrap_or("").to_string();
    let patch_id = options.patch.clone().or_else(|| patch_id_trailer(&message));
    if patch_id.is_none() {
        let stack = stack_of(&repo, &fork)?;
        if !stack.is_empty() {
            return propose_stack(ctx, &repo, base, &fork, stack, options);
        }
    }
    let revision = NewRevision {
        head: fork.head.to_string(),
        base_commit: fork.base_commit.to_string(),
        base_tip: Some(fork.base_tip.to_string()),
    };

    let conn = collab_store::open(&ctx.collab_db)
        .map_err(|e| format!("opening the collab database: {e}"))?;
    // The push's records are this repository's: its lock, not the key of
    // the writes that may touch several (docs/postgres.md).
    let tx = collab_store::sql::Transaction::new_unchecked(&conn, TransactionBehavior::Repository)
        .and_then(|tx| tx.lock_repository(&ctx.repo).map(|_| tx))
        .map_err(|e| format!("collab database: {e}"))?;
    let actor = Person {
        principal: ctx.principal.clone(),
        name: ctx.principal.clone(),
        key: None,
    };
    let w = patches::WriteCtx {
        repo: &ctx.repo,
        actor: &actor,
        max_body: ctx.max_body,
        now: chrono::Utc::now().timestamp(),
    };
    let written: Written = match &patch_id {
        Some(id) => {
            // Review integrity: someone else's patch takes a revision only
            // if the merge rule allows it, or from a maintainer (Rewind).
            let revisers = if ctx.others_may_revise || ctx.access >= collab_proto::Access::Rewind {
                patches::Revisers::Anyone
            } else {
                patches::Revisers::AuthorOnly
            };
            patches::revise(&tx, &w, id, &revision, &options.issues, revisers)
        }
        None => {
            // The same commit pushed again for the same base: an open patch
            // already has it as its latest revision. Nothing new to open (a
            // retrying agent would otherwise open a duplicate each time).
            let same = patches::open_on_base(&tx, &ctx.repo, base)
                .map_err(|e| format!("collab database: {e}"))?
                .into_iter()
                .find(|(_, head)| *head == revision.head);
            if let Some((existing, _)) = same {
                let n = patches::get(&tx, &ctx.repo, &existing)
                    .map_err(|e| format!("collab database: {e}"))?
                    .map_or(1, |p| p.revision_count);
                eprintln!(
                    "patch {} already has {} as its revision {n} against {base}: nothing new \
                     (to update it, push a new commit with: git push -o patch={} origin \
                     HEAD:refs/for/{base})",
                    short(&existing),
                    short(&revision.head),
                    short(&existing)
                );
                eprintln!("  {}", web_url(ctx, &existing));
                return Ok(Outcome::Done {
                    pin: refs::revision_ref(&existing, n as u32),
                    head: fork.head,
                });
            }
            let (subject, body) = split_message(&message);
            patches::open(
                &tx,
                &w,
                &NewPatch {
                    title: options.title.clone().unwrap_or(subject),
                    body: options.description.clone().unwrap_or(body),
                    base: base.to_string(),
                    revision: revision.clone(),
                    issues: options.issues.clone(),
                    change_id: None,
                    depends_on: None,
                },
            )
        }
    }
    .map_err(|e| e.to_string())?;
    let n = written.revision.unwrap_or(1);
    let pin = refs::revision_ref(&written.patch, n as u32);
    create_ref_beside_maintenance(
        &repo,
        &pin,
        fork.head,
        "git-collab: revision pushed for review",
    )
    .map_err(|e| format!("writing {pin}: {}", e.message()))?;
    if let Err(e) = tx.commit() {
        if let Ok(mut r) = repo.find_reference(&pin) {
            let _ = r.delete();
        }
        return Err(format!("collab database: {e}"));
    }
    let verb = if patch_id.is_some() {
        "updated"
    } else {
        "opened"
    };
    eprintln!(
        "patch {} {verb}: revision {n} against {base} ({} on top of {})",
        short(&written.patch),
        short(&revision.head),
        short(&revision.base_commit)
    );
    eprintln!("  {}", web_url(ctx, &written.patch));
    if patch_id.is_none() {
        eprintln!(
            "  push a new revision with: git push -o patch={} origin HEAD:refs/for/{base}",
            short(&written.patch)
        );
    }
    Ok(Outcome::Done {
        pin,
        head: fork.head,
    })
}

/// What a stack's push did to one patch.
enum StackStep {
    Opened,
    Revised,
    Unchanged,
}

/// One patch of a pushed stack, for the pusher's report.
struct Reported {
    patch: String,
    n: i64,
    step: StackStep,
    head: Oid,
    below: Option<String>,
    base_commit: String,
}

/// Handle a push whose commits carry change ids: one patch per commit of
/// `stack` (tip first), bottom up, all in one transaction.
fn propose_stack(
    ctx: &HookContext,
    repo: &Repository,
    base: &str,
    fork: &Fork,
    stack: Vec<Stacked>,
    options: &ReviewOptions,
) -> Result<Outcome, String> {
    let db = |e: collab_store::sql::Error| format!("collab database: {e}");
    let conn = collab_store::open(&ctx.collab_db)
        .map_err(|e| format!("opening the collab database: {e}"))?;
    let tx = collab_store::sql::Transaction::new_unchecked(&conn, TransactionBehavior::Repository)
        .and_then(|tx| tx.lock_repository(&ctx.repo).map(|_| tx))
        .map_err(db)?;
    let actor = Person {
        principal: ctx.principal.clone(),
        name: ctx.principal.clone(),
        key: None,
    };
    let w = patches::WriteCtx {
        repo: &ctx.repo,
        actor: &actor,
        max_body: ctx.max_body,
        now: chrono::Utc::now().timestamp(),
    };
    let revisers = if ctx.others_may_revise || ctx.access >= collab_proto::Access::Rewind {
        patches::Revisers::Anyone
    } else {
        patches::Revisers::AuthorOnly
    };
    // Refs written so far, deleted again if the transaction fails.
    let mut written_refs: Vec<String> = Vec::new();
    let undo = |refs: &[String]| {
        for name in refs {
            if let Ok(mut r) = repo.find_reference(name) {
                let _ = r.delete();
            }
        }
    };
    let mut report: Vec<Reported> = Vec::new();
    let mut tip_pin = None;
    let mut work = || -> Result<(), String> {
        let mut below: Option<String> = None;
        for item in stack.iter().rev() {
            let is_tip = item.head == fork.head;
            let base_commit = repo.merge_base(item.head, fork.base_tip).map_err(|_| {
                format!(
                    "{} shares no history with {base}",
                    short(&item.head.to_string())
                )
            })?;
            let revision = NewRevision {
                head: item.head.to_string(),
                base_commit: base_commit.to_string(),
                base_tip: Some(fork.base_tip.to_string()),
            };
            let issues: &[String] = if is_tip { &options.issues } else { &[] };
            let found =
                patches::open_by_change_id(&tx, &ctx.repo, base, &item.change_id).map_err(db)?;
            let (id, n, step) = match found {
                Some((id, head)) if head == revision.head => {
                    let n = patches::get(&tx, &ctx.repo, &id)
                        .map_err(db)?
                        .map_or(1, |p| p.revision_count);
                    (id, n, StackStep::Unchanged)
                }
                Some((id, _)) => {
                    let wr = patches::revise(&tx, &w, &id, &revision, issues, revisers)
                        .map_err(|e| e.to_string())?;
                    (wr.patch, wr.revision.unwrap_or(1), StackStep::Revised)
                }
                None => {
                    let (subject, body) = split_message(&item.message);
                    let (title, body) = if is_tip {
                        (
                            options.title.clone().unwrap_or(subject),
                            options.description.clone().unwrap_or(body),
                        )
                    } else {
                        (subject, body)
                    };
                    let new = NewPatch {
                        title,
                        body,
                        base: base.to_string(),
                        revision: revision.clone(),
                        issues: issues.to_vec(),
                        change_id: Some(item.change_id.clone()),
                        depends_on: below.clone(),
                    };
                    let wr = patches::open(&tx, &w, &new).map_err(|e| e.to_string())?;
                    (wr.patch, wr.revision.unwrap_or(1), StackStep::Opened)
                }
            };
            patches::set_depends_on(&tx, &ctx.repo, &id, below.as_deref()).map_err(db)?;
            let pin = refs::revision_ref(&id, n as u32);
            if !matches!(step, StackStep::Unchanged) {
                create_ref_beside_maintenance(
                    repo,
                    &pin,
                    item.head,
                    "git-collab: revision pushed for review",
                )
                .map_err(|e| format!("writing {pin}: {}", e.message()))?;
                written_refs.push(pin.clone());
            }
            if is_tip {
                tip_pin = Some(pin);
            }
            report.push(Reported {
                patch: id.clone(),
                n,
                step,
                head: item.head,
                below: below.clone(),
                base_commit: revision.base_commit,
            });
            below = Some(id);
        }
        Ok(())
    };
    if let Err(e) = work() {
        undo(&written_refs);
        return Err(e);
    }
    if let Err(e) = tx.commit() {
        undo(&written_refs);
        return Err(db(e));
    }
    eprintln!(
        "stack of {} patch{} against {base}, bottom first:",
        report.len(),
        if report.len() == 1 { "" } else { "es" }
    );
    for Reported {
        patch: id,
        n,
        step,
        head,
        below,
        base_commit,
    } in &report
    {
        let what = match step {
            StackStep::Opened => format!("opened: revision {n}"),
            StackStep::Revised => format!("updated: revision {n}"),
            StackStep::Unchanged => format!("unchanged: revision {n} already has it"),
        };
        let on = match below {
            Some(b) => format!("on patch {}", short(b)),
            None => format!("on {}", short(base_commit)),
        };
        eprintln!(
            "patch {} {what} ({} {on})",
            short(id),
            short(&head.to_string())
        );
        eprintln!("  {}", web_url(ctx, id));
    }
    Ok(Outcome::Done {
        pin: tip_pin.ok_or("the stack has no tip")?,
        head: fork.head,
    })
}

/// How many times [`create_ref_beside_maintenance`] writes a ref.
const REF_WRITE_ATTEMPTS: u32 = 10;

/// Create the ref `name` at `oid` (create-only), as git's own ref writes
/// do it beside a concurrent `git pack-refs --all` (repository
/// maintenance, `maintenance::run`): that prunes the loose refs it packed
/// and removes the directories they leave empty, so between libgit2
/// making `refs/collab/revisions` and making `<patch>` below it (or the
/// lock file in it) the parent can vanish, and the write fails with
/// `failed to make directory …` (an OS error; 2 pushes in 360 while `gc`
/// looped). git retries its own writes then (`raceproof_create_file`);
/// so does this, a few times, since nothing was written. Maintenance
/// keeps pruning: a packed-refs file without the loose copies is what it
/// is for. An existing ref (`Exists`) is not an OS error, and is final.
fn create_ref_beside_maintenance(
    repo: &Repository,
    name: &str,
    oid: Oid,
    log_message: &str,
) -> Result<(), git2::Error> {
    let mut attempt = 1;
    loop {
        match repo.reference(name, oid, false, log_message) {
            Ok(_) => return Ok(()),
            Err(e) if e.class() == git2::ErrorClass::Os && attempt < REF_WRITE_ATTEMPTS => {
                tracing::debug!("writing {name}: {} (attempt {attempt})", e.message());
                std::thread::sleep(std::time::Duration::from_millis(u64::from(attempt)));
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The web page of a patch.
fn web_url(ctx: &HookContext, patch: &str) -> String {
    let name = ctx.repo.strip_suffix(".git").unwrap_or(&ctx.repo);
    format!(
        "{}/{name}/-/patches/{}",
        ctx.web_url.trim_end_matches('/'),
        short(patch)
    )
}

/// A commit message's subject line and the rest.
fn split_message(message: &str) -> (String, String) {
    let mut lines = message.trim().splitn(2, '\n');
    let subject = lines.next().unwrap_or("").trim().to_string();
    let body = lines.next().unwrap_or("").trim().to_string();
    (subject, body)
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_trailers() {
        let o = review_options(&[
            "title=Fix it".into(),
            "issue=abcd".into(),
            "collab-lease=abcd:1".into(),
            "issue=ef01".into(),
            "patch=1234abcd".into(),
        ]);
        assert_eq!(o.title.as_deref(), Some("Fix it"));
        assert_eq!(o.patch.as_deref(), Some("1234abcd"));
        assert_eq!(o.issues, vec!["abcd", "ef01"]);
        assert_eq!(
            patch_id_trailer("Fix\n\nbody\n\nPatch-Id: 3f2a91c0\nSigned-off-by: A <a@b>\n"),
            Some("3f2a91c0".into())
        );
        assert_eq!(
            patch_id_trailer("Fix\n\nPatch-Id is not a trailer here"),
            None
        );
        assert_eq!(
            split_message("Subject\n\nline one\nline two\n"),
            ("Subject".into(), "line one\nline two".into())
        );
    }

    #[test]
    fn change_ids_from_trailers_and_headers() {
        let gerrit = format!("I{}", "0a".repeat(20));
        let jj = "zyxwvutsrqponmlkzyxwvutsrqponmlk";
        let msg = format!("Fix\n\nbody\n\nChange-Id: {gerrit}\n");
        assert_eq!(change_id_of(&msg, None), Ok(Some(gerrit.clone())));
        // The trailer wins over a header.
        assert_eq!(
            change_id_of(&msg, Some(jj.as_bytes())),
            Ok(Some(gerrit.clone()))
        );
        assert_eq!(
            change_id_of("Fix", Some(jj.as_bytes())),
            Ok(Some(jj.into()))
        );
        assert_eq!(change_id_of("Fix\n\nno trailers here", None), Ok(None));
        for bad in ["I123", "Iabc-not-hex", &gerrit.to_uppercase(), &gerrit[1..]] {
            let msg = format!("Fix\n\nChange-Id: {bad}\n");
            assert!(change_id_of(&msg, None).is_err(), "{bad}");
        }
        let two = format!("Fix\n\nChange-Id: {gerrit}\nChange-Id: {gerrit}\n");
        assert!(change_id_of(&two, None).is_err());
        for bad in [
            "abc",
            "zyxwvutsrqponmlk",
            "0123456789abcdef0123456789abcdef",
        ] {
            assert!(change_id_of("Fix", Some(bad.as_bytes())).is_err(), "{bad}");
        }
    }

    #[test]
    fn pkt_lines_round_trip() {
        let mut buf = Vec::new();
        write_pkt(&mut buf, "version=1\0push-options").unwrap();
        flush_pkt(&mut buf).unwrap();
        write_pkt(&mut buf, "ok refs/for/main").unwrap();
        flush_pkt(&mut buf).unwrap();
        let mut r = buf.as_slice();
        assert_eq!(
            read_section(&mut r).unwrap(),
            vec!["version=1\0push-options".to_string()]
        );
        assert_eq!(
            read_section(&mut r).unwrap(),
            vec!["ok refs/for/main".to_string()]
        );
        assert!(read_pkt(&mut b"zzzz".as_slice()).is_err());
    }

    #[test]
    fn a_bad_context_refuses_every_update_without_failing_the_protocol() {
        let mut input = Vec::new();
        write_pkt(&mut input, "version=1\0push-options atomic").unwrap();
        flush_pkt(&mut input).unwrap();
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        write_pkt(&mut input, &format!("{zero} {one} refs/for/main")).unwrap();
        flush_pkt(&mut input).unwrap();
        flush_pkt(&mut input).unwrap();
        let mut out = Vec::new();
        // The test process has no hook context.
        serve(&mut input.as_slice(), &mut out).unwrap();
        let mut r = out.as_slice();
        assert_eq!(
            read_section(&mut r).unwrap(),
            vec!["version=1\0push-options"]
        );
        let report = read_section(&mut r).unwrap();
        assert_eq!(report.len(), 1);
        assert!(
            report[0].starts_with("ng refs/for/main push refused"),
            "{report:?}"
        );
    }
}
