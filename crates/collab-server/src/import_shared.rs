//! What the issue importer (`import`) and the patch importer
//! (`patch_import`) share: the batch size and a replayed event's author as
//! a `collab.db` person.

use collab_record::sign;
use collab_record::state;

use crate::db::issues::Person;

/// Issues replayed and stored per transaction.
pub const BATCH: usize = 256;

/// A replayed event's author as a person: the principal is the key's
/// `SHA256:` fingerprint (the key itself when it does not parse).
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
