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
