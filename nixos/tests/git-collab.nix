# NixOS VM test of services.git-collab, end to end: boot the module, admit a
# freshly generated client key through environmentFile, push a repository
# over SSH, open an issue with the git-collab CLI, take a lease on it, restart
# the unit and find the repository, the issue and the lease still there. A
# second server binds ports below 1024 to check the capability handling.
#
# Run: nix build .#checks.x86_64-linux.vm-test   (needs the flake overlay for
# pkgs.git-collab, which flake.nix provides).
{lib, ...}: let
  # Public half of a throwaway key: never used to log in, it only shows that
  # authorizedKeys reaches the server.
  observerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFGcO/3H2J4Iz3IIZ+Q83UCxEhu5/ic2LhsNeb/62hMF observer@example";
in {
  name = "git-collab";

  nodes = {
    server = {pkgs, ...}: {
      imports = [../module.nix];
      services.git-collab = {
        enable = true;
        openFirewall = true;
        authorizedKeys = [observerKey];
        environmentFile = "/run/git-collab-secrets/env";
        settings.site_title = "VM forge";
      };
      # The test script provisions the secrets before the first start, as
      # agenix or sops-nix would, then starts the unit itself.
      systemd.services.git-collab.wantedBy = lib.mkForce [];
      environment.systemPackages = [pkgs.curl];
    };

    lowport = {
      imports = [../module.nix];
      services.git-collab = {
        enable = true;
        openFirewall = true;
        authorizedKeys = [observerKey];
        settings.ssh.listen = "0.0.0.0:22";
        settings.http.listen = "0.0.0.0:80";
      };
    };

    client = {pkgs, ...}: {
      environment.systemPackages = [pkgs.git pkgs.git-collab pkgs.openssh pkgs.curl];
    };
  };

  testScript = ''
    import json

    start_all()
    server.wait_for_unit("multi-user.target")
    client.wait_for_unit("multi-user.target")

    with subtest("the unit is rendered from the module and hardened"):
        server.succeed("grep -q 'VM forge' /etc/git-collab/server.toml")
        exposure = server.succeed("systemd-analyze security git-collab.service | tail -n 1")
        print(exposure)
        assert "UNSAFE" not in exposure and "EXPOSED" not in exposure, exposure

    with subtest("a generated client key is admitted as admin through environmentFile"):
        client.succeed(
            "install -d -m 0700 /root/.ssh",
            'ssh-keygen -q -t ed25519 -N "" -C agent@client -f /root/.ssh/id_ed25519',
            "printf 'Host server lowport\\n  User git\\n  IdentityFile /root/.ssh/id_ed25519\\n"
            + "  StrictHostKeyChecking accept-new\\nHost server\\n  Port 2222\\n' > /root/.ssh/config",
        )
        pubkey = client.succeed("cat /root/.ssh/id_ed25519.pub").strip()
        server.succeed(
            "install -d -m 0750 -g git-collab /run/git-collab-secrets",
            f"echo '{pubkey}' > /run/git-collab-secrets/admin_keys",
            "chgrp git-collab /run/git-collab-secrets/admin_keys",
            "chmod 0440 /run/git-collab-secrets/admin_keys",
            "echo GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE=/run/git-collab-secrets/admin_keys"
            + " > /run/git-collab-secrets/env",
            "chmod 0400 /run/git-collab-secrets/env",
        )
        server.succeed("systemctl start git-collab.service")
        server.wait_for_unit("git-collab.service")
        server.wait_for_open_port(2222)
        server.wait_for_open_port(8080)
        server.succeed("grep -qxF '${observerKey}' /run/git-collab/authorized_keys")
        server.succeed('test "$(stat -c %U /var/lib/git-collab)" = git-collab')
        # Only the configured ports are opened, and the service holds no capability.
        client.succeed("curl -sf http://server:8080/readyz")
        caps = server.succeed(
            "grep CapEff /proc/$(systemctl show -P MainPID git-collab.service)/status"
        )
        assert caps.split()[1] == "0000000000000000", caps

    with subtest("create a repository on the host and push to it over ssh"):
        server.succeed(
            "runuser -u git-collab -- git-collab-server --config /etc/git-collab/server.toml"
            + " repo create demo.git"
        )
        client.succeed(
            "git config --global user.name Agent",
            "git config --global user.email agent@client",
            "git config --global init.defaultBranch main",
            "git init /root/demo",
            "echo hello > /root/demo/README.md",
            "git -C /root/demo add README.md",
            "git -C /root/demo commit -m 'First commit'",
            "git -C /root/demo remote add origin server:demo.git",
            "git -C /root/demo push origin main",
        )

    with subtest("open an issue with git-collab and publish it"):
        client.succeed("git -C /root/demo config collab.signingKey /root/.ssh/id_ed25519")
        client.succeed(
            "cd /root/demo && git-collab issue open --title 'Lease me' --body 'Opened by the VM test'"
        )
        issue = client.succeed(
            "git -C /root/demo for-each-ref --format='%(refname:lstrip=3)' refs/collab/issues/"
        ).strip()
        assert len(issue) == 40, f"expected exactly one issue id, got {issue!r}"
        client.succeed("git -C /root/demo push origin 'refs/collab/*:refs/collab/*'")

    with subtest("acquire a lease over ssh"):
        lease = json.loads(
            client.succeed(f"ssh server \"collab-lease acquire 'demo.git' '{issue}' --ttl 300\"")
        )
        assert lease["status"] == "acquired", lease
        assert lease["issue"] == issue, lease
        holder, token = lease["holder"], lease["token"]

    with subtest("after a restart the repository, the issue and the lease are still there"):
        server.succeed("systemctl restart git-collab.service")
        server.wait_for_unit("git-collab.service")
        server.wait_for_open_port(2222)
        # StrictHostKeyChecking also proves the host key survived the restart.
        listed = json.loads(client.succeed("ssh server \"collab-lease list 'demo.git'\""))
        kept = [(entry["issue"], entry["holder"], entry["token"]) for entry in listed["leases"]]
        assert kept == [(issue, holder, token)], listed
        refs = client.succeed("git ls-remote server:demo.git")
        assert "refs/heads/main" in refs, refs
        assert f"refs/collab/issues/{issue}" in refs, refs
        client.succeed("git clone server:demo.git /root/demo-clone")
        client.succeed("grep -qx hello /root/demo-clone/README.md")

    with subtest("ports below 1024 bind with CAP_NET_BIND_SERVICE and nothing else"):
        lowport.wait_for_unit("git-collab.service")
        lowport.wait_for_open_port(22)
        lowport.wait_for_open_port(80)
        client.succeed("ssh-keyscan -p 22 lowport | grep -q ssh-ed25519")
        client.succeed("curl -sf http://lowport/livez")
        caps = lowport.succeed(
            "grep CapEff /proc/$(systemctl show -P MainPID git-collab.service)/status"
        )
        assert caps.split()[1] == "0000000000000400", caps
  '';
}
