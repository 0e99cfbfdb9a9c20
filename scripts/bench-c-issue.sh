#!/usr/bin/env bash
# The C ABI's wid_issue beside libsodium's Ed25519 signature of the same
# signing input, in wall time, alternating rounds in one process
# (benches/c/issue_vs_libsodium.c). A benchmark, not a test: run by hand, the
# figures go to BENCHMARKS.md.
#
# Usage: scripts/bench-c-issue.sh [rounds] [calls per round]
#   WID_LIB_DIR=dir  use an already built library (see scripts/c-tests.sh).
# Installs libsodium-dev with apt-get when it is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
[ -f /usr/include/sodium.h ] || wid_apt_install libsodium-dev
wid_find_lib bench-c-issue
work="$(mktemp -d "${TMPDIR:-/tmp}/wid-bench-c-issue.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"${CC:-gcc}" -std=c11 -O2 -Wall -Wextra -Werror -I"$WID_INC" \
    benches/c/issue_vs_libsodium.c "$WID_LIB/libworkload_identity.a" \
    -lsodium -lpthread -ldl -lm -o "$work/issue_vs_libsodium"
"$work/issue_vs_libsodium" tests/vectors/msgpack/issue_request_task.msgpack "${1:-15}" "${2:-2000}"
