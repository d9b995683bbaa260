# The git-collab package: the `git-collab` CLI and the `git-collab-server`
# server, built from the Cargo workspace at the repository root.
{
  lib,
  stdenv,
  rustPlatform,
  pkg-config,
  zlib,
  libiconv,
  git,
  openssh,
  makeBinaryWrapper,
  installShellFiles,
}: let
  cargoToml = lib.importTOML ../Cargo.toml;
  fs = lib.fileset;
in
  rustPlatform.buildRustPackage {
    pname = "git-collab";
    inherit (cargoToml.workspace.package) version;

    # Only what cargo reads: editing the Nix files or the docs must not
    # rebuild the package.
    src = fs.toSource {
      root = ../.;
      fileset = fs.unions [
        ../Cargo.toml
        ../Cargo.lock
        ../crates
        # collab-proto's unit test checks the verb reference against it
        ../docs/ssh-verbs.md
        (fs.maybeMissing ../README.md)
      ];
    };

    cargoLock.lockFile = ../Cargo.lock;

    # git2 is built without default features: libgit2 (vendored by
    # libgit2-sys), SQLite (rusqlite "bundled") and ring are compiled from C
    # with the cc crate, so no OpenSSL or libssh2 is needed. zlib comes from
    # nixpkgs through pkg-config rather than libz-sys's bundled copy.
    nativeBuildInputs = [pkg-config makeBinaryWrapper installShellFiles];
    buildInputs = [zlib] ++ lib.optionals stdenv.hostPlatform.isDarwin [libiconv];

    # Unit tests (lib and bins) run here. The integration tests under tests/
    # start git-collab-server and drive it with OpenSSH `ssh` and `git` over
    # loopback, boot the container image with testcontainers (needs a Docker
    # engine and a registry) and drive headless Chromium; none of that exists
    # in the build sandbox. The NixOS VM test (checks.<system>.vm-test) runs
    # the real service end to end instead.
    cargoTestFlags = ["--lib" "--bins"];
    nativeCheckInputs = [git openssh];
    preCheck = ''
      export HOME=$TMPDIR
    '';

    # The server spawns `git upload-pack` / `git receive-pack`; the CLI
    # shells out to `git` and `ssh`. Append, so a user's own git wins.
    # Man pages are generated from the CLI's clap definitions (`git-collab
    # man DIR`), so `git collab --help` finds `git-collab(1)`; the NixOS
    # module puts the package in environment.systemPackages, which brings
    # them along. Skipped when cross-compiling (the binary cannot run here).
    postInstall =
      lib.optionalString (stdenv.buildPlatform.canExecute stdenv.hostPlatform) ''
        $out/bin/git-collab man man1
        installManPage man1/*.1
      ''
      + ''
        wrapProgram $out/bin/git-collab-server --suffix PATH : ${lib.makeBinPath [git]}
        wrapProgram $out/bin/git-collab --suffix PATH : ${lib.makeBinPath [git openssh]}
      '';

    meta = {
      inherit (cargoToml.package) description;
      license = with lib.licenses; [mit asl20];
      mainProgram = "git-collab";
      platforms = lib.platforms.unix;
    };
  }
