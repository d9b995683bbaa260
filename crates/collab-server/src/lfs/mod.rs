//! git-lfs objects and the wire git-lfs's SSH transfer speaks. `store`
//! keeps the objects on disk, content-addressed per repository identity;
//! `pktline` frames the conversation; `pointer` reads the files git keeps
//! in place of the objects (the web's raw page serves the object); `gc`
//! collects the objects no ref points at any more (maintenance). The conversation itself (which
//! command may run in which session, who may do what) is the SSH verb's:
//! `ssh::lfs`. docs/lfs.md is the user's side.

pub mod gc;
pub mod pktline;
pub mod pointer;
pub mod smudge;
pub mod store;
