#!/usr/bin/env python3
"""The file-level module import graph of each crate, and its cycles.

For every crate under crates/*/src, each crate root (lib.rs, main.rs,
bin/*.rs) and the module files it declares become nodes; a file has an
arrow to the file of every module it names:

- `mod foo;` declarations (a folder module `foo/mod.rs` is the file of `foo`),
- `use crate::…`, `use super::…`, `use self::…` (and `use child::…`),
- `crate::x::…`, `super::…` and `self::…` paths anywhere in the code.

A path names the file of the longest module prefix it spells. A name a
module re-exports (`pub use run::RunReport` in maintenance/mod.rs) counts as
that module's, so `crate::maintenance::RunReport` is an arrow to
maintenance/mod.rs; a `#[macro_export]` macro, named from the crate root
(`crate::sql_params`), is an arrow to the file that defines it. Arrows into
other crates (including names re-exported from them, `pub use collab_store
as db;`) are not followed, and a file's arrows to itself are dropped.

Test code is not part of the layering: a `#[cfg(test)]` module sits above
the file that declares it, and nothing in the crate's build imports it
back. So the paths named inside an inline `#[cfg(test)] mod tests { … }`
block are no arrows, and a `#[cfg(test)] mod tests;` declaration is no
arrow to its file (whose own arrows stay: nothing points at it, so it
closes no cycle). A unit test may use any module of its crate (the store's
tests all use `crate::testing`, which migrates, which knows every table)
without making the modules it tests import each other.

The strongly connected components with more than one file (Tarjan) are the
import cycles; each is printed with its files.

    python3 scripts/import-graph.py [--check] [--edges] [WORKSPACE]

`--check` exits 1 on any import cycle, printing a one-line reason per
failure: no file imports a file that imports it back, directly or through
others. A folder module's shared items live in a leaf file of the folder
(its parts import that file, not `mod.rs`), and `mod.rs` or `lib.rs` only
declares the parts and re-exports them. The one exception would be `ALLOWED`
below (empty since the last, `collab-store`'s `sql/`, was broken): a folder whose cycle is known and not broken yet, with why. It can
only shrink: `--check` also fails when an allowed folder has no cycle any
more (take it off the list), and a cycle there that spans folders fails
as any other.
`--edges` also prints every arrow that stays inside a cycle.

Folders. The server's top-level modules (`ssh`, `service`, `merge_queue`,
…: each file counts as the first folder of its path, a root file as its
own module) form a second graph, printed after the files'. `--check`
holds two rules over it:

- the doors (`DOORS`: how a caller reaches the verbs) import no other
  door, and the service (`SERVICE`) imports no door; an arrow between
  doors is allowed only in `DOOR_ARROWS`, with why;
- the folders still in one cycle (`FOLDER_KNOT`, the knot ARCHITECTURE.md
  describes) may only shrink: a folder that joins a cycle fails, and so
  does one on the list that left it (take it off).
"""

import os
import re
import signal
import sys

# Folders (crate, folder under src/) whose one import cycle is still
# allowed, and why; see the module's note.
ALLOWED: dict = {}

# The server crate whose top-level modules are checked as folders.
FOLDER_CRATE = "collab-server"

# How callers reach the verbs. None imports another (but `DOOR_ARROWS`).
DOORS = {"ssh", "mcp", "tui", "http"}

# The verbs without a transport: imports no door.
SERVICE = "service"

# Arrows between doors that stay, and why. The terminal UI and the MCP
# session run on an SSH channel today: the SSH door hands them its channel
# and context, and they answer on it. They go when those sessions take a
# byte stream and a `service::Context` instead (then MCP over HTTP needs
# no SSH at all).
DOOR_ARROWS: dict = {
    ("ssh", "mcp"): "the SSH door runs `collab-mcp` sessions on its channels",
    ("ssh", "tui"): "the SSH door runs the terminal UI on its pty channels",
    ("mcp", "ssh"): "an MCP session answers on its SSH channel (ssh::context, ssh::reply)",
    ("tui", "ssh"): "the terminal UI draws on its SSH channel (ssh::context, ssh::reply, ssh::call)",
}

