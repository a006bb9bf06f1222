package node

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/troop-lab/troop/node/decide"
)

// A key's register, as consensus sees it (node/decide), is a decide.Slot:
// the key's value and the lock a transaction on several keys of its owner
// holds on it (transact.go). On each replica the value lives under the key,
// as plain data, and the lock under LockPrefix+key; prepareScript answers
// both, acceptScript writes both, at one ballot.
//
// In the node the slot's data is the value as the proposer carries it: its
// expiry (Unix ms, as PEXPIRETIME, 0 for none) in 8 bytes, then its DUMP;
// nil for none. packValue makes the register of a value without a lock,
// which is what every change of one key makes, with no copy on reading.

// LockPrefix names the key that holds a key's lock: the record key of the
// transaction on several keys that holds the key locked.
const LockPrefix = "__troop:l:"

// lockedError is what a replica answers to a whole-value write, a repair
// or a read of a locked key. It starts as promisedError does, so the
// paths that meet a promise (a write misses its quorum, repair and a
// read's write-back read by consensus) treat it as one.
const lockedError = promisedCode + " troop: this key is locked by a transaction on several keys under way; a change of it goes by consensus, and this replica did not run the command"

// lockedCode tells lockedError from promisedError.
const lockedCode = promisedCode + " troop: this key is locked"

// errLocked is lockedError as a replica's read answers it.
var errLocked = errors.New(lockedError)

// isLocked says whether err is a replica refusing a locked key.
func isLocked(err error) bool { return err != nil && strings.Contains(err.Error(), lockedCode) }

// packValue is the register of a value without a lock: nil for none.
func packValue(dump []byte, expireAt int64) []byte {
	if len(dump) == 0 {
		return nil
	}
	out := make([]byte, 10, 10+len(dump))
	out[0] = 1 // data present; then a lock of length 0
	binary.BigEndian.PutUint64(out[2:], uint64(max(expireAt, 0)))
	return append(out, dump...)
}

// unpackValue is the value a register holds: its DUMP (nil for none) and
// its expiry.
func unpackValue(v []byte) (dump []byte, expireAt int64) {
	data, _ := splitSlot(v)
	if len(data) < 8 {
		return nil, 0
	}
	return data[8:], int64(binary.BigEndian.Uint64(data))
}

// splitSlot reads a register (decide.Slot's encoding) without copying: its
// data (nil for none) and its lock (empty for none). A value that is not a
// slot reads as empty.
func splitSlot(v []byte) (data, lock []byte) {
	if len(v) < 2 || v[0] > 1 {
		return nil, nil
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || uint64(len(v)-1-k) < n {
		return nil, nil
	}
	lock = v[1+k : 1+k+int(n)]
	if v[0] == 1 {
		data = v[1+k+int(n):]
	}
	return data, lock
}

// makeSlot is the register of data (as a slot's data: expiry, then DUMP)
// and lock.
func makeSlot(data, lock []byte) []byte {
	return decide.Slot{Data: data, Lock: string(lock)}.Value()
}
