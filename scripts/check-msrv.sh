#!/usr/bin/env bash
# Proves the declared rust-version is honest: every package in the locked
# dependency graph must declare a rust-version no newer than ours (only one
# toolchain can be installed here, so we check the graph instead of compiling
# with the old compiler).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo metadata --locked --format-version 1 --quiet | python3 -c '
import json, sys
meta = json.load(sys.stdin)
ver = lambda s: (tuple(int(p) for p in s.split(".")) + (0, 0))[:3]
root = next(p for p in meta["packages"] if p["name"] == "workload-identity")
ours = root.get("rust_version")
if not ours:
    sys.exit("check-msrv: Cargo.toml declares no rust-version")
newer = sorted(
    (p["name"], p["version"], p["rust_version"])
    for p in meta["packages"]
    if p.get("rust_version") and ver(p["rust_version"]) > ver(ours)
)
if newer:
    for n, v, r in newer:
        print(f"check-msrv: {n} {v} needs Rust {r}, newer than our rust-version {ours}")
    sys.exit(1)
count = len(meta["packages"]) - len(meta["workspace_members"])
print(f"check-msrv: {count} locked dependencies all build with Rust {ours}")
'
