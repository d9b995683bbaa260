//! `governance.toml`: the file in `_governance.git` that names principals
//! (with their keys), groups, and grants of read/write/rewind on repository
//! globs. Parsing is also validation: a `GovernanceConf` that exists is one
//! the server can apply.
//!
//! ```toml
//! public = ["docs/*"]              # repos anonymous HTTP may read
//!
//! [principals.alice]
//! keys = ["ssh-ed25519 AAAA… alice@laptop"]
//! [principals.bot-1]
//! keys = ["ssh-ed25519 AAAA… bot-1"]
//! [principals.fleet]                # SSH certificates only
//! certificate_principals = ["agent-7", "agent-8"]
//!
//! [groups]
//! agents = ["bot-1"]
//!
//! [[grants]]
//! repos = ["**"]                   # `*` stays in one segment, `**` crosses `/`
//! to = ["alice"]                   # principal, `@group`, or `*` (every principal)
//! access = "rewind"                # read | checks | write | rewind
//! ```
//!
//! A top-level `fenced_refs = ["refs/heads/issue/*"]` makes a live lease
//! token mandatory for pushes touching those refs, in every repository;
//! `fenced_ref_issue = ["refs/heads/task/{issue}"]` adds patterns naming
//! the issue whose lease such a ref needs (`hooks::fencing`).
//!
//! `[[webhooks]]` tables declare webhook subscriptions (id
//! `governance-<name>`), synced by `webhooks` whenever the file changes:
//!
//! ```toml
//! [[webhooks]]
//! name = "ci"
//! repo = "team/*"
//! url = "https://ci.example.com/hook"
//! events = ["ref.*"]               # optional; none = every type
//! ```
//!
//! They carry no HMAC secret (the file is readable by everyone who can read
//! `_governance`); receivers verify the server's Ed25519 `v1a,` signature.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use russh::keys::ssh_key::PublicKey;
use serde::Deserialize;

pub use collab_proto::Access;

/// The name of the file at the governance branch's root.
pub const CONF_FILE: &str = "governance.toml";

/// The governance repository's short name, as grants spell it.
pub const GOVERNANCE_SHORT_NAME: &str = "_governance";

/// Why a governance file was refused. The message is shown to the pusher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{CONF_FILE}: {0}")]
pub struct GovernanceError(pub String);

fn invalid(msg: impl Into<String>) -> GovernanceError {
    GovernanceError(msg.into())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConf {
    #[serde(default)]
    public: Vec<String>,
    #[serde(default)]
    principals: BTreeMap<String, RawPrincipal>,
    #[serde(default)]
    groups: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    grants: Vec<RawGrant>,
    #[serde(default)]
    fenced_refs: Vec<String>,
    #[serde(default)]
    fenced_ref_issue: Vec<String>,
    #[serde(default)]
    webhooks: Vec<GovWebhook>,
    #[serde(default)]
    merge_rules: Vec<RawMergeRule>,
}

/// `[[merge_rules]]`: the merge rule of the repositories `repos` matches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMergeRule {
    repos: Vec<String>,
    approvals: Option<u32>,
    no_changes_requested: Option<bool>,
    author_may_approve: Option<bool>,
    others_may_revise: Option<bool>,
    required_checks: Option<Vec<String>>,
    skipped_is_success: Option<bool>,
    checks_from: Option<collab_store::patches::ChecksFrom>,
    lease_holder_is_author: Option<bool>,
    queue: Option<bool>,
    max_batch: Option<u32>,
    max_parallel: Option<u32>,
    queue_method: Option<collab_store::patches::QueueMethod>,
    speculate: Option<bool>,
    train: Option<bool>,
    min_batch: Option<u32>,
    batch_wait: Option<u32>,
}

