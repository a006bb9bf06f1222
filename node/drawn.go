package node

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// pop runs a pop: by consensus at a quorum level when it takes from one
// key (consensus.go), which orders it with every other change of the key
// whoever coordinates them; else as drawn.
func (n *Node) pop(tr *trace, level consistency.Level, cmd *command, keys, args [][]byte, g *keyGate, h *hold, b *batch, done replyFunc) {
	if n.consensusWrite(level, cmd, keys, args) {
		n.consensus(tr, level, cmd, keys, args, g, h, done)
		return
	}
	if len(keys) > 1 && n.sameReplicas(keys) && n.transactCommand(tr, level, keys, args, g, h, done) {
		return
	}
	n.drawn(tr, level, cmd, keys, args, h, b, done)
}

// drawn runs a write whose effect depends on the order writes reach a
// replica, or on chance: the pops (LPOP, RPOP, ZPOPMIN, LMOVE, LMPOP ...)
// and SPOP. Were every replica to run it, two pops through two nodes at
// once could each reach the replicas in another order and both answer the
// same element, and SPOP would draw other members on each replica. So
// the deciding replica (transactions use the same one) runs the command,
// and the other replicas then remove exactly what it took, as one
// transaction with the same version (followOps): LREM of each element,
// ZREM and SREM of each member, and for a move the push too. Remote
// datacenters get the same, asynchronously. The client gets the deciding
// replica's answer once the write level is met, counting the deciding
// replica as one. A deciding replica that cannot be reached fails the
// command, with nothing applied anywhere.
func (n *Node) drawn(tr *trace, level consistency.Level, cmd *command, keys, args [][]byte, h *hold, b *batch, done replyFunc) {
	if n.consensusWrite(level, cmd, keys, args) { // a blocking pop that found something: its client waits, and sends nothing meanwhile
		n.consensus(tr, level, cmd, keys, args, &keyGate{}, h, done)
		return
	}
	if len(keys) > 1 && n.sameReplicas(keys) && n.transactCommand(tr, level, keys, args, &keyGate{}, h, done) {
		return
	}
	if len(keys) > 1 && !n.sameReplicas(keys) {
		done(resp.AppendError(nil, fmt.Sprintf("ERR troop: the keys of '%s' belong to different nodes, and troop does not split it", cmd.name)))
		return
	}
	v := n.view()
	reps := v.replicas(n.token(keys[0]))
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	d, di := n.decider(reps)
	version := n.clock.Next()
	h.add(1)
	decided := func(raw []byte, err error) {
		defer h.done()
		if err == nil && (len(raw) == 0 || raw[0] == '-') {
			done(raw) // redis-server's own error (WRONGTYPE, say): nothing was taken
			return
		}
		if err != nil {
			n.countFailure(err)
			n.stats.quorumFailures.Add(1)
			done(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s failed, outcome unknown: the replica that decides it, %s, did not answer, and no other replica got it (%v)", cmd.name, replicaName(d), err)))
			return
		}
		follow := followOps(cmd.name, args, raw)
		if len(follow) == 0 || len(reps) == 1 {
			done(raw) // nothing taken (an empty or missing key): nothing to follow
			return
		}
		w := n.newWriteQuorum(tr, level, args[0], reps, func(reply []byte) {
			if len(reply) == 0 || reply[0] != '-' {
				reply = raw // what was taken, not the followers' answers
			}
			done(reply)
		})
		n.follow(tr, v, reps, di, version, follow, n.token(keys[0]), w, h)
		w.answer(di, raw, nil)
	}
	if d.self {
		n.applyWrite(b, tr, v, version, cmd, keys, args, decided)
		return
	}
	if d.isDown() {
		decided(nil, errMarkedDown(d))
		return
	}
	n.toPeer(b, tr, d, appendPeerRequest(nil, "WRITE", version, args), fromPeer(decided))
}

// follow has the replicas other than the deciding one (reps[di]) run
// follow, as one transaction with the version, answering to w, and the
// remote datacenters' owners of token after, without waiting; h counts
// each of them.
func (n *Node) follow(tr *trace, v *view, reps []*member, di int, version []byte, follow [][][]byte, token uint32, w *writeQuorum, h *hold) {
	var remote []byte
	for i, m := range reps {
		if i == di {
			continue
		}
		i := i
		h.add(1)
		answer := func(raw []byte, err error) { w.answer(i, raw, err); h.done() }
		if m.self {
			n.runTx(nil, m, version, nil, nil, follow, answer)
			continue
		}
		if remote == nil {
			remote = appendTxRequest(nil, "TX", version, nil, nil, follow)
		}
		n.sendWrite(nil, tr, m, remote, answer)
	}
	if len(v.remoteDCs) > 0 {
		fwd := appendTxRequest(nil, "TXFWD", version, nil, nil, follow)
		h.add(len(v.remoteDCs))
		for _, dc := range v.remoteDCs {
			n.sendWrite(nil, tr, v.members[dc.ring.Owner(token)], fwd, func(raw []byte, err error) { n.asyncDone(raw, err); h.done() })
		}
	}
}

// followOps are the commands that make another replica lose what the
// deciding replica's answer raw says it took: none when it took nothing.
// The answer is redis-server's, in RESP2.
func followOps(name string, args [][]byte, raw []byte) [][][]byte {
	v, err := resp.Parse(raw)
	if err != nil || v.IsNull {
		return nil
	}
	word := func(s string) []byte { return []byte(s) }
	// lrem removes each element from the end it was taken from.
	lrem := func(key []byte, left bool, elems []resp.Value) [][][]byte {
		count := "1"
		if !left {
			count = "-1"
		}
		var out [][][]byte
		for _, e := range elems {
			out = append(out, [][]byte{word("LREM"), key, word(count), e.Str})
		}
		return out
	}
	// zrem removes the members of [member, score, ...] or [[member, score] ...].
	zrem := func(key []byte, pairs []resp.Value) [][][]byte {
		op := [][]byte{word("ZREM"), key}
		for i := 0; i < len(pairs); i++ {
			if p := pairs[i]; p.Type == resp.Array {
				if len(p.Elems) > 0 {
					op = append(op, p.Elems[0].Str)
				}
			} else {
				op = append(op, p.Str)
				i++ // its score
			}
		}
		if len(op) == 2 {
			return nil
		}
		return [][][]byte{op}
	}
	elems := v.Elems
	if v.Type != resp.Array {
		elems = []resp.Value{v}
	}
	left := func(a []byte) bool { return bytes.EqualFold(a, []byte("LEFT")) }
	switch name {
	case "SPOP":
		if len(elems) == 0 {
			return nil
		}
		return [][][]byte{append([][]byte{word("SREM"), args[1]}, valuesOf(elems)...)}
	case "LPOP", "RPOP":
		return lrem(args[1], name == "LPOP", elems)
	case "ZPOPMIN", "ZPOPMAX":
		return zrem(args[1], elems)
	case "RPOPLPUSH":
		return append(lrem(args[1], false, elems), [][]byte{word("LPUSH"), args[2], v.Str})
	case "LMOVE":
		push := "RPUSH"
		if left(args[4]) {
			push = "LPUSH"
		}
		return append(lrem(args[1], left(args[3]), elems), [][]byte{word(push), args[2], v.Str})
	case "LMPOP", "ZMPOP": // [key, [elements]]
		if len(v.Elems) != 2 {
			return nil
		}
		key := v.Elems[0].Str
		if name == "ZMPOP" {
			return zrem(key, v.Elems[1].Elems)
		}
		numkeys, _ := strconv.Atoi(string(args[1])) // checked by the keys of the command
		return lrem(key, left(args[2+numkeys]), v.Elems[1].Elems)
	}
	return nil
}

func valuesOf(vs []resp.Value) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i] = v.Str
	}
	return out
}
