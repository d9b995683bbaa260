//! Every verb's access is its row's (issue 46): a table-driven test over
//! `collab_proto::verbs::VERBS`, through the real server and OpenSSH.
//! For each row that asks a level on its repository, a key one level below
//! it is refused (`repository not found`, or `permission denied: … access`
//! for a reader), and a key at the level is not; a handler that asked for
//! another level than its row's fails one of the two. A row any key may
//! run is run by a key with no repository at all. A row whose need is a
//! rule of its own (creating a repository, hooks over a glob, reads
//! filtered per repository) is its handler's, and its suite's
//! (`ssh_access`, `webhooks`, `events`, `search`, `info_verb`).

use collab_testkit as common;

use collab_proto::verbs::{self, Access, Arity, Kind, Need, Rule, Verb};
use common::{fingerprint, ServerHarness};

/// The repository every line names.
const REPO: &str = "r";

/// A value of `kind` the table accepts. Only the argument `repo` names
/// [`REPO`]: another repository value (a new name, `--confirm`) is `x`, so
/// that a rename or delete at its level is refused for what it names and
/// leaves [`REPO`] to the rows after it.
fn sample(kind: Kind) -> String {
    match kind {
        Kind::Int { min, .. } => min.max(1).to_string(),
        Kind::Choice(words) => words[0].to_string(),
        Kind::Id => "abcd".to_string(),
        _ => "x".to_string(),
    }
}

/// A command line the table takes for `verb`, naming [`REPO`]: its
/// required arguments, its required flags and one flag of each group that
/// needs one. `raise`: give the argument its need depends on (a
/// `Need::RepoBy`), so that it asks the raised level; else leave it out,
/// or give another value.
fn line(verb: &Verb, raise: bool) -> String {
    let by = match verb.need {
        Need::RepoBy { arg, value, .. } => Some((arg, value)),
        _ => None,
    };
    let mut line = verb.name();
    for arg in verb.args {
        let value = match by {
            Some((name, value)) if name == arg.name => match (raise, value, arg.kind) {
                (true, Some(value), _) => Some(value.to_string()),
                (true, None, Kind::Choice(words)) => words.last().map(|w| w.to_string()),
                (true, None, kind) => Some(sample(kind)),
                (false, Some(value), Kind::Choice(words)) => {
                    words.iter().find(|w| **w != value).map(|w| w.to_string())
                }
                (false, _, _) => None,
            },
            _ if arg.name == "repo" && arg.arity == Arity::One => Some(REPO.to_string()),
            _ if arg.arity == Arity::One => Some(sample(arg.kind)),
            _ => None,
        };
        if let Some(value) = value {
            line.push(' ');
            line.push_str(&collab_proto::tokens::shell_quote(&value));
        }
    }
    let mut wanted: Vec<&str> = verb
        .flags
        .iter()
        .filter(|f| f.required)
        .map(|f| f.long)
        .collect();
    for rule in verb.rules {
        if let Rule::OneOf(group) | Rule::AtLeastOne(group) = rule {
            wanted.push(group[0]);
        }
    }
    for long in wanted {
        let flag = verb.flag(long).unwrap();
        line.push(' ');
        line.push_str(long);
        if let Some((_, kind)) = flag.value {
            line.push(' ');
            line.push_str(&sample(kind));
        }
    }
    line
}

/// Whether `stderr` is an access refusal: the one not-found line (what a
/// caller who may not use the repository gets, so that it stays secret),
/// a reader's `permission denied: … <level> access`, or the
/// administrators-only lines.
fn refused(stderr: &str) -> bool {
    let first = stderr.lines().next().unwrap_or("");
    first == "error: repository not found"
        || (first.starts_with("error: permission denied: ") && first.ends_with(" access"))
        || first.ends_with("are for server administrators")
        || first.ends_with("needs a server administrator")
}

/// The keys, one per level, and the harness's administrator.
struct Keys {
    none: std::path::PathBuf,
    read: std::path::PathBuf,
    checks: std::path::PathBuf,
    write: std::path::PathBuf,
    rewind: std::path::PathBuf,
    admin: std::path::PathBuf,
}

