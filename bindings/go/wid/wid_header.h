/*
 * The library's header, or a message that says how to give it to cgo.
 * Included by wid_helpers.h; not part of the library's ABI.
 *
 * Without the build tag wid_pkgconfig (whose #cgo pkg-config line adds the
 * installed header's directory) and without CGO_CFLAGS=-I<dir> (the
 * installed include/, or the checkout's include/), cgo cannot
 * find workload_identity.h: say what to do instead of only "No such file or
 * directory". scripts/go-packaging-check.sh checks this message.
 */
#ifndef WID_GO_HEADER_H
#define WID_GO_HEADER_H

#if defined(__has_include)
#if !__has_include("workload_identity.h")
#error "workload_identity.h not found: build with -tags wid_pkgconfig after scripts/install.sh (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig for a prefix pkg-config does not search), or set CGO_CFLAGS=-I<repo>/include and CGO_LDFLAGS=<cargo target dir>/release/libworkload_identity_ffi.a (see docs/go.md)"
#define WID_GO_HEADER_MISSING 1
#endif
#endif

#ifndef WID_GO_HEADER_MISSING
#include "workload_identity.h"
#endif

#endif
