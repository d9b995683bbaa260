//! The workspace's binaries and its root directory, as tests find them:
//! [`bin`] (any binary), [`cli_bin`] (`git-collab`), [`workspace_root`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The workspace's root directory (README.md, docs/, nixos/).
///
/// Taken from the running test's `CARGO_MANIFEST_DIR` (cargo and nextest
/// set it to the tested crate, one of `crates/*`), not from this crate's
/// compile-time one: a build cached from a checkout elsewhere (CI shares
/// one target directory between clones) would point at that checkout.
pub fn workspace_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        crate_dir.join("../..")
    })
}

/// The path of one of the workspace's binaries (`git-collab-server`,
/// `git-collab`). A test can only name its own package's binaries with
/// `env!("CARGO_BIN_EXE_…")`, so this looks beside the test executable:
/// cargo puts tests in `target/<profile>/deps/` and binaries in
/// `target/<profile>/`. The test command builds every binary of the
/// workspace first (`cargo nextest run --workspace`); run alone,
/// `cargo test -p collab-server` does not build `git-collab`, and this
/// panics saying so rather than running a stale one that is missing.
pub fn bin(name: &str) -> &'static str {
    static FOUND: Mutex<Vec<(String, &'static str)>> = Mutex::new(Vec::new());
    let mut found = FOUND.lock().unwrap();
    if let Some((_, path)) = found.iter().find(|(n, _)| n == name) {
        return path;
    }
    let path = match std::env::var(format!("CARGO_BIN_EXE_{name}")) {
        Ok(path) => path,
        Err(_) => {
            let exe = std::env::current_exe().expect("the test executable's path");
            let mut dir = exe.parent().expect("the test executable's directory");
            if dir.ends_with("deps") {
                dir = dir.parent().expect("target/<profile>");
            }
            let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
            assert!(
                path.is_file(),
                "{name} is not built at {}: run `cargo build --workspace --bins` first (the test command does)",
                path.display()
            );
            path.to_string_lossy().into_owned()
        }
    };
    let path: &'static str = Box::leak(path.into_boxed_str());
    found.push((name.to_owned(), path));
    path
}

/// The `git-collab` CLI binary.
pub fn cli_bin() -> &'static str {
    bin("git-collab")
}
