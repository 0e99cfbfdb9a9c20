#!/usr/bin/env bash
# ABI guard: the cdylib's exported wid_* symbols must be exactly ffi/abi/symbols.txt.
# A removed or renamed symbol breaks every C and Go caller; an added one must be
# added to the list on purpose (and to the C test and the header).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh
wid_find_lib "ABI guard"
lib="$WID_LIB/libworkload_identity.so"
exported="$(nm -D --defined-only "$lib" | awk '{print $3}' | grep '^wid_' | LC_ALL=C sort)"
expected="$(LC_ALL=C sort ffi/abi/symbols.txt)"
if [ "$exported" != "$expected" ]; then
    echo "ABI guard: exported symbols differ from ffi/abi/symbols.txt" >&2
    diff <(echo "$expected") <(echo "$exported") | sed -n 's/^< /  removed or renamed: /p; s/^> /  added (list it on purpose): /p' >&2
    exit 1
fi
echo "ABI guard: $(echo "$exported" | wc -l | tr -d ' ') exported symbols match ffi/abi/symbols.txt"
