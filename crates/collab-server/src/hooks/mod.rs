//! The server's git hooks: what runs inside `git receive-pack` before (and,
//! later, after) a push changes any ref.
//!
//! `ssh/git.rs` runs `git receive-pack` with `core.hooksPath` = the server
//! hooks dir (written by `setup`), whose scripts exec
//! `git-collab-server hook <name>`; `run` dispatches here. A hook is a
//! separate process: everything it knows about the push comes from the
//! environment the server set (`context`) and the ref updates git writes on
//! stdin (`updates`).
//!
//! `pre-receive` is a pipeline of checks over the parsed updates, run in
//! order; the first check that refuses stops the push, and nothing changes
//! (git's quarantine keeps the pushed objects out of the repository). Each
//! concern is one module with one `check` function:
//!
//! - `access`: who may create, fast-forward, rewrite or delete which ref;
//! - `push_options`: the push options are few, short lines of text, and
//!   the ids among them are ids (they reach the pusher's terminal and the
//!   records);
//! - `refnames`: a new ref's name holds no control, invisible or
//!   text-direction character;
//! - `gitmodules`: no pushed commit's `.gitmodules` holds a carriage
//!   return inside a value (CVE-2025-48384; git's own fsck of every
//!   pushed object runs before the hook, `receive.fsckObjects`);
//! - `records`: issue and patch DAG refs are not pushed any more (the
//!   server holds both; `git collab issue …`, `refs/for/<base>` and
//!   `collab-patch` write them);
//! - `fencing`: a push carrying `-o collab-lease=<issue>:<token>`, or
//!   touching a fenced ref, needs the pusher's live lease token;
//! - `governance`: a push to `_governance.git` must keep a valid
//!   `governance.toml` that still has an admin;
//! - `review`: the revision refs of patches the server holds are the
//!   server's;
//! - `mirrored`: a repository with a pull mirror takes no push to the refs
//!   its upstream provides;
//! - `lfs_locks`: no pushed commit changes a path someone else holds a
//!   git-lfs lock on (`git lfs lock`), whatever the client checked.
//!
//! `proc-receive` takes the `refs/for/<base>` updates (push-to-review,
//! `review`): git hands them to it instead of storing them, and it records
//! each as a patch revision.
//!
//! `post-receive` runs after the refs moved; it records a `ref.updated`
//! event per ref (`events`), then runs the merge scan (`merge_scan`:
//! patches merged and issues fixed by the push), and never refuses
//! anything.
//!
//! To add a concern, write `hooks/<concern>.rs` with a [`Check`] and add it
//! to [`PRE_RECEIVE`] (or to a new stage, with its script name in
//! [`HOOK_NAMES`] so `setup` writes it).

pub mod access;
pub mod check;
pub mod context;
pub mod fencing;
pub mod gitmodules;
pub mod governance;
pub mod lfs_locks;
pub mod merge_scan;
pub mod mirrored;
pub mod post_receive;
pub mod push_options;
pub mod records;
pub mod refnames;
pub mod review;
pub mod updates;

use std::io::Read as _;

pub use check::{Check, Refusal};
pub use context::HookContext;
pub use updates::RefUpdate;

/// The hook scripts `setup` writes into the hooks dir, each running
/// `git-collab-server hook <name>`.
pub const HOOK_NAMES: &[&str] = &["pre-receive", "proc-receive", "post-receive"];

/// The `pre-receive` checks, in order. Access comes first: nothing else
/// looks at an update the pusher may not make.
pub const PRE_RECEIVE: &[(&str, Check)] = &[
    ("access", access::check),
    ("push_options", push_options::check),
    ("refnames", refnames::check),
    ("gitmodules", gitmodules::check),
    ("records", records::check),
    ("fencing", fencing::check),
    ("governance", governance::check),
    ("review", review::check),
    ("mirrored", mirrored::check),
    ("lfs_locks", lfs_locks::check),
];

/// Most ref updates one push may carry; the hook input is read whole.
const MAX_INPUT: u64 = 64 * 1024 * 1024;

/// Run the named hook; returns the process exit code.
pub fn run(name: &str) -> u8 {
    match name {
        "pre-receive" => match pre_receive() {
            Ok(()) => 0,
            Err(refusal) => {
                for line in refusal.0 {
                    eprintln!("error: {line}");
                }
                1
            }
        },
        "proc-receive" => review::run(),
        "post-receive" => {
            if let Err(line) = post_receive() {
                eprintln!("warning: {line}");
            }
            0
        }
        // Unknown hooks do nothing: git only runs the scripts we wrote.
        _ => 0,
    }
}

fn pre_receive() -> Result<(), Refusal> {
    let ctx = HookContext::from_env().map_err(Refusal::one)?;
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_INPUT)
        .read_to_string(&mut input)
        .map_err(|e| Refusal::one(format!("reading the hook input: {e}")))?;
    let updates = updates::parse(&input).map_err(Refusal::one)?;
    run_checks(PRE_RECEIVE, &ctx, &updates)
}

fn post_receive() -> Result<(), String> {
    let ctx = HookContext::from_env()?;
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_INPUT)
        .read_to_string(&mut input)
        .map_err(|e| format!("reading the hook input: {e}"))?;
    let updates = updates::parse(&input)?;
    let recorded = post_receive::record(&ctx, &updates);
    let scanned = merge_scan::run(&ctx, &updates);
    recorded.and(scanned)
}

/// Run `checks` in order; the first refusal wins.
pub fn run_checks(
    checks: &[(&str, Check)],
    ctx: &HookContext,
    updates: &[RefUpdate],
) -> Result<(), Refusal> {
    for (_name, check) in checks {
        check(ctx, updates)?;
    }
    Ok(())
}
