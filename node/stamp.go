package node

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/resp"
)

// A stamped write is the usual form of a quorum write of a whole value when
// this node's rack holds the key. The version query and the write to one
// other replica meet on that replica: the coordinator sends it the write
// with its own replica's version (from the version cache, mostly); the
// replica stamps the write above that and its own version with its clock,
// applies it, and answers the stamp; the coordinator then writes the
// stamped value to its own replica and the others. Two replicas' versions
// were compared, as in the version query, so the stamp is newer than
// every write acknowledged before this one began (with two or three racks
// two replicas are a quorum, and any two quorums share a replica; with more
// racks a write takes the long way), and the write costs one round trip to
// a peer fewer.
//
// The stamping replica refuses a write that reaches it past the
// coordinator's deadline by its own clock (the deadline of the version
// query: stamped later, a write could outrank writes acknowledged after
// its client gave up on it). A refused write was not applied anywhere, and
// goes the long way: the version query, then the write. A replica that
// stamped the write but could not apply it (its redis-server failed) says
// so with the stamp, and the others still get the write.

// Error codes that start a stamping replica's answer: it did not apply the
// write, so the coordinator may take the long way; or it stamped the write
// (the version follows the code) but its redis-server did not acknowledge
// it.
const (
	notAppliedCode = "NOTAPPLIED"
	stampedCode    = "STAMPED"
)

// stamper is the replica to stamp a write of reps: the first other replica
// reachable by the ask order when this node holds the key in its rack and
// the stamper and this node's own version make a quorum; -1 when the write
// takes the long way.
func (n *Node) stamper(reps []*member) int {
	if len(reps) < 2 || consistency.Quorum(len(reps)) > 2 || !reps[0].self {
		return -1
	}
	// The ask order puts the peers that are up and connected first.
	var order [inlineReplicas]int
	if i := askOrder(order[:0], reps)[1]; !reps[i].isDown() && reps[i].link.Connected() {
		return i
	}
	return -1
}

// stampedWrite runs a write of reps through the stamper s; it must be
// stamped before deadline. release ends the query's part of the request:
// its key in the connection's gate and its part of the hold, once the
// write is queued or has failed.
func (n *Node) stampedWrite(tr *trace, v *view, level consistency.Level, cmd *command, keys, args [][]byte, reps []*member, s int, deadline time.Time, release func(), h *hold, b *batch, done replyFunc) {
	// The stamper reads the deadline on its own clock.
	stampBy := n.clock.Millis() + time.Until(deadline).Milliseconds()
	n.localVersion(b, tr, keys[0], func(floor []byte, err error, b *batch) {
		if err != nil { // this node's redis-server: the long way asks the others
			n.queryThenWrite(tr, v, level, cmd, keys, args, reps, deadline, release, h, b, done)
			return
		}
		m := reps[s]
		n.toPeer(b, tr, m, appendStampRequest(stampBy, floor, args), func(raw []byte, err error) {
			st, err := parseStampReply(raw, err)
			var injected *fit.InjectedError
			switch {
			case err == errNotApplied, errors.As(err, &injected): // an injected fault is never sent
				n.queryThenWrite(tr, v, level, cmd, keys, args, reps, deadline, release, h, nil, done)
			case err != nil:
				n.countFailure(err)
				n.stats.quorumFailures.Add(1)
				release()
				done(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed, outcome unknown: %s, which was to stamp it, did not answer (%s); it may have been applied, and repair may still spread it",
					level, args[0], replicaName(m), err)))
			default:
				// This node's version went into the stamp, as a version
				// query's answer would.
				n.useReplica(tr, reps[0])
				n.stats.stampedWrites.Add(1)
				n.clock.Observe(st.version)
				st.replica = s
				n.writeAt(tr, v, level, cmd, keys, args, reps, st.version, st, h, nil, done) // from a link goroutine: no batch
				release()
			}
		})
	})
}

// stamped is the replica that stamped a write, the version, and its own
// answer: its reply, or why its redis-server did not acknowledge it.
type stamped struct {
	replica int
	version []byte
	reply   []byte
	err     error
}

var errNotApplied = errors.New("the stamping replica did not apply the write")

