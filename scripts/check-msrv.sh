#!/usr/bin/env bash
# Proves each declared rust-version is honest: every package a workspace
# member builds with (its locked dependency closure, build and dev
# dependencies included) must declare a rust-version no newer than that
# member's. The library, the C ABI and the quickstart share the workspace's;
# `wid` declares its own (its gRPC stack needs a newer Rust than the
# library promises its users). Only one toolchain can be installed here, so
# the graph is checked instead of compiling with the old compilers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo metadata --locked --format-version 1 --quiet | python3 -c '
import json, sys
meta = json.load(sys.stdin)
ver = lambda s: (tuple(int(p) for p in s.split(".")) + (0, 0))[:3]
packages = {p["id"]: p for p in meta["packages"]}
# Each package: its dependencies of every kind, and those it is built with
# when another package depends on it (no dev-dependencies).
deps = {n["id"]: [d["pkg"] for d in n["deps"]] for n in meta["resolve"]["nodes"]}
built_with = {
    n["id"]: [d["pkg"] for d in n["deps"] if any(k["kind"] != "dev" for k in d["dep_kinds"])]
    for n in meta["resolve"]["nodes"]
}
members = set(meta["workspace_members"])
failed = False
for member in sorted(members, key=lambda i: packages[i]["name"]):
    root = packages[member]
    name = root["name"]
    ours = root.get("rust_version")
    if not ours:
        sys.exit(f"check-msrv: {name} declares no rust-version")
    seen, todo = set(), list(deps.get(member, []))
    while todo:
        d = todo.pop()
        if d not in seen and d != member:
            seen.add(d)
            todo.extend(built_with.get(d, []))
    newer = sorted(
        (packages[i]["name"], packages[i]["version"], packages[i]["rust_version"])
        for i in seen
        if i not in members and packages[i].get("rust_version") and ver(packages[i]["rust_version"]) > ver(ours)
    )
    for n, v, r in newer:
        failed = True
        print(f"check-msrv: {name} (rust-version {ours}) builds {n} {v}, which needs Rust {r}")
    if not newer:
        print(f"check-msrv: {name}: {len(seen - members)} locked dependencies all build with Rust {ours}")
sys.exit(1 if failed else 0)
'