impl Keys {
    /// A key holding exactly `level` on [`REPO`].
    fn at(&self, level: Access) -> &std::path::Path {
        match level {
            Access::Read => &self.read,
            Access::Checks => &self.checks,
            Access::Write => &self.write,
            Access::Rewind => &self.rewind,
        }
    }

    /// A key holding one level less than `level` (no access below read).
    fn below(&self, level: Access) -> &std::path::Path {
        match level {
            Access::Read => &self.none,
            Access::Checks => &self.read,
            Access::Write => &self.checks,
            Access::Rewind => &self.write,
        }
    }
}

#[test]
fn every_rows_level_is_the_level_its_handler_asks() {
    let h = ServerHarness::start();
    let repo = h.create_repo(REPO);
    let keys = Keys {
        none: h.authorized_key("none"),
        read: h.authorized_key("read"),
        checks: h.authorized_key("checks"),
        write: h.authorized_key("write"),
        rewind: h.authorized_key("rewind"),
        admin: h.ssh_client_key(),
    };
    let list = |keys: &[&std::path::PathBuf]| {
        let fps: Vec<String> = keys
            .iter()
            .map(|k| format!("\"{}\"", fingerprint(k)))
            .collect();
        format!("[{}]", fps.join(", "))
    };
    let readers = [&keys.read, &keys.checks, &keys.write, &keys.rewind];
    common::write_live(
        &repo.join("collab-policy.toml"),
        format!(
            "read = {}\nchecks = {}\nwrite = {}\nrewind = {}\n",
            list(&readers),
            list(&[&keys.checks]),
            list(&[&keys.write]),
            list(&[&keys.rewind]),
        ),
    );

    let run = |key: &std::path::Path, line: &str| h.ssh_exec_as(key, line, b"");
    let mut driven = 0;
    // The arguments that raise a level set something: run them last.
    let raised = verbs::VERBS
        .iter()
        .filter(|v| matches!(v.need, Need::RepoBy { .. }))
        .map(|v| (v, true));
    let rows = verbs::VERBS.iter().map(|v| (v, false)).chain(raised);
    for (verb, raise) in rows {
        let line = line(verb, raise);
        let (below, at): (&std::path::Path, &std::path::Path) = match verb.need {
            Need::Anyone => {
                let out = run(&keys.none, &line);
                assert!(!refused(&out.stderr), "{line}: refused to any key: {out:?}");
                driven += 1;
                continue;
            }
            // The handler's own rule, its suite's.
            Need::Rule(_) => continue,
            Need::Admin => (&keys.rewind, &keys.admin),
            Need::Repo(_) | Need::RepoBy { .. } | Need::RepoAtLeast { .. } => {
                let tokens = collab_proto::tokens::shell_tokens(&line).unwrap();
                let invocation = verbs::parse(&tokens).unwrap();
                let level = verb
                    .need
                    .level(|arg| verb.arg(arg).and_then(|_| invocation.opt_arg(arg)))
                    .unwrap();
                (keys.below(level), keys.at(level))
            }
        };
        let denied = run(below, &line);
        assert!(
            refused(&denied.stderr) && denied.code == 1,
            "{line}: a key below its row's level ({}) was not refused: {denied:?}",
            verb.need.describe()
        );
        let allowed = run(at, &line);
        assert!(
            !refused(&allowed.stderr),
            "{line}: a key at its row's level ({}) was refused: {allowed:?}",
            verb.need.describe()
        );
        driven += 1;
    }
    // No row at its level removed or renamed the repository the later rows
    // were driven on.
    assert!(repo.join("HEAD").is_file());
    // Nothing above was vacuous: every row with a level or open to anyone
    // was driven (the raised settings twice).
    let expected = verbs::VERBS
        .iter()
        .map(|v| match v.need {
            Need::Rule(_) => 0,
            Need::RepoBy { .. } => 2,
            _ => 1,
        })
        .sum::<usize>();
    assert_eq!(driven, expected);
    assert!(driven > 40, "{driven}");
}
