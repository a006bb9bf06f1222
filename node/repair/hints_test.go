package repair

import (
	"fmt"
	"os"
	"testing"

	"github.com/troop-lab/troop/resp"
)

// A hint file keeps hints in order up to its bound, drops the rest, and
// after a restart goes on from the saved offset; a hint cut short by a
// crash is cut off.
func TestHintLog(t *testing.T) {
	dir := t.TempDir()
	req := func(i int) []byte {
		return resp.AppendCommandStrings(nil, "WRITE", fmt.Sprintf("%020x", i), "SET", fmt.Sprintf("k%d", i), "v")
	}
	size := int64(len(req(0)))
	h, err := openHints(dir, "127.0.0.1:7000", 10*size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		h.Add(req(i))
	}
	if p, d := h.pending.Load(), h.dropped.Load(); p != 10 || d != 2 {
		t.Fatalf("pending %d dropped %d, want 10 and 2", p, d)
	}
	h.flush() // what the timer does hintFlushDelay after the first hint
	frames, used, err := h.next()
	if err != nil || len(frames) != 10 || used != 10*size {
		t.Fatalf("next: %d frames, %d bytes, %v", len(frames), used, err)
	}
	for i, f := range frames {
		if string(f) != string(req(i)) {
			t.Fatalf("hint %d out of order: %q", i, f)
		}
	}
	h.advance(4, 4*size)
	// A crash in the middle of a hint: half a frame at the end.
	h.f.Write(req(99)[:size/2])
	h.Close()

	h, err = openHints(dir, "127.0.0.1:7000", 10*size)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if p := h.pending.Load(); p != 6 {
		t.Fatalf("after reopening, %d pending, want 6", p)
	}
	frames, _, err = h.next()
	if err != nil || len(frames) != 6 || string(frames[0]) != string(req(4)) {
		t.Fatalf("after reopening: %d frames (%v), first %q", len(frames), err, frames)
	}
	h.advance(6, 6*size)
	if st, _ := os.Stat(h.path); st.Size() != 0 || h.pending.Load() != 0 {
		t.Fatalf("a delivered hint file should start over: size %d, pending %d", st.Size(), h.pending.Load())
	}
	// Room again after delivery.
	if !h.Add(req(100)) {
		t.Fatal("no room after delivery")
	}
}