# The top-level modules of the server still in one import cycle. It may
# only shrink (see the module's note).
FOLDER_KNOT: set = {
    # the policy compilers live in the features that use them (issue 46)
    "app", "authz", "events", "governance", "hooks", "mirrors", "objects",
    "repo_admin", "repos", "webhooks",
    # maintenance reports to metrics, which reads the LFS store's figures,
    # and both stop with `shutdown`
    "lfs", "maintenance", "metrics", "shutdown",
    # the sessions on SSH channels (DOOR_ARROWS)
    "mcp", "ssh", "tui",
}

# ---------------------------------------------------------------- lexing

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# what may stand between `#[cfg(test)]` and the `mod` it gates
VISIBILITY = {("id", "pub"), ("p", "("), ("p", ")"), ("id", "crate"), ("id", "super"), ("id", "self"), ("id", "in"), ("id", "mod")}


def tokens(src):
    """Rust source as a list of tokens, comments dropped, every string
    literal as one ("str", text) token. Identifiers are ("id", name);
    punctuation is ("p", text) with `::` as one token."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j + 1
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c in "rb" and re.match(r"(br|r|b)?#*\"", src[i:i + 260] or ""):
            # raw strings (r"…", r#"…"#, br#"…"#) and byte strings
            m = re.match(r"(br|r|b)?(#*)\"", src[i:])
            prefix, hashes = m.group(1) or "", m.group(2)
            j = i + m.end()
            if "r" in prefix:
                end = src.find('"' + hashes, j)
                end = n if end < 0 else end + 1 + len(hashes)
            else:
                end = skip_string(src, j)
            out.append(("str", src[j:end - 1 - len(hashes)]))
            i = end
        elif c == '"':
            end = skip_string(src, i + 1)
            out.append(("str", src[i + 1:end - 1]))
            i = end
        elif c == "'":
            # a char literal ('a', '\n', '\u{1F600}') or a lifetime ('a)
            m = re.match(r"'(\\(u\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}|.)|[^\\'])'", src[i:], re.S)
            if m:
                i += m.end()
            else:
                m = IDENT.match(src, i + 1)
                i = m.end() if m else i + 1
        elif c.isalpha() or c == "_":
            m = IDENT.match(src, i)
            out.append(("id", m.group()))
            i = m.end()
        elif c.isdigit():
            m = re.match(r"[0-9][0-9A-Za-z_]*(\.[0-9][0-9A-Za-z_]*)?", src[i:])
            i += m.end()
        elif src.startswith("::", i):
            out.append(("p", "::"))
            i += 2
        else:
            out.append(("p", c))
            i += 1
    return out


def skip_string(src, j):
    """The index just past the closing quote of a string starting at j."""
    n = len(src)
    while j < n:
        if src[j] == "\\":
            j += 2
        elif src[j] == '"':
            return j + 1
        else:
            j += 1
    return n


# ---------------------------------------------------------------- parsing


class ModFile:
    """One source file: the modules it declares, the paths it names and
    the names it re-exports."""

    def __init__(self, path, modpath):
        self.path = path
        self.modpath = modpath  # module path of the file, from the crate root
        self.children = []  # (inline module prefix, name, #[path] or None, test-only)
        self.inline = []  # module paths of inline `mod x { … }` blocks
        self.refs = []  # (module path where written, segments, is_use)
        self.reexports = {}  # module path -> {name: (where written, segments)}
        self.macros = []  # `#[macro_export]` macros: items of the crate root


def parse_use_tree(toks, i):
    """Parse a use tree at toks[i]; return (list of (segments, alias), i)."""
    prefix = []
    while True:
        kind, text = toks[i]
        if kind == "p" and text == "{":
            i += 1
            items = []
            while not (toks[i] == ("p", "}")):
                sub, i = parse_use_tree(toks, i)
                items.extend((prefix + s, a) for s, a in sub)
                if toks[i] == ("p", ","):
                    i += 1
            return items, i + 1
        if kind == "p" and text == "*":
            return [(prefix + ["*"], None)], i + 1
        if kind == "p" and text == "::":
            i += 1
            continue
        if kind == "id":
            prefix.append(text)
            i += 1
            if toks[i] == ("p", "::"):
                i += 1
                continue
            alias = None
            if toks[i] == ("id", "as"):
                alias = toks[i + 1][1]
                i += 2
            return [(prefix, alias)], i
        # anything else ends the tree
        return [(prefix, None)], i


def parse_file(mf, src):
    toks = tokens(src) + [("p", ";")] * 4
    stack = []  # (inline module name, brace depth at its `{`, test-only)
    depth = 0
    pending_path = None  # a #[path = "…"] waiting for its `mod`
    pending_test = False  # a #[cfg(test)] waiting for its item
    exported_macro = False  # a #[macro_export] waiting for its macro_rules!
    i = 0
    n = len(toks) - 4

    def here():
        return mf.modpath + [s for s, _, _ in stack]

    def in_test():
        return any(test for _, _, test in stack)

    while i < n:
        kind, text = toks[i]
        attribute = kind == "p" and text == "#" and toks[i + 1] == ("p", "[")
        if pending_test and not attribute and toks[i] not in VISIBILITY:
            pending_test = False  # the attribute was on an item other than a module
        if attribute:
            if toks[i + 2] == ("id", "path") and toks[i + 3] == ("p", "=") and toks[i + 4][0] == "str":
                pending_path = toks[i + 4][1]
            if toks[i + 2:i + 6] == [("id", "cfg"), ("p", "("), ("id", "test"), ("p", ")")]:
                pending_test = True
            if toks[i + 2] == ("id", "macro_export"):
                exported_macro = True
            # skip the attribute
            j, d = i + 1, 0
            while j < n:
                if toks[j] == ("p", "["):
                    d += 1
                elif toks[j] == ("p", "]"):
                    d -= 1
                    if d == 0:
                        break
                j += 1
            i = j + 1
            continue
        if kind == "id" and text == "macro_rules" and toks[i + 1] == ("p", "!"):
            if exported_macro and toks[i + 2][0] == "id":
                mf.macros.append(toks[i + 2][1])
            exported_macro = False
        if kind == "p" and text == "{":
            depth += 1
        elif kind == "p" and text == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
        elif kind == "id" and text == "mod" and toks[i + 1][0] == "id":
            name = toks[i + 1][1]
            test = pending_test or in_test()
            pending_test = False
            if toks[i + 2] == ("p", ";"):
                mf.children.append(([s for s, _, _ in stack], name, pending_path, test))
                pending_path = None
                i += 3
                continue
            if toks[i + 2] == ("p", "{"):
                depth += 1
                stack.append((name, depth, test))
                mf.inline.append(here())
                pending_path = None
                i += 3
                continue
        elif kind == "id" and text == "use" and i + 1 < n and toks[i + 1][0] in ("id", "p") and toks[i + 1] != ("p", "("):
            public = toks[i - 1] == ("id", "pub") or (
                toks[i - 1] == ("p", ")") and ("id", "pub") in toks[max(0, i - 6):i - 1]
            )
            items, j = parse_use_tree(toks, i + 1)
            where = here()
            if in_test():
                items = []  # test code: no arrow (see the module's note)
            for segs, alias in items:
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                if not segs:
                    continue
                mf.refs.append((where, segs, True))
                if public and segs[-1] != "*":
                    name = alias or segs[-1]
                    mf.reexports.setdefault(tuple(where), {})[name] = (where, segs)
            i = j
            continue
        elif kind == "id" and text in ("crate", "super", "self") and toks[i + 1] == ("p", "::"):
            prev = toks[i - 1] if i else ("p", "")
            if prev not in (("p", "$"), ("id", "in"), ("p", "::")):
                segs = [text]
                j = i + 1
                while toks[j] == ("p", "::") and toks[j + 1][0] == "id":
                    segs.append(toks[j + 1][1])
                    j += 2
                if not in_test():
                    mf.refs.append((here(), segs, False))
                i = j
                continue
        i += 1


# ---------------------------------------------------------------- graph


class Crate:
    def __init__(self, name, src_dir):
        self.name = name
        self.src_dir = src_dir
        self.files = {}  # relative path -> ModFile
        self.edges = {}  # relative path -> set of relative paths
        self.trees = []  # one {module path tuple: file} per crate root

    def load(self):
        roots = []
        for root in ("lib.rs", "main.rs"):
            if os.path.isfile(os.path.join(self.src_dir, root)):
                roots.append(root)
        bin_dir = os.path.join(self.src_dir, "bin")
        if os.path.isdir(bin_dir):
            for entry in sorted(os.listdir(bin_dir)):
                if entry.endswith(".rs"):
                    roots.append("bin/" + entry)
                elif os.path.isfile(os.path.join(bin_dir, entry, "main.rs")):
                    roots.append("bin/" + entry + "/main.rs")
        for root in roots:
            self.load_tree(root)

    def load_tree(self, root):
        modules = {}  # module path tuple -> relative file
        files = {}
        todo = [(root, [], True)]
        while todo:
            rel, modpath, dir_owner = todo.pop()
            full = os.path.join(self.src_dir, rel)
            if rel in files or not os.path.isfile(full):
                continue
            mf = ModFile(rel, modpath)
            with open(full, encoding="utf-8") as f:
                parse_file(mf, f.read())
            files[rel] = mf
            modules[tuple(modpath)] = rel
            for inline in mf.inline:
                modules[tuple(inline)] = rel
            here_dir = os.path.dirname(rel)
            # where the child modules of this file live
            base = here_dir if dir_owner else os.path.join(here_dir, os.path.splitext(os.path.basename(rel))[0])
            for inline_prefix, name, attr, _ in mf.children:
                if attr is not None:
                    child = os.path.normpath(os.path.join(here_dir, attr))
                    todo.append((child, modpath + inline_prefix + [name], child.endswith("mod.rs")))
                    continue
                d = os.path.join(base, *inline_prefix)
                flat = os.path.normpath(os.path.join(d, name + ".rs"))
                folder = os.path.normpath(os.path.join(d, name, "mod.rs"))
                if os.path.isfile(os.path.join(self.src_dir, flat)):
                    todo.append((flat, modpath + inline_prefix + [name], False))
                else:
                    todo.append((folder, modpath + inline_prefix + [name], True))
        # `#[macro_export]` macros are named from the crate root
        # (`crate::sql_params`) but belong to the file that defines them
        macros = {m: rel for rel, mf in files.items() for m in mf.macros}
        self.trees.append((modules, files))
        for rel, mf in files.items():
            self.files[rel] = mf
            out = self.edges.setdefault(rel, set())
            for inline_prefix, name, _, test in mf.children:
                target = modules.get(tuple(mf.modpath + inline_prefix + [name]))
                if target and not test:
                    out.add(target)
            for where, segs, is_use in mf.refs:
                target = self.resolve(modules, files, macros, where, segs, is_use, 0)
                if target:
                    out.add(target)
            out.discard(rel)

    def absolute(self, modules, where, segs, is_use):
        """The path from the crate root that segs spells when written in
        module `where`, or None if it leaves the crate."""
        first = segs[0]
        if first == "crate":
            return segs[1:]
        if first in ("super", "self"):
            base = list(where)
            k = 0
            while k < len(segs) and segs[k] in ("super", "self"):
                if segs[k] == "super":
                    if not base:
                        return None
                    base.pop()
                k += 1
            return base + segs[k:]
        if is_use and tuple(where + [first]) in modules:
            return list(where) + segs  # `use child::…`
        return None

    def resolve(self, modules, files, macros, where, segs, is_use, hops):
        path = self.absolute(modules, where, segs, is_use)
        if path is None:
            return None
        if path and path[0] in macros and (path[0],) not in modules:
            return macros[path[0]]
        k = len(path)
        while k > 0 and tuple(path[:k]) not in modules:
            k -= 1
        target = modules.get(tuple(path[:k]))
        if target is None:
            return None
        # a name the module re-exports from another crate (`pub use
        # other_crate as db;`) is not an arrow into this one
        if k < len(path) and hops < 8:
            exported = files[target].reexports.get(tuple(path[:k]), {})
            if path[k] in exported:
                ewhere, esegs = exported[path[k]]
                rest = path[k + 1:]
                if self.resolve(modules, files, macros, ewhere, esegs + rest, True, hops + 1) is None:
                    return None
        return target


def tarjan(edges):
    """Strongly connected components of a graph {node: set(nodes)}."""
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # iterative Tarjan: (node, iterator over successors)
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    scc.append(w)
                    if w == node:
                        break
                sccs.append(sorted(scc))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sccs


def top_module(path):
    """The top-level module a file of src/ belongs to."""
    first = path.split("/", 1)[0]
    return first[:-3] if first.endswith(".rs") else first


def folder_rules(root):
    """The folder graph of `FOLDER_CRATE`, printed, and what breaks its
    rules (see the module's note)."""
    src = os.path.join(root, "crates", FOLDER_CRATE, "src")
    if not os.path.isdir(src):
        return []
    crate = Crate(FOLDER_CRATE, src)
    crate.load()
    roots = {"lib", "main"}
    edges = {}
    for f, targets in crate.edges.items():
        a = top_module(f)
        for t in targets:
            b = top_module(t)
            if a != b and a not in roots and b not in roots:
                edges.setdefault(a, set()).add(b)
    failures = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            door_to_door = a in DOORS and b in DOORS
            if (door_to_door or (a == SERVICE and b in DOORS)) and (a, b) not in DOOR_ARROWS:
                failures.append(f"{FOLDER_CRATE}: {a}/ imports {b}/: no door imports another, the service none")
    for (a, b) in sorted(DOOR_ARROWS):
        if b not in edges.get(a, set()):
            failures.append(f"{FOLDER_CRATE}: {a}/ no longer imports {b}/: take it off DOOR_ARROWS")
    cycles = [set(c) for c in tarjan(edges) if len(c) > 1]
    knotted = set().union(*cycles) if cycles else set()
    print(f"{FOLDER_CRATE} folders: {len(edges)} with imports, {len(cycles)} folder cycle(s)")
    for number, cycle in enumerate(cycles, 1):
        print(f"  folder cycle {number}: {', '.join(sorted(cycle))}")
    for folder in sorted(knotted - FOLDER_KNOT):
        failures.append(f"{FOLDER_CRATE}: {folder}/ joined a folder import cycle")
    for folder in sorted(FOLDER_KNOT - knotted):
        failures.append(f"{FOLDER_CRATE}: {folder}/ is in no folder cycle any more: take it off FOLDER_KNOT")
    return failures


def main(argv):
    check = "--check" in argv
    show_edges = "--edges" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    crates_dir = os.path.join(root, "crates")
    failures = []
    total = 0
    allowed_seen = set()
    for name in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, name, "src")
        if not os.path.isdir(src):
            continue
        crate = Crate(name, src)
        crate.load()
        cycles = [c for c in tarjan(crate.edges) if len(c) > 1]
        total += len(cycles)
        n_edges = sum(len(v) for v in crate.edges.values())
        print(f"{name}: {len(crate.files)} files, {n_edges} imports, {len(cycles)} cycle(s)")
        for number, cycle in enumerate(cycles, 1):
            folders = sorted({os.path.dirname(f) or "." for f in cycle})
            print(f"  cycle {number} ({len(cycle)} files, folders: {', '.join(folders)}):")
            members = set(cycle)
            for f in cycle:
                inside = sorted(crate.edges[f] & members)
                print(f"    {name}/src/{f}" + (f" -> {', '.join(inside)}" if show_edges else ""))
            if len(folders) > 1:
                failures.append(
                    f"{name}: cycle {number} spans {len(folders)} folders ({', '.join(folders)}): {', '.join(cycle)}"
                )
            elif (name, folders[0]) in ALLOWED:
                allowed_seen.add((name, folders[0]))
                print(f"    allowed for now: {ALLOWED[(name, folders[0])]}")
            else:
                where = "src/" if folders[0] == "." else folders[0] + "/"
                failures.append(f"{name}: cycle {number} between files of {where}: {', '.join(cycle)}")
    for crate_name, folder in sorted(set(ALLOWED) - allowed_seen):
        failures.append(
            f"{crate_name}: {folder}/ has no import cycle any more: take it off ALLOWED in scripts/import-graph.py"
        )
    print(f"total: {total} cycle(s)")
    failures += folder_rules(root)
    if check:
        for reason in failures:
            print(f"FAIL {reason}")
        if failures:
            return 1
        print("ok: no import cycle but the allowed ones")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
