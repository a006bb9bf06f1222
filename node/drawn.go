package node

import (
	"fmt"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// drawn runs a write whose effect is drawn at random (SPOP): were each
// replica to draw for itself, each would pop other members. The deciding
// replica (transactions use the same one) runs the command and draws;
// the other replicas then remove the members it drew (SREM) with the
// same version. The client gets the deciding replica's answer once the
// write level is met, counting the deciding replica as one replica.
// A deciding replica that cannot be reached fails the command, with
// nothing applied anywhere.
func (n *Node) drawn(tr *trace, level consistency.Level, cmd *command, keys, args [][]byte, h *hold, b *batch, done replyFunc) {
	reps := n.replicas(keys[0])
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	d, di := n.decider(reps)
	version := n.clock.next()
	h.add(1)
	decided := func(raw []byte, err error) {
		defer h.done()
		if err == nil && (len(raw) == 0 || raw[0] == '-') {
			done(raw) // redis-server's own error (WRONGTYPE, say): nothing was drawn
			return
		}
		if err != nil {
			n.countFailure(err)
			n.stats.quorumFailures.Add(1)
			done(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s failed and was not applied: the replica that draws the members, %s, did not answer (%v)", cmd.name, replicaName(d), err)))
			return
		}
		members, perr := drawnMembers(raw)
		if perr != nil || len(members) == 0 || len(reps) == 1 {
			done(raw) // nothing drawn (an empty or missing set): nothing to follow
			return
		}
		follow := append([][]byte{[]byte("SREM"), keys[0]}, members...)
		others := make([]*member, 0, len(reps)-1)
		for i, m := range reps {
			if i != di {
				others = append(others, m)
			}
		}
		w := &writeQuorum{replicated: n.newReplicated(tr, level, args[0], append([]*member{d}, others...), func(reply []byte) {
			if len(reply) == 0 || reply[0] != '-' {
				reply = raw // the members drawn, not the followers' counts
			}
			done(reply)
		}), replies: make([][]byte, len(reps))}
		srem := commandTable["SREM"]
		var remote []byte
		h.add(len(others))
		for j, m := range others {
			i := j + 1
			answer := func(raw []byte, err error) { w.answer(i, raw, err); h.done() }
			if m.self {
				n.writeLocal(nil, tr, version, srem, keys, follow, answer)
				continue
			}
			if remote == nil {
				remote = appendPeerRequest(nil, "WRITE", version, follow)
			}
			n.sendWrite(nil, tr, m, remote, answer)
		}
		w.answer(0, raw, nil)
		n.forwardToRemoteDCs(tr, keys[0], version, follow, h, nil)
	}
	if d.self {
		n.writeLocal(b, tr, version, cmd, keys, args, decided)
		return
	}
	if d.isDown() {
		decided(nil, errMarkedDown(d))
		return
	}
	n.toPeer(b, tr, d, appendPeerRequest(nil, "WRITE", version, args), fromPeer(decided))
}

// drawnMembers reads the members an SPOP drew: one bulk string, an array
// of them, or none (nil).
func drawnMembers(raw []byte) ([][]byte, error) {
	v, err := resp.Parse(raw)
	if err != nil {
		return nil, err
	}
	if v.IsNull {
		return nil, nil
	}
	if v.Type == resp.Array {
		out := make([][]byte, len(v.Elems))
		for i, e := range v.Elems {
			out[i] = e.Str
		}
		return out, nil
	}
	return [][]byte{v.Str}, nil
}