// appendStampRequest encodes `STAMP deadline floor cmd args...`.
func appendStampRequest(deadline int64, floor []byte, args [][]byte) []byte {
	dst := resp.AppendArrayHeader(nil, 3+len(args))
	dst = resp.AppendBulkString(dst, "STAMP")
	dst = resp.AppendBulkInt(dst, deadline)
	dst = resp.AppendBulk(dst, floor)
	for _, a := range args {
		dst = resp.AppendBulk(dst, a)
	}
	return dst
}

// parseStampReply reads a stamping replica's answer: the stamp and the
// replica's own answer; errNotApplied; or why the outcome is unknown.
func parseStampReply(raw []byte, err error) (*stamped, error) {
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(raw, []byte(peerProtocolError)) {
		// Refused before it ran: a bad request, or a node of an older
		// build, which knows no STAMP (so a cluster can be upgraded one
		// node at a time).
		return nil, errNotApplied
	}
	if len(raw) > 0 && raw[0] == '-' {
		code, rest, _ := strings.Cut(strings.TrimSpace(string(raw[1:])), " ")
		switch code {
		case notAppliedCode:
			return nil, errNotApplied
		case stampedCode:
			version, why, _ := strings.Cut(rest, " ")
			if _, ok := hlc.Decode([]byte(version)); ok {
				return &stamped{version: []byte(version), err: errors.New(why)}, nil
			}
		}
		return nil, errors.New(strings.TrimSpace(string(raw[1:])))
	}
	version, reply, err := splitVersioned(raw)
	if err == nil {
		if _, ok := hlc.Decode(version); !ok {
			err = fmt.Errorf("stamp: %q is not a version", resp.Printable(version))
		}
	}
	return &stamped{version: version, reply: reply}, err
}

// serveStamp stamps and applies a peer's write (STAMP deadline floor cmd
// args...), answering [version, reply].
func (n *Node) serveStamp(tr *trace, args [][]byte, s *slot, b *batch) {
	deadline, err := strconv.ParseInt(string(args[1]), 10, 64)
	floor := args[2]
	if _, ok := hlc.Decode(floor); err != nil || !ok && len(floor) > 0 {
		s.complete(resp.AppendError(nil, "ERR troop peer protocol: bad STAMP deadline or version"))
		return
	}
	cmdArgs := args[3:]
	c, keys, bad := peerCommand(cmdArgs)
	if bad == "" && !c.isLWW(cmdArgs) {
		bad = fmt.Sprintf("ERR troop peer protocol: STAMP carries whole-value writes, not '%s'", resp.Printable(cmdArgs[0]))
	}
	if bad != "" {
		s.complete(resp.AppendError(nil, bad))
		return
	}
	notApplied := func(why string) { s.complete(resp.AppendError(nil, notAppliedCode+" "+why)) }
	n.localVersion(b, tr, keys[0], func(held []byte, err error, b *batch) {
		if err != nil {
			n.countFailure(err)
			notApplied("this replica's version: " + err.Error())
			return
		}
		if bytes.Compare(floor, held) > 0 {
			held = floor
		}
		version, ok := n.clock.StampBefore(deadline, held)
		if !ok {
			notApplied("the write arrived after its deadline by this node's clock")
			return
		}
		// The answer goes once: the reply, the datastore's failure, or,
		// at half the timeout, word that the datastore has not answered
		// yet (the coordinator's own wait for this answer ends at the
		// timeout, and the other replicas still need the stamp).
		var answered atomic.Bool
		notAcked := func(why string) {
			if answered.CompareAndSwap(false, true) {
				s.complete(resp.AppendError(nil, stampedCode+" "+string(version)+" "+why))
			}
		}
		late := time.AfterFunc(n.cfg.Timeout/2, func() {
			notAcked(fmt.Sprintf("this replica's redis-server did not answer within %v", n.cfg.Timeout/2))
		})
		n.applyWrite(b, tr, n.view(), version, c, keys, cmdArgs, func(raw []byte, err error) {
			late.Stop()
			if err != nil {
				n.countFailure(err)
				notAcked(err.Error())
				return
			}
			if answered.CompareAndSwap(false, true) {
				out := resp.AppendArrayHeader(nil, 2)
				out = resp.AppendBulk(out, version)
				s.complete(append(out, raw...))
			}
		})
	})
}
