package resp

import "bytes"

// A FrameScanner finds where a frame ends in a buffer that fills as a
// socket is read: each Scan resumes where the last one stopped, so a large
// reply that arrives in many reads is scanned once, not once per read. It
// accepts what ReadRaw reads, within the same limits, except a line ended
// by a bare LF, which no server sends. It is for a caller that reads a
// socket itself (an event loop) and cuts frames out of its buffer where
// they lie, with no copy. The zero value scans with no room at all: set
// Limits.
type FrameScanner struct {
	Limits
	pos  int         // where the next header starts
	open []openFrame // the aggregates pos is inside, outermost first
}

// An openFrame is an aggregate with elements still to come.
type openFrame struct {
	left int64 // elements still to come
	attr bool  // an attribute: the frame it annotates follows it
}

// Scan returns the length of the frame at the start of b, whatever its
// type, or 0, with a nil error, while b holds only the start of one. b
// holds what the last Scan was given, and perhaps more; after a frame is
// found (or an error), the next Scan starts a new one.
func (s *FrameScanner) Scan(b []byte) (int, error) {
	n, err := s.scan(b)
	if n > 0 || err != nil {
		s.pos, s.open = 0, s.open[:0]
	}
	return n, err
}

func (s *FrameScanner) scan(b []byte) (int, error) {
	for {
		rest := b[s.pos:]
		nl := bytes.IndexByte(rest[:min(len(rest), s.MaxInline)], '\n')
		if nl < 0 {
			if len(rest) >= s.MaxInline {
				return 0, protoErr("line longer than %d bytes", s.MaxInline)
			}
			return 0, nil
		}
		if nl < 1 || rest[nl-1] != '\r' {
			return 0, protoErr("line without CRLF")
		}
		line := rest[:nl-1]
		if len(line) == 0 {
			return 0, protoErr("empty line where a frame was expected")
		}
		next := s.pos + nl + 1
		typ := Type(line[0])
		switch typ {
		case SimpleString, Error, Double, BigNumber:
		case Integer:
			if _, ok := parseInt(line[1:]); !ok {
				return 0, protoErr("invalid integer")
			}
		case Boolean:
			if len(line) != 2 || (line[1] != 't' && line[1] != 'f') {
				return 0, protoErr("invalid boolean")
			}
		case Null:
			if len(line) != 1 {
				return 0, protoErr("invalid null")
			}
		case BulkString, BlobError, Verbatim:
			n, ok := parseInt(line[1:])
			if !ok || n < -1 {
				return 0, protoErr("invalid bulk length")
			}
			if n >= 0 {
				if n > int64(s.MaxBulk) || next+int(n) > s.MaxFrame {
					return 0, protoErr("frame of more than %d bytes", min(s.MaxBulk, s.MaxFrame))
				}
				end := next + int(n) + 2
				if len(b) < end {
					return 0, nil // the header is read again next time: the payload is waited for, not scanned
				}
				if b[end-2] != '\r' || b[end-1] != '\n' {
					return 0, protoErr("bulk payload not followed by CRLF")
				}
				next = end
			}
		case Array, Map, Set, Attribute, Push:
			n, ok := parseInt(line[1:])
			if !ok || n < -1 || (n == -1 && typ != Array) { // only RESP2's array has a null form
				return 0, protoErr("invalid aggregate length")
			}
			if n > int64(s.MaxElems) { // before a map's count is doubled, which could overflow
				return 0, protoErr("aggregate of %d elements (limit %d)", n, s.MaxElems)
			}
			if typ == Map || typ == Attribute {
				n *= 2
			}
			if n > int64(s.MaxElems) {
				return 0, protoErr("aggregate of %d elements (limit %d)", n, s.MaxElems)
			}
			if len(s.open) >= s.MaxDepth {
				return 0, protoErr("nesting deeper than %d", s.MaxDepth)
			}
			if n > 0 {
				s.open = append(s.open, openFrame{left: n, attr: typ == Attribute})
				s.pos = next
				continue
			}
			if typ == Attribute { // an empty attribute: the frame it annotates follows
				s.pos = next
				continue
			}
		default:
			return 0, protoErr("unknown frame type '%s'", printable(line[:1]))
		}
		// A frame ended at next: it completes the aggregates whose last
		// element it is, up to one still open or an attribute, whose frame
		// follows it.
		s.pos = next
		for {
			if len(s.open) == 0 {
				return next, nil
			}
			top := &s.open[len(s.open)-1]
			if top.left--; top.left > 0 {
				break
			}
			attr := top.attr
			s.open = s.open[:len(s.open)-1]
			if attr {
				break
			}
		}
	}
}
