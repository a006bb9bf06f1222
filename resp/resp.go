// Package resp reads and writes the Redis serialization protocol, RESP2 and
// RESP3. It is shared by the node, the client and the benchmark, so the hot
// paths (reading a command, copying a reply frame) avoid re-encoding: a frame
// is kept as the exact bytes that arrived, and parsed into a Value only when
// something needs to look inside it.
package resp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Type is the first byte of a RESP frame.
type Type byte

// RESP2 types, then the types RESP3 added.
const (
	SimpleString Type = '+'
	Error        Type = '-'
	Integer      Type = ':'
	BulkString   Type = '$'
	Array        Type = '*'
	Null         Type = '_'
	Double       Type = ','
	Boolean      Type = '#'
	BigNumber    Type = '('
	BlobError    Type = '!'
	Verbatim     Type = '='
	Map          Type = '%'
	Set          Type = '~'
	Attribute    Type = '|'
	Push         Type = '>'
)

// Value is a parsed frame. Str holds the payload of string-like types
// (simple, error, bulk, verbatim, double, big number, boolean as "t"/"f"),
// Int the value of an integer, Elems the elements of aggregates (a map's
// keys and values alternate). IsNull marks RESP2's null bulk and null array
// and RESP3's null.
type Value struct {
	Type   Type
	Str    []byte
	Int    int64
	Elems  []Value
	IsNull bool
}

// IsError reports whether v is an error reply.
func (v Value) IsError() bool { return v.Type == Error || v.Type == BlobError }

// String renders v for humans: logs, error messages and tests.
func (v Value) String() string {
	switch {
	case v.IsNull:
		return "(nil)"
	case v.Type == Integer:
		return "(integer) " + strconv.FormatInt(v.Int, 10)
	case v.IsError():
		return "(error) " + string(v.Str)
	case len(v.Elems) > 0 || v.Type == Array || v.Type == Map || v.Type == Set || v.Type == Push:
		s := "["
		for i, e := range v.Elems {
			if i > 0 {
				s += " "
			}
			s += e.String()
		}
		return s + "]"
	default:
		return strconv.Quote(string(v.Str))
	}
}

// Limits bound what a Reader accepts, so a hostile or broken peer cannot make
// it allocate without bound.
type Limits struct {
	MaxBulk   int // longest bulk string, in bytes
	MaxElems  int // most elements in one aggregate
	MaxInline int // longest inline command or simple line
	MaxDepth  int // deepest nesting of aggregates
	MaxFrame  int // most bytes in one frame, all of it
}

// DefaultLimits mirror redis-server's defaults: 512 MB bulk strings, 64 KB
// inline commands; and replies nested as deep as redis-server makes them:
// a Lua script's reply nests as deep as Lua's stack lets it (a table that
// holds itself: about 8,000 levels, then "reached lua stack limit").
var DefaultLimits = Limits{
	MaxBulk:   512 << 20,
	MaxElems:  1 << 20,
	MaxInline: 64 << 10,
	MaxDepth:  10000,
	MaxFrame:  512 << 20,
}

// ProtocolError means the stream broke the protocol: the reader cannot find
// the next frame, so the connection has to be closed after reporting it.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.Msg }

func protoErr(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// IsProtocolError reports whether err is a ProtocolError.
func IsProtocolError(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

// Printable is an argument as an error message or a log line quotes it:
// its first 64 bytes, control characters as '?'.
func Printable(a []byte) string {
	if len(a) > 64 {
		a = a[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 32 || r == 127 {
			return '?'
		}
		return r
	}, string(a))
}
