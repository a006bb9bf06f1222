package resp

import "bytes"

// Parse parses one complete frame, as returned by ReadRaw. The Value's byte
// slices point into raw. Trailing bytes after the frame are an error.
func Parse(raw []byte) (Value, error) {
	v, n, err := parse(raw, 0)
	if err != nil {
		return Value{}, err
	}
	if n != len(raw) {
		return Value{}, protoErr("%d bytes after the frame", len(raw)-n)
	}
	return v, nil
}

func parse(b []byte, depth int) (Value, int, error) {
	end := bytes.IndexByte(b, '\n')
	if end < 2 || b[end-1] != '\r' {
		return Value{}, 0, protoErr("frame without CRLF")
	}
	line := b[1 : end-1]
	pos := end + 1
	t := Type(b[0])
	v := Value{Type: t}
	switch t {
	case SimpleString, Error, Double, BigNumber:
		v.Str = line
	case Boolean:
		if len(line) != 1 || (line[0] != 't' && line[0] != 'f') {
			return Value{}, 0, protoErr("invalid boolean")
		}
		v.Str = line
	case Null:
		v.IsNull = true
	case Integer:
		n, ok := parseInt(line)
		if !ok {
			return Value{}, 0, protoErr("invalid integer")
		}
		v.Int = n
	case BulkString, BlobError, Verbatim:
		n, ok := parseInt(line)
		if !ok || n < -1 {
			return Value{}, 0, protoErr("invalid bulk length")
		}
		if n == -1 {
			v.IsNull = true
			return v, pos, nil
		}
		if int64(len(b)-pos) < n+2 {
			return Value{}, 0, protoErr("bulk payload truncated")
		}
		stop := pos + int(n)
		if b[stop] != '\r' || b[stop+1] != '\n' {
			return Value{}, 0, protoErr("bulk payload not followed by CRLF")
		}
		v.Str = b[pos:stop:stop]
		pos = stop + 2
	case Array, Map, Set, Attribute, Push:
		n, ok := parseInt(line)
		if !ok || n < -1 || (n == -1 && t != Array) { // only RESP2's array has a null form
			return Value{}, 0, protoErr("invalid aggregate length")
		}
		if n == -1 {
			v.IsNull = true
			return v, pos, nil
		}
		// Each element takes at least 3 bytes, which bounds n by the input
		// (checked before a map's count is doubled, which could overflow).
		if n > int64(len(b)-pos)/3 {
			return Value{}, 0, protoErr("aggregate longer than its frame")
		}
		if t == Map || t == Attribute {
			n *= 2
			if n > int64(len(b)-pos)/3 {
				return Value{}, 0, protoErr("aggregate longer than its frame")
			}
		}
		if depth >= DefaultLimits.MaxDepth {
			return Value{}, 0, protoErr("nesting too deep")
		}
		v.Elems = make([]Value, n)
		for i := range v.Elems {
			e, used, err := parse(b[pos:], depth+1)
			if err != nil {
				return Value{}, 0, err
			}
			v.Elems[i] = e
			pos += used
		}
		if t == Attribute { // skip the attribute, keep the frame it annotates
			next, used, err := parse(b[pos:], depth)
			if err != nil {
				return Value{}, 0, err
			}
			return next, pos + used, nil
		}
	default:
		return Value{}, 0, protoErr("unknown frame type '%s'", printable(b[:1]))
	}
	return v, pos, nil
}

// Elements returns the frames of the elements of raw, one complete RESP2
// array frame, as slices of raw: a reply put together from parts (a value
// and its version, say) is taken apart with no copy of the parts.
func Elements(raw []byte) ([][]byte, error) {
	if len(raw) == 0 || Type(raw[0]) != Array {
		return nil, protoErr("not an array")
	}
	end := bytes.IndexByte(raw, '\n')
	if end < 2 || raw[end-1] != '\r' {
		return nil, protoErr("frame without CRLF")
	}
	n, ok := parseInt(raw[1 : end-1])
	if !ok || n < 0 || n > int64(len(raw)-end-1)/3 {
		return nil, protoErr("invalid array length")
	}
	out := make([][]byte, n)
	pos := end + 1
	for i := range out {
		_, used, err := parse(raw[pos:], 1)
		if err != nil {
			return nil, err
		}
		out[i] = raw[pos : pos+used : pos+used]
		pos += used
	}
	if pos != len(raw) {
		return nil, protoErr("%d bytes after the frame", len(raw)-pos)
	}
	return out, nil
}

