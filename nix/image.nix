# OCI image of git-collab-server built with dockerTools: the same contract as
# docker/Dockerfile (entrypoint, command, ports, volume, non-root user, git,
# health check, /backups), so either image can be swapped for the other.
#   nix build .#image && docker load < result
{
  dockerTools,
  fakeNss,
  gitMinimal,
  git-collab,
}: let
  # The server runs only git's transport and maintenance builtins
  # (upload-pack, receive-pack, pack-objects, index-pack, repack,
  # commit-graph, fsck): the minimal git, without perl, python, docs or
  # remote helpers, is all it needs. The package wraps the server with git
  # on PATH, so it is rebuilt against gitMinimal for the image.
  server = git-collab.override {git = gitMinimal;};
  uid = "10001";
  stateDir = "/var/lib/git-collab";
  # git and the server look the running user up by uid.
  nss = fakeNss.override {
    extraPasswdLines = ["git-collab:x:${uid}:${uid}:git-collab forge:${stateDir}:/bin/false"];
    extraGroupLines = ["git-collab:x:${uid}:"];
  };
in
  dockerTools.buildLayeredImage {
    name = "git-collab";
    tag = server.version;
    # binSh: /bin/sh, which runs the server's git hooks (`#!/bin/sh`).
    contents = [server gitMinimal nss dockerTools.binSh];
    # The volume mount point must belong to the server user, and git wants a
    # writable /tmp.
    fakeRootCommands = ''
      mkdir -p .${stateDir} tmp backups
      chown ${uid}:${uid} .${stateDir} backups
      chmod 0750 .${stateDir} backups
      chmod 1777 tmp
    '';
    config = {
      Entrypoint = ["git-collab-server"];
      Cmd = ["serve"];
      User = "${uid}:${uid}";
      WorkingDir = stateDir;
      Env = ["PATH=/bin" "HOME=${stateDir}"];
      ExposedPorts = {
        "2222/tcp" = {};
        "8080/tcp" = {};
      };
      Volumes = {${stateDir} = {};};
      StopSignal = "SIGTERM";
      # Durations in nanoseconds, as in the image config JSON.
      Healthcheck = {
        Test = ["CMD" "git-collab-server" "healthcheck"];
        Interval = 30000000000;
        Timeout = 5000000000;
        StartPeriod = 10000000000;
        Retries = 3;
      };
      Labels = {
        "org.opencontainers.image.title" = "git-collab";
        "org.opencontainers.image.description" = server.meta.description;
        "org.opencontainers.image.version" = server.version;
      };
    };
  }
