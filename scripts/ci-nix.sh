#!/usr/bin/env bash
# Checks of the Nix files that run without nixpkgs (which cannot be fetched
# on CI machines): every .nix file parses (nix-instantiate --parse), is clean
# under statix and deadnix, is formatted as alejandra formats it, and the
# NixOS module evaluates as crates/collab-server/tests/it/once/nix_module.rs expects.
#
# Idempotent. Tools are installed once and cached outside the clone, in
# $GIT_COLLAB_CI_CACHE (default /var/cache/git-collab-ci):
#   nix-bin (Nix 2.8)  apt-get
#   deadnix            cargo install --locked deadnix (crates.io)
#   alejandra          cargo install --locked --path nix/tools/alejandra: the
#                      alejandra crate on crates.io is the formatter's library
#                      only, so a small command around it lives in this repo
#   statix             not on crates.io (the crate named `statix` there is an
#                      unrelated HTTP server); used from PATH when an
#                      operator installed it (e.g. from nixpkgs). Without
#                      it the statix step is skipped with a notice, or
#                      fails when GIT_COLLAB_REQUIRE_STATIX=1; `nix flake
#                      check` runs it (checks.nix-lint).
# Module evaluation needs the nixpkgs lib (nix-community/nixpkgs.lib, in no
# registry): $NIXPKGS_LIB, else the copy vendored beside the clone
# (../shared/vendor/nixpkgs-lib from the project root), else
# $GIT_COLLAB_CI_CACHE/nixpkgs-lib. Without one that step is skipped with a
# notice, or fails when GIT_COLLAB_REQUIRE_NIX_TESTS=1 (.ci/run sets it).
# Here the module is evaluated once as a smoke test; every assertion about
# what it produces is in crates/collab-server/tests/it/once/nix_module.rs,
# which scripts/test.sh runs with the same lib (found the same way).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cache=${GIT_COLLAB_CI_CACHE:-/var/cache/git-collab-ci}
tools=$cache/nix-tools
mkdir -p "$tools"
export PATH="$tools/bin:$PATH"
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

step() { printf '\n== %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- tools ------------------------------------------------------------------
step "tools"
if ! command -v nix-instantiate >/dev/null; then
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q nix-bin
fi
nix-instantiate --version

if [ "$(deadnix --version 2>/dev/null)" != "deadnix 1.3.1" ]; then
  cargo install --locked deadnix --version 1.3.1 --root "$tools"
fi
deadnix --version

if [ "$(alejandra --version 2>/dev/null)" != "alejandra 3.1.0" ]; then
  cargo install --locked --path nix/tools/alejandra --root "$tools" \
    --target-dir "$cache/build/alejandra"
fi
alejandra --version

# The Nix linter prints "statix 0.5.x"; anything else named statix is not it.
is_statix_linter() { statix --version 2>/dev/null | grep -Eq '^statix 0\.[0-9]+\.[0-9]+$'; }
have_statix=no
if is_statix_linter; then
  have_statix=yes
  statix --version
fi

# --- the files --------------------------------------------------------------
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t nix_files < <(git ls-files --cached --others --exclude-standard -- '*.nix')
else
  mapfile -t nix_files < <(find . -name '*.nix' -not -path './target/*' -not -path './.git/*' | sort)
fi
[ "${#nix_files[@]}" -gt 0 ] || { echo "error: no .nix files found" >&2; exit 1; }

step "nix-instantiate --parse (${#nix_files[@]} files)"
for f in "${nix_files[@]}"; do
  nix-instantiate --parse "$f" >/dev/null
  echo "ok $f"
done

step "statix check"
if [ "$have_statix" = yes ]; then
  for f in "${nix_files[@]}"; do statix check "$f"; done
  echo "statix: clean"
elif [ "${GIT_COLLAB_REQUIRE_STATIX:-0}" = 1 ]; then
  echo "error: statix (the Nix linter) is not installed" >&2
  exit 1
else
  echo "SKIPPED: statix (the Nix linter) is not on crates.io and none is installed;"
  echo "         run 'nix flake check' (checks.nix-lint) where nixpkgs is reachable."
fi

step "deadnix --fail"
deadnix --fail "${nix_files[@]}"
echo "deadnix: clean"

step "alejandra --check"
alejandra --check "${nix_files[@]}"

# --- module evaluation --------------------------------------------------------
step "NixOS module evaluation (crates/collab-server/tests/it/once/nix_module.rs)"
lib_dir=${NIXPKGS_LIB:-}
if [ -z "$lib_dir" ] && [ -d "$repo/../shared/vendor/nixpkgs-lib" ]; then
  lib_dir=$(cd "$repo/../shared/vendor/nixpkgs-lib" && pwd)
fi
if [ -z "$lib_dir" ] && [ -f "$cache/nixpkgs-lib/lib/default.nix" ]; then
  lib_dir=$cache/nixpkgs-lib
fi
if [ -n "$lib_dir" ]; then
  lib_path=$lib_dir
  [ -f "$lib_path/modules.nix" ] || lib_path=$lib_dir/lib
  [ -f "$lib_path/modules.nix" ] || { echo "error: $lib_dir holds no nixpkgs lib" >&2; exit 1; }
  # Evaluation fails (and so this script) on a type error or a failed
  # assertion of the module; the Rust test checks the values.
  nix-instantiate --eval --strict --json --readonly-mode nixos/tests/eval/eval-module.nix \
    --argstr libPath "$lib_path" \
    --arg configuration '{ services.git-collab = { enable = true; settings.ssh.trusted_user_ca_keys = "/etc/ssh/git-collab-user-ca.pub"; }; }' \
    | grep -q '"ExecStart"' || { echo "error: the NixOS module did not evaluate to a unit" >&2; exit 1; }
  echo "module evaluates with $lib_path"
elif [ "${GIT_COLLAB_REQUIRE_NIX_TESTS:-0}" = 1 ]; then
  echo "error: no nixpkgs lib (NIXPKGS_LIB, ../shared/vendor/nixpkgs-lib, $cache/nixpkgs-lib)" >&2
  echo "       and GIT_COLLAB_REQUIRE_NIX_TESTS=1" >&2
  exit 1
else
  echo "SKIPPED: no nixpkgs lib (set NIXPKGS_LIB to a checkout of nix-community/nixpkgs.lib,"
  echo "         or extract one to $cache/nixpkgs-lib)."
fi

step "ci-nix: done"
