//! Repository maintenance: keeping served repositories fast to clone and
//! free of leftovers. `lock` is the per-repository lock that maintenance and
//! backups share; `quarantine` removes what killed pushes leave behind, and
//! `sweep` runs it over every repository at start and periodically.

pub mod lock;
// The scheduler that runs it per repository is the next step; startup
// clean-up may call it too.
pub mod git;
pub mod quarantine;
pub mod sweep;
