#!/usr/bin/env bash
# go-work.sh -- module mode offline, inside this checkout: writes
# bindings/go/go.work (ignored by git) pointing the binding's one dependency,
# Nomad's codec go-msgpack, at Debian's package under /usr/share/gocode, so that
#
#   cd bindings/go && GOPROXY=off go test ./wid
#
# works with no module proxy. Set CGO_CFLAGS/CGO_LDFLAGS, or use -tags
# wid_pkgconfig with an installed library (found at run time through
# ldconfig, an rpath (-ldflags "-r <prefix>/lib") or LD_LIBRARY_PATH); see
# bindings/go/README.md. With a proxy none of this is needed: bindings/go/go.sum
# pins the same version. The interop checks (a module of their own, needing
# go-jose and x/crypto) run in GOPATH mode: scripts/go-tests.sh. Remove the
# file (or set GOWORK=off) to leave workspace mode. Run scripts/go-deps.sh
# first for the Debian packages.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gocode=/usr/share/gocode
msgpack="$gocode/src/github.com/hashicorp/go-msgpack"
[ -f "$msgpack/go.mod" ] || {
    echo "go-work.sh: $msgpack is missing: run scripts/go-deps.sh" >&2
    exit 1
}
out="$REPO_ROOT/bindings/go/go.work"
cat > "$out" <<WORK
go 1.19

use .

// Debian's package stands in for the module proxy (scripts/go-work.sh).
replace github.com/hashicorp/go-msgpack => $msgpack
WORK
echo "go-work.sh: wrote $out"
