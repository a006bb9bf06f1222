// Package repair copies the newest version of a key onto the replicas
// that missed it (docs/repair.md): read repair after a quorum read, the
// write-back of an ABD read, anti-entropy (a pass that compares the
// replicas' Merkle trees, built by SCAN, and copies the keys they disagree
// on; merkle.go is its pure core), and hinted handoff (the writes a peer
// missed, kept in a file per peer and delivered when it is back). A
// membership change's handoff copies keys by the same means.
//
// It runs in a node and reaches replicas only through the node: what it
// needs of it is the Node interface, which reads and writes this node's
// redis-server and sends peer requests, so that the datastore's layout
// (the version keys, the scripts) and the peer links stay the node's.
package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// Replica is one of a key's replicas, this node or a peer, as the node
// knows it. Repair is generic over the node's type for it, so that the
// request path hands over its slices of replicas as they are.
type Replica interface {
	comparable
	// Local says it is this node: repair reads and writes its
	// redis-server rather than send it peer requests.
	Local() bool
	// MarkedDown is why repair does not ask it: the failure detector
	// marked it down; nil when it may be asked.
	MarkedDown() error
	// Name names it in messages: its datacenter and rack.
	Name() string
}

// Node is what repair needs of the node it runs in.
type Node[R Replica] interface {
	// Token is key's token on the ring (of its hash tag).
	Token(key []byte) uint32
	// LocalRacks is the rings of the local datacenter's racks, this
	// node's first, as the node routes now, and the members their
	// owners index: the replicas anti-entropy compares.
	LocalRacks() (racks []*ring.Ring, members []R)

	// Fetch reads key's copy from this node's redis-server: the reply
	// of the peer request FETCH (an array of version, DUMP, PTTL of the
	// value and of the version).
	Fetch(key []byte, done func(raw []byte, err error))
	// Install installs c on this node's redis-server unless it holds a
	// newer version, and answers as the peer request REPAIR does (1 when
	// it took it); mirror says a membership change mirrors it to the
	// key's other owner, as it does a write.
	Install(key []byte, c Copy, mirror bool, done func(raw []byte, err error))
	// Send sends the peer requests reqs to peer r over its link, in
	// one flush, and calls done with each reply in order; a peer's
	// answer that its own datastore is unreachable comes as an error.
	Send(r R, reqs [][]byte, done func(i int, raw []byte, err error))

	// Scan calls page with the keys this node's redis-server holds a
	// version of, a SCAN page at a time, and their tokens. The keys share
	// the page's reply: a key kept beyond the call must be copied.
	Scan(ctx context.Context, page func(keys [][]byte, tokens []uint32) error) error
	// Entries is what this node's redis-server holds of keys: each one's
	// version ("" for none) and a digest of its value ("" for none).
	Entries(keys [][]byte) ([]Entry, error)
	// Size is DBSIZE of this node's redis-server (a value and its
	// version per key), for the depth of the trees.
	Size() (int64, error)
	// Ask sends the peer request req to peer r over a connection of long
	// timeout (a tree takes seconds to build on a large redis-server) and
	// waits for its reply.
	Ask(r R, req []byte) ([]byte, error)

	// Promised says whether err is a replica refusing a copy below a
	// key's promise: a change by consensus was promised above its newest
	// version and not decided (or not yet everywhere).
	Promised(err error) bool
	// ReadByConsensus reads key by consensus among its replicas. A
	// change promised and abandoned (its proposer gave up) refuses every
	// copy below its promise, so copying alone would leave the replicas
	// differing for good; the read finishes or supersedes that change on
	// a quorum and forwards the value decided to the others.
	ReadByConsensus(key []byte) error
}

// Config is what repair needs of the node's config.
type Config struct {
	Name                string        // the node's, in reports
	ReadRepair          bool          // troop_read_repair
	AntiEntropyInterval time.Duration // troop_anti_entropy_interval_ms; 0: no passes of its own
	KeysPerSec          int           // troop_repair_keys_per_sec: anti-entropy's copies
	HintDir             string        // where the hint files are; "" when hinted handoff is off
	MaxHintBytes        int64         // per peer
	Log                 *slog.Logger
}

// Repairer repairs the replicas of one node's keys.
type Repairer[R Replica] struct {
	node  Node[R]
	cfg   Config
	slots chan struct{} // read repairs under way, bounded
	trees treeCache     // the trees built for peers' passes
	run   sync.Mutex    // one anti-entropy pass at a time

	// ReadRepairs counts the stale replicas a quorum read wrote its answer
	// to, before or after answering; ReadRepairsLost the read repairs not
	// done (too many under way, or they failed).
	ReadRepairs, ReadRepairsLost atomic.Int64

	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup // hint replays
}

