package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Reader reads frames from a stream. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	lim Limits
}

// NewReader reads from rd through a 64 KiB buffer (or rd itself when it is
// already a *bufio.Reader), within the given limits.
func NewReader(rd io.Reader, lim Limits) *Reader {
	br, ok := rd.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(rd, 64<<10)
	}
	return &Reader{br: br, lim: lim}
}

// Buffered is the number of bytes read from the stream but not yet consumed.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Command is one request: Args are the command name and its arguments, Raw the
// request as an array of bulk strings (what arrived, or the encoding of an
// inline command). Args point into Raw.
type Command struct {
	Raw  []byte
	Args [][]byte
}

// ReadRaw appends the bytes of the next frame, whatever its type, to dst.
func (r *Reader) ReadRaw(dst []byte) ([]byte, error) {
	start := len(dst)
	return r.readRaw(dst, start, 0)
}

func (r *Reader) readRaw(dst []byte, start, depth int) ([]byte, error) {
	line, err := r.readLine()
	if err != nil {
		if depth > 0 {
			err = eofIsUnexpected(err)
		}
		return dst, err
	}
	if len(line) == 0 {
		return dst, protoErr("empty line where a frame was expected")
	}
	// line points into the reader's buffer, which the reads of an
	// aggregate's elements refill: take what is needed of it now.
	typ := Type(line[0])
	dst = append(dst, line...)
	dst = append(dst, '\r', '\n')
	switch typ {
	case SimpleString, Error, Double, BigNumber:
		return dst, nil
	case Integer:
		if _, ok := parseInt(line[1:]); !ok {
			return dst, protoErr("invalid integer")
		}
		return dst, nil
	case Boolean:
		if len(line) != 2 || (line[1] != 't' && line[1] != 'f') {
			return dst, protoErr("invalid boolean")
		}
		return dst, nil
	case Null:
		if len(line) != 1 {
			return dst, protoErr("invalid null")
		}
		return dst, nil
	case BulkString, BlobError, Verbatim:
		n, ok := parseInt(line[1:])
		if !ok || n < -1 {
			return dst, protoErr("invalid bulk length")
		}
		if n == -1 {
			return dst, nil
		}
		if n > int64(r.lim.MaxBulk) || len(dst)-start+int(n) > r.lim.MaxFrame {
			return dst, protoErr("frame of more than %d bytes", min(r.lim.MaxBulk, r.lim.MaxFrame))
		}
		return r.readPayload(dst, int(n))
	case Array, Map, Set, Attribute, Push:
		n, ok := parseInt(line[1:])
		if !ok || n < -1 || (n == -1 && typ != Array) { // only RESP2's array has a null form
			return dst, protoErr("invalid aggregate length")
		}
		if n > int64(r.lim.MaxElems) { // before a map's count is doubled, which could overflow
			return dst, protoErr("aggregate of %d elements (limit %d)", n, r.lim.MaxElems)
		}
		if typ == Map || typ == Attribute {
			n *= 2
		}
		if n > int64(r.lim.MaxElems) {
			return dst, protoErr("aggregate of %d elements (limit %d)", n, r.lim.MaxElems)
		}
		if depth >= r.lim.MaxDepth {
			return dst, protoErr("nesting deeper than %d", r.lim.MaxDepth)
		}
		for i := int64(0); i < n; i++ {
			if dst, err = r.readRaw(dst, start, depth+1); err != nil {
				return dst, err
			}
		}
		if typ == Attribute { // an attribute annotates the frame after it
			return r.readRaw(dst, start, depth)
		}
		return dst, nil
	default:
		return dst, protoErr("unknown frame type '%s'", printable(line[:1]))
	}
}

// ReadValue reads and parses the next frame.
func (r *Reader) ReadValue() (Value, error) {
	raw, err := r.ReadRaw(nil)
	if err != nil {
		return Value{}, err
	}
	return Parse(raw)
}

// readPayload appends n bytes and the CRLF after them.
func (r *Reader) readPayload(dst []byte, n int) ([]byte, error) {
	dst = grow(dst, n+2)
	start := len(dst)
	dst = dst[:start+n+2]
	if _, err := io.ReadFull(r.br, dst[start:]); err != nil {
		return dst[:start], eofIsUnexpected(err)
	}
	if dst[start+n] != '\r' || dst[start+n+1] != '\n' {
		return dst, protoErr("bulk payload not followed by CRLF")
	}
	return dst, nil
}

// readLine returns a line without its CRLF. The slice is valid until the next
// read.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || len(line) > r.lim.MaxInline {
		return nil, protoErr("line longer than %d bytes", min(r.br.Size(), r.lim.MaxInline))
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		// redis-server accepts a bare LF after inline commands; so do we.
		return line[:len(line)-1], nil
	}
	return line[:len(line)-2], nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), 2*cap(b)+n)
	copy(nb, b)
	return nb
}

func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseInt parses a decimal integer without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	// Accumulate the magnitude unsigned, so that the smallest int64, whose
	// magnitude int64 cannot hold, parses too.
	limit := uint64(1<<63 - 1)
	if neg {
		limit = 1 << 63
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (limit-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	n := int64(u)
	if neg {
		n = -n // for 1<<63 this wraps to the smallest int64, as wanted
	}
	return n, true
}

func printable(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return string(bytes.Map(func(r rune) rune {
		if r < 32 || r > 126 {
			return '?'
		}
		return r
	}, b))
}

// splitInline splits an inline command into words, honouring double quotes
// (with \n, \r, \t, \", \\ and \xHH escapes) and single quotes, as redis-cli
// and redis-server do.
func splitInline(line []byte) ([][]byte, error) {
	var args [][]byte
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i == len(line) {
			return args, nil
		}
		var word []byte
		switch line[i] {
		case '"':
			i++
			for {
				if i == len(line) {
					return nil, protoErr("unbalanced quotes in request")
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) {
					i++
					switch e := line[i]; e {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'x':
						if i+2 < len(line) && isHex(line[i+1]) && isHex(line[i+2]) {
							c = unhex(line[i+1])<<4 | unhex(line[i+2])
							i += 2
						} else {
							c = 'x'
						}
					default:
						c = e
					}
				}
				word = append(word, c)
				i++
			}
		case '\'':
			i++
			for {
				if i == len(line) {
					return nil, protoErr("unbalanced quotes in request")
				}
				c := line[i]
				if c == '\'' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					c = '\''
				}
				word = append(word, c)
				i++
			}
		default:
			for i < len(line) && !isSpace(line[i]) {
				word = append(word, line[i])
				i++
			}
		}
		if i < len(line) && !isSpace(line[i]) {
			return nil, protoErr("unbalanced quotes in request")
		}
		if word == nil {
			word = []byte{}
		}
		args = append(args, word)
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
