//go:build !amd64 && !arm64

package prefetch

import "unsafe"

// Line does nothing where troop has no prefetch instruction: the miss it
// would hide is simply not hidden.
func Line(unsafe.Pointer) {}
