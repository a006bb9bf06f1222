package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/node/repair"
	"github.com/troop-lab/troop/resp"
)

// The node's side of membership changes (docs/store.md, Membership
// changes): the driver (node/reconfig) takes the steps and drives the
// changes through changeNode; here are what it asks of the node
// (routing by a step, streaming a range, dropping what the node no
// longer owns, asking a peer) and the mirroring of writes to moving keys,
// which is on the request path.

// applyWrite applies a write on this node's replica (writeLocal) for a
// request routed by view v. While a change is under way, a write to a key
// whose owner in this rack changes, and of which this node is one owner,
// is copied once applied to the key's other owner (mirrored: from
// whichever owner it landed on to the other, which is old to new before
// the switch and both ways after it, so that a cancel loses nothing);
// while a change adds a rack, before the switch, every replica copies it
// to the key's owner in the new rack (after it, the new rack is one of
// the replicas, and a cancel needs no copy back: store.md says why); with
// the repair copy that never replaces a newer version; the write answers
// only when the copy is in, else this replica fails it as unreachable (the
// outcome unknown: it is applied here). Copies travel as HANDOFF, which
// the receiver does not mirror again. With no change under way this is
// writeLocal and one nil check.
func (n *Node) applyWrite(b *batch, tr *trace, v *view, version []byte, cmd *command, keys, args [][]byte, done func([]byte, error)) {
	n.writeLocal(b, tr, version, cmd, keys, args, n.mirrorAfter(v, version, keys, done))
}

// mirrorAfter wraps the done of a local write of keys, routed by v, so
// that the write answers once it is mirrored (applyWrite); it returns done
// itself when there is nothing to mirror.
func (n *Node) mirrorAfter(v *view, version []byte, keys [][]byte, done func([]byte, error)) func([]byte, error) {
	if v.other == nil || planted && n.noMirror || len(version) == 0 {
		return done
	}
	var mkeys [][]byte
	var targets []*member
	for _, k := range keys {
		if t := v.mirrorTarget(n.token(k)); t != nil {
			mkeys = append(mkeys, append([]byte(nil), k...))
			targets = append(targets, t)
		}
	}
	if len(mkeys) == 0 {
		return done
	}
	return func(raw []byte, err error) {
		if err != nil || len(raw) == 0 || raw[0] == '-' {
			done(raw, err)
			return
		}
		n.mirror(mkeys, targets, func(merr error) {
			if merr != nil {
				// The replica did not take the write as a whole: to the
				// coordinator it is a replica that could not be reached,
				// with the outcome unknown, not one that refused it.
				n.stats.mirrorFailures.Add(1)
				done(nil, fmt.Errorf("the write was applied here, but a membership change is under way and its copy to the key's other owner failed: %v", merr))
				return
			}
			done(raw, nil)
		})
	}
}

// mirrorTarget returns the other owner, in this node's rack, of a token
// whose owner a change under way moves, when this node is one of its two
// owners; while a change adds a rack and routes by the old members, the
// token's owner in the new rack; else nil.
func (v *view) mirrorTarget(t uint32) *member {
	if v.other == nil {
		return nil
	}
	if v.newRack != nil {
		if m := v.other.members[v.newRack.ring.Owner(t)]; !m.self {
			return m
		}
		return nil
	}
	if !v.ownRack || !v.other.ownRack { // this node's rack is the one added
		return nil
	}
	mine := v.members[v.localRacks[0].ring.Owner(t)]
	theirs := v.other.members[v.other.localRacks[0].ring.Owner(t)]
	switch {
	case mine == theirs:
		return nil
	case mine.self:
		return theirs
	case theirs.self:
		return mine
	}
	return nil
}

// mirror copies each key to its target and calls done once all are in,
// with the first failure.
func (n *Node) mirror(keys [][]byte, targets []*member, done func(error)) {
	var mu sync.Mutex
	left := len(keys)
	var first error
	for i, k := range keys {
		t := targets[i]
		n.repair.Handoff(k, n.self, t, func(err error) {
			mu.Lock()
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %v", t.peerAddr, err)
			}
			left--
			last := left == 0
			mu.Unlock()
			if last {
				done(first)
			}
		})
	}
}

// dropIfScript deletes each key of KEYS and its version when the version
// is still ARGV's (the one scanned), and returns how many it deleted:
// cleanup never drops a write that arrived after its scan.
const dropIfScript = `
local n = 0
for i = 1, #KEYS do
  local vkey = '` + VersionPrefix + `' .. KEYS[i]
  if redis.call('GET', vkey) == ARGV[i] then
    redis.call('DEL', KEYS[i], vkey)
    n = n + 1
  end
end
return n
`

// streamRange copies every key of this node's redis-server whose token is
// in r to the member at addr, with its version (HANDOFF: the repair copy,
// which never replaces a newer version), a bounded number of copies in
// flight, at most troop_handoff_keys_per_sec a second: unbounded, the
// stream took the clients' share of redis-server and the CPU
// (perf/NOTES.md). It returns how many keys it copied.
// handoffInflight bounds the copies of a membership change's stream in
// flight at once.
const handoffInflight = 64

