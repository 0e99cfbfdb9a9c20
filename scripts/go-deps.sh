#!/usr/bin/env bash
# go-deps.sh -- install the Debian Go packages the Go checks use, when missing:
# golang-go, golang-github-hashicorp-go-msgpack-dev (Nomad's codec),
# golang-gopkg-square-go-jose.v2-dev and golang-golang-x-crypto-dev (HKDF;
# interop checks only). Needs root or sudo.
# Run by CI and by the scripts that need Go; `source scripts/go-env.sh` never
# installs anything.
set -euo pipefail

gocode=/usr/share/gocode
need=""
command -v go >/dev/null 2>&1 || need="$need golang-go"
[ -d "$gocode/src/github.com/hashicorp/go-msgpack/codec" ] || need="$need golang-github-hashicorp-go-msgpack-dev"
[ -d "$gocode/src/gopkg.in/square/go-jose.v2" ] || need="$need golang-gopkg-square-go-jose.v2-dev"
[ -d "$gocode/src/golang.org/x/crypto/hkdf" ] || need="$need golang-golang-x-crypto-dev"
[ -z "$need" ] && exit 0

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck disable=SC2086
wid_apt_install $need
