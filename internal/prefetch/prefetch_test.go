package prefetch

import (
	"testing"
	"unsafe"
)

// A prefetch of any address, mapped or not, must return and change nothing.
func TestLineNeverFaults(t *testing.T) {
	b := make([]byte, 64)
	for _, p := range []unsafe.Pointer{nil, unsafe.Pointer(&b[0]), unsafe.Add(unsafe.Pointer(&b[0]), 1<<46)} {
		Line(p)
	}
	for i, x := range b {
		if x != 0 {
			t.Fatalf("byte %d changed to %d", i, x)
		}
	}
}
