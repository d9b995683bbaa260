//! The `collab-issue` and `collab-patch` parsers' tests, through
//! `command::parse_exec_command` as a request line arrives. They live here
//! rather than beside the parsers because `command` imports both verb
//! modules.

mod issue {
    use crate::authz::Access;
    use crate::service::command::{parse_exec_command, ExecCommand};
    use crate::service::issue::*;

    fn issue(line: &str) -> Option<IssueCmd> {
        match parse_exec_command(line)? {
            ExecCommand::Issue(cmd) => Some(cmd),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_every_subcommand() {
        assert_eq!(
            issue("collab-issue open 'r' --title 'T x' --label bug --label ui --body-stdin"),
            Some(IssueCmd::Open {
                repo: "r".into(),
                title: "T x".into(),
                body: Some(BodyArg::Stdin),
                labels: vec!["bug".into(), "ui".into()],
            })
        );
        assert_eq!(
            issue("collab-issue list r --state all --label a --limit 10 --after 5-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
            Some(IssueCmd::List {
                repo: "r".into(),
                state: "all".into(),
                labels: vec!["a".into()],
                limit: Some(10),
                after: Some("5-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into()),
            })
        );
        assert_eq!(
            issue("collab-issue comment r abcd --body hi --lease-token 3"),
            Some(IssueCmd::Comment {
                repo: "r".into(),
                id: "abcd".into(),
                body: BodyArg::Text("hi".into()),
                fence: Some(3),
            })
        );
        assert_eq!(
            issue("collab-issue link r abcd blocks 'team/lib#ef01'").map(|c| c.verb()),
            Some("collab-issue link")
        );
        assert_eq!(
            issue("collab-issue unlink r abcd relates ef01 --lease-token 1")
                .map(|c| (c.verb(), c.needed_access())),
            Some(("collab-issue unlink", Access::Write))
        );
        assert_eq!(
            issue("collab-issue show r abcd").map(|c| c.needed_access()),
            Some(Access::Read)
        );
        for ok in [
            "collab-issue edit r abcd --title T",
            "collab-issue edit r abcd --body-stdin --lease-token 9",
            "collab-issue label r abcd --add a --remove b --add c",
            "collab-issue close r abcd",
            "collab-issue close r abcd --reason 'done now'",
            "collab-issue reopen r abcd",
            "collab-issue list r",
        ] {
            assert!(issue(ok).is_some(), "{ok}");
        }
    }

    #[test]
    fn refuses_malformed_commands() {
        for bad in [
            "collab-issue",
            "collab-issue open r",
            "collab-issue open r --title",
            "collab-issue open r --title a --title b",
            "collab-issue open r --title a --body x --body-stdin",
            "collab-issue open r --title a --lease-token 1",
            "collab-issue show r",
            "collab-issue show r a b",
            "collab-issue list r --state nope",
            "collab-issue list r --limit 0",
            "collab-issue list r --limit 501",
            "collab-issue list r --limit -1",
            "collab-issue list r --after nope",
            "collab-issue comment r abcd",
            "collab-issue comment r abcd --body",
            "collab-issue comment r abcd --body x --lease-token 0",
            "collab-issue comment r abcd --body x --lease-token x",
            "collab-issue comment r abcd --body x --lease-token 1 --lease-token 1",
            "collab-issue comment r abcd --body x extra",
            "collab-issue edit r abcd",
            "collab-issue label r abcd",
            "collab-issue close r abcd --reason",
            "collab-issue reopen r abcd --reason x",
            "collab-issue link r abcd blocked ef01",
            "collab-issue link r abcd blocks",
            "collab-issue delete r abcd",
            "collab-issue comment r abcd --body 'a\nb'",
        ] {
            assert_eq!(parse_exec_command(bad), None, "{bad:?}");
        }
    }
}

mod patch {
    use crate::service::command::{parse_exec_command, ExecCommand};
    use crate::service::issue::BodyArg;
    use crate::service::patch::*;
    use collab_store::patches::Verdict;

    fn patch(line: &str) -> Option<PatchCmd> {
        match parse_exec_command(line)? {
            ExecCommand::Patch(cmd) => Some(cmd),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_every_subcommand() {
        assert_eq!(
            patch("collab-patch list 'r' --state all --limit 5"),
            Some(PatchCmd::List {
                repo: "r".into(),
                state: "all".into(),
                limit: Some(5),
                after: None,
            })
        );
        assert_eq!(
            patch("collab-patch review 'r' abcd --approve --body 'LGTM' --rev 2"),
            Some(PatchCmd::Review {
                repo: "r".into(),
                id: "abcd".into(),
                verdict: Verdict::Approve,
                body: Some(BodyArg::Text("LGTM".into())),
                rev: Some(2),
            })
        );
        assert_eq!(
            patch("collab-patch comment 'r' abcd --body-stdin --path src/a.rs --line 3"),
            Some(PatchCmd::Comment {
                repo: "r".into(),
                id: "abcd".into(),
                body: BodyArg::Stdin,
                path: Some("src/a.rs".into()),
                line: Some(3),
                rev: None,
            })
        );
        assert_eq!(
            patch("collab-patch interdiff 'r' abcd 1 2"),
            Some(PatchCmd::Interdiff {
                repo: "r".into(),
                id: "abcd".into(),
                from: 1,
                to: 2,
            })
        );
        assert_eq!(
            patch("collab-patch merge 'r' abcd --lease-token 7"),
            Some(PatchCmd::Merge {
                repo: "r".into(),
                id: "abcd".into(),
                fence: Some(7),
                mode: MergeMode::Now,
            })
        );
        assert_eq!(
            patch("collab-patch merge 'r' abcd --when-green --lease-token 7"),
            Some(PatchCmd::Merge {
                repo: "r".into(),
                id: "abcd".into(),
                fence: Some(7),
                mode: MergeMode::WhenGreen,
            })
        );
        assert_eq!(
            patch("collab-patch merge 'r' abcd --cancel"),
            Some(PatchCmd::Merge {
                repo: "r".into(),
                id: "abcd".into(),
                fence: None,
                mode: MergeMode::Cancel,
            })
        );
    }

    #[test]
    fn refuses_bad_arguments() {
        for line in [
            "collab-patch review 'r' abcd",
            "collab-patch review 'r' abcd --approve --comment",
            "collab-patch comment 'r' abcd --line 3 --body x",
            "collab-patch comment 'r' abcd --path p",
            "collab-patch list 'r' --state weird",
            "collab-patch list 'r' --limit 0",
            "collab-patch list 'r' --after nope",
            "collab-patch interdiff 'r' abcd 0 2",
            "collab-patch merge 'r' abcd --lease-token -1",
            "collab-patch merge 'r' abcd --when-green --cancel",
            "collab-patch merge 'r' abcd --cancel --lease-token 3",
            "collab-patch diff 'r' abcd --rev 1 --rev 2",
            "collab-patch close 'r'",
            "collab-patch frobnicate 'r' abcd",
        ] {
            assert_eq!(patch(line), None, "{line}");
        }
    }
}
