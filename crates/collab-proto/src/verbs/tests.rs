use super::*;
use crate::tokens::shell_tokens;

fn tokens(line: &str) -> Vec<String> {
    shell_tokens(line).unwrap()
}

fn parses(line: &str) -> bool {
    parse(&tokens(line)).is_ok()
}

#[test]
fn every_row_is_well_formed() {
    let mut names = Vec::new();
    for verb in VERBS {
        let name = verb.name();
        assert!(!names.contains(&name), "{name} twice");
        names.push(name.clone());
        assert!(!verb.help.is_empty(), "{name}: no help line");
        // Required arguments first, then at most one optional or repeated.
        let optional = verb.args.iter().position(|a| a.arity != Arity::One);
        if let Some(i) = optional {
            assert!(
                verb.args[i..].iter().all(|a| a.arity != Arity::One),
                "{name}: a required argument after an optional one"
            );
            assert_eq!(verb.args.len() - i, 1, "{name}: two optional arguments");
        }
        for flag in verb.flags {
            assert!(flag.long.starts_with("--"), "{name}: {}", flag.long);
        }
        for rule in verb.rules {
            let longs: Vec<&str> = match *rule {
                Rule::OneOf(g) | Rule::AtMostOne(g) | Rule::AtLeastOne(g) => g.to_vec(),
                Rule::Requires(a, b) => vec![a, b],
            };
            for long in longs {
                assert!(verb.flag(long).is_some(), "{name}: rule names {long}");
            }
        }
        // Repository verbs name it first, and call it `repo`.
        if let Need::Repo(_) | Need::RepoBy { .. } | Need::RepoAtLeast { .. } = verb.need {
            assert!(
                verb.names_repo(),
                "{name}: needs repo access but names none"
            );
        }
        // A level that depends on an argument names one the verb takes.
        if let Need::RepoBy { arg, .. } = verb.need {
            assert!(verb.arg(arg).is_some(), "{name}: its need names {arg}");
        }
    }
}

#[test]
fn two_word_actions_parse_and_their_family_gets_the_usage() {
    let inv = tokens("collab-repo mirror add 'a/b' 'https://x/y.git' --push --interval 10m");
    let inv = parse(&inv).unwrap();
    assert_eq!(inv.verb.name(), "collab-repo mirror add");
    assert_eq!(inv.arg("repo"), "a/b");
    assert_eq!(inv.arg("url"), "https://x/y.git");
    assert!(inv.has("--push"));
    assert_eq!(inv.flag("--interval"), Some("10m"));
    let sync = tokens("collab-repo mirror sync r");
    assert_eq!(parse(&sync).unwrap().opt_arg("id"), None);
    // `mirror` alone, or an unknown second word, is a usage error of the
    // family, not a command.
    for line in [
        "collab-repo mirror",
        "collab-repo mirror frob r",
        "collab-repo mirror add r",
    ] {
        match parse(&tokens(line)) {
            Err(Refusal::Usage(usage)) => assert!(usage.contains("mirror add"), "{usage}"),
            other => panic!("{line}: {other:?}"),
        }
    }
    let call = Call::new("collab-repo", "mirror remove")
        .arg("r")
        .arg("mr1");
    let line = call.line();
    assert!(parses(&line), "{line}");
}

#[test]
fn tool_names_are_family_and_action() {
    let tool = |f, a| find(f, a).unwrap().tool_name();
    assert_eq!(tool("collab-issue", "open"), "issue_open");
    assert_eq!(tool("collab-lease", "next"), "lease_next");
    assert_eq!(tool("collab-repo", "set-head"), "repo_set_head");
    assert_eq!(tool("collab-whoami", ""), "whoami");
    assert_eq!(tool("collab-repo", "mirror add"), "repo_mirror_add");
    assert_eq!(
        find("collab-issue", "comment")
            .unwrap()
            .flag("--lease-token")
            .unwrap()
            .property(),
        "lease_token"
    );
}