// readRepairDelay lets writes still in flight reach the stale replica
// before it is repaired, so that a write that is merely late is not
// mistaken for a missed one (for writes that are not last-writer-wins,
// such as INCR, copying first and applying the late write after would
// apply it twice).
const readRepairDelay = 200 * time.Millisecond

const maxReadRepairs = 256

// New makes the repairer of node.
func New[R Replica](node Node[R], cfg Config) *Repairer[R] {
	return &Repairer[R]{node: node, cfg: cfg, slots: make(chan struct{}, maxReadRepairs)}
}

// Copy is a key as a replica holds it, to be installed on another: its
// version, DUMP, and the PTTL of the value and of the version.
type Copy struct {
	Version, Dump []byte
	PTTL, VPTTL   int64
}

// countFunc sees the bytes of a peer request and its reply.
type countFunc func(req, raw []byte)

// fetch reads key's copy from replica m.
func (r *Repairer[R]) fetch(m R, key []byte, count countFunc, done func(Copy, error)) {
	parse := func(raw []byte, err error) {
		if err != nil {
			done(Copy{}, err)
			return
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() || len(v.Elems) != 4 {
			done(Copy{}, fmt.Errorf("fetch %q from %s: unexpected reply %s", key, m.Name(), v))
			return
		}
		done(Copy{Version: v.Elems[0].Str, Dump: v.Elems[1].Str, PTTL: v.Elems[2].Int, VPTTL: v.Elems[3].Int}, nil)
	}
	if m.Local() {
		r.node.Fetch(key, parse)
		return
	}
	if err := m.MarkedDown(); err != nil {
		done(Copy{}, err)
		return
	}
	req := resp.AppendCommand(nil, []byte("FETCH"), key)
	r.node.Send(m, [][]byte{req}, func(_ int, raw []byte, err error) {
		if count != nil {
			count(req, raw)
		}
		parse(raw, err)
	})
}

// install writes a copy onto replica m; changed says whether m took it.
func (r *Repairer[R]) install(m R, key []byte, c Copy, count countFunc, done func(changed bool, err error)) {
	r.installAs("REPAIR", m, key, c, count, done)
}

// installAs is install by peer request op: REPAIR, or HANDOFF for the
// copies of a membership change, which the receiver takes as a REPAIR and
// never mirrors again.
func (r *Repairer[R]) installAs(op string, m R, key []byte, c Copy, count countFunc, done func(changed bool, err error)) {
	parse := func(raw []byte, err error) {
		if err != nil {
			done(false, err)
			return
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() {
			done(false, fmt.Errorf("repair %q on %s: %s", key, m.Name(), raw))
			return
		}
		done(v.Int == 1, nil)
	}
	if m.Local() {
		r.node.Install(key, c, op == "REPAIR", parse)
		return
	}
	if err := m.MarkedDown(); err != nil {
		done(false, err)
		return
	}
	req := resp.AppendCommand(nil, []byte(op), key, c.Version, c.Dump,
		[]byte(strconv.FormatInt(c.PTTL, 10)), []byte(strconv.FormatInt(c.VPTTL, 10)))
	r.node.Send(m, [][]byte{req}, func(_ int, raw []byte, err error) {
		if count != nil {
			count(req, raw)
		}
		parse(raw, err)
	})
}

// copyKey copies key from replica src to the targets; done gets how many
// targets changed, and the first error. count (may be nil) sees the peer
// traffic.
func (r *Repairer[R]) copyKey(key []byte, src R, targets []R, count countFunc, done func(changed int, err error)) {
	r.copyKeyAs("REPAIR", key, src, targets, count, done)
}

// copyKeyAs is copyKey with the peer request op (installAs).
func (r *Repairer[R]) copyKeyAs(op string, key []byte, src R, targets []R, count countFunc, done func(changed int, err error)) {
	r.fetch(src, key, count, func(c Copy, err error) {
		if err != nil {
			done(0, err)
			return
		}
		if len(c.Version) == 0 { // nothing troop wrote: nothing to copy
			done(0, nil)
			return
		}
		results := make(chan error, len(targets))
		changed := make(chan bool, len(targets))
		for _, t := range targets {
			r.installAs(op, t, key, c, count, func(ch bool, err error) { changed <- ch; results <- err })
		}
		go func() {
			n := 0
			var first error
			for range targets {
				if <-changed {
					n++
				}
				if err := <-results; err != nil && first == nil {
					first = err
				}
			}
			done(n, first)
		}()
	})
}

// Handoff copies key from this node to to, its new owner in a membership
// change, by the peer request HANDOFF, which the receiver takes as a
// REPAIR and never mirrors again.
func (r *Repairer[R]) Handoff(key []byte, self, to R, done func(error)) {
	r.copyKeyAs("HANDOFF", key, self, []R{to}, nil, func(_ int, err error) { done(err) })
}

// ErrMovedOn is WriteBack's error when the replica it copies from holds a
// newer version than the one the read is to answer.
var ErrMovedOn = errors.New("the replica holds a newer version than the one read")

// WriteBack copies key, at version, from replica src to the targets before
// a quorum read answers, and calls done once need of them hold it (or a
// newer version), or with the reason they cannot. It is the second phase
// of an ABD read: the answer must be on a quorum before it is given, or a
// later read could miss it. src's copy is fetched anew; one older than
// version means src lost the value since it answered, and a newer one
// fails with ErrMovedOn: a newer value on a quorum does not put the one
// read there. A value decided by consensus after it need not hold it
// (what src answered may be a try some proposer's accept left there alone,
// never chosen, and now never to be), so the read may not answer it.
func (r *Repairer[R]) WriteBack(key []byte, src R, version []byte, targets []R, need int, done func(error)) {
	r.fetch(src, key, nil, func(c Copy, err error) {
		switch cmp := bytes.Compare(c.Version, version); {
		case err != nil:
		case cmp < 0:
			err = fmt.Errorf("%s no longer holds version %s", src.Name(), version)
		case cmp > 0:
			err = fmt.Errorf("%w: %s holds %s, not %s", ErrMovedOn, src.Name(), c.Version, version)
		}
		if err != nil {
			done(err)
			return
		}
		var mu sync.Mutex
		held, failed := 0, 0
		var reasons []string
		for _, t := range targets {
			r.install(t, key, c, nil, func(changed bool, err error) {
				if changed {
					r.ReadRepairs.Add(1)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					reasons = append(reasons, t.Name()+": "+err.Error())
				} else {
					held++
				}
				switch {
				case err == nil && held == need:
					done(nil)
				case err != nil && failed == len(targets)-need+1:
					done(errors.New(strings.Join(reasons, "; ")))
				}
			})
		}
	})
}

// ReadRepair repairs the stale replicas a quorum read of one key found, in
// the background, after readRepairDelay.
func (r *Repairer[R]) ReadRepair(key []byte, replicas []R, answers []consistency.Reply, idx []int) {
	if !r.cfg.ReadRepair || len(answers) < 2 {
		return
	}
	source, stale, _ := consistency.Resolve(answers)
	if len(stale) == 0 {
		return
	}
	var targets []R
	for _, s := range stale {
		targets = append(targets, replicas[idx[s]])
	}
	select {
	case r.slots <- struct{}{}:
	default:
		r.ReadRepairsLost.Add(int64(len(targets)))
		return
	}
	key = append([]byte(nil), key...)
	src := replicas[idx[source]]
	time.AfterFunc(readRepairDelay, func() {
		r.copyKey(key, src, targets, nil, func(changed int, err error) {
			defer func() { <-r.slots }() // a settle holds its slot too
			r.ReadRepairs.Add(int64(changed))
			if r.node.Promised(err) {
				err = r.node.ReadByConsensus(key)
			}
			if err != nil {
				r.ReadRepairsLost.Add(1)
				r.cfg.Log.Debug("read repair failed", "key", resp.Printable(key), "err", err)
			}
		})
	})
}

// RunAntiEntropy runs an anti-entropy pass every
// troop_anti_entropy_interval_ms (never when it is 0).
func (r *Repairer[R]) RunAntiEntropy(ctx context.Context) {
	every := r.cfg.AntiEntropyInterval
	if every <= 0 {
		return
	}
	ctxtime.Every(ctx, every, func() {
		rep, err := r.AntiEntropy(ctx)
		if err != nil {
			r.cfg.Log.Warn("anti-entropy pass failed", "err", err)
			return
		}
		r.cfg.Log.Info("anti-entropy pass", "keys_compared", rep.KeysCompared, "differing", rep.Differing, "repaired", rep.Repaired,
			"bytes", rep.Bytes, "took", rep.Took)
	})
}
