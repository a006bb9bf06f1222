package resp

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

func reader(s string) *Reader { return NewReader(strings.NewReader(s), DefaultLimits) }

func argsOf(c Command) []string {
	var out []string
	for _, a := range c.Args {
		out = append(out, string(a))
	}
	return out
}

func TestParseCommand(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"*1\r\n$4\r\nPING\r\n", []string{"PING"}},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", []string{"SET", "k", ""}},
		{"PING\r\n", []string{"PING"}},
		{"set k v\n", []string{"set", "k", "v"}},
		{"\r\n\r\n*0\r\nGET  a\r\n", []string{"GET", "a"}},
		{`SET k "a b\x41\n"` + "\r\n", []string{"SET", "k", "a bA\n"}},
		{`SET k 'it\'s'` + "\r\n", []string{"SET", "k", "it's"}},
		{`SET k ""` + "\r\n", []string{"SET", "k", ""}},
	}
	for _, c := range cases {
		cmd, n, _, err := ParseCommand([]byte(c.in), DefaultLimits)
		if err != nil || n != len(c.in) {
			t.Fatalf("%q: took %d bytes: %v", c.in, n, err)
		}
		if got := argsOf(cmd); strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
		// Raw is always the canonical array encoding of the arguments.
		if want := AppendCommand(nil, cmd.Args...); !bytes.Equal(cmd.Raw, want) {
			t.Errorf("%q: raw %q, want %q", c.in, cmd.Raw, want)
		}
	}
}

func TestParseCommandErrors(t *testing.T) {
	small := Limits{MaxBulk: 10, MaxElems: 4, MaxInline: 64, MaxDepth: 4, MaxFrame: 100}
	cases := []struct {
		in   string
		want string
	}{
		{"*1\r\n:4\r\n", "expected '$'"},
		{"*x\r\n", "invalid multibulk length"},
		{"*9\r\n", "invalid multibulk length 9"},
		{"*1\r\n$11\r\n", "request of more than 10 bytes"},
		{"*1\r\n$-3\r\n", "invalid bulk length"},
		{"*1\r\n$2\r\nabcd\r\n", "not followed by CRLF"},
		{`GET "abc` + "\r\n", "unbalanced quotes"},
		{`GET "abc"d` + "\r\n", "unbalanced quotes"},
		{strings.Repeat("a", 100) + "\r\n", "line longer than"},
	}
	for _, c := range cases {
		_, _, _, err := ParseCommand([]byte(c.in), small)
		if !IsProtocolError(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want protocol error containing %q", c.in, err, c.want)
		}
	}
}

// TestParseCommandIncomplete: the start of a request takes nothing, and
// says how long the request is once its header does.
func TestParseCommandIncomplete(t *testing.T) {
	cases := []struct {
		in   string
		need int
	}{
		{"", 0},
		{"GET k", 0},
		{"*2\r\n$3\r\nGET\r\n", 0},
		{"*2\r\n$3\r\nGET\r\n$5\r\nab", 24},
		{"\r\n*1\r\n$4\r\nPI", 16},
	}
	for _, c := range cases {
		cmd, n, need, err := ParseCommand([]byte(c.in), DefaultLimits)
		if err != nil || n != 0 || need != c.need || cmd.Args != nil {
			t.Errorf("%q: took %d, need %d (want %d), %v", c.in, n, need, c.need, err)
		}
	}
}

func TestRawRoundTrip(t *testing.T) {
	frames := []string{
		"+OK\r\n", "-ERR bad\r\n", ":-42\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "_\r\n", ",3.14\r\n", "#t\r\n", "(123\r\n",
		"!3\r\nerr\r\n", "=7\r\ntxt:abc\r\n", "%1\r\n+k\r\n:1\r\n", "~1\r\n+a\r\n", ">1\r\n+p\r\n",
		"|1\r\n+key\r\n+val\r\n:5\r\n",
	}
	all := strings.Join(frames, "")
	r := reader(all)
	for _, f := range frames {
		raw, err := r.ReadRaw(nil)
		if err != nil {
			t.Fatalf("%q: %v", f, err)
		}
		if string(raw) != f {
			t.Fatalf("raw %q, want %q", raw, f)
		}
		v, err := Parse(raw)
		if err != nil {
			t.Fatalf("parse %q: %v", f, err)
		}
		if f[0] == '|' { // attributes are dropped on parse
			if v.Type != Integer || v.Int != 5 {
				t.Fatalf("attribute frame parsed as %v", v)
			}
			continue
		}
		if enc := AppendValue(nil, v); string(enc) != f {
			t.Errorf("re-encoded %q as %q", f, enc)
		}
	}
}