impl RawMergeRule {
    fn rule(&self) -> collab_store::patches::MergeRule {
        let d = collab_store::patches::MergeRule::default();
        collab_store::patches::MergeRule {
            approvals: self.approvals.unwrap_or(d.approvals),
            no_changes_requested: self.no_changes_requested.unwrap_or(d.no_changes_requested),
            author_may_approve: self.author_may_approve.unwrap_or(d.author_may_approve),
            others_may_revise: self.others_may_revise.unwrap_or(d.others_may_revise),
            required_checks: self.required_checks.clone().unwrap_or(d.required_checks),
            skipped_is_success: self.skipped_is_success.unwrap_or(d.skipped_is_success),
            checks_from: self.checks_from.unwrap_or(d.checks_from),
            check_posters: d.check_posters,
            lease_holder_is_author: self
                .lease_holder_is_author
                .unwrap_or(d.lease_holder_is_author),
            queue: self.queue.unwrap_or(d.queue),
            max_batch: self.max_batch.unwrap_or(d.max_batch),
            max_parallel: self.max_parallel.unwrap_or(d.max_parallel),
            queue_method: self.queue_method.unwrap_or(d.queue_method),
            speculate: self.speculate.unwrap_or(d.speculate),
            train: self.train.unwrap_or(d.train),
            min_batch: self.min_batch.unwrap_or(d.min_batch),
            batch_wait: self.batch_wait.unwrap_or(d.batch_wait),
        }
    }
}

/// A webhook subscription declared in `governance.toml` (`[[webhooks]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GovWebhook {
    /// Unique in the file; the subscription id is `governance-<name>`.
    pub name: String,
    /// Repository glob (`team/*`, `*`), as `collab-hook add` takes it.
    pub repo: String,
    pub url: String,
    /// Type patterns; none = every type.
    #[serde(default)]
    pub events: Vec<String>,
}

/// The most `[[webhooks]]` one governance file may declare.
pub const MAX_GOV_WEBHOOKS: usize = 256;

fn check_webhooks(hooks: &[GovWebhook]) -> Result<(), GovernanceError> {
    if hooks.len() > MAX_GOV_WEBHOOKS {
        return Err(invalid(format!(
            "webhooks: at most {MAX_GOV_WEBHOOKS} subscriptions"
        )));
    }
    let mut names = BTreeSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let ctx = format!("webhooks[{i}]");
        let ok_name = !hook.name.is_empty()
            && hook.name.len() <= 64
            && hook
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if !ok_name {
            return Err(invalid(format!(
                "{ctx}.name: use 1 to 64 of A-Z a-z 0-9 - _ (found {:?})",
                hook.name
            )));
        }
        if !names.insert(hook.name.as_str()) {
            return Err(invalid(format!(
                "{ctx}.name: {:?} is used twice",
                hook.name
            )));
        }
        if !crate::events::filter::valid_repo_glob(&hook.repo) {
            return Err(invalid(format!(
                "{ctx}.repo: not a repository glob: {:?}",
                hook.repo
            )));
        }
        let url = reqwest::Url::parse(&hook.url)
            .map_err(|e| invalid(format!("{ctx}.url: invalid URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(invalid(format!(
                "{ctx}.url: must be an http:// or https:// URL with a host"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(format!("{ctx}.url: must not carry credentials")));
        }
        if hook.events.len() > crate::events::filter::MAX_PATTERNS {
            return Err(invalid(format!(
                "{ctx}.events: at most {} patterns",
                crate::events::filter::MAX_PATTERNS
            )));
        }
        if let Some(bad) = hook
            .events
            .iter()
            .find(|p| !crate::events::filter::valid_pattern(p))
        {
            return Err(invalid(format!(
                "{ctx}.events: bad pattern {bad:?} (1 to 100 of A-Z a-z 0-9 . _ - *)"
            )));
        }
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    #[serde(default)]
    keys: Vec<String>,
    /// SSH certificate principals this principal logs in as (default: its
    /// own name, but only while no principal of the file has a list).
    certificate_principals: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    repos: Vec<String>,
    to: Vec<String>,
    access: Access,
}

#[derive(Debug, Clone)]
enum Subject {
    Everyone,
    Principal(String),
    Group(String),
}

#[derive(Debug, Clone)]
struct Grant {
    repos: GlobSet,
    to: Vec<Subject>,
    access: Access,
}

/// A validated governance file.
#[derive(Debug, Clone)]
pub struct GovernanceConf {
    /// Fingerprint -> principal name.
    by_fingerprint: HashMap<String, String>,
    /// SSH certificate principal -> principal name: the
    /// `certificate_principals` lists when any principal has one, else each
    /// principal's own name.
    by_cert_principal: HashMap<String, String>,
    principals: BTreeSet<String>,
    groups: BTreeMap<String, BTreeSet<String>>,
    grants: Vec<Grant>,
    public: GlobSet,
    /// Ref globs fenced in every governed repository (`hooks::fencing`).
    fenced_refs: Vec<String>,
    /// Patterns tying fenced refs to their issue (`hooks::fencing`).
    fenced_ref_issue: Vec<String>,
    /// Declared webhook subscriptions (`webhooks` syncs them).
    webhooks: Vec<GovWebhook>,
    /// `[[merge_rules]]` in file order: the first whose globs match wins.
    merge_rules: Vec<(GlobSet, collab_store::patches::MergeRule)>,
}

fn valid_ident(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Compile repository globs; a trailing `.git` is ignored so `app` and
/// `app.git` mean the same repository.
fn compile_globs(patterns: &[String], context: &str) -> Result<GlobSet, GovernanceError> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let p = pattern.strip_suffix(".git").unwrap_or(pattern);
        let p = p.strip_prefix('/').unwrap_or(p);
        if p.is_empty() {
            return Err(invalid(format!("{context}: empty repository pattern")));
        }
        let glob: Glob = GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| invalid(format!("{context}: bad pattern {pattern:?}: {}", e.kind())))?;
        set.add(glob);
    }
    set.build().map_err(|e| invalid(format!("{context}: {e}")))
}

