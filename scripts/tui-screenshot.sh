#!/usr/bin/env bash
# Renders docs/tui.png: a real terminal UI session at 80x24. It starts a
# scratch server, writes a repository with an issue, a comment, a lease and
# a patch through the verbs, opens `ssh -tt` in tmux, goes to the issue,
# captures the pane with its colours, turns that into HTML (ansi2html, from
# PyPI) and photographs it with headless Chromium.
#
#   bash scripts/tui-screenshot.sh [BIN_DIR]     # BIN_DIR: target/debug
#
# Needs tmux, chromium, python3 with ansi2html (pip install ansi2html).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-${CARGO_TARGET_DIR:-$root/target}/debug}"
work="$(mktemp -d)"
server_pid=""
cleanup() {
    tmux -S "$work/tmux.sock" kill-server 2>/dev/null || true
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ssh-keygen -q -t ed25519 -N '' -C ada -f "$work/ada"
ssh-keygen -q -t ed25519 -N '' -C bob -f "$work/bob"
mkdir -p "$work/state"
{
    echo "environment=\"GIT_COLLAB_ROLE=admin\",name=\"ada\" $(cat "$work/ada.pub")"
    echo "name=\"bob\" $(cat "$work/bob.pub")"
} >"$work/state/authorized_keys"
port=$((20000 + RANDOM % 20000))
"$bin/git-collab-server" --state-dir "$work/state" --ssh-listen "127.0.0.1:$port" \
    --http-listen 127.0.0.1:0 serve --init >"$work/server.log" 2>&1 &
server_pid=$!
ssh_opts=(-F /dev/null -p "$port" -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no
    -o BatchMode=yes -o IdentitiesOnly=yes -o LogLevel=ERROR)
as() { local who=$1; shift; ssh "${ssh_opts[@]}" -i "$work/$who" git@127.0.0.1 "$@"; }
for _ in $(seq 100); do as ada collab-whoami >/dev/null 2>&1 && break; sleep 0.2; done

as ada "collab-repo create 'team/app'" >/dev/null
as ada "collab-repo describe 'team/app' 'The app: a demo of git-collab'" >/dev/null
as ada "collab-repo create 'team/lib'" >/dev/null
id=$(as ada "collab-issue open 'team/app' --title 'Crash on start when the config is empty' --body 'Run it with an empty config.toml: it panics in load().' --label bug --label p1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["issue"])')
as ada "collab-issue open 'team/app' --title 'Document the TUI keys' --label docs" >/dev/null
as ada "collab-issue open 'team/lib' --title 'Parser rejects tabs'" >/dev/null
as bob "collab-issue comment 'team/app' '$id' --body 'I can reproduce it; load() unwraps the [server] table.'" >/dev/null
as bob "collab-lease acquire 'team/app' '$id' --ttl 7200 --note 'fixing load()'" >/dev/null

tmux -S "$work/tmux.sock" -f /dev/null new-session -d -s shot -x 80 -y 24 \
    "TERM=xterm-256color ssh ${ssh_opts[*]} -i $work/ada -tt git@127.0.0.1; sleep 600"
wait_for() {
    for _ in $(seq 200); do
        tmux -S "$work/tmux.sock" capture-pane -p -t shot | grep -q "$1" && return 0
        sleep 0.1
    done
    echo "tui-screenshot: the screen never showed $1" >&2
    tmux -S "$work/tmux.sock" capture-pane -p -t shot >&2
    exit 1
}
wait_for "team/app"
tmux -S "$work/tmux.sock" send-keys -t shot Enter
wait_for "Crash on start"
tmux -S "$work/tmux.sock" send-keys -t shot j Enter
wait_for "lease: held by"
tmux -S "$work/tmux.sock" capture-pane -p -e -t shot >"$work/screen.ansi"

python3 - "$work/screen.ansi" "$work/screen.html" <<'EOF'
import sys
from ansi2html import Ansi2HTMLConverter
text = open(sys.argv[1], encoding="utf-8").read()
html = Ansi2HTMLConverter(dark_bg=True, scheme="xterm", line_wrap=False).convert(text)
style = "<style>body{margin:0;padding:8px;background:#000}pre,.ansi2html-content{font:15px/18px 'DejaVu Sans Mono',monospace}</style>"
open(sys.argv[2], "w", encoding="utf-8").write(html.replace("</head>", style + "</head>"))
EOF
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=760,460 \
    --screenshot="$root/docs/tui.png" "file://$work/screen.html" >/dev/null 2>&1
echo "wrote docs/tui.png"
