package resp

import (
	"slices"
	"strconv"
)

// The Append functions encode one frame at the end of dst and return the
// extended slice, in the style of strconv.Append*: no allocation when dst
// has room.

// AppendCommand encodes args as an array of bulk strings, the form every
// Redis command takes on the wire. dst grows once, to CommandSize.
func AppendCommand(dst []byte, args ...[]byte) []byte {
	dst = slices.Grow(dst, CommandSize(args))
	dst = AppendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendCommandStrings is AppendCommand for string arguments.
func AppendCommandStrings(dst []byte, args ...string) []byte {
	dst = AppendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = AppendBulkString(dst, a)
	}
	return dst
}

// BulkSize is at most what AppendBulk adds for n bytes: a header of up to
// 20 digits, the bytes, and the line ends.
func BulkSize(n int) int { return n + 25 }

// CommandSize is at most what AppendCommand adds for args: what a buffer
// grows to at once, rather than once per argument.
func CommandSize(args [][]byte) int {
	n := 24
	for _, a := range args {
		n += BulkSize(len(a))
	}
	return n
}

// AppendBulkInt writes n as a bulk string, the form numeric arguments of
// commands take.
func AppendBulkInt(dst []byte, n int64) []byte {
	var b [20]byte
	return AppendBulk(dst, strconv.AppendInt(b[:0], n, 10))
}

// AppendArrayHeader writes "*n\r\n"; n < 0 writes RESP2's null array.
func AppendArrayHeader(dst []byte, n int) []byte {
	return appendHeader(dst, '*', int64(n))
}

// AppendBulk writes a bulk string.
func AppendBulk(dst, b []byte) []byte {
	dst = appendHeader(dst, '$', int64(len(b)))
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendBulkString writes a bulk string from a string.
func AppendBulkString(dst []byte, s string) []byte {
	dst = appendHeader(dst, '$', int64(len(s)))
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// AppendNullBulk writes RESP2's null bulk string, "$-1".
func AppendNullBulk(dst []byte) []byte { return append(dst, "$-1\r\n"...) }

// AppendNullArray appends RESP2's null array, a blocking pop's answer
// when it timed out.
func AppendNullArray(dst []byte) []byte { return append(dst, "*-1\r\n"...) }

// AppendInt writes an integer reply.
func AppendInt(dst []byte, n int64) []byte { return appendHeader(dst, ':', n) }

// AppendSimple writes a simple string; line breaks in s become spaces so the
// frame stays well formed.
func AppendSimple(dst []byte, s string) []byte {
	dst = append(dst, '+')
	return appendLine(dst, s)
}

// AppendError writes an error reply. By convention msg starts with an upper
// case code (ERR, BUSY, WRONGTYPE ...).
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	return appendLine(dst, msg)
}

// AppendValue encodes v. Values read from RESP3 are written back as RESP3.
func AppendValue(dst []byte, v Value) []byte {
	if v.IsNull {
		switch v.Type {
		case Array:
			return append(dst, "*-1\r\n"...)
		case Null:
			return append(dst, "_\r\n"...)
		default:
			return AppendNullBulk(dst)
		}
	}
	switch v.Type {
	case SimpleString, Error, Double, BigNumber:
		dst = append(dst, byte(v.Type))
		return appendLine(dst, string(v.Str))
	case Boolean:
		dst = append(dst, '#')
		if len(v.Str) > 0 && v.Str[0] == 't' {
			return append(dst, "t\r\n"...)
		}
		return append(dst, "f\r\n"...)
	case Integer:
		return AppendInt(dst, v.Int)
	case BulkString, BlobError, Verbatim:
		dst = appendHeader(dst, byte(v.Type), int64(len(v.Str)))
		dst = append(dst, v.Str...)
		return append(dst, '\r', '\n')
	case Map, Attribute:
		dst = appendHeader(dst, byte(v.Type), int64(len(v.Elems)/2))
	case Null:
		return append(dst, "_\r\n"...)
	default: // Array, Set, Push
		dst = appendHeader(dst, byte(v.Type), int64(len(v.Elems)))
	}
	for _, e := range v.Elems {
		dst = AppendValue(dst, e)
	}
	return dst
}

func appendHeader(dst []byte, t byte, n int64) []byte {
	dst = append(dst, t)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '\r', '\n')
}

func appendLine(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}
