//! THE access decision. Every verb, over SSH and HTTP, asks this module what
//! a caller may do with a repository; nothing else compares principals with
//! policies or grants.
//!
//! Levels are ordered, Read < Write < Rewind (gitolite's R / RW / RW+):
//! Read clones and fetches; Write fast-forwards and creates refs (and takes
//! leases); Rewind rewrites or deletes refs and administers. The levels
//! themselves are the protocol's `collab_proto::Access` (re-exported
//! here), which the verb table names too.
//!
//! The regime of a caller is fixed per command from the live governance
//! state: `Ungoverned` (per-repo `collab-policy.toml`, admins rewind
//! everywhere), `Governed { name, .. }` (grants in `governance.toml`), or
//! `Closed` (governance is active and the key is not enrolled: nothing).
//! Unknown and unauthorized repositories look the same to callers:
//! `authorize` returns the one `NotFound` for both.

use std::net::IpAddr;
use std::sync::Arc;

use crate::app::App;
use crate::governance::conf::GovernanceConf;
use crate::governance::GovState;
use crate::identity::{Admission, Identity};
use crate::repos::RepoEntry;
use russh::keys::ssh_key::public::KeyData;
use russh::keys::ssh_key::PublicKey;

/// An access level (read < write < rewind): the protocol's, since the verb
/// table says which one each verb needs.
pub use collab_proto::Access;

/// Which rules apply to a caller.
#[derive(Debug, Clone)]
pub enum Regime {
    /// No governance: per-repository policy files; `admin` keys (marked in
    /// authorized_keys) rewind every repository.
    Ungoverned { admin: bool },
    /// Governance is active and the key is enrolled as `name`.
    Governed {
        name: String,
        conf: Arc<GovernanceConf>,
    },
    /// Governance is active (or broken) and the key is not enrolled.
    Closed,
}

impl Regime {
    pub fn as_str(&self) -> &'static str {
        match self {
            Regime::Ungoverned { .. } => "ungoverned",
            Regime::Governed { .. } => "governed",
            Regime::Closed => "closed",
        }
    }
}

/// An authenticated caller: the key that completed authentication and the
/// regime that applies to it right now.
#[derive(Debug, Clone)]
pub struct Caller {
    pub identity: Identity,
    pub regime: Regime,
}

impl Caller {
    /// The principal: the governed name, else the certificate's principal
    /// for a certificate login, else the key's `SHA256:` fingerprint.
    /// This is also the lease holder string.
    pub fn principal(&self) -> &str {
        match (&self.regime, &self.identity.certificate) {
            (Regime::Governed { name, .. }, _) => name,
            (_, Some(cert)) => &cert.principal,
            _ => &self.identity.fingerprint,
        }
    }

