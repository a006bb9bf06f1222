package resp

import (
	"bytes"
	"math"
	"strconv"
	"testing"
)

// CommandSize bounds what AppendCommand writes, so one growth is enough;
// AppendBulkInt writes the decimal bulk string.
func TestCommandSizeAndBulkInt(t *testing.T) {
	for _, args := range [][][]byte{
		nil,
		{[]byte("PING")},
		{[]byte("SET"), []byte("k"), bytes.Repeat([]byte("v"), 1<<16)},
		{{}, {}, {}},
	} {
		out := AppendCommand(nil, args...)
		if len(out) > CommandSize(args) {
			t.Errorf("%d args: wrote %d bytes, CommandSize %d", len(args), len(out), CommandSize(args))
		}
		buf := make([]byte, 0, CommandSize(args))
		if again := AppendCommand(buf, args...); &again[:1][0] != &buf[:1][0] {
			t.Errorf("%d args: a buffer of CommandSize was not enough", len(args))
		}
	}
	for _, n := range []int64{0, 7, -12, math.MaxInt64, math.MinInt64} {
		want := "$" + strconv.Itoa(len(strconv.FormatInt(n, 10))) + "\r\n" + strconv.FormatInt(n, 10) + "\r\n"
		if got := string(AppendBulkInt(nil, n)); got != want {
			t.Errorf("AppendBulkInt(%d) = %q, want %q", n, got, want)
		}
	}
}