#[test]
fn usage_lines_say_the_grammar() {
    let usage = |f, a| find(f, a).unwrap().usage();
    assert_eq!(
        usage("collab-issue", "open"),
        "collab-issue open '<repo>' --title T [--body B|--body-stdin] [--label L]..."
    );
    assert_eq!(
        usage("collab-issue", "comment"),
        "collab-issue comment '<repo>' '<issue>' --body B|--body-stdin [--lease-token N]"
    );
    assert_eq!(
        usage("collab-patch", "review"),
        "collab-patch review '<repo>' '<patch>' --approve|--request-changes|--comment \
         [--body B|--body-stdin] [--rev N]"
    );
    assert_eq!(
        usage("collab-events", "watch"),
        "collab-events watch ['<repo>'...] [--since <seq>] [--type <pattern>]... [--no-follow]"
    );
    assert_eq!(usage("git-upload-pack", ""), "git-upload-pack '<repo>'");
    assert_eq!(
        usage("collab-repo", "visibility"),
        "collab-repo visibility '<repo>' [public|private]"
    );
    assert!(family_usage("collab-lease").starts_with("collab-lease acquire '<repo>'"));
    assert!(family_usage("collab-lease")
        .contains(" | collab-lease renew '<repo>' '<issue>' --ttl <secs>"));
}

#[test]
fn parses_positionals_flags_and_aliases() {
    let t = tokens("collab-issue open 'team/app' --title 'A bug' --label x --label y --body-stdin");
    let inv = parse(&t).unwrap();
    assert_eq!(inv.verb.name(), "collab-issue open");
    assert_eq!(inv.arg("repo"), "team/app");
    assert_eq!(inv.flag("--title"), Some("A bug"));
    assert_eq!(inv.flags("--label"), ["x", "y"]);
    assert!(inv.has("--body-stdin"));
    assert!(!inv.has("--body"));

    let t = tokens("git upload-pack 'r.git'");
    let inv = parse(&t).unwrap();
    assert_eq!(
        (inv.verb.family, inv.arg("repo")),
        ("git-upload-pack", "r.git")
    );
    assert_eq!(parse(&tokens("collab-help")).unwrap().verb.family, "help");

    // Repeated positionals and flags interleave.
    let t = tokens("collab-events watch a --since 3 b --type 'lease.*' --no-follow");
    let inv = parse(&t).unwrap();
    assert_eq!(inv.args("repo"), ["a", "b"]);
    assert_eq!(inv.int("--since"), Some(3));
    assert!(inv.has("--no-follow"));

    // A required positional may look like a flag; the handler decides.
    let t = tokens("collab-lease list --ttl");
    assert_eq!(parse(&t).unwrap().arg("repo"), "--ttl");
    // Free text may too.
    let t = tokens("collab-repo describe r '--- notes'");
    assert_eq!(parse(&t).unwrap().opt_arg("text"), Some("--- notes"));
}

