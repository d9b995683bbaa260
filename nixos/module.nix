# NixOS module for git-collab-server: services.git-collab.
#
# Owns the service's options, the rendered configuration file
# /etc/git-collab/server.toml, the hardened systemd unit, the service
# account and the firewall ports, and with `database.type = "postgres"` the
# connection to PostgreSQL (optionally a local server it sets up). Secrets
# never enter the Nix store: they come through `environmentFile`
# (GIT_COLLAB_* variables, or *_FILE paths) or systemd credentials.
# See docs/deploy-nixos.md for a complete example.
{
  config,
  lib,
  pkgs,
  ...
}: let
  inherit (lib) mkOption types;

  cfg = config.services.git-collab;
  settingsFormat = pkgs.formats.toml {};

  defaultUser = "git-collab";
  configPath = "/etc/git-collab/server.toml";
  # Declarative authorizedKeys are installed here at every start. The runtime
  # directory disappears when the unit stops, so a key removed from the
  # configuration can never linger in a stale file.
  runtimeAuthorizedKeys = "/run/git-collab/authorized_keys";

  # "0.0.0.0:2222", "[::]:2222", "127.0.0.1:8080" -> { host; port; }
  parseListen = listen: let
    m = builtins.match "(.*):([0-9]+)" listen;
  in {
    host = lib.removeSuffix "]" (lib.removePrefix "[" (builtins.elemAt m 0));
    port = lib.toInt (builtins.elemAt m 1);
  };
  listenType = types.strMatching "(.*):([0-9]+)";
  isLoopback = host: host == "localhost" || host == "::1" || lib.hasPrefix "127." host;

  listeners = map parseListen [cfg.settings.ssh.listen cfg.settings.http.listen];
  needsPrivilegedPort = lib.any (l: l.port < 1024) listeners;
  firewallPorts = lib.unique (map (l: l.port) (lib.filter (l: !(isLoopback l.host)) listeners));

  isUnder = dir: path: path == dir || lib.hasPrefix "${lib.removeSuffix "/" dir}/" path;
  stateDirIsManaged = isUnder "/var/lib" cfg.stateDir && cfg.stateDir != "/var/lib";
  # Paths the server writes that StateDirectory= does not already cover
  # (SQLite writes its journal beside collab_db, hence the directory).
  collabDbDir = lib.mapNullable dirOf cfg.settings.collab_db;
  collabDbDirIsCovered = collabDbDir == null || lib.any (dir: isUnder dir collabDbDir) [cfg.stateDir cfg.settings.repos_dir];
  extraWritablePaths =
    lib.optional (!stateDirIsManaged) cfg.stateDir
    ++ lib.optional (!(isUnder cfg.stateDir cfg.settings.repos_dir)) cfg.settings.repos_dir
    ++ lib.optional (!collabDbDirIsCovered) collabDbDir;

  # TOML has no null: an unset optional key means "the server's own default".
  renderedSettings = lib.filterAttrsRecursive (_: v: v != null) cfg.settings;
  configFile = settingsFormat.generate "git-collab-server.toml" renderedSettings;

  authorizedKeysFile =
    pkgs.writeText "git-collab-authorized-keys"
    (lib.concatMapStrings (key: "${key}\n") cfg.authorizedKeys);

  # The collab database in PostgreSQL (issue #17). The server reads its URL
  # from GIT_COLLAB_COLLAB_DB, or from the file GIT_COLLAB_COLLAB_DB_FILE
  # names; both override `collab_db` in server.toml.
  db = cfg.database;
  usePostgres = db.type == "postgres";
  dbHostIsSocket = lib.hasPrefix "/" db.host;
  # The option types keep these free of characters a URL (or systemd's %
  # specifiers) would need escaped, so without a password the URL is plain.
  dbUrlNoPassword = "postgres:///${db.name}?host=${db.host}&user=${db.user}&port=${toString db.port}";
  # With a password the URL is built at start, from the credential, by
  # dbUrlScript; only the parts around the password are in the store. A socket
  # directory is written as a percent-encoded host, an IPv6 address in [].
  dbUrlHost =
    if dbHostIsSocket
    then lib.escapeURL db.host
    else if lib.hasInfix ":" db.host
    then "[${db.host}]"
    else db.host;
  dbUrlScript = pkgs.writeShellScript "git-collab-collab-db-url" ''
    # Writes the collab database URL, password percent-encoded, to "$1"
    # (mode 0600), from the credential collab-db-password (LoadCredential=).
    set -euo pipefail
    export LC_ALL=C
    pw=$(<"$CREDENTIALS_DIRECTORY/collab-db-password")
    enc=
    for ((i = 0; i < ''${#pw}; i++)); do
      c=''${pw:i:1}
      case $c in
        [A-Za-z0-9._~-]) enc+=$c ;;
        *) printf -v c '%%%02X' "'$c"; enc+=$c ;;
      esac
    done
    umask 077
    printf '%s' ${lib.escapeShellArg "postgres://${db.user}:"}"$enc"${lib.escapeShellArg "@${dbUrlHost}:${toString db.port}/${db.name}"} >"$1"
  '';
  # What a unit needs to reach the database; runtimeDir is the unit's own
  # RuntimeDirectory, where the URL with the password is written.
  dbUsesPassword = usePostgres && db.passwordFile != null;
  dbEnvironment = runtimeDir:
    lib.optionalAttrs usePostgres (
      if dbUsesPassword
      then {GIT_COLLAB_COLLAB_DB_FILE = "${runtimeDir}/collab-db-url";}
      else {GIT_COLLAB_COLLAB_DB = dbUrlNoPassword;}
    );
  dbCredential = lib.optionalAttrs dbUsesPassword {
    LoadCredential = ["collab-db-password:${db.passwordFile}"];
  };
  dbUrlCommand = runtimeDir: lib.optional dbUsesPassword "${dbUrlScript} ${runtimeDir}/collab-db-url";
  # Ordering only: without createLocally the server may be elsewhere. Newer
  # nixpkgs creates the ensured databases in postgresql-setup.service,
  # which postgresql.target waits for; older ones in postgresql.service.
  dbAfter = lib.optionals usePostgres ["postgresql.service" "postgresql.target"];
  # A database reached over TCP needs the network, which the backup unit
  # otherwise does without.
  dbNeedsNetwork = usePostgres && !dbHostIsSocket;
  # A path literal is copied to the store; a string must be absolute.
  absolutePath = types.coercedTo types.path (p: "${p}") (types.strMatching "/.+");
  isOutsideStore = path: lib.hasPrefix "/" path && !(lib.hasPrefix "${builtins.storeDir}/" path);
  dbIdentifier = types.strMatching "[A-Za-z0-9_][A-Za-z0-9_.-]*";

  # Run before the server starts, in this order.
  serverStartPre =
    lib.optional (cfg.authorizedKeys != [])
    "${pkgs.coreutils}/bin/install -m 0600 ${authorizedKeysFile} ${cfg.settings.ssh.authorized_keys}"
    ++ dbUrlCommand "/run/git-collab";

  # systemd expands % specifiers and $VARIABLES even inside quotes.
  escapeExecArg = arg: lib.replaceStrings ["%" "$"] ["%%" "$$"] (lib.escapeShellArg arg);
  serverExe = lib.getExe' cfg.package "git-collab-server";
in {
  options.services.git-collab = {
    enable = lib.mkEnableOption "git-collab-server, the self-hosted SSH-first code forge";

    package = lib.mkPackageOption pkgs "git-collab" {};

    stateDir = mkOption {
      type = types.strMatching "/.+";
      default = "/var/lib/git-collab";
      description = ''
        Directory holding repositories, collab.db, the SSH host key,
        authorized_keys and release files. Under /var/lib it is created with
        systemd's StateDirectory=; elsewhere with a tmpfiles rule.
      '';
    };

    user = mkOption {
      type = types.str;
      default = defaultUser;
      description = "User account the server runs as (created when left at the default).";
    };

    group = mkOption {
      type = types.str;
      default = defaultUser;
      description = "Group the server runs as (created when left at the default).";
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Open the TCP ports of `settings.ssh.listen` and `settings.http.listen`
        in the firewall (listeners bound to a loopback address are skipped).
      '';
    };

    authorizedKeys = mkOption {
      type = types.listOf types.singleLineStr;
      default = [];
      example = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBcj4k9wDn1l3jG4Ew5Ws8vgM4Yh2b1H9XoGSQqzM1Ko alice@laptop"];
      description = ''
        OpenSSH public key lines admitted to the server (not admins: use
        `settings.initial_admin_keys` for those). Public keys are not secret,
        so they are written to the Nix store and installed at every start as
        ${runtimeAuthorizedKeys}, which `settings.ssh.authorized_keys` then
        points to: the admitted set is exactly this list. When the list is
        empty the server keeps its own mutable file,
        `{stateDir}/authorized_keys`.
      '';
    };

    environmentFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "/run/secrets/git-collab.env";
      description = ''
        Absolute path of an environment file (systemd EnvironmentFile=) read
        at start, for secrets and per-host overrides that must stay out of
        the Nix store, e.g.
        `GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE=/run/secrets/git-collab-admins`.
        Environment variables override the configuration file.
      '';
    };

    database = {
      type = mkOption {
        type = types.enum ["sqlite" "postgres"];
        default = "sqlite";
        description = ''
          Where the server keeps its collab database. `sqlite`: the file
          `settings.collab_db` (default `{repos_dir}/collab.db`). `postgres`:
          the PostgreSQL database described by the options below, passed to
          the server as GIT_COLLAB_COLLAB_DB (or GIT_COLLAB_COLLAB_DB_FILE
          with `passwordFile`); leave `settings.collab_db` unset then.
        '';
      };
      createLocally = mkOption {
        type = types.bool;
        default = false;
        description = ''
          Run PostgreSQL on this host (`services.postgresql`) and create the
          database `name` owned by the role `user`. The server connects over
          the unix socket in `host` with peer authentication, so `user` must
          be the service's user (`services.git-collab.user`), `name` must
          equal `user`, and no password is used.
        '';
      };
      name = mkOption {
        type = dbIdentifier;
        default = "git-collab";
        description = "Database name.";
      };
      user = mkOption {
        type = dbIdentifier;
        default = "git-collab";
        description = "Database role the server connects as.";
      };
      host = mkOption {
        type = types.strMatching "[A-Za-z0-9_./:-]+";
        default = "/run/postgresql";
        example = "db.example.org";
        description = ''
          Database host: a host name or IP address for TCP, or a directory
          (a path starting with `/`) holding the server's unix socket.
        '';
      };
      port = mkOption {
        type = types.port;
        default = 5432;
        description = "Database port (with a socket directory, it names the socket file, `.s.PGSQL.PORT`).";
      };
      passwordFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/run/secrets/git-collab-db-password";
        description = ''
          Absolute path, outside the Nix store, of a file holding only the
          database password (a trailing newline is ignored). systemd reads it
          as root (LoadCredential=), so it may be readable by root alone; at
          every start the unit writes the full URL, password percent-encoded,
          to a mode 0600 file in its runtime directory and points the server
          at it with GIT_COLLAB_COLLAB_DB_FILE. The password never enters
          the store. Not for `createLocally` (peer authentication).
        '';
      };
    };

    backup = {
      enable = lib.mkEnableOption ''
        scheduled online backups (`git-collab-server backup`) while the server
        runs: a timer starts a oneshot service that writes a new timestamped
        backup under `directory` and then keeps only the `keep` newest
      '';
      startAt = mkOption {
        type = types.either types.str (types.listOf types.str);
        default = "daily";
        example = "*-*-* 03:15:00";
        description = "When to back up, as systemd OnCalendar expressions (missed runs catch up at boot).";
      };
      directory = mkOption {
        type = types.strMatching "/.+";
        default = "/var/backup/git-collab";
        description = ''
          Directory that holds the backups, one subdirectory per run
          (`20261203T031500Z`). It must lie outside `stateDir`. Restore one
          with `git-collab-server restore --from DIR --key SHA256:...` (the
          fingerprint each backup run logs) into an empty state directory
          (docs/operations.md).
        '';
      };
      keep = mkOption {
        type = types.ints.positive;
        default = 7;
        description = "How many of the newest backups to keep; older ones are removed after a successful run.";
      };
      postgresqlPackage = mkOption {
        type = types.package;
        default =
          if db.createLocally
          then config.services.postgresql.package
          else pkgs.postgresql;
        defaultText = lib.literalExpression ''if database.createLocally then config.services.postgresql.package else pkgs.postgresql'';
        description = ''
          With `database.type = "postgres"`: the PostgreSQL whose `pg_dump`
          the backup runs (on one snapshot, before the repositories). Its
          major version must be the database server's or newer.
        '';
      };
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [];
      example = ["--log-level" "debug"];
      description = "Extra command-line arguments for `git-collab-server serve`.";
    };

    settings = mkOption {
      default = {};
      description = ''
        Configuration rendered to ${configPath} (see SPEC §3.1). Keys not
        declared here are passed through unchanged; the server rejects keys
        it does not know.
      '';
      type = types.submodule {
        freeformType = settingsFormat.type;
        options = {
          state_dir = mkOption {
            type = types.str;
            default = cfg.stateDir;
            defaultText = lib.literalExpression "config.services.git-collab.stateDir";
            description = "Follows `services.git-collab.stateDir`; set that instead.";
          };
          repos_dir = mkOption {
            type = types.str;
            default = "${cfg.stateDir}/repos";
            defaultText = lib.literalExpression ''"''${config.services.git-collab.stateDir}/repos"'';
            description = "Directory of the bare repositories.";
          };
          collab_db = mkOption {
            type = types.nullOr types.str;
            default = null;
            description = ''
              SQLite database of server state; null means `{repos_dir}/collab.db`.
              For PostgreSQL use `services.git-collab.database` instead.
            '';
          };
          site_title = mkOption {
            type = types.str;
            default = "git-collab";
            description = "Title shown by the web UI.";
          };
          max_release_size = mkOption {
            type = types.ints.positive;
            default = 100 * 1024 * 1024;
            description = "Largest release file accepted, in bytes.";
          };
          initial_admin_keys = mkOption {
            type = types.listOf types.singleLineStr;
            default = [];
            description = ''
              OpenSSH public key lines admitted and granted admin. To keep
              them out of the store, set
              `GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE` in `environmentFile`.
            '';
          };
          ssh = {
            listen = mkOption {
              type = listenType;
              default = "0.0.0.0:2222";
              description = "SSH listen address, `host:port`. A port below 1024 grants CAP_NET_BIND_SERVICE.";
            };
            host_key = mkOption {
              type = types.nullOr types.str;
              default = null;
              description = "SSH host key; null means `{state_dir}/ssh_host_ed25519_key`, generated on first start.";
            };
            authorized_keys = mkOption {
              type = types.nullOr types.str;
              default = null;
              defaultText = lib.literalMD "`${runtimeAuthorizedKeys}` when `authorizedKeys` is set, else null";
              description = "authorized_keys file; null means `{state_dir}/authorized_keys`.";
            };
            trusted_user_ca_keys = mkOption {
              type = types.nullOr absolutePath;
              default = null;
              example = lib.literalExpression ''pkgs.writeText "user-ca.pub" "ssh-ed25519 AAAA... fleet-ca"'';
              description = ''
                File of CA public keys (OpenSSH `TrustedUserCAKeys`) whose user
                certificates log in as their principal. Public keys are not
                secret, so a store path is fine; the server re-reads the file
                when it changes.
              '';
            };
            revoked_keys = mkOption {
              type = types.nullOr absolutePath;
              default = null;
              example = "/var/lib/git-collab/revoked.krl";
              description = ''
                Revoked keys and certificates: a KRL (`ssh-keygen -k`) or a list
                of keys. Re-read when it changes, so keep it at a mutable path
                (not the store) to revoke without a rebuild. A file that cannot
                be read refuses every key.
              '';
            };
            host_certificate = mkOption {
              type = types.nullOr absolutePath;
              default = null;
              description = ''
                Certificate of the host key (`ssh-keygen -s HOST_CA -h`), for
                clients with `@cert-authority` in known_hosts. Not secret.
              '';
            };
          };
          http.listen = mkOption {
            type = listenType;
            default = "0.0.0.0:8080";
            description = "HTTP listen address, `host:port`.";
          };
          log = {
            level = mkOption {
              type = types.enum ["trace" "debug" "info" "warn" "error"];
              default = "info";
              description = "Log level.";
            };
            format = mkOption {
              type = types.enum ["text" "json"];
              default = "text";
              description = "Log format.";
            };
          };
        };
      };
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.environmentFile == null || (lib.hasPrefix "/" cfg.environmentFile && !(lib.hasPrefix "${builtins.storeDir}/" cfg.environmentFile));
        message = "services.git-collab.environmentFile must be an absolute path outside the Nix store (it holds secrets), got ${toString cfg.environmentFile}.";
      }
      {
        assertion = cfg.settings.state_dir == cfg.stateDir;
        message = "services.git-collab.settings.state_dir must equal services.git-collab.stateDir (the unit's state directory); set stateDir instead.";
      }
      {
        assertion = !cfg.backup.enable || !(isUnder cfg.stateDir cfg.backup.directory || isUnder cfg.settings.repos_dir cfg.backup.directory);
        message = "services.git-collab.backup.directory must lie outside stateDir and repos_dir (a backup inside them would be copied into the next one), got ${cfg.backup.directory}.";
      }
      {
        assertion = lib.all (l: l.port >= 1 && l.port <= 65535) listeners;
        message = "services.git-collab.settings: ssh.listen and http.listen need a port between 1 and 65535.";
      }
      {
        assertion = usePostgres || (!db.createLocally && db.passwordFile == null);
        message = "services.git-collab.database.createLocally and database.passwordFile apply to database.type = \"postgres\" only.";
      }
      {
        assertion = !usePostgres || cfg.settings.collab_db == null;
        message = "services.git-collab.settings.collab_db must stay unset with database.type = \"postgres\" (the database options set the server's collab_db).";
      }
      {
        assertion = db.passwordFile == null || isOutsideStore db.passwordFile;
        message = "services.git-collab.database.passwordFile must be an absolute path outside the Nix store (it holds a secret), got ${toString db.passwordFile}.";
      }
      {
        assertion = !db.createLocally || dbHostIsSocket;
        message = "services.git-collab.database.createLocally connects over the local unix socket: database.host must be a socket directory such as /run/postgresql, got ${db.host}.";
      }
      {
        assertion = !db.createLocally || db.passwordFile == null;
        message = "services.git-collab.database.createLocally uses peer authentication, which needs no password: unset database.passwordFile.";
      }
      {
        assertion = !db.createLocally || db.user == cfg.user;
        message = "services.git-collab.database.createLocally uses peer authentication: database.user (${db.user}) must equal services.git-collab.user (${cfg.user}).";
      }
      {
        assertion = !db.createLocally || db.name == db.user;
        message = "services.git-collab.database.createLocally makes database.user the owner of a database of the same name (ensureDBOwnership): database.name (${db.name}) must equal database.user (${db.user}).";
      }
    ];

    services.postgresql = lib.mkIf db.createLocally {
      enable = true;
      ensureDatabases = [db.name];
      ensureUsers = [
        {
          name = db.user;
          ensureDBOwnership = true;
        }
      ];
    };

    services.git-collab.settings.ssh.authorized_keys =
      lib.mkIf (cfg.authorizedKeys != []) (lib.mkDefault runtimeAuthorizedKeys);

    environment.etc."git-collab/server.toml".source = configFile;
    # For `sudo -u git-collab git-collab-server repo create NAME` on the host.
    environment.systemPackages = [cfg.package];

    users.users = lib.mkIf (cfg.user == defaultUser) {
      ${defaultUser} = {
        isSystemUser = true;
        inherit (cfg) group;
        home = cfg.stateDir;
        description = "git-collab forge server";
      };
    };
    users.groups = lib.mkIf (cfg.group == defaultUser) {${defaultUser} = {};};

    systemd.tmpfiles.settings."10-git-collab" = lib.mkIf (!stateDirIsManaged || cfg.backup.enable) (
      lib.optionalAttrs (!stateDirIsManaged) {
        ${cfg.stateDir}.d = {
          inherit (cfg) user group;
          mode = "0750";
        };
      }
      // lib.optionalAttrs cfg.backup.enable {
        ${cfg.backup.directory}.d = {
          inherit (cfg) user group;
          mode = "0750";
        };
      }
    );

    networking.firewall.allowedTCPPorts = lib.mkIf cfg.openFirewall firewallPorts;

    # The backup runs as the server's user with the server's configuration,
    # beside the running server (it takes a consistent snapshot online).
    # It writes lock files in the repositories and opens collab.db, hence
    # write access to the server's directories as well as its own.
    systemd.services.git-collab-backup = lib.mkIf cfg.backup.enable {
      description = "git-collab online backup";
      after = ["git-collab.service"] ++ dbAfter;
      environment = dbEnvironment "/run/git-collab-backup";
      inherit (cfg.backup) startAt;
      # pg_dump dumps a PostgreSQL collab database into the backup.
      path = [pkgs.git pkgs.coreutils] ++ lib.optional usePostgres cfg.backup.postgresqlPackage;
      script = ''
        exec ${serverExe} --config ${configPath} backup \
          --to ${lib.escapeShellArg cfg.backup.directory}/"$(date -u +%Y%m%dT%H%M%SZ)" \
          --keep ${toString cfg.backup.keep} --json
      '';
      serviceConfig =
        {
          Type = "oneshot";
          User = cfg.user;
          Group = cfg.group;
          UMask = "0077";
          Nice = 10;
          IOSchedulingClass = "idle";
          ProtectSystem = "strict";
          ProtectHome = true;
          PrivateTmp = true;
          PrivateDevices = true;
          PrivateNetwork = true;
          NoNewPrivileges = true;
          ProtectKernelTunables = true;
          ProtectKernelModules = true;
          ProtectKernelLogs = true;
          ProtectControlGroups = true;
          ProtectClock = true;
          ProtectHostname = true;
          RestrictAddressFamilies = ["AF_UNIX"];
          RestrictNamespaces = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          SystemCallArchitectures = "native";
          SystemCallFilter = ["@system-service" "~@privileged" "~@resources"];
          CapabilityBoundingSet = [""];
          ReadWritePaths = lib.unique ([cfg.stateDir cfg.backup.directory] ++ extraWritablePaths);
        }
        // lib.optionalAttrs (cfg.environmentFile != null) {
          EnvironmentFile = cfg.environmentFile;
        }
        // lib.optionalAttrs dbNeedsNetwork {
          PrivateNetwork = false;
          RestrictAddressFamilies = ["AF_UNIX" "AF_INET" "AF_INET6"];
        }
        // lib.optionalAttrs dbUsesPassword (dbCredential
          // {
            RuntimeDirectory = "git-collab-backup";
            RuntimeDirectoryMode = "0700";
            ExecStartPre = dbUrlCommand "/run/git-collab-backup";
          });
    };
    systemd.timers.git-collab-backup = lib.mkIf cfg.backup.enable {
      timerConfig.Persistent = true;
    };

    systemd.services.git-collab = {
      description = "git-collab forge server";
      wantedBy = ["multi-user.target"];
      after = ["network.target"] ++ dbAfter;
      requires = lib.optional db.createLocally "postgresql.service";
      environment = dbEnvironment "/run/git-collab";
      # The server spawns git upload-pack / receive-pack.
      path = [pkgs.git];
      restartTriggers =
        [configFile]
        ++ lib.optional (cfg.authorizedKeys != []) authorizedKeysFile
        ++ lib.optional dbUsesPassword dbUrlScript;

      serviceConfig =
        {
          Type = "exec";
          User = cfg.user;
          Group = cfg.group;
          ExecStart = lib.concatStringsSep " " ([serverExe "--config" configPath "serve"] ++ map escapeExecArg cfg.extraArgs);
          Restart = "on-failure";
          RestartSec = "5s";
          WorkingDirectory = cfg.stateDir;
          RuntimeDirectory = "git-collab";
          RuntimeDirectoryMode = "0750";
          UMask = "0077";

          # Hardening: the server needs its state directory, outbound nothing,
          # and inbound TCP only.
          ProtectSystem = "strict";
          ProtectHome = true;
          PrivateTmp = true;
          PrivateDevices = true;
          PrivateMounts = true;
          # A user namespace would drop the capability to bind a low port.
          PrivateUsers = !needsPrivilegedPort;
          NoNewPrivileges = true;
          ProtectKernelTunables = true;
          ProtectKernelModules = true;
          ProtectKernelLogs = true;
          ProtectControlGroups = true;
          ProtectClock = true;
          ProtectHostname = true;
          ProtectProc = "invisible";
          ProcSubset = "pid";
          RestrictAddressFamilies = ["AF_INET" "AF_INET6" "AF_UNIX"];
          RestrictNamespaces = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          RemoveIPC = true;
          DevicePolicy = "closed";
          SystemCallArchitectures = "native";
          SystemCallFilter = ["@system-service" "~@privileged" "~@resources"];
          SystemCallErrorNumber = "EPERM";
          CapabilityBoundingSet =
            if needsPrivilegedPort
            then ["CAP_NET_BIND_SERVICE"]
            else [""];
        }
        // lib.optionalAttrs needsPrivilegedPort {
          AmbientCapabilities = ["CAP_NET_BIND_SERVICE"];
        }
        // lib.optionalAttrs stateDirIsManaged {
          StateDirectory = lib.removePrefix "/var/lib/" cfg.stateDir;
          StateDirectoryMode = "0750";
        }
        // lib.optionalAttrs (extraWritablePaths != []) {
          ReadWritePaths = extraWritablePaths;
        }
        // lib.optionalAttrs (cfg.environmentFile != null) {
          EnvironmentFile = cfg.environmentFile;
        }
        // lib.optionalAttrs (serverStartPre != []) {
          ExecStartPre =
            if lib.length serverStartPre == 1
            then lib.head serverStartPre
            else serverStartPre;
        }
        // dbCredential;
    };
  };
}
