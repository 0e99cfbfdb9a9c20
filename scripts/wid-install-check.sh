#!/usr/bin/env bash
# wid-install-check.sh -- docs/wid.md's install block (marked `run by
# scripts/wid-install-check.sh: install`), run as printed by bash from the
# repository root, with CARGO_INSTALL_ROOT a scratch directory: cargo's own
# setting for where `cargo install` puts its binaries (without it,
# $CARGO_HOME/bin, the page's ~/.cargo/bin), so nothing of this machine's is
# replaced. The installed `wid` is the package's version and works: a KEK,
# a wrapped keystore, its JWKS. `cargo install --path` builds in the
# workspace's target dir with the release profile, so after `cargo build
# --release --locked -p wid` (scripts/profiles-interop.sh, the step before
# in CI) it only copies the binary.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
block="$(awk -v m="<!-- run by scripts/wid-install-check.sh: install -->" '
    $0 == m { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }
' docs/wid.md)"
[ -n "$block" ] || { echo "wid-install-check: docs/wid.md lost its install block" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/wid-install-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
started=$SECONDS
if ! CARGO_INSTALL_ROOT="$root" bash -euo pipefail -c "$block" > "$work/install.out" 2>&1; then
    cat "$work/install.out" >&2
    echo "wid-install-check: docs/wid.md's install block failed; it ran:" >&2
    echo "$block" >&2
    exit 1
fi
took=$((SECONDS - started))
wid="$root/bin/wid"
[ -x "$wid" ] || {
    cat "$work/install.out" >&2
    echo "wid-install-check: the install block put no wid in $root/bin" >&2
    exit 1
}
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
said="$("$wid" --version)"
[ "$said" = "wid $version" ] || { echo "wid-install-check: the installed wid says '$said', expected 'wid $version'" >&2; exit 1; }
"$wid" keyring generate-kek --kek-file "$work/kek" >/dev/null
"$wid" keyring init --keystore "$work/keystore" --kek-file "$work/kek" >/dev/null
keys="$("$wid" keyring jwks --keystore "$work/keystore" --kek-file "$work/kek" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["keys"]))')"
[ "$keys" = 1 ] || { echo "wid-install-check: the installed wid's keystore has $keys keys in its JWKS, expected 1" >&2; exit 1; }
echo "wid-install-check: OK: docs/wid.md's cargo install put $said in the install root (${took}s), which made a wrapped keystore and its JWKS"
