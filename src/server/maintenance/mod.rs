//! Repository maintenance: keeping served repositories fast to clone and
//! free of leftovers. `lock` is the per-repository lock that maintenance and
//! backups share; `quarantine` removes what killed pushes leave behind.

pub mod lock;
// The scheduler that runs it per repository is the next step; startup
// clean-up may call it too.
pub mod git;
#[allow(dead_code)]
pub mod quarantine;
