#!/usr/bin/env bash
# dev-soname-link.sh DIR -- cargo writes libworkload_identity.so, whose SONAME is
# libworkload_identity.so.<abi> (build.rs): a program linked against it asks the
# loader for the .so.<abi> name. An installed library has that link
# (scripts/install.sh); for running against a build tree, this adds it beside
# the .so (DIR defaults to <cargo target dir>/release: $CARGO_TARGET_DIR's, else
# target/release). Idempotent.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dir="${1:-$(wid_target_dir)/release}"
so="$dir/libworkload_identity.so"
[ -f "$so" ] || exit 0
soname="$(wid_soname "$so")"
if [ -n "$soname" ] && [ "$soname" != "libworkload_identity.so" ] && [ ! -e "$dir/$soname" ]; then
    ln -sfn libworkload_identity.so "$dir/$soname"
fi