// ParseCommand parses the request at the start of buf: a RESP array of bulk
// strings, or an inline command (a line of words, as typed into telnet).
// Empty requests are skipped, as redis-server does. It returns the command
// and how many bytes of buf it took; n is 0, with a nil error, while buf
// holds only the start of a request, and need is then how many bytes the
// request takes in all, where its header says (0 where it does not yet).
// The command's Raw is a copy, so buf may be reused at once.
func ParseCommand(buf []byte, lim Limits) (cmd Command, n, need int, err error) {
	for n < len(buf) {
		var took int
		if buf[n] == '*' {
			cmd, took, need, err = parseArrayCommand(buf[n:], lim)
		} else {
			cmd, took, err = parseInlineCommand(buf[n:], lim)
		}
		if err != nil || took == 0 {
			if need > 0 {
				need += n
			}
			return Command{}, 0, need, err
		}
		n += took
		if len(cmd.Args) > 0 {
			return cmd, n, 0, nil
		}
	}
	return Command{}, 0, 0, nil
}

// commandLine returns the line at b[at:] without its CRLF (or bare LF, which
// redis-server accepts too), and where the next line starts; next is 0 when
// the line is not complete yet.
func commandLine(b []byte, at int, lim Limits) (line []byte, next int, err error) {
	i := bytes.IndexByte(b[at:], '\n')
	if i < 0 {
		if len(b)-at > lim.MaxInline {
			return nil, 0, protoErr("line longer than %d bytes", lim.MaxInline)
		}
		return nil, 0, nil
	}
	if i > lim.MaxInline {
		return nil, 0, protoErr("line longer than %d bytes", lim.MaxInline)
	}
	line = b[at : at+i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, at + i + 1, nil
}

func parseArrayCommand(b []byte, lim Limits) (cmd Command, n, need int, err error) {
	line, pos, err := commandLine(b, 0, lim)
	if err != nil || pos == 0 {
		return Command{}, 0, 0, err
	}
	count, ok := parseInt(line[1:])
	if !ok {
		return Command{}, 0, 0, protoErr("invalid multibulk length")
	}
	if count <= 0 {
		return Command{}, pos, 0, nil
	}
	if count > int64(lim.MaxElems) {
		return Command{}, 0, 0, protoErr("invalid multibulk length %d (limit %d)", count, lim.MaxElems)
	}
	// Raw goes on to redis-server as it is, so it must be the canonical
	// encoding: redis-server refuses a bare LF or a length of "04".
	odd := !canonicalLine(b, pos, line)
	var spansBuf [8][2]int
	spans := spansBuf[:0]
	for i := int64(0); i < count; i++ {
		line, next, err := commandLine(b, pos, lim)
		if err != nil || next == 0 {
			return Command{}, 0, 0, err
		}
		if len(line) == 0 || line[0] != '$' {
			return Command{}, 0, 0, protoErr("expected '$', got '%s'", printable(line))
		}
		size, ok := parseInt(line[1:])
		if !ok || size < 0 {
			return Command{}, 0, 0, protoErr("invalid bulk length")
		}
		odd = odd || !canonicalLine(b, next, line)
		if size > int64(lim.MaxBulk) || int64(next)+size > int64(lim.MaxFrame) {
			return Command{}, 0, 0, protoErr("request of more than %d bytes", min(lim.MaxBulk, lim.MaxFrame))
		}
		end := next + int(size)
		if end+2 > len(b) {
			return Command{}, 0, end + 2, nil
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return Command{}, 0, 0, protoErr("bulk payload not followed by CRLF")
		}
		spans = append(spans, [2]int{next, end})
		pos = end + 2
	}
	args := make([][]byte, len(spans))
	if odd {
		for i, s := range spans {
			args[i] = b[s[0]:s[1]]
		}
		return canonical(args), pos, 0, nil
	}
	raw := append([]byte(nil), b[:pos]...)
	for i, s := range spans {
		args[i] = raw[s[0]:s[1]:s[1]]
	}
	return Command{Raw: raw, Args: args}, pos, 0, nil
}

func parseInlineCommand(b []byte, lim Limits) (Command, int, error) {
	line, n, err := commandLine(b, 0, lim)
	if err != nil || n == 0 {
		return Command{}, 0, err
	}
	args, err := splitInline(line)
	if err != nil || len(args) == 0 {
		return Command{}, n, err
	}
	return canonical(args), n, nil
}

// canonicalLine says whether the header line ending before next is as
// AppendCommand writes it: a CRLF, and a length without sign or leading zero.
func canonicalLine(b []byte, next int, line []byte) bool {
	return b[next-2] == '\r' && line[1] != '-' && (line[1] != '0' || len(line) == 2)
}

// canonical is the command of args, with Raw their array encoding and args
// re-pointed into it.
func canonical(args [][]byte) Command {
	raw := AppendCommand(nil, args...)
	at := bytes.IndexByte(raw, '\n') + 1 // past *N
	for i, a := range args {
		at += bytes.IndexByte(raw[at:], '\n') + 1 // past $len
		args[i] = raw[at : at+len(a) : at+len(a)]
		at += len(a) + 2
	}
	return Command{Raw: raw, Args: args}
}
