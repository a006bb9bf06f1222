package node

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/decide"
	"github.com/troop-lab/troop/resp"
)

// Which commands of several keys run as transactions (transact.go), and
// what each does to its keys' values: its commands, each key in the
// place of a scratch key of its own, run in one MULTI block on the
// coordinator's redis-server.

// transactCommand runs args, a command of several keys of one owner (a
// write of several keys, a pop that moves, a script, a read that met a
// lock), as a transaction at level, answering done, when level decides
// such commands by consensus and the node can run it in scratch keys; it
// reports whether it did.
func (n *Node) transactCommand(tr *trace, level consistency.Level, keys, args [][]byte, g *keyGate, h *hold, done replyFunc) bool {
	if !n.byConsensusAt(level) || len(keys) < 2 {
		return false
	}
	distinct := distinctKeys(keys)
	if len(distinct) < 2 { // one key in several places (LMOVE l l): a change of that key
		scratch, ok := n.consensusScript(level, lookup(args[0]), keys, args)
		if ok {
			n.byConsensus(tr, level, keys[0], args[0], n.blockChange(keys[0], [][][]byte{scratch}, false, nil), decideRequest(level, args), g, h, done)
		}
		return ok
	}
	scratch, ok := scratchArgsFor(args, keys, distinct)
	if !ok {
		return false
	}
	n.runTransact(tr, level, args[0], distinct, n.blockCompound(distinct, [][][]byte{scratch}, false, nil, nil), g, h, done)
	return true
}

// execTransact runs a transaction (MULTI/EXEC) over several keys of one
// owner, its WATCH tokens checked against the values it locked, as a
// transaction at level, when level decides such transactions by consensus
// and none of its commands asks the cluster; it reports whether it did.
func (n *Node) execTransact(tx *txn, wkeys, tokens [][]byte, sess *session, level consistency.Level, done replyFunc) bool {
	if !n.byConsensusAt(level) {
		return false
	}
	distinct := distinctKeys(append(append([][]byte{}, tx.keys...), wkeys...))
	if len(distinct) < 2 {
		return false
	}
	var scratch [][][]byte
	for _, c := range tx.cmds {
		cmd := lookup(c[0])
		keys, _, bad := txCommand(cmd, c)
		if bad != "" || clusterInTx(cmd, c) {
			return false
		}
		sc, ok := scratchArgsFor(c, keys, distinct)
		if !ok {
			return false
		}
		scratch = append(scratch, sc)
	}
	n.runTransact(nil, level, []byte("EXEC"), distinct, n.blockCompound(distinct, scratch, true, wkeys, tokens), &sess.gate, nil, n.execReply(tx, sess, done))
	return true
}

// runTransact runs do on keys as a transaction (transact) on a goroutine
// of its own, holding the keys in the connection's gate until it answers.
func (n *Node) runTransact(tr *trace, level consistency.Level, name []byte, keys [][]byte, do compoundFunc, g *keyGate, h *hold, done replyFunc) {
	reps := n.replicas(keys[0])
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	ungates := make([]func(), len(keys))
	for i, k := range keys {
		ungates[i] = g.hold(k)
	}
	h.add(1)
	go func() {
		defer h.done()
		reply := n.transact(tr, level, name, keys, reps, do)
		for _, u := range ungates {
			u()
		}
		done(reply)
	}()
}

// distinctKeys is keys without repeats, in the order of their first
// appearance.
func distinctKeys(keys [][]byte) [][]byte {
	var out [][]byte
	for _, k := range keys {
		if !slices.ContainsFunc(out, func(o []byte) bool { return bytes.Equal(o, k) }) {
			out = append(out, k)
		}
	}
	return out
}

// scratchName is where the i-th key of a transaction runs in the
// coordinator's redis-server.
func scratchName(i int) []byte { return strconv.AppendInt([]byte(scratchKey+":"), int64(i), 10) }

// scratchArgsFor is args with each of its keys (cmdKeys, as txCommand or
// a keys function found them in args) in the place of the scratch key of
// its index in keys. It is not ok when the node cannot tell a key's place
// (an empty key), when a key is not among keys, or when the command names
// other keys besides (SORT's patterns).
func scratchArgsFor(args, cmdKeys, keys [][]byte) ([][]byte, bool) {
	if c := lookup(args[0]); c != nil && (c.name == "SORT" || c.name == "SORT_RO") {
		if _, patterns := sortKeys(args); len(patterns) > 0 {
			return nil, false
		}
	}
	out := slices.Clone(args)
	for _, k := range cmdKeys {
		at := -1
		for i, a := range args {
			if len(a) > 0 && len(a) == len(k) && &a[0] == &k[0] { // the keys functions hand out args' own words
				at = i
			}
		}
		idx := slices.IndexFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) })
		if at < 0 || idx < 0 {
			return nil, false
		}
		out[at] = scratchName(idx)
	}
	return out, true
}