func (n *Node) streamRange(ctx context.Context, r membership.Range, addr string) (int64, error) {
	to := n.memberByAddr(addr)
	if to == nil {
		return 0, fmt.Errorf("%s is not a member this node knows", addr)
	}
	slots := make(chan struct{}, handoffInflight)
	limiter := repair.NewLimiter(n.cfg.HandoffKeysPerSec)
	var (
		mu     sync.Mutex
		first  error
		copied int64
		wg     sync.WaitGroup
	)
	err := n.scanVersioned(ctx, func(keys [][]byte, tokens []uint32) error {
		for i, key := range keys {
			if !r.Contains(tokens[i]) {
				continue
			}
			if err := limiter.Wait(ctx); err != nil {
				return err
			}
			key = append([]byte(nil), key...)
			slots <- struct{}{}
			wg.Add(1)
			n.repair.Handoff(key, n.self, to, func(err error) {
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("copying %q: %v", resp.Printable(key), err)
				}
				if err == nil {
					copied++
				}
				mu.Unlock()
				<-slots
				wg.Done()
			})
		}
		return nil
	})
	wg.Wait()
	n.stats.handoffKeys.Add(copied)
	if err == nil {
		err = first
	}
	return copied, err
}

// cleanup drops the keys of this node's redis-server that it does not own
// in its rack in the view it routes by (all of them on a removed node),
// each only if its version is still the one scanned: a SCAN page's
// versions in one MGET, its drops in one script. It returns how many it
// dropped.
func (n *Node) cleanup(ctx context.Context) (int64, error) {
	v := n.view()
	if v.other != nil {
		return 0, errors.New("a membership change is under way: keys are dropped only once it is done")
	}
	store, _ := n.longLinks()
	own := v.localRacks[0].ring // not this node's rack when !ownRack: it owns nothing
	var dropped int64
	err := n.scanVersioned(ctx, func(keys [][]byte, tokens []uint32) error {
		var drop [][]byte
		for i, k := range keys {
			if !v.ownRack || v.members[own.Owner(tokens[i])] != n.self {
				drop = append(drop, k)
			}
		}
		if len(drop) == 0 {
			return nil
		}
		req := resp.AppendArrayHeader(nil, 1+len(drop))
		req = resp.AppendBulkString(req, "MGET")
		for _, k := range drop {
			req = appendVersionKey(req, k)
		}
		raw, err := doSync(ctx, store, req)
		if err != nil {
			return err
		}
		vs, err := resp.Parse(raw)
		if err != nil || vs.IsError() || len(vs.Elems) != len(drop) {
			return fmt.Errorf("MGET of versions: unexpected reply %.200s", raw)
		}
		args := scriptArgs("EVAL", dropIfScript, drop)
		for _, e := range vs.Elems {
			args = append(args, e.Str) // "" for a version gone since SCAN: matches none
		}
		raw, err = doSync(ctx, store, resp.AppendCommand(nil, args...))
		if err != nil {
			return err
		}
		d, err := resp.Parse(raw)
		if err != nil || d.IsError() {
			return fmt.Errorf("dropping keys: unexpected reply %.200s", raw)
		}
		dropped += d.Int // the version cache keeps its bound: an upper bound still
		return nil
	})
	return dropped, err
}

// memberByAddr returns the member at a peer address among every member of
// the current view, either side of a change; nil when there is none.
func (n *Node) memberByAddr(addr string) *member {
	for _, m := range n.view().all {
		if m.peerAddr == addr {
			return m
		}
	}
	return nil
}

// serveMembership answers a peer's MEMBERSHIP request (reconfig's
// Driver.Serve), off the connection's reader: streaming and cleanup scan
// the keyspace.
func (n *Node) serveMembership(args [][]byte, s *slot) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		s.complete(n.changes.Serve(context.Background(), args))
	}()
}

// changeNode is the node as its membership driver sees it
// (reconfig.Node).
type changeNode Node

func (c *changeNode) node() *Node { return (*Node)(c) }

func (c *changeNode) Self() string { return c.node().me() }

func (c *changeNode) SetSelf(addr string) { c.selfAddr.Store(&addr) }

func (c *changeNode) State() membership.State { return c.node().view().state }

// Route builds the view of s, with self as this node's address, and
// routes by it once keep succeeded.
func (c *changeNode) Route(s membership.State, self string, keep func() error) error {
	n := c.node()
	old := n.me()
	n.selfAddr.Store(&self)
	v, err := n.buildView(s)
	if err == nil {
		err = keep()
	}
	if err != nil {
		n.selfAddr.Store(&old)
		return err
	}
	n.cur.Store(v)
	return nil
}

func (c *changeNode) Stream(ctx context.Context, r membership.Range, addr string) (int64, error) {
	return c.node().streamRange(ctx, r, addr)
}

func (c *changeNode) Cleanup(ctx context.Context) (int64, error) { return c.node().cleanup(ctx) }

// Ask sends MEMBERSHIP args to m over its peer link, or, when long, over
// the connection of long timeout (longLink).
func (c *changeNode) Ask(ctx context.Context, m membership.Member, long bool, args ...[]byte) ([]byte, error) {
	n := c.node()
	peer, err := n.memberFor(m.Addr, m.DC, m.Rack)
	if err != nil {
		return nil, err
	}
	l := peer.link
	if long {
		l = n.longLink(peer)
	}
	return doSync(ctx, l, resp.AppendCommand(nil, append([][]byte{[]byte("MEMBERSHIP")}, args...)...))
}
