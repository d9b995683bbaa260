# Declarations of the NixOS options nixos/module.nix sets outside its own
# namespace, typed and merged like the real ones where it matters (systemd
# unit values concatenate lists; everything else must agree).
{
  lib,
  pkgs,
  ...
}: let
  inherit (lib) mkOption types;

  # As nixos/lib/systemd-unit-options.nix: lists concatenate, scalars must agree.
  unitOption = lib.mkOptionType {
    name = "systemd option";
    merge = loc: defs: let
      defs' = lib.filterOverrides defs;
    in
      if lib.any (def: builtins.isList def.value) defs'
      then lib.concatMap (def: lib.toList def.value) defs'
      else lib.mergeEqualOption loc defs';
  };

  service = types.submodule {
    freeformType = types.attrsOf types.anything;
    options = {
      description = mkOption {type = types.str;};
      wantedBy = mkOption {
        type = types.listOf types.str;
        default = [];
      };
      after = mkOption {
        type = types.listOf types.str;
        default = [];
      };
      requires = mkOption {
        type = types.listOf types.str;
        default = [];
      };
      environment = mkOption {
        type = types.attrsOf (types.nullOr (types.oneOf [types.str types.path types.package]));
        default = {};
      };
      path = mkOption {
        type = types.listOf (types.either types.package types.str);
        default = [];
      };
      restartTriggers = mkOption {
        type = types.listOf types.unspecified;
        default = [];
      };
      serviceConfig = mkOption {
        type = types.attrsOf unitOption;
        default = {};
      };
    };
  };
in {
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      default = [];
    };
    warnings = mkOption {
      type = types.listOf types.str;
      default = [];
    };
    systemd.services = mkOption {
      type = types.attrsOf service;
      default = {};
    };
    systemd.timers = mkOption {
      type = types.attrsOf (types.attrsOf types.anything);
      default = {};
    };
    systemd.tmpfiles.settings = mkOption {
      type = types.attrsOf (types.attrsOf (types.attrsOf (types.attrsOf types.anything)));
      default = {};
    };
    users.users = mkOption {
      type = types.attrsOf (types.attrsOf types.anything);
      default = {};
    };
    users.groups = mkOption {
      type = types.attrsOf (types.attrsOf types.anything);
      default = {};
    };
    networking.firewall.allowedTCPPorts = mkOption {
      type = types.listOf types.port;
      default = [];
    };
    environment.etc = mkOption {
      type = types.attrsOf (types.submodule {
        options.source = mkOption {type = types.unspecified;};
      });
      default = {};
    };
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [];
    };
    # The part of services.postgresql that createLocally sets.
    services.postgresql = {
      enable = mkOption {
        type = types.bool;
        default = false;
      };
      package = mkOption {
        type = types.package;
        default = pkgs.postgresql;
      };
      ensureDatabases = mkOption {
        type = types.listOf types.str;
        default = [];
      };
      ensureUsers = mkOption {
        type = types.listOf (types.submodule {
          options = {
            name = mkOption {type = types.str;};
            ensureDBOwnership = mkOption {
              type = types.bool;
              default = false;
            };
          };
        });
        default = [];
      };
    };
  };
}