// blockCompound is what a transaction of cmds (their keys in scratch keys,
// scratchArgsFor) does to keys' values: it runs them in one MULTI block
// (runBlockOn) and answers the one command's reply, or, exec, EXEC's:
// a null array, the values left as they are, when a watched key's token
// (wkeys, tokens) is not that of its value, else every command's reply.
func (n *Node) blockCompound(keys [][]byte, cmds [][][]byte, exec bool, wkeys, tokens [][]byte) compoundFunc {
	return func(values [][]byte, bases []decide.Ballot) ([]byte, [][]byte, error) {
		for j, wk := range wkeys {
			i := slices.IndexFunc(keys, func(o []byte) bool { return bytes.Equal(o, wk) })
			if i < 0 || !bytes.Equal(tokens[j], valueToken(makeSlot(values[i], nil), bases[i])) {
				return resp.AppendNullArray(nil), values, nil
			}
		}
		replies, after, err := n.runBlockOn(keys, values, cmds)
		if err != nil {
			return nil, nil, err
		}
		return blockReply(replies, exec), after, nil
	}
}

// runBlockOn runs cmds on keys' values (each a slot's data, nil for none)
// in scratch keys of this node's redis-server (scratchName), as one MULTI
// block (DEL, RESTORE of each, the commands, DUMP and PEXPIRETIME of
// each, DEL), waiting for the answer: each command's reply, the scratch
// keys' names in it given back as the keys', and the values after.
func (n *Node) runBlockOn(keys, values [][]byte, cmds [][][]byte) ([]resp.Value, [][]byte, error) {
	names := make([][]byte, len(keys))
	for i := range keys {
		names[i] = scratchName(i)
	}
	restores := 0
	for _, v := range values {
		if v != nil {
			restores++
		}
	}
	sent := 4 + restores + len(cmds) + 2*len(keys) // MULTI, DEL, RESTOREs, the commands, DUMP and PEXPIRETIME of each, DEL, EXEC
	appendReq := func(dst []byte) []byte {
		dst = resp.AppendCommandStrings(dst, "MULTI")
		dst = resp.AppendCommand(dst, append([][]byte{[]byte("DEL")}, names...)...)
		for i, v := range values {
			if dump, expireAt := unpackValue(makeSlot(v, nil)); dump != nil {
				dst = resp.AppendCommand(dst, []byte("RESTORE"), names[i], strconv.AppendInt(nil, expireAt, 10), dump, []byte("ABSTTL"))
			}
		}
		for _, c := range cmds {
			dst = resp.AppendCommand(dst, c...)
		}
		for _, name := range names {
			dst = resp.AppendCommand(dst, []byte("DUMP"), name)
			dst = resp.AppendCommand(dst, []byte("PEXPIRETIME"), name)
		}
		dst = resp.AppendCommand(dst, append([][]byte{[]byte("DEL")}, names...)...)
		return resp.AppendCommandStrings(dst, "EXEC")
	}
	v, err := n.storeBlock(keys[0], sent, appendReq)
	if err != nil {
		return nil, nil, err
	}
	for i := 1; i < 1+restores; i++ {
		if v.Elems[i].IsError() {
			return nil, nil, fmt.Errorf("a value could not be restored: %s", v.Elems[i].Str)
		}
	}
	replies := v.Elems[1+restores : 1+restores+len(cmds)]
	for i := range replies {
		nameKeys(&replies[i], names, keys)
	}
	tail := v.Elems[1+restores+len(cmds):]
	after := make([][]byte, len(keys))
	for i := range keys {
		if p := packValue(tail[2*i].Str, tail[2*i+1].Int); p != nil {
			after[i], _ = splitSlot(p)
		}
	}
	return replies, after, nil
}

// nameKeys gives each key's name back to its scratch key wherever a reply
// names it (BLMOVE's, a script's KEYS).
func nameKeys(v *resp.Value, names, keys [][]byte) {
	if v.Type == resp.BulkString {
		for i, name := range names {
			if bytes.Equal(v.Str, name) {
				v.Str = keys[i]
				break
			}
		}
	}
	for i := range v.Elems {
		nameKeys(&v.Elems[i], names, keys)
	}
}
