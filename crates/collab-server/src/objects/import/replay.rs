//! What every kind of client-written DAG shares on its way into the
//! database: a kind's replay and rows ([`DagKind`]), the loop that replays
//! a repository's DAGs of one kind and stores them in batches of [`BATCH`]
//! ([`replay_in_batches`]), and who wrote an event ([`person`]). Below the
//! kinds (`issue`, `patch`) and the importer (`mod`).

use collab_record::replay::DroppedEvent;
use collab_record::sign;
use collab_record::state;
use collab_record::trust::TrustList;
use git2::Repository;

use collab_store::issues::Person;

/// Objects replayed and stored per transaction.
pub const BATCH: usize = 256;

/// Who wrote an event of a replayed DAG, as the database keeps people.
pub(crate) fn person(author: &state::Author) -> Person {
    let principal = sign::parse_public_key(&author.key)
        .map(|k| sign::fingerprint(&k))
        .unwrap_or_else(|_| author.key.clone());
    Person {
        principal,
        name: author.name.clone(),
        key: Some(author.key.clone()),
    }
}

/// One kind of client-written DAG the importer replays: what
/// [`replay_in_batches`] needs to know of it.
pub(super) trait DagKind {
    /// A replayed DAG's state.
    type State;
    /// What the database stores of one DAG.
    type Rows;
    /// What importing a repository's DAGs of this kind found and did.
    type Report: Clone;
    /// The rows one batch inserted.
    type Counts;

    /// Replay the DAG at `ref_name`; `Err` says why it could not be
    /// replayed at all.
    fn replay(
        git: &Repository,
        ref_name: &str,
        id: &str,
        trust: Option<&TrustList>,
    ) -> Result<Replayed<Self::State>, String>;

    /// The rows of a replayed DAG of `repo`, or why the database cannot
    /// hold them.
    fn rows(
        git: &Repository,
        repo: &str,
        state: &Self::State,
        report: &mut Self::Report,
    ) -> Result<Self::Rows, String>;

    /// Count a replay's events and report what it dropped.
    fn note_replayed(
        report: &mut Self::Report,
        id: &str,
        events: usize,
        dropped: Vec<DroppedEvent>,
    );

    /// Report object `id` as left out: `invalid` (its root was dropped, or
    /// the database cannot hold it) or skipped (not replayable).
    fn note_left_out(report: &mut Self::Report, id: &str, reason: String, invalid: bool);

    /// Add what a batch inserted to the report.
    fn add(report: &mut Self::Report, counts: Self::Counts);
}

/// What replaying one DAG gave.
pub(super) struct Replayed<S> {
    /// Event commits applied or dropped (structural merges excluded).
    pub(super) events: usize,
    pub(super) dropped: Vec<DroppedEvent>,
    /// `Err(reason)` when the object is invalid (its root was dropped).
    pub(super) state: Result<S, String>,
}

/// Where [`replay_in_batches`] hands each batch of rows, with the report
/// so far on the last.
pub(super) type StoreBatch<'a, K> = dyn FnMut(
        Vec<<K as DagKind>::Rows>,
        Option<<K as DagKind>::Report>,
    ) -> anyhow::Result<<K as DagKind>::Counts>
    + 'a;

/// Replay the DAGs `refs` (`(ref name, id)`) of the repository at `git`
/// (canonical name `repo`) and hand their rows to `store` in batches of
/// [`BATCH`]: at least one batch, the last with a copy of the report so far
/// (`Some`); what each batch inserted is added to `report`.
pub(super) fn replay_in_batches<K: DagKind>(
    git: &Repository,
    repo: &str,
    refs: &[(String, String)],
    trust: Option<&TrustList>,
    report: &mut K::Report,
    store: &mut StoreBatch<'_, K>,
) -> anyhow::Result<()> {
    let chunks: Vec<&[(String, String)]> = refs.chunks(BATCH).collect();
    let total = chunks.len().max(1);
    for i in 0..total {
        let chunk: &[(String, String)] = chunks.get(i).copied().unwrap_or(&[]);
        let mut batch = Vec::with_capacity(chunk.len());
        for (ref_name, id) in chunk {
            match K::replay(git, ref_name, id, trust) {
                Ok(replay) => {
                    K::note_replayed(report, id, replay.events, replay.dropped);
                    match replay.state.and_then(|s| K::rows(git, repo, &s, report)) {
                        Ok(rows) => batch.push(rows),
                        Err(reason) => K::note_left_out(report, id, reason, true),
                    }
                }
                Err(reason) => K::note_left_out(report, id, reason, false),
            }
        }
        let last = (i + 1 == total).then(|| report.clone());
        let counts = store(batch, last)?;
        K::add(report, counts);
    }
    Ok(())
}