    /// The governed name, if any.
    pub fn name(&self) -> Option<&str> {
        match &self.regime {
            Regime::Governed { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// Whether a key may log in at all from `peer` now: a line of
/// authorized_keys admits it (`from=`, `expiry-time=` honoured), or it is
/// enrolled through governance and authorized_keys does not restrict it (a
/// key listed there whose every line refuses this connection is refused in
/// both regimes). `Err` carries the reason for the log.
pub fn admission(app: &App, key: &KeyData, peer: IpAddr) -> Result<(), String> {
    if let Some(why) = app.certs.key_revoked(key) {
        return Err(why);
    }
    let fingerprint = &crate::identity::fingerprint(&PublicKey::new(key.clone(), ""));
    match app
        .authorized_keys
        .admit(fingerprint, peer, crate::identity::unix_now())
    {
        Admission::Admitted(_) => Ok(()),
        Admission::Refused(why) => Err(format!("authorized_keys: {why}")),
        Admission::Unlisted => match app.governance.state().as_ref() {
            GovState::Active(conf) if conf.principal_for_fingerprint(fingerprint).is_some() => {
                Ok(())
            }
            _ => Err("not in authorized_keys or governance".into()),
        },
    }
}

/// Whether an authenticated identity is still admitted (asked again
/// before each command and by long-running streams): its key by
/// `admission`, or its certificate by the whole certificate check again,
/// so a certificate revoked, expired, or whose CA is no longer trusted
/// stops working on open connections too.
pub fn identity_admission(app: &App, identity: &Identity) -> Result<(), String> {
    match &identity.certificate {
        None => admission(app, identity.key.key_data(), identity.peer),
        Some(cert) => app.certs.recheck(
            cert,
            identity.peer,
            crate::identity::unix_now().max(0) as u64,
        ),
    }
}

/// `identity_admission` as a yes/no.
pub fn is_admitted(app: &App, identity: &Identity) -> bool {
    identity_admission(app, identity).is_ok()
}

/// Fix the regime for `identity` from the live governance state. Admin
/// status is re-read from authorized_keys (the line that admits this
/// connection) so a demotion applies at once.
pub fn caller_for(app: &App, mut identity: Identity) -> Caller {
    if let Some(cert) = &identity.certificate {
        // A certificate is never an admin key; governance may still grant
        // its principal anything.
        identity.admin = false;
        let regime = match app.governance.state().as_ref() {
            GovState::Inactive => Regime::Ungoverned { admin: false },
            GovState::Active(conf) => match conf.principal_for_certificate(&cert.principal) {
                Some(name) => Regime::Governed {
                    name: name.to_string(),
                    conf: conf.clone(),
                },
                None => Regime::Closed,
            },
            GovState::Broken(_) => Regime::Closed,
        };
        return Caller { identity, regime };
    }
    identity.admin = matches!(
        app.authorized_keys.admit(
            &identity.fingerprint,
            identity.peer,
            crate::identity::unix_now()
        ),
        Admission::Admitted(k) if k.admin()
    );
    let regime = match app.governance.state().as_ref() {
        GovState::Inactive => Regime::Ungoverned {
            admin: identity.admin,
        },
        GovState::Active(conf) => match conf.principal_for_fingerprint(&identity.fingerprint) {
            Some(name) => Regime::Governed {
                name: name.to_string(),
                conf: conf.clone(),
            },
            None => Regime::Closed,
        },
        GovState::Broken(_) => Regime::Closed,
    };
    Caller { identity, regime }
}

/// The caller's level on an existing repository; `None` = no access at all.
pub fn repo_access(_app: &App, caller: &Caller, entry: &RepoEntry) -> Option<Access> {
    let access = match &caller.regime {
        Regime::Closed => None,
        Regime::Ungoverned { admin: true } => Some(Access::Rewind),
        Regime::Ungoverned { admin: false } => {
            let p = caller.principal();
            let policy = &entry.policy;
            if policy.allows_rewind(p) {
                Some(Access::Rewind)
            } else if policy.allows_write(p) {
                Some(Access::Write)
            } else if policy.allows_checks(p) {
                Some(Access::Checks)
            } else if policy.allows_read(p) {
                Some(Access::Read)
            } else {
                None
            }
        }
        Regime::Governed { name, conf } => conf.access(name, entry.short_name()),
    };
    if entry.is_governance() {
        // Pushing governance is administration: only Rewind may write it,
        // and in the ungoverned regime only admins may see it at all.
        return match (&caller.regime, access) {
            (Regime::Ungoverned { admin: false }, _) => None,
            (_, Some(Access::Write | Access::Checks)) => Some(Access::Read),
            (_, a) => a,
        };
    }
    access
}

/// The one reply for a repository that is missing or not visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotFound;

impl NotFound {
    /// The exact stderr line, shared by every verb.
    pub const MESSAGE: &'static str = "error: repository not found";
}

/// Resolve `requested` and require `needed` on it. A repository the caller
/// cannot see, and one that does not exist, give the same `NotFound`.
pub fn authorize(
    app: &App,
    caller: &Caller,
    requested: &str,
    needed: Access,
) -> Result<(RepoEntry, Access), NotFound> {
    let entry = crate::repos::find_repo(&app.config.repos_dir, requested).ok_or(NotFound)?;
    match repo_access(app, caller, &entry) {
        Some(level) if level >= needed => Ok((entry, level)),
        _ => Err(NotFound),
    }
}

/// Whether the caller may create the repository `name` (short or full
/// name): admins when ungoverned, Rewind on the name when governed.
pub fn can_create_repo(_app: &App, caller: &Caller, name: &str) -> bool {
    let short = name.strip_suffix(".git").unwrap_or(name);
    match &caller.regime {
        Regime::Ungoverned { admin } => *admin,
        Regime::Governed { name, conf } => conf.allows_repo(name, short, Access::Rewind),
        Regime::Closed => false,
    }
}

/// Whether the caller is a server administrator: an admin key when
/// ungoverned, a principal with Rewind on the governance repository when
/// governed. Administrators see the events that belong to no repository
/// (`collab-events watch`) and may subscribe webhooks to any repository glob.
pub fn is_server_admin(_app: &App, caller: &Caller) -> bool {
    match &caller.regime {
        Regime::Ungoverned { admin } => *admin,
        Regime::Governed { name, conf } => conf.allows_repo(
            name,
            crate::repos::GOVERNANCE_REPO.trim_end_matches(".git"),
            Access::Rewind,
        ),
        Regime::Closed => false,
    }
}

/// Whether a governed principal may act with nobody connected: one of
/// its ways in stands without a connection (a certificate principal, a
/// key authorized_keys does not list, or one listed on a line without
/// `from=` that has not expired). A principal whose every key
/// authorized_keys restricts with `from=` acts only while connected.
fn governed_acts_unattended(app: &App, conf: &GovernanceConf, principal: &str) -> bool {
    if conf.enrolled_by_certificate(principal) {
        return true;
    }
    let keys = app.authorized_keys.current();
    conf.fingerprints_of(principal)
        .any(|fp| !keys.contains_key(fp) || app.authorized_keys.lookup_unattended(fp).is_some())
}

/// Whether what `caller` leaves to happen later (a webhook subscription,
/// a queued merge) could act for it once it has gone: refused at once
/// when not, rather than dropped at its first turn.
pub fn caller_acts_unattended(app: &App, caller: &Caller) -> bool {
    if caller.identity.certificate.is_some() {
        return true;
    }
    match &caller.regime {
        Regime::Ungoverned { .. } => app
            .authorized_keys
            .lookup_unattended(&caller.identity.fingerprint)
            .is_some(),
        Regime::Governed { name, conf } => governed_acts_unattended(app, conf, name),
        Regime::Closed => false,
    }
}

/// The refusal of work left for later by a key that cannot act then.
pub const UNATTENDED_REFUSAL: &str = "refused: this key is limited by from= in authorized_keys; \
     work that runs while it is not connected (webhooks, queued merges) cannot act for it";

/// Whether a webhook owner (an `ssh`-origin subscription's principal) is
/// still admitted to act with nobody connected: its key line is still in
/// authorized_keys, unexpired and without `from=` (ungoverned), or it is
/// still a principal of governance.toml with such a way in (governed).
/// Checked at every delivery, so a removed or `from=`-restricted key stops
/// its subscriptions.
pub fn owner_admitted(app: &App, owner: &str) -> bool {
    match app.governance.state().as_ref() {
        GovState::Inactive => app.authorized_keys.lookup_unattended(owner).is_some(),
        GovState::Active(conf) => {
            conf.principals().any(|p| p == owner) && governed_acts_unattended(app, conf, owner)
        }
        GovState::Broken(_) => false,
    }
}

/// Whether a webhook owner is a server administrator now (may aim at
/// non-public targets without approval, sees delivery details).
pub fn owner_is_admin(app: &App, owner: &str) -> bool {
    match app.governance.state().as_ref() {
        GovState::Inactive => app
            .authorized_keys
            .lookup_unattended(owner)
            .is_some_and(|k| k.admin()),
        GovState::Active(conf) => {
            conf.allows_repo(
                owner,
                crate::repos::GOVERNANCE_REPO.trim_end_matches(".git"),
                Access::Rewind,
            ) && governed_acts_unattended(app, conf, owner)
        }
        GovState::Broken(_) => false,
    }
}

/// Whether `principal` may write `entry` now, with no session at hand (a
/// merge queued with `--when-green`, merged later by the server): governed,
/// by governance.toml's grants; ungoverned, a key fingerprint must still be
/// admitted by authorized_keys and be an admin or a writer of the policy,
/// a certificate principal must be a writer of the policy. Either way the
/// principal must be able to act with nobody connected: a key whose lines
/// all carry `from=` may not (`lookup_unattended`).
pub fn principal_may_write(app: &App, principal: &str, entry: &RepoEntry) -> bool {
    if entry.is_governance() {
        return false;
    }
    match app.governance.state().as_ref() {
        GovState::Inactive => {
            let key = app.authorized_keys.lookup_unattended(principal);
            if principal.starts_with("SHA256:") && key.is_none() {
                return false;
            }
            key.is_some_and(|k| k.admin())
                || entry.policy.allows_write(principal)
                || entry.policy.allows_rewind(principal)
        }
        GovState::Active(conf) => {
            conf.allows_repo(principal, entry.short_name(), Access::Write)
                && governed_acts_unattended(app, conf, principal)
        }
        GovState::Broken(_) => false,
    }
}

/// Whether the owner of a webhook subscription may read `repo` now (`None`,
/// or a repository that no longer exists: for administrators only). Subscriptions declared by
/// the operator (`config`, `governance` origins) see everything. `owner` is
/// the principal that added it: a fingerprint when ungoverned (it must
/// still be admitted), a governed name when governed.
pub fn owner_can_read(app: &App, owner: &str, origin: &str, repo: Option<&str>) -> bool {
    if origin != "ssh" {
        return true;
    }
    // Events of a name that no longer exists (renamed away, deleted) are
    // for administrators only, like server-wide ones.
    let repo = repo.filter(|r| crate::repos::find_repo(&app.config.repos_dir, r).is_some());
    match app.governance.state().as_ref() {
        GovState::Inactive => {
            let Some(key) = app.authorized_keys.lookup_unattended(owner) else {
                return false;
            };
            match repo {
                None => key.admin(),
                Some(repo) => {
                    let Some(entry) = crate::repos::find_repo(&app.config.repos_dir, repo) else {
                        return false;
                    };
                    if entry.is_governance() {
                        return key.admin();
                    }
                    key.admin()
                        || entry.policy.allows_read(owner)
                        || entry.policy.allows_write(owner)
                        || entry.policy.allows_rewind(owner)
                }
            }
        }
        GovState::Active(conf) => {
            if !governed_acts_unattended(app, conf, owner) {
                return false;
            }
            let governance = crate::repos::GOVERNANCE_REPO.trim_end_matches(".git");
            match repo {
                None => conf.allows_repo(owner, governance, Access::Rewind),
                Some(repo) => {
                    let Some(entry) = crate::repos::find_repo(&app.config.repos_dir, repo) else {
                        return false;
                    };
                    conf.allows_repo(owner, entry.short_name(), Access::Read)
                }
            }
        }
        GovState::Broken(_) => false,
    }
}

/// Whether the caller may add a webhook for `glob` (`*` matches any run of
/// characters, `/` included): server administrators always; others only
/// when the glob matches at least one repository and they hold Rewind on
/// every repository it matches.
pub fn can_subscribe(app: &App, caller: &Caller, glob: &str) -> bool {
    if is_server_admin(app, caller) {
        return true;
    }
    let glob = glob.strip_suffix(".git").unwrap_or(glob);
    let matching: Vec<RepoEntry> = crate::repos::list_repos(&app.config.repos_dir)
        .into_iter()
        .filter(|e| crate::events::filter::glob_match(glob, e.short_name()))
        .collect();
    !matching.is_empty()
        && matching
            .iter()
            .all(|e| repo_access(app, caller, e) == Some(Access::Rewind))
}

/// The rule `collab-patch merge` applies in this repository: the first
/// `[[merge_rules]]` of `governance.toml` matching it while governance is
/// active, else the `merge` of its `collab-policy.toml`, else the default
/// (no approval needed, no changes requested, the author's vote does not
/// count).
///
/// The rule carries who holds the `checks` level on the repository now
/// (`checks_from = "checks"`): a snapshot of governance, authorized_keys
/// and the policy, taken with the rule, so every verdict made with it
/// (merge, `--when-green`, the merge queue, the pages) counts alike.
pub fn merge_rule(app: &App, entry: &RepoEntry) -> collab_store::patches::MergeRule {
    let state = app.governance.state();
    let governed = match state.as_ref() {
        GovState::Active(conf) => conf.merge_rule(entry.short_name()),
        _ => None,
    };
    let mut rule = governed.or(entry.policy.merge.clone()).unwrap_or_default();
    if rule.checks_from == collab_store::patches::ChecksFrom::Checks {
        rule.check_posters = check_posters(app, entry);
    }
    rule
}

/// Whether a principal's level on `entry` is exactly `checks`, decided
/// with no session at hand from a snapshot of the live state. A key's
/// `from=` does not matter here: the check was posted over a connection
/// that passed it.
fn check_posters(app: &App, entry: &RepoEntry) -> collab_store::patches::CheckPosters {
    let short = entry.short_name().to_string();
    match app.governance.state().as_ref() {
        GovState::Active(conf) => {
            let conf = conf.clone();
            collab_store::patches::CheckPosters::new(move |p| {
                conf.access(p, &short) == Some(Access::Checks)
            })
        }
        GovState::Broken(_) => collab_store::patches::CheckPosters::new(|_| false),
        GovState::Inactive => {
            let (keys, policy) = (app.authorized_keys.current(), entry.policy.clone());
            let now = crate::identity::unix_now();
            collab_store::patches::CheckPosters::new(move |p| {
                if p.starts_with("SHA256:") {
                    let line = keys.get(p).and_then(|lines| {
                        lines
                            .usable
                            .iter()
                            .find(|k| k.options.expires_at.is_none_or(|t| now <= t))
                    });
                    // An admin key rewinds everywhere; an unlisted key is nobody.
                    if line.is_none_or(|k| k.admin()) {
                        return false;
                    }
                }
                policy.allows_checks(p) && !policy.allows_write(p)
            })
        }
    }
}

/// The repository's fenced refs: its `collab-policy.toml`'s plus
/// governance's when governance is active.
pub fn fenced_refs(app: &App, entry: &RepoEntry) -> Vec<String> {
    let mut fenced = entry.policy.fenced_refs.clone();
    if let GovState::Active(conf) = app.governance.state().as_ref() {
        fenced.extend(conf.fenced_refs().iter().cloned());
    }
    fenced
}

/// Whether branch `base` is a fenced ref of the repository. A policy that
/// does not compile fences everything it meant to.
pub fn base_is_fenced(app: &App, entry: &RepoEntry, base: &str) -> bool {
    match crate::hooks::fencing::compile(&fenced_refs(app, entry)) {
        Ok(set) => set.is_match(collab_record::refs::branch_ref(base)),
        Err(_) => true,
    }
}

/// Whether anonymous HTTP may read this repository.
pub fn anonymous_can_read(app: &App, entry: &RepoEntry) -> bool {
    if entry.is_governance() {
        return false;
    }
    match app.governance.state().as_ref() {
        GovState::Inactive => entry.policy.public && entry.policy.broken.is_none(),
        GovState::Active(conf) => conf.is_public(entry.short_name()),
        GovState::Broken(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repos::RepoPolicy;

    fn entry(name: &str, policy: RepoPolicy) -> RepoEntry {
        RepoEntry {
            name: name.into(),
            path: "/nonexistent".into(),
            policy,
        }
    }

    fn caller(regime: Regime) -> Caller {
        let key = russh::keys::ssh_key::PublicKey::from_openssh(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICtQ/RYc3WhAmSKhGYkTZDTD1K+ATpny91Oy682hu+Dg",
        )
        .unwrap();
        Caller {
            identity: Identity {
                fingerprint: crate::identity::fingerprint(&key),
                key,
                admin: false,
                peer: [127, 0, 0, 1].into(),
                certificate: None,
            },
            regime,
        }
    }

    fn app() -> (tempfile::TempDir, App) {
        let tmp = tempfile::tempdir().unwrap();
        let config = crate::config::ServerConfig::with_state_dir(tmp.path().to_path_buf());
        let app = App::new(config).unwrap();
        (tmp, app)
    }

    #[test]
    fn levels_are_ordered() {
        assert!(Access::Read < Access::Write && Access::Write < Access::Rewind);
    }

    #[test]
    fn ungoverned_defaults_and_policy() {
        let (_t, app) = app();
        let user = caller(Regime::Ungoverned { admin: false });
        let admin = caller(Regime::Ungoverned { admin: true });
        let r = entry("r.git", RepoPolicy::default());
        assert_eq!(repo_access(&app, &user, &r), Some(Access::Write));
        assert_eq!(repo_access(&app, &admin, &r), Some(Access::Rewind));
        let private = entry(
            "p.git",
            RepoPolicy::parse("read = []\nwrite = []\n").unwrap(),
        );
        assert_eq!(repo_access(&app, &user, &private), None);
        let fp = user.identity.fingerprint.clone();
        let mine = entry(
            "m.git",
            RepoPolicy::parse(&format!("read = []\nwrite = []\nrewind = [\"{fp}\"]\n")).unwrap(),
        );
        assert_eq!(repo_access(&app, &user, &mine), Some(Access::Rewind));
        let gov = entry("_governance.git", RepoPolicy::default());
        assert_eq!(repo_access(&app, &user, &gov), None);
        assert_eq!(repo_access(&app, &admin, &gov), Some(Access::Rewind));
        assert_eq!(repo_access(&app, &caller(Regime::Closed), &r), None);
        assert!(!anonymous_can_read(&app, &r));
        assert!(can_create_repo(&app, &admin, "x") && !can_create_repo(&app, &user, "x"));
    }
}
