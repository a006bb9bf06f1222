package resp

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameScanner(t *testing.T) {
	lim := Limits{MaxBulk: 16, MaxElems: 4, MaxInline: 32, MaxDepth: 2, MaxFrame: 64}
	for _, c := range []struct {
		in   string
		n    int  // 0: partial
		fail bool // a protocol error
	}{
		{"+OK\r\n", 5, false},
		{"+OK\r\n+next\r\n", 5, false},
		{"+OK\r", 0, false},
		{"", 0, false},
		{"$3\r\nabc\r\n", 9, false},
		{"$3\r\nabc\r", 0, false},
		{"$3\r\nabcde", 0, true},
		{"$-1\r\n", 5, false},
		{"$17\r\n", 0, true}, // past MaxBulk
		{":12\r\n", 5, false},
		{":1x\r\n", 0, true},
		{"*2\r\n$1\r\na\r\n:1\r\n", 15, false},
		{"*2\r\n$1\r\na\r\n", 0, false},
		{"*-1\r\n", 5, false},
		{"*5\r\n", 0, true},                   // past MaxElems
		{"*1\r\n*1\r\n*1\r\n:1\r\n", 0, true}, // past MaxDepth
		{"%1\r\n+a\r\n_\r\n", 11, false},
		{"|1\r\n+a\r\n+b\r\n#t\r\n", 16, false}, // the attribute and the frame it annotates
		{"#x\r\n", 0, true},
		{"_x\r\n", 0, true},
		{"+OK\n", 0, true},
		{"\r\n", 0, true},
		{"?\r\n", 0, true},
		{"+" + string(bytes.Repeat([]byte("a"), 40)), 0, true}, // a line past MaxInline
		{"+" + string(bytes.Repeat([]byte("a"), 20)), 0, false},
	} {
		n, err := (&FrameScanner{Limits: lim}).Scan([]byte(c.in))
		if n != c.n || (err != nil) != c.fail || (err != nil && !IsProtocolError(err)) {
			t.Errorf("Scan(%q) = %d, %v; want %d, failing %v", c.in, n, err, c.n, c.fail)
		}
	}
}

// FuzzFrameScanner holds the scanner to ReadRaw: a frame it measures is
// the one ReadRaw reads, a partial frame is one ReadRaw runs out of input
// in, and a frame ReadRaw reads as it came is one it measures. Scanning the
// input as it grows, a few bytes at a time, finds the same.
func FuzzFrameScanner(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "*2\r\n:1\r\n$1\r\na\r\n", "%1\r\n+a\r\n_\r\n", "|1\r\n+a\r\n+b\r\n#t\r\n", "$5\r\nab", "*3\r\n$-1\r\n", "*2\r\n|0\r\n*0\r\n:1\r\n"} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBulk: 1 << 16, MaxElems: 1 << 10, MaxInline: 1 << 12, MaxDepth: 8, MaxFrame: 1 << 17}
	f.Fuzz(func(t *testing.T, in []byte) {
		n, err := (&FrameScanner{Limits: lim}).Scan(in)
		raw, rerr := NewReader(bytes.NewReader(in), lim).ReadRaw(nil)
		switch {
		case err != nil:
			if rerr == nil && bytes.HasPrefix(in, raw) {
				t.Fatalf("Scan(%q): %v; ReadRaw read %q", in, err, raw)
			}
		case n == 0:
			if !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
				t.Fatalf("Scan(%q) found a partial frame; ReadRaw: %q, %v", in, raw, rerr)
			}
		default:
			if rerr != nil || !bytes.Equal(raw, in[:n]) {
				t.Fatalf("Scan(%q) = %d; ReadRaw: %q, %v", in, n, raw, rerr)
			}
		}
		// The same input, scanned as it arrives 1 to 7 bytes at a time by
		// one scanner, then the frames after the first one.
		s := FrameScanner{Limits: lim}
		k := 0
		for {
			k = min(len(in), k+1+k%7)
			m, merr := s.Scan(in[:k])
			if m > 0 || merr != nil || k == len(in) {
				if m != n || (merr == nil) != (err == nil) {
					t.Fatalf("%q scanned whole: %d, %v; as it arrived: %d, %v after %d bytes", in, n, err, m, merr, k)
				}
				break
			}
		}
		if n > 0 {
			next, _ := s.Scan(in[n:])
			if again, _ := (&FrameScanner{Limits: lim}).Scan(in[n:]); next != again {
				t.Fatalf("%q: the scanner that found the first frame found %d bytes after it, a new one %d", in, next, again)
			}
		}
	})
}