func TestValueString(t *testing.T) {
	v, _ := Parse([]byte("*3\r\n:1\r\n$-1\r\n-ERR x\r\n"))
	if got := v.String(); got != "[(integer) 1 (nil) (error) ERR x]" {
		t.Errorf("got %s", got)
	}
}

func TestAppendSimpleStripsLineBreaks(t *testing.T) {
	if got := string(AppendError(nil, "ERR a\r\nb")); got != "-ERR a  b\r\n" {
		t.Errorf("got %q", got)
	}
}

// FuzzParseCommand checks that no input makes the parser panic, that every
// command it takes parses again identically from its raw form, and that the
// same bytes arriving a few at a time parse as the same commands.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"*1\r\n$4\r\nPING\r\n", "SET a \"b\\x00\"\r\n", "*1\r\n$04\r\nPING\r\n", "*2\r\n$1\r\na\r\n$-1\r\n", "'\r\n", "*1\n$1\nx\n"} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBulk: 1 << 16, MaxElems: 1 << 10, MaxInline: 1 << 12, MaxDepth: 8, MaxFrame: 1 << 17}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole := parseAll(in, len(in), lim)
		if chunked := parseAll(in, 1+len(in)%7, lim); !slices.Equal(whole, chunked) {
			t.Fatalf("%q whole: %q; a few bytes at a time: %q", in, whole, chunked)
		}
		rest := in
		for range 100 {
			cmd, n, _, err := ParseCommand(rest, lim)
			if err != nil || n == 0 {
				return
			}
			rest = rest[n:]
			again, m, _, err := ParseCommand(cmd.Raw, lim)
			if err != nil || m != len(cmd.Raw) || len(again.Args) != len(cmd.Args) {
				t.Fatalf("raw %q does not parse again: %v", cmd.Raw, err)
			}
			for j := range cmd.Args {
				if !bytes.Equal(again.Args[j], cmd.Args[j]) {
					t.Fatalf("arg %d: %q vs %q", j, again.Args[j], cmd.Args[j])
				}
			}
			if canon := AppendCommand(nil, cmd.Args...); !bytes.Equal(canon, cmd.Raw) {
				t.Fatalf("raw %q, want the canonical %q", cmd.Raw, canon)
			}
		}
	})
}

// parseAll parses in as it arrives in chunks of step bytes, the way a
// server's read loop does, and returns the commands' raw forms and the
// error that ended them, if any.
func parseAll(in []byte, step int, lim Limits) []string {
	var out []string
	var held []byte
	for len(in) > 0 || len(held) > 0 {
		k := min(step, len(in))
		held, in = append(held, in[:k]...), in[k:]
		for {
			cmd, n, _, err := ParseCommand(held, lim)
			if err != nil {
				return append(out, "error: "+err.Error())
			}
			if n == 0 {
				break
			}
			out = append(out, string(cmd.Raw))
			held = held[n:]
		}
		if k == 0 {
			break
		}
	}
	return out
}

// FuzzReadRaw checks that any frame the reader accepts parses, and that
// parsing never panics.
func FuzzReadRaw(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "*2\r\n:1\r\n$1\r\na\r\n", "%1\r\n+a\r\n_\r\n", "|1\r\n+a\r\n+b\r\n#t\r\n"} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBulk: 1 << 16, MaxElems: 1 << 10, MaxInline: 1 << 12, MaxDepth: 8, MaxFrame: 1 << 17}
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _ = Parse(in)
		raw, err := NewReader(bytes.NewReader(in), lim).ReadRaw(nil)
		// The same bytes arriving a few at a time, so the reader refills its
		// buffer in the middle of frames, read as the same frames.
		whole, chunked := NewReader(bytes.NewReader(in), lim), NewReader(&trickle{rest: in}, lim)
		for {
			a, errA := whole.ReadRaw(nil)
			b, errB := chunked.ReadRaw(nil)
			if !bytes.Equal(a, b) || (errA == nil) != (errB == nil) {
				t.Fatalf("%q read whole: %q %v; a few bytes at a time: %q %v", in, a, errA, b, errB)
			}
			if errA != nil {
				break
			}
		}
		if err != nil {
			return
		}
		v, err := Parse(raw)
		if err != nil {
			t.Fatalf("accepted frame %q does not parse: %v", raw, err)
		}
		// An array's element frames, taken apart with no copy, are the
		// frames its parsed elements write back as.
		if v.Type != Array || v.IsNull || raw[0] != '*' {
			return
		}
		frames, err := Elements(raw)
		if err != nil || len(frames) != len(v.Elems) {
			t.Fatalf("Elements(%q) = %d frames, %v; Parse found %d", raw, len(frames), err, len(v.Elems))
		}
		for i, f := range frames {
			e, err := Parse(f)
			if err != nil || !bytes.Equal(AppendValue(nil, e), AppendValue(nil, v.Elems[i])) {
				t.Fatalf("Elements(%q)[%d] = %q, want the frame of %v", raw, i, f, v.Elems[i])
			}
		}
	})
}

