//go:build amd64 || arm64

package prefetch

import "unsafe"

// Line starts loading the cache line at p and returns at once
// (prefetch_GOARCH.s).
//
//go:noescape
func Line(p unsafe.Pointer)
