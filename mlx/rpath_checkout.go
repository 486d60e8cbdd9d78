//go:build !specula_installed

package mlx

// A development build finds libmlx.so in this checkout's .deps/ through an
// absolute rpath (${SRCDIR}): tests and build/specula run in place, with
// whichever backend `make deps` unpacked last. An installed or bundled
// program is built with the specula_installed tag instead, which leaves this
// rpath out so that nothing refers to the checkout.

// #cgo LDFLAGS: -Wl,-rpath,${SRCDIR}/../.deps/mlx/lib
import "C"
