package bench

import (
	"bytes"
	"encoding/hex"
	"hash/crc32"
)

// A value troop bench writes says which key and which write it belongs to and
// carries a checksum, so a read can be checked on its own (is it intact, is it
// this key's?) and against the model of writes (is it a version the store may
// return now?):
//
//	tv1:<version, 16 hex>:<crc32c, 8 hex>:<key>:<padding to the size>
//
// The checksum covers the version, the key and the padding. The padding is a
// pattern drawn from the version, so two writes of one key differ all along.
const valuePrefix = "tv1:"

// valueOverhead is the header's length without the key.
const valueOverhead = len(valuePrefix) + 16 + 1 + 8 + 1 + 1

// MinValueSize is the smallest value that holds the header for a key of
// keySize bytes.
func MinValueSize(keySize int) int { return valueOverhead + keySize }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeValue appends the value of write version to key, size bytes long
// (or the header alone when size is smaller).
func EncodeValue(dst, key []byte, version uint64, size int) []byte {
	start := len(dst)
	dst = append(dst, valuePrefix...)
	dst = appendHex(dst, version, 16)
	dst = append(dst, ':')
	crcAt := len(dst)
	dst = append(dst, "00000000:"...)
	dst = append(dst, key...)
	dst = append(dst, ':')
	for i := len(dst) - start; i < size; i++ {
		dst = append(dst, byte('a'+(version+uint64(i))%26))
	}
	v := dst[start:]
	sum := checksum(v, crcAt-start)
	appendHex(dst[:crcAt], uint64(sum), 8)
	return dst
}

// checksum is CRC-32C over the value without its prefix and checksum field.
func checksum(v []byte, crcAt int) uint32 {
	c := crc32.Update(0, castagnoli, v[len(valuePrefix):crcAt])
	return crc32.Update(c, castagnoli, v[crcAt+9:])
}

func appendHex(dst []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		dst = append(dst, "0123456789abcdef"[(v>>(4*uint(i)))&0xf])
	}
	return dst
}

// Integrity is what a value says about itself.
type Integrity int

const (
	Intact    Integrity = iota
	Malformed           // not a troop bench value at all (truncated, foreign)
	Corrupt             // a troop value whose checksum does not match
	WrongKey            // intact, but written for another key
)

func (i Integrity) String() string {
	return [...]string{"intact", "malformed", "corrupt", "wrong key"}[i]
}

// Verify checks value as the reply for key and returns its write version.
func Verify(key, value []byte) (uint64, Integrity) {
	crcAt := len(valuePrefix) + 17
	if len(value) < valueOverhead || !bytes.HasPrefix(value, []byte(valuePrefix)) ||
		value[crcAt-1] != ':' || value[crcAt+8] != ':' {
		return 0, Malformed
	}
	var vb, cb [8]byte
	if _, err := hex.Decode(vb[:], value[len(valuePrefix):crcAt-1]); err != nil {
		return 0, Malformed
	}
	if _, err := hex.Decode(cb[4:], value[crcAt:crcAt+8]); err != nil {
		return 0, Malformed
	}
	version := be64(vb[:])
	if uint32(be64(cb[:])) != checksum(value, crcAt) {
		return version, Corrupt
	}
	rest := value[crcAt+9:]
	if len(rest) < len(key)+1 || !bytes.Equal(rest[:len(key)], key) || rest[len(key)] != ':' {
		return version, WrongKey
	}
	return version, Intact
}

func be64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