// trickle hands its bytes out a few at a time (1 to 7, by the bytes
// themselves), as a socket does under load.
type trickle struct{ rest []byte }

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.rest), 1+int(r.rest[0]%7))
	copy(p, r.rest[:n])
	r.rest = r.rest[n:]
	return n, nil
}

// A reply's type is read before its elements: reading them refills the
// reader's buffer, and the byte where the header line was may then be a
// '|', which made the reader take the reply for an attribute and swallow
// the next reply with it (found as a store that paired a peer's replies
// with the wrong requests under load).
func TestReadRawTypeSurvivesRefill(t *testing.T) {
	reply := "*2\r\n$3\r\nabc\r\n$9\r\nkey:1|xyz\r\n"
	stream := []byte(reply + reply)
	split := strings.Index(reply, "|") // the refill puts the '|' where "*2" was
	rd := NewReader(&chunks{parts: [][]byte{stream[:split], stream[split:]}}, DefaultLimits)
	for i := 0; i < 2; i++ {
		raw, err := rd.ReadRaw(nil)
		if err != nil || string(raw) != reply {
			t.Fatalf("reply %d: %q, %v; want %q", i, raw, err, reply)
		}
	}
}

// chunks hands out its parts one Read each.
type chunks struct{ parts [][]byte }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	if c.parts[0] = c.parts[0][n:]; len(c.parts[0]) == 0 {
		c.parts = c.parts[1:]
	}
	return n, nil
}

// Aggregate counts so large that doubling a map's count overflows are
// refused, not turned into a negative length (found by FuzzReadRaw).
func TestHugeAggregateCounts(t *testing.T) {
	for _, in := range []string{"%7770000000000000000\r\n", "%4611686018427387905\r\n", "*9223372036854775807\r\n", "|4611686018427387905\r\n"} {
		if _, err := Parse([]byte(in)); !IsProtocolError(err) {
			t.Errorf("Parse(%q): %v, want a protocol error", in, err)
		}
		if _, err := reader(in).ReadRaw(nil); !IsProtocolError(err) {
			t.Errorf("ReadRaw(%q): %v, want a protocol error", in, err)
		}
	}
}

// Integers parse over the whole int64 range, the smallest included (a
// Redis counter at its limit), and not one past either end.
func TestParseIntRange(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"-1", -1, true},
		{"9223372036854775807", 1<<63 - 1, true},
		{"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"-", 0, false},
		{"1a", 0, false},
	} {
		got, ok := parseInt([]byte(tt.in))
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseInt(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	v, err := Parse([]byte(":-9223372036854775808\r\n"))
	if err != nil || v.Int != -1<<63 {
		t.Errorf("Parse of the smallest integer: %v, %v", v, err)
	}
}

func TestElements(t *testing.T) {
	got, err := Elements([]byte("*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:2\r\n"))
	if err != nil || len(got) != 3 || string(got[0]) != "$1\r\na\r\n" || string(got[1]) != "$-1\r\n" || string(got[2]) != "*1\r\n:2\r\n" {
		t.Fatalf("Elements = %q, %v", got, err)
	}
	for _, bad := range []string{"", "$1\r\na\r\n", "*2\r\n$1\r\na\r\n", "*1\r\n:1\r\n:2\r\n", "*-1\r\n", "*x\r\n"} {
		if _, err := Elements([]byte(bad)); !IsProtocolError(err) {
			t.Errorf("Elements(%q): %v, want a protocol error", bad, err)
		}
	}
}