impl GovernanceConf {
    /// Parse and validate a governance file.
    pub fn parse(text: &str) -> Result<GovernanceConf, GovernanceError> {
        let raw: RawConf = toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end()))?;

        let mut by_fingerprint = HashMap::new();
        let mut by_cert_principal: HashMap<String, String> = HashMap::new();
        // Certificates stay in their lane: once any principal lists
        // `certificate_principals`, names map to principals only through
        // those lists. Otherwise a CA trusted for a fleet's names would
        // still mint every other principal by its own name, the admin
        // included (`principal_for_certificate`).
        let listed_only = raw
            .principals
            .values()
            .any(|p| p.certificate_principals.is_some());
        let mut principals = BTreeSet::new();
        for (name, p) in &raw.principals {
            if !valid_ident(name) {
                return Err(invalid(format!(
                    "principals.{name}: a principal name uses only letters, digits, '.', '_' and '-' (at most 64)"
                )));
            }
            // Without keys a principal can only log in with a certificate,
            // which the operator must then name explicitly.
            if p.keys.is_empty()
                && p.certificate_principals
                    .as_ref()
                    .is_none_or(|names| names.is_empty())
            {
                return Err(invalid(format!(
                    "principals.{name}.keys: no key given (nor certificate_principals)"
                )));
            }
            let cert_names = match &p.certificate_principals {
                Some(names) => names.clone(),
                None if listed_only => Vec::new(),
                None => vec![name.clone()],
            };
            for (i, cert_name) in cert_names.iter().enumerate() {
                if !crate::identity::certs::valid_principal(cert_name) {
                    return Err(invalid(format!(
                        "principals.{name}.certificate_principals[{i}]: {cert_name:?} is not a valid principal name"
                    )));
                }
                if let Some(other) = by_cert_principal.insert(cert_name.clone(), name.clone()) {
                    return Err(invalid(format!(
                        "principals.{name}.certificate_principals[{i}]: {cert_name:?} already belongs to principal {other}"
                    )));
                }
            }
            for (i, line) in p.keys.iter().enumerate() {
                let key = PublicKey::from_openssh(line.trim()).map_err(|e| {
                    invalid(format!(
                        "principals.{name}.keys[{i}]: not an OpenSSH public key ({e})"
                    ))
                })?;
                let fp = crate::identity::fingerprint(&key);
                if let Some(other) = by_fingerprint.insert(fp.clone(), name.clone()) {
                    return Err(invalid(format!(
                        "principals.{name}.keys[{i}]: key {fp} already belongs to principal {other}"
                    )));
                }
            }
            principals.insert(name.clone());
        }

        let mut groups = BTreeMap::new();
        for (group, members) in &raw.groups {
            if !valid_ident(group) {
                return Err(invalid(format!("groups.{group}: bad group name")));
            }
            let mut set = BTreeSet::new();
            for m in members {
                if !principals.contains(m) {
                    return Err(invalid(format!("groups.{group}: unknown principal {m:?}")));
                }
                set.insert(m.clone());
            }
            groups.insert(group.clone(), set);
        }

        let mut grants = Vec::new();
        for (i, g) in raw.grants.iter().enumerate() {
            let ctx = format!("grants[{i}]");
            if g.repos.is_empty() {
                return Err(invalid(format!("{ctx}.repos: no repository pattern")));
            }
            if g.to.is_empty() {
                return Err(invalid(format!("{ctx}.to: nobody to grant to")));
            }
            let repos = compile_globs(&g.repos, &format!("{ctx}.repos"))?;
            let mut to = Vec::new();
            for who in &g.to {
                let subject = if who == "*" {
                    Subject::Everyone
                } else if let Some(group) = who.strip_prefix('@') {
                    if !groups.contains_key(group) {
                        return Err(invalid(format!("{ctx}.to: unknown group {who:?}")));
                    }
                    Subject::Group(group.to_string())
                } else if principals.contains(who) {
                    Subject::Principal(who.clone())
                } else {
                    return Err(invalid(format!("{ctx}.to: unknown principal {who:?}")));
                };
                to.push(subject);
            }
            grants.push(Grant {
                repos,
                to,
                access: g.access,
            });
        }
        let public = compile_globs(&raw.public, "public")?;
        crate::hooks::fencing::compile(&raw.fenced_refs).map_err(invalid)?;
        crate::hooks::fencing::compile_ref_issue(&raw.fenced_ref_issue).map_err(invalid)?;
        check_webhooks(&raw.webhooks)?;
        let mut merge_rules = Vec::new();
        for (i, m) in raw.merge_rules.iter().enumerate() {
            let ctx = format!("merge_rules[{i}].repos");
            if m.repos.is_empty() {
                return Err(invalid(format!("{ctx}: no repository pattern")));
            }
            let rule = m.rule();
            rule.validate()
                .map_err(|e| invalid(format!("merge_rules[{i}]: {e}")))?;
            merge_rules.push((compile_globs(&m.repos, &ctx)?, rule));
        }
        Ok(GovernanceConf {
            by_fingerprint,
            by_cert_principal,
            principals,
            groups,
            grants,
            public,
            fenced_refs: raw.fenced_refs,
            fenced_ref_issue: raw.fenced_ref_issue,
            webhooks: raw.webhooks,
            merge_rules,
        })
    }

    /// The merge rule of the first `[[merge_rules]]` matching `repo` (its
    /// name without `.git`).
    pub fn merge_rule(&self, repo: &str) -> Option<collab_store::patches::MergeRule> {
        let repo = repo.strip_suffix(".git").unwrap_or(repo);
        self.merge_rules
            .iter()
            .find(|(globs, _)| globs.is_match(repo))
            .map(|(_, rule)| rule.clone())
    }

    /// The webhook subscriptions the file declares.
    pub fn webhooks(&self) -> &[GovWebhook] {
        &self.webhooks
    }

    /// The principal a key is enrolled as.
    pub fn principal_for_fingerprint(&self, fingerprint: &str) -> Option<&str> {
        self.by_fingerprint.get(fingerprint).map(String::as_str)
    }

    /// The principal an SSH certificate principal logs in as.
    pub fn principal_for_certificate(&self, cert_principal: &str) -> Option<&str> {
        self.by_cert_principal
            .get(cert_principal)
            .map(String::as_str)
    }

    /// The fingerprints of the keys enrolled as `principal`.
    pub fn fingerprints_of<'a>(&'a self, principal: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_fingerprint
            .iter()
            .filter(move |(_, p)| p.as_str() == principal)
            .map(|(fp, _)| fp.as_str())
    }

    /// Whether an SSH certificate principal logs in as `principal`.
    pub fn enrolled_by_certificate(&self, principal: &str) -> bool {
        self.by_cert_principal.values().any(|p| p == principal)
    }

    /// Every principal name.
    pub fn principals(&self) -> impl Iterator<Item = &str> {
        self.principals.iter().map(String::as_str)
    }

    fn subject_matches(&self, subject: &Subject, principal: &str) -> bool {
        match subject {
            Subject::Everyone => self.principals.contains(principal),
            Subject::Principal(p) => p == principal,
            Subject::Group(g) => self.groups.get(g).is_some_and(|m| m.contains(principal)),
        }
    }

    /// The highest level granted to `principal` on the repository `repo`
    /// (its short name, without `.git`).
    pub fn access(&self, principal: &str, repo: &str) -> Option<Access> {
        self.grants
            .iter()
            .filter(|g| g.repos.is_match(repo))
            .filter(|g| g.to.iter().any(|s| self.subject_matches(s, principal)))
            .map(|g| g.access)
            .max()
    }

    /// Whether `principal` holds at least `needed` on `repo`.
    pub fn allows_repo(&self, principal: &str, repo: &str, needed: Access) -> bool {
        self.access(principal, repo).is_some_and(|a| a >= needed)
    }

    /// Ref globs fenced in every governed repository.
    pub fn fenced_refs(&self) -> &[String] {
        &self.fenced_refs
    }

    /// Top-level `fenced_ref_issue`: patterns naming the issue a fenced
    /// ref belongs to, added to every repository's own.
    pub fn fenced_ref_issue(&self) -> &[String] {
        &self.fenced_ref_issue
    }

    /// Whether anonymous HTTP may read `repo` (short name).
    pub fn is_public(&self, repo: &str) -> bool {
        repo != GOVERNANCE_SHORT_NAME && self.public.is_match(repo)
    }

    /// Refuse a file that would take governance away from the key pushing
    /// it: that key must stay enrolled with rewind on `_governance`.
    pub fn check_keeps_admin(&self, pusher_fingerprint: &str) -> Result<(), GovernanceError> {
        let ok = self
            .principal_for_fingerprint(pusher_fingerprint)
            .is_some_and(|name| self.allows_repo(name, GOVERNANCE_SHORT_NAME, Access::Rewind));
        if ok {
            Ok(())
        } else {
            Err(invalid(format!(
                "this file would lock you out: your key {pusher_fingerprint} must belong to a principal with rewind access to {GOVERNANCE_SHORT_NAME}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICtQ/RYc3WhAmSKhGYkTZDTD1K+ATpny91Oy682hu+Dg alice";
    const BOB: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN3QmJ0vwcw0ie88/iXLtsBJjbfPedY+frkLSCrD/NGf bob";

    fn conf(extra: &str) -> String {
        format!(
            "public = [\"docs/*\"]\n\
             [principals.alice]\nkeys = [\"{ALICE}\"]\n\
             [principals.bob]\nkeys = [\"{BOB}\"]\n\
             [groups]\nagents = [\"bob\"]\n\
             [[grants]]\nrepos = [\"**\"]\nto = [\"alice\"]\naccess = \"rewind\"\n\
             [[grants]]\nrepos = [\"team/*\"]\nto = [\"@agents\"]\naccess = \"write\"\n\
             [[grants]]\nrepos = [\"open\"]\nto = [\"*\"]\naccess = \"read\"\n{extra}"
        )
    }

    #[test]
    fn grants_resolve_by_glob_and_group() {
        let c = GovernanceConf::parse(&conf("")).unwrap();
        let alice_fp = crate::identity::fingerprint(&PublicKey::from_openssh(ALICE).unwrap());
        assert_eq!(c.principal_for_fingerprint(&alice_fp), Some("alice"));
        assert_eq!(c.access("alice", "anything/deep"), Some(Access::Rewind));
        assert_eq!(c.access("bob", "team/app"), Some(Access::Write));
        assert_eq!(c.access("bob", "team/app/deeper"), None);
        assert_eq!(c.access("bob", "open"), Some(Access::Read));
        assert_eq!(c.access("bob", "other"), None);
        assert_eq!(c.access("mallory", "open"), None);
        assert!(c.is_public("docs/site") && !c.is_public("docs") && !c.is_public("_governance"));
        assert!(c.check_keeps_admin(&alice_fp).is_ok());
        assert!(c.check_keeps_admin("SHA256:nobody").is_err());
    }

    #[test]
    fn certificate_principals_default_to_the_name_until_any_principal_lists_them() {
        let c = GovernanceConf::parse(&conf("")).unwrap();
        assert_eq!(c.principal_for_certificate("alice"), Some("alice"));
        assert_eq!(c.principal_for_certificate("carol"), None);
        // Once one principal lists names, only the lists map: the fleet's
        // CA can no longer mint alice (the admin) by her own name.
        let fleet = "[principals.fleet]\ncertificate_principals = [\"agent-7\", \"bob\"]\n";
        let c = GovernanceConf::parse(&conf(fleet)).unwrap();
        assert_eq!(c.principal_for_certificate("agent-7"), Some("fleet"));
        assert_eq!(c.principal_for_certificate("bob"), Some("fleet"));
        assert_eq!(c.principal_for_certificate("fleet"), None);
        assert_eq!(c.principal_for_certificate("alice"), None);
        // A principal may keep its own name by listing it.
        let own =
            format!("{fleet}[principals.carol]\nkeys = []\ncertificate_principals = [\"carol\"]\n");
        let c = GovernanceConf::parse(&conf(&own)).unwrap();
        assert_eq!(c.principal_for_certificate("carol"), Some("carol"));
        assert_eq!(c.principal_for_certificate("alice"), None);
        // `certificate_principals = []` alone closes certificates for all.
        let none = conf("").replacen(
            "[principals.bob]\n",
            "[principals.bob]\ncertificate_principals = []\n",
            1,
        );
        let c = GovernanceConf::parse(&none).unwrap();
        assert_eq!(c.principal_for_certificate("alice"), None);
        assert_eq!(c.principal_for_certificate("bob"), None);
        // Two claims on one name, a bad name, or neither keys nor
        // certificate principals (an empty list counts as none): refused.
        let twice = "[principals.a]\ncertificate_principals = [\"x\"]\n\
                     [principals.b]\ncertificate_principals = [\"x\"]\n";
        assert!(GovernanceConf::parse(&conf(twice)).is_err());
        let takes_default = "[principals.a]\ncertificate_principals = [\"alice\"]\n";
        let c = GovernanceConf::parse(&conf(takes_default)).unwrap();
        assert_eq!(c.principal_for_certificate("alice"), Some("a"));
        let bad = "[principals.a]\ncertificate_principals = [\"SHA256:abc\"]\n";
        assert!(GovernanceConf::parse(&conf(bad)).is_err());
        for neither in [
            "[principals.a]\n",
            "[principals.a]\ncertificate_principals = []\n",
        ] {
            let e = GovernanceConf::parse(&conf(neither)).unwrap_err();
            assert!(e.0.contains("no key given"), "{e}");
        }
    }

    #[test]
    fn merge_rules_match_by_glob_first_wins() {
        let rules = "[[merge_rules]]\nrepos = [\"team/core\"]\napprovals = 2\n\
                     [[merge_rules]]\nrepos = [\"team/*\"]\napprovals = 1\nauthor_may_approve = true\n";
        let c = GovernanceConf::parse(&conf(rules)).unwrap();
        let core = c.merge_rule("team/core.git").unwrap();
        assert_eq!((core.approvals, core.author_may_approve), (2, false));
        assert!(core.no_changes_requested);
        let app = c.merge_rule("team/app").unwrap();
        assert_eq!((app.approvals, app.author_may_approve), (1, true));
        assert_eq!(c.merge_rule("other"), None);
        let bad = "[[merge_rules]]\nrepos = [\"x\"]\napprovals = 1\nquorum = 3\n";
        assert!(GovernanceConf::parse(&conf(bad)).is_err());
        let empty = "[[merge_rules]]\nrepos = []\n";
        assert!(GovernanceConf::parse(&conf(empty)).is_err());
        assert!(
            !core.others_may_revise,
            "others_may_revise is off by default"
        );
        let queued = "[[merge_rules]]\nrepos = [\"q\"]\nqueue = true\nmax_batch = 4\n\
                      max_parallel = 2\nqueue_method = \"rebase\"\n";
        let q = GovernanceConf::parse(&conf(queued))
            .unwrap()
            .merge_rule("q")
            .unwrap();
        assert!(q.queue);
        assert_eq!((q.max_batch, q.max_parallel), (4, 2));
        assert_eq!(q.queue_method, collab_store::patches::QueueMethod::Rebase);
        let defaults = "[[merge_rules]]\nrepos = [\"q\"]\nqueue = true\n";
        let d = GovernanceConf::parse(&conf(defaults))
            .unwrap()
            .merge_rule("q")
            .unwrap();
        assert_eq!((d.max_parallel, d.queue_method.as_str()), (8, "merge"));
        assert_eq!((d.train, d.min_batch, d.batch_wait), (false, 1, 0));
        let train = "[[merge_rules]]\nrepos = [\"q\"]\nqueue = true\ntrain = true\n\
                     min_batch = 2\nbatch_wait = 30\n";
        let t = GovernanceConf::parse(&conf(train))
            .unwrap()
            .merge_rule("q")
            .unwrap();
        assert_eq!((t.train, t.min_batch, t.batch_wait), (true, 2, 30));
        for bad in [
            "max_parallel = 0",
            "max_parallel = 33",
            "queue_method = \"squash\"",
            "max_batch = 2\nmin_batch = 3",
            "min_batch = 0",
            "batch_wait = 3601",
        ] {
            let text = format!("[[merge_rules]]\nrepos = [\"q\"]\nqueue = true\n{bad}\n");
            assert!(GovernanceConf::parse(&conf(&text)).is_err(), "{bad}");
        }
        let too_big = "[[merge_rules]]\nrepos = [\"q\"]\nqueue = true\nmax_batch = 33\n";
        assert!(GovernanceConf::parse(&conf(too_big)).is_err());
        let open = "[[merge_rules]]\nrepos = [\"**\"]\nothers_may_revise = true\n";
        let c = GovernanceConf::parse(&conf(open)).unwrap();
        assert!(c.merge_rule("any").unwrap().others_may_revise);
    }

    #[test]
    fn merge_rules_take_required_checks_and_validate_their_names() {
        let rules =
            "[[merge_rules]]\nrepos = [\"**\"]\nrequired_checks = [\"ci/test\", \"lint\"]\n\
                     skipped_is_success = true\n";
        let c = GovernanceConf::parse(&conf(rules)).unwrap();
        let rule = c.merge_rule("any").unwrap();
        assert_eq!(rule.required_checks, ["ci/test", "lint"]);
        assert!(rule.skipped_is_success);
        let plain = "[[merge_rules]]\nrepos = [\"**\"]\n";
        let rule = GovernanceConf::parse(&conf(plain))
            .unwrap()
            .merge_rule("x")
            .unwrap();
        assert!(rule.required_checks.is_empty() && !rule.skipped_is_success);
        assert_eq!(rule.checks_from, collab_store::patches::ChecksFrom::Anyone);
        let ci_only = "[[merge_rules]]\nrepos = [\"**\"]\nchecks_from = \"checks\"\n";
        let rule = GovernanceConf::parse(&conf(ci_only))
            .unwrap()
            .merge_rule("x")
            .unwrap();
        assert_eq!(rule.checks_from, collab_store::patches::ChecksFrom::Checks);
        let bad = "[[merge_rules]]\nrepos = [\"**\"]\nchecks_from = \"writers\"\n";
        assert!(GovernanceConf::parse(&conf(bad)).is_err());
        for bad in ["\"a b\"", "\"\"", "\"/ci\""] {
            let text = format!("[[merge_rules]]\nrepos = [\"**\"]\nrequired_checks = [{bad}]\n");
            let e = GovernanceConf::parse(&conf(&text)).unwrap_err();
            assert!(e.0.contains("required_checks"), "{e}");
        }
    }

    #[test]
    fn fenced_ref_issue_patterns_are_validated() {
        let c = GovernanceConf::parse(&format!(
            "fenced_ref_issue = [\"refs/heads/task/{{issue}}\"]\n{}",
            conf("")
        ))
        .unwrap();
        assert_eq!(c.fenced_ref_issue(), ["refs/heads/task/{issue}"]);
        let err = GovernanceConf::parse(&format!(
            "fenced_ref_issue = [\"refs/heads/task/*\"]\n{}",
            conf("")
        ))
        .unwrap_err();
        assert!(err.to_string().contains("fenced_ref_issue"), "{err}");
    }

    #[test]
    fn webhooks_are_declared_and_validated() {
        let hook = "[[webhooks]]\nname = \"ci\"\nrepo = \"team/*\"\nurl = \"https://ci.example.com/hook\"\nevents = [\"ref.*\"]\n";
        let c = GovernanceConf::parse(&conf(hook)).unwrap();
        assert_eq!(
            c.webhooks(),
            [GovWebhook {
                name: "ci".into(),
                repo: "team/*".into(),
                url: "https://ci.example.com/hook".into(),
                events: vec!["ref.*".into()],
            }]
        );
        assert!(GovernanceConf::parse(&conf(""))
            .unwrap()
            .webhooks()
            .is_empty());
        for (bad, needle) in [
            (
                hook.replace("https://ci.example.com/hook", "ftp://x/"),
                "webhooks[0].url",
            ),
            (hook.replace("https://", "https://u:p@"), "credentials"),
            (hook.replace("\"ci\"", "\"c i\""), "webhooks[0].name"),
            (format!("{hook}{hook}"), "used twice"),
            (hook.replace("team/*", "team app"), "webhooks[0].repo"),
            (hook.replace("ref.*", "ref updated"), "webhooks[0].events"),
            (format!("{hook}secret = \"whsec_AAAA\"\n"), "secret"),
        ] {
            let err = GovernanceConf::parse(&conf(&bad)).unwrap_err();
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn fenced_refs_are_validated_globs() {
        let c = GovernanceConf::parse(&format!(
            "fenced_refs = [\"refs/heads/issue/*\"]\n{}",
            conf("")
        ))
        .unwrap();
        assert_eq!(c.fenced_refs(), ["refs/heads/issue/*"]);
        assert!(GovernanceConf::parse(&conf(""))
            .unwrap()
            .fenced_refs()
            .is_empty());
        let err = GovernanceConf::parse(&format!("fenced_refs = [\"heads/*\"]\n{}", conf("")))
            .unwrap_err();
        assert!(err.to_string().contains("fenced_refs"), "{err}");
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let cases = [
            (
                "[principals.x]\nkeys = [\"nope\"]\n",
                "principals.x.keys[0]",
            ),
            ("[groups]\ng = [\"ghost\"]\n", "unknown principal"),
            (
                "[[grants]]\nrepos=[\"a\"]\nto=[\"@none\"]\naccess=\"read\"\n",
                "unknown group",
            ),
            (
                "[[grants]]\nrepos=[\"a\"]\nto=[\"ghost\"]\naccess=\"read\"\n",
                "unknown principal",
            ),
            (
                "[[grants]]\nrepos=[\"a\"]\nto=[\"*\"]\naccess=\"admin\"\n",
                "unknown variant",
            ),
            (
                "[[grants]]\nrepos=[\"a[\"]\nto=[\"*\"]\naccess=\"read\"\n",
                "bad pattern",
            ),
            ("colour = 1\n", "unknown field"),
            ("[principals.x\n", "TOML parse error"),
        ];
        for (text, needle) in cases {
            let err = GovernanceConf::parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        let dup =
            format!("[principals.a]\nkeys = [\"{ALICE}\"]\n[principals.b]\nkeys = [\"{ALICE}\"]\n");
        assert!(GovernanceConf::parse(&dup)
            .unwrap_err()
            .0
            .contains("already belongs"));
    }
}
