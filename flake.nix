{
  description = "git-collab: a self-hosted, SSH-first code forge for people and coding agents";

  # flake.lock is created by `nix flake lock` (or any nix build/develop) on
  # first use and should then be committed.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = {
    self,
    nixpkgs,
  }: let
    inherit (nixpkgs) lib;
    systems = ["x86_64-linux" "aarch64-linux" "x86_64-darwin" "aarch64-darwin"];
    forAllSystems = f:
      lib.genAttrs systems (system:
        f (import nixpkgs {
          inherit system;
          overlays = [self.overlays.default];
        }));
  in {
    overlays.default = final: _prev: {
      git-collab = final.callPackage ./nix/package.nix {};
    };

    packages = forAllSystems (pkgs:
      {
        default = pkgs.git-collab;
        inherit (pkgs) git-collab;
      }
      // lib.optionalAttrs pkgs.stdenv.hostPlatform.isLinux {
        image = pkgs.callPackage ./nix/image.nix {};
      });

    # The module reads services.git-collab.package from pkgs.git-collab (the
    # overlay); this wrapper defaults it to this flake's build instead, so
    # importing nixosModules.default needs nothing else.
    nixosModules.default = {pkgs, ...}: {
      imports = [./nixos/module.nix];
      services.git-collab.package =
        lib.mkDefault self.packages.${pkgs.stdenv.hostPlatform.system}.default;
    };
    nixosModules.git-collab = ./nixos/module.nix;

    checks = forAllSystems (pkgs:
      {
        package = pkgs.git-collab;
        # The same linters and formatter as scripts/ci-nix.sh, from nixpkgs.
        nix-lint =
          pkgs.runCommand "git-collab-nix-lint" {
            nativeBuildInputs = [pkgs.statix pkgs.deadnix pkgs.alejandra];
            src = lib.fileset.toSource {
              root = ./.;
              fileset = lib.fileset.fileFilter (file: file.hasExt "nix") ./.;
            };
          } ''
            cd "$src"
            statix check .
            deadnix --fail .
            alejandra --check .
            touch "$out"
          '';
      }
      // lib.optionalAttrs pkgs.stdenv.hostPlatform.isLinux {
        image = self.packages.${pkgs.stdenv.hostPlatform.system}.image;
        vm-test = pkgs.testers.runNixOSTest ./nixos/tests/git-collab.nix;
      });

    devShells = forAllSystems (pkgs: {
      default = pkgs.mkShell {
        inputsFrom = [pkgs.git-collab];
        packages = with pkgs; [
          clippy
          rustfmt
          rust-analyzer
          git
          openssh
          sqlite
          statix
          deadnix
          alejandra
        ];
      };
    });

    formatter = forAllSystems (pkgs: pkgs.alejandra);
  };
}