#[test]
fn refuses_what_the_table_does_not_allow() {
    for bad in [
        "collab-issue open r",                                 // --title required
        "collab-issue open r --title a --title b",             // once
        "collab-issue open r --title a --body b --body-stdin", // at most one body
        "collab-issue comment r 1234",                         // a body required
        "collab-issue edit r 1234",                            // something to edit
        "collab-issue label r 1234 --lease-token 3",           // add or remove
        "collab-issue list r --state maybe",                   // a choice
        "collab-issue list r --limit 0",                       // 1..=500
        "collab-issue list r --limit 501",
        "collab-issue list r --limit -1",
        "collab-issue list r --limit ' 5'",
        "collab-issue show r",                         // missing argument
        "collab-issue link r a parent b",              // blocks|relates
        "collab-issue open r --title",                 // value missing
        "collab-patch review r p",                     // a verdict required
        "collab-patch review r p --approve --comment", // only one
        "collab-patch comment r p --body b --line 3",  // --line needs --path
        "collab-patch interdiff r p 1 x",
        "collab-lease acquire r i --ttl 0",
        "collab-lease acquire r i --wait 3601",
        "collab-lease renew r i", // --ttl required
        "collab-repo delete r",   // --confirm required
        "collab-repo visibility r maybe",
        "collab-events watch -x", // not a repository
        "collab-hook deliveries h --limit 1001",
    ] {
        match parse(&tokens(bad)) {
            Err(Refusal::Usage(_)) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    // A word with no place left is named, with the verb it was given to.
    for (bad, verb, word) in [
        ("collab-issue show r a b", "collab-issue show", "b"),
        (
            "collab-issue open r --bogus x --title t",
            "collab-issue open",
            "--bogus",
        ),
        ("collab-whoami now", "collab-whoami", "now"),
        ("help me", "help", "me"),
        ("git upload-pack a b", "git-upload-pack", "b"),
    ] {
        match parse(&tokens(bad)) {
            Err(Refusal::Unexpected { verb: v, token }) => {
                assert_eq!((v.name().as_str(), token.as_str()), (verb, word), "{bad}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(parse(&tokens("ls -la")), Err(Refusal::Unknown));
    assert_eq!(parse(&tokens("git status")), Err(Refusal::Unknown));
    assert_eq!(
        parse(&tokens("git upload-pack")).unwrap_err().line(),
        "error: usage: git-upload-pack '<repo>'"
    );
}

/// ssh joins the words of `ssh host collab-check set … --description "2
/// tests failed"` and the server splits them again: the refusal names the
/// first stray word, says how to quote, and gives the verb's own usage,
/// not every form of its family.
#[test]
fn a_value_split_by_ssh_is_named_with_how_to_quote_it() {
    let head = "0123456789abcdef0123456789abcdef01234567";
    let line = parse(&tokens(&format!(
        "collab-check set app {head} ci/test --state failure --description 2 tests failed"
    )))
    .unwrap_err()
    .line();
    let set = find("collab-check", "set").unwrap().usage();
    assert_eq!(
        line,
        format!(
            "error: unexpected argument 'tests' for collab-check set; ssh splits the command \
             at spaces, so quote a value with spaces twice: --description \"'two words'\"; \
             usage: {set}"
        )
    );
    assert!(!line.contains("collab-check list"), "{line}");
    // Quoted twice, the value arrives whole.
    let whole = tokens(&format!(
        "collab-check set app {head} ci/test --state failure --description '2 tests failed'"
    ));
    assert_eq!(
        parse(&whole).unwrap().flag("--description"),
        Some("2 tests failed")
    );
}

#[test]
fn every_verb_names_a_stray_option() {
    let mut named = 0;
    for verb in VERBS {
        // The shortest line the verb takes, from its own usage words.
        let mut call = Call::new(verb.family, verb.action);
        for arg in verb
            .args
            .iter()
            .filter(|a| a.arity == super::row::Arity::One)
        {
            call = call.arg(sample(arg.kind));
        }
        for flag in verb.flags.iter().filter(|f| f.required) {
            call = match flag.value {
                Some((_, kind)) => call.flag(flag.long, sample(kind)),
                None => call.switch(flag.long, true),
            };
        }
        let base = call.line();
        if parse(&tokens(&base)).is_err() {
            // Rules between flags (one of a group) need more than this;
            // the verbs above cover those.
            continue;
        }
        let bad = format!("{base} --no-such-option");
        let Err(refusal) = parse(&tokens(&bad)) else {
            // A free-text argument takes it as its value.
            assert!(
                verb.args.iter().any(|a| a.kind == super::row::Kind::Text),
                "{bad} parsed"
            );
            continue;
        };
        named += 1;
        let line = refusal.line();
        assert_eq!(
            line,
            format!(
                "error: unknown option '--no-such-option' for {}; usage: {}",
                verb.name(),
                verb.usage()
            ),
            "{bad}"
        );
    }
    // Most rows are reached (the others need a flag of a group).
    assert!(named * 4 >= VERBS.len() * 3, "{named} of {}", VERBS.len());
}

/// A value of `kind` the table accepts.
fn sample(kind: super::row::Kind) -> &'static str {
    use super::row::Kind;
    match kind {
        Kind::Int { min, .. } if min <= 1 => "1",
        Kind::Int { .. } => "60",
        Kind::Choice(words) => words[0],
        Kind::Id => "abcd1234",
        _ => "x",
    }
}

#[test]
fn a_stray_word_is_shown_shortened() {
    let long = "w".repeat(500);
    let line = parse(&tokens(&format!("collab-whoami {long}")))
        .unwrap_err()
        .line();
    assert!(
        line.starts_with(&format!(
            "error: unexpected argument '{}…' for collab-whoami; usage: collab-whoami",
            "w".repeat(64)
        )),
        "{line}"
    );
}

#[test]
fn a_watch_names_at_most_64_repositories() {
    let many = |n: usize| {
        let repos: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
        format!("collab-events watch {}", repos.join(" "))
    };
    assert!(parses(&many(64)));
    assert!(!parses(&many(65)));
}

#[test]
fn calls_parse_back() {
    let line = Call::new("collab-issue", "open")
        .arg("it's/app")
        .flag("--title", "a 'quoted' title")
        .switch("--body-stdin", true)
        .flag("--label", "bug")
        .line();
    assert_eq!(
        line,
        "collab-issue open 'it'\\''s/app' --title 'a '\\''quoted'\\'' title' --body-stdin --label 'bug'"
    );
    let t = tokens(&line);
    let inv = parse(&t).unwrap();
    assert_eq!(inv.arg("repo"), "it's/app");
    assert_eq!(inv.flag("--title"), Some("a 'quoted' title"));
}

#[test]
#[should_panic(expected = "collab-issue show has no flag --title")]
fn calls_refuse_flags_the_verb_does_not_take() {
    let _ = Call::new("collab-issue", "show").flag("--title", "x");
}

#[test]
fn help_groups_by_family_and_access() {
    let groups = help_groups(|_| true);
    let of = |prefix: &str| -> Vec<&str> {
        groups
            .iter()
            .filter(|g| g.verb.starts_with(prefix))
            .map(|g| g.access)
            .collect()
    };
    assert_eq!(of("collab-issue show"), ["read"]);
    assert_eq!(of("collab-issue open"), ["write"]);
    // The owner's verbs, and `approve` (administrators).
    assert_eq!(of("collab-hook").len(), 2);
    assert_eq!(of("collab-events watch").len(), 1);
    let issue_reads = groups
        .iter()
        .find(|g| g.verb.starts_with("collab-issue show"))
        .unwrap();
    assert_eq!(
        issue_reads.verb,
        "collab-issue show|list|ready '<repo>' ..."
    );
}

/// docs/ssh-verbs.md holds the reference the table writes; with
/// `UPDATE_VERB_DOCS=1` this rewrites it instead of failing.
#[test]
fn the_docs_reference_is_the_table() {
    let path = super::crate_dir().join("../../docs/ssh-verbs.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let want = docs::splice(&doc, &reference_markdown()).unwrap_or_else(|| {
        panic!(
            "{} has no generated section: add the lines\n{}\n{}",
            path.display(),
            docs::BEGIN,
            docs::END
        )
    });
    if want != doc {
        if std::env::var_os("UPDATE_VERB_DOCS").is_some() {
            std::fs::write(&path, want).unwrap();
        } else {
            panic!(
                "{} is out of date with the verb table: run UPDATE_VERB_DOCS=1 cargo test -p collab-proto",
                path.display()
            );
        }
    }
}

/// A row's level is read from the row, and an argument raises it only
/// where the row says so.
#[test]
fn levels_come_from_the_row() {
    let row = |name: &str| named(name).unwrap_or_else(|| panic!("{name} is no row"));
    let none = |_: &str| None;
    assert_eq!(
        row("collab-lease break").need.level(none),
        Some(Access::Rewind)
    );
    assert_eq!(
        row("git-receive-pack").need.level(none),
        Some(Access::Write)
    );
    let describe = row("collab-repo describe").need;
    assert_eq!(describe.level(none), Some(Access::Read));
    assert_eq!(
        describe.level(|a| (a == "text").then_some("x")),
        Some(Access::Rewind)
    );
    assert_eq!(describe.least(), Some(Access::Read));
    let lfs = row("git-lfs-transfer").need;
    assert_eq!(lfs.level(|_| Some("download")), Some(Access::Read));
    assert_eq!(lfs.level(|_| Some("upload")), Some(Access::Write));
    assert_eq!(
        row("collab-repo mirror add").need.level(none),
        Some(Access::Rewind)
    );
    assert_eq!(row("collab-hook list").need.level(none), None);
    assert_eq!(row("collab-whoami").need.level(none), None);
    assert_eq!(named("collab-lease steal"), None);
    assert_eq!(
        named("collab-repo mirror add").map(|v| v.action),
        Some("mirror add")
    );
}
