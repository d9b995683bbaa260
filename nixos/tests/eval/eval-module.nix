# Evaluates nixos/module.nix with the real nixpkgs lib, the stub option
# declarations and the stub pkgs, and returns what the module produced as
# plain JSON-able data. Used by crates/collab-server/tests/it/once/nix_module.rs:
#   nix-instantiate --eval --strict --json nixos/tests/eval/eval-module.nix \
#     --argstr libPath /path/to/nixpkgs.lib/lib \
#     --arg configuration '{ services.git-collab.enable = true; }'
{
  # The nixpkgs lib directory (the one holding default.nix).
  libPath,
  # A NixOS module: an attrset or a function of { lib, ... }.
  configuration,
}: let
  lib = import libPath;
  pkgs = import ./stub-pkgs.nix {inherit lib;};
  evaluated = lib.evalModules {
    modules = [
      ./stub-nixos.nix
      ../../module.nix
      configuration
      {_module.args.pkgs = pkgs;}
    ];
  };
  inherit (evaluated) config;

  # Packages and generated files become their store paths, so the result is
  # plain JSON.
  plain = v:
    if lib.isDerivation v
    then v.outPath
    else if builtins.isAttrs v
    then lib.mapAttrs (_: plain) v
    else if builtins.isList v
    then map plain v
    else v;
  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
  etcFile = file: {
    path = file.source.outPath;
    text = file.source.text or null;
  };
  textOf = file: {
    path = file.outPath;
    inherit (file) text;
  };
in
  if failedAssertions != []
  then {inherit failedAssertions;}
  else {
    failedAssertions = [];
    inherit (config) warnings;
    service = plain (config.systemd.services.git-collab or null);
    backupService = plain (config.systemd.services.git-collab-backup or null);
    backupTimer = config.systemd.timers.git-collab-backup or null;
    settings = config.services.git-collab.settings;
    etc = lib.mapAttrs (_: etcFile) config.environment.etc;
    # Every text file the module wrote to the (stub) store, by store path.
    storeFiles = builtins.listToAttrs (map (f: lib.nameValuePair f.path f) (
      map textOf (lib.filter (f: f ? text) (config.systemd.services.git-collab.restartTriggers or []))
    ));
    users = plain config.users.users;
    groups = plain config.users.groups;
    firewallTCPPorts = config.networking.firewall.allowedTCPPorts;
    tmpfiles = config.systemd.tmpfiles.settings;
    systemPackages = plain config.environment.systemPackages;
    inherit (config.services) postgresql;
  }
