//go:build wid_pkgconfig

package wid

// With the build tag wid_pkgconfig the compiler and linker flags come from
// the workload_identity.pc that scripts/install.sh writes when it installs
// the C library (the workload-identity-ffi crate, under its C names), so no
// CGO_CFLAGS or CGO_LDFLAGS are needed:
//
//	go build -tags wid_pkgconfig ./...
//
// pkg-config must find the .pc (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig when
// the prefix is not a system one). Its Libs link the shared library: the
// program then finds libworkload_identity.so.1 at run time through ldconfig
// (a system library directory) or an rpath (-ldflags "-r <prefix>/lib").

// #cgo pkg-config: workload_identity
import "C"
