package repair

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// Anti-entropy (docs/repair.md): for every token segment this node owns in
// its rack, each replica of the local datacenter builds a Merkle tree of
// its keys by scanning its redis-server; the trees are compared from the
// root down, the keys of the leaves that differ are listed with their
// versions and value digests, and every key whose replicas disagree is
// copied from the replica holding the newest version (consistency.Resolve)
// to the others, at most troop_repair_keys_per_sec keys a second.

// Report is what an anti-entropy pass did.
type Report struct {
	Node         string   `json:"node"`
	Segments     int      `json:"segments"`
	KeysCompared int64    `json:"keys_compared"` // keys in the compared trees (the largest replica's count, per segment)
	LeavesDiffer int64    `json:"leaves_differing"`
	Differing    int64    `json:"differing"` // keys whose replicas disagree
	Repaired     int64    `json:"repaired"`  // keys copied onto at least one replica
	Failed       int64    `json:"failed"`    // keys whose repair failed
	Bytes        int64    `json:"bytes"`     // peer traffic of the pass: requests and replies
	Skipped      []string `json:"skipped_replicas,omitempty"`
	Took         string   `json:"took"`
	TookSeconds  float64  `json:"took_seconds"`
}

// scanLocal scans this node's redis-server for the versioned keys of seg
// whose leaf (in a tree of depth) want accepts (nil: all), and calls visit
// for each, with its version and value digest, its leaf too.
func (r *Repairer[R]) scanLocal(ctx context.Context, seg segment, depth int, want map[int]bool, visit func(key []byte, e Entry, leaf int)) error {
	return r.node.Scan(ctx, func(all [][]byte, tokens []uint32) error {
		var keys [][]byte
		var leaves []int
		for i, key := range all {
			leaf, ok := seg.leafOf(tokens[i], depth)
			if ok && (want == nil || want[leaf]) {
				keys = append(keys, key)
				leaves = append(leaves, leaf)
			}
		}
		if len(keys) == 0 {
			return nil
		}
		es, err := r.node.Entries(keys)
		if err != nil {
			return err
		}
		for i, k := range keys {
			if len(es[i].Version) > 0 { // the version may have expired since SCAN
				visit(k, es[i], leaves[i])
			}
		}
		return nil
	})
}

// buildTree builds this replica's tree of seg.
func (r *Repairer[R]) buildTree(ctx context.Context, seg segment, depth int) (*merkleTree, error) {
	t := newMerkleTree(depth)
	err := r.scanLocal(ctx, seg, depth, nil, func(key []byte, e Entry, leaf int) {
		t.add(leaf, entryHash(key, e.Version, e.Digest))
	})
	if err != nil {
		return nil, err
	}
	t.seal()
	return t, nil
}

// Entry is one key as a replica holds it: its version, and a digest of
// its value, "" when it has none (a tombstone).
type Entry struct{ Version, Digest []byte }

// localEntries lists this replica's keys in the given leaves.
func (r *Repairer[R]) localEntries(ctx context.Context, seg segment, depth int, leaves []int) (map[string]Entry, error) {
	want := map[int]bool{}
	for _, l := range leaves {
		want[l] = true
	}
	out := map[string]Entry{}
	err := r.scanLocal(ctx, seg, depth, want, func(key []byte, e Entry, _ int) {
		out[string(key)] = Entry{append([]byte(nil), e.Version...), append([]byte(nil), e.Digest...)}
	})
	return out, err
}

// treeCache keeps the trees this node built for a peer's pass, so the
// peer can walk them level by level.
type treeCache struct {
	mu    sync.Mutex
	trees map[string]cachedTree
}

type cachedTree struct {
	t    *merkleTree
	made time.Time
}

const treeTTL = 10 * time.Minute

func (c *treeCache) put(key string, t *merkleTree) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trees == nil {
		c.trees = map[string]cachedTree{}
	}
	for k, ct := range c.trees {
		if time.Since(ct.made) > treeTTL {
			delete(c.trees, k)
		}
	}
	c.trees[key] = cachedTree{t: t, made: time.Now()}
}

func (c *treeCache) get(key string) *merkleTree {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trees[key].t
}

// Serve answers a peer's anti-entropy request op with args, the request's
// arguments after op (a tree takes a while to build: the node runs it off
// the connection's reader):
//
//	TREE session lo hi depth            -> [keys, root (8 bytes)]
//	TREENODES session lo hi depth level idx...  -> hashes, 8 bytes each, in one bulk
//	ENTRIES lo hi depth leaf...         -> [key, version, digest, ...]
//
// A request it cannot read is answered with an error naming what is
// wrong; err is this node's redis-server failing, which the peer must
// count as this replica unreachable.
func (r *Repairer[R]) Serve(ctx context.Context, op string, args [][]byte) (reply []byte, err error) {
	bad := func(why string) []byte { return resp.AppendError(nil, "ERR troop peer protocol: "+op+": "+why) }
	first := 1 // where lo starts
	if op == "ENTRIES" {
		first = 0
	}
	if len(args) < first+3 {
		return bad("too few arguments"), nil
	}
	nums := make([]int64, 0, len(args)-first)
	for _, a := range args[first:] {
		x, err := strconv.ParseInt(string(a), 10, 64)
		if err != nil || x < 0 || x > 1<<32-1 {
			return bad(fmt.Sprintf("bad number '%s'", resp.Printable(a))), nil
		}
		nums = append(nums, x)
	}
	seg, depth := segment{lo: uint32(nums[0]), hi: uint32(nums[1])}, int(nums[2])
	if depth > maxMerkleDepth {
		return bad("depth above " + strconv.Itoa(maxMerkleDepth)), nil
	}
	cacheKey := fmt.Sprintf("%s/%d/%d/%d", args[0], seg.lo, seg.hi, depth)
	switch op {
	case "TREE":
		t, err := r.buildTree(ctx, seg, depth)
		if err != nil {
			return nil, err
		}
		r.trees.put(cacheKey, t)
		out := resp.AppendArrayHeader(nil, 2)
		out = resp.AppendInt(out, int64(t.keys))
		return resp.AppendBulk(out, binary.BigEndian.AppendUint64(nil, t.root())), nil
	case "TREENODES":
		t := r.trees.get(cacheKey)
		if t == nil || len(nums) < 4 || int(nums[3]) > t.depth {
			return bad("no such tree (ask TREE first) or level"), nil
		}
		level := int(nums[3])
		idx := make([]int, 0, len(nums)-4)
		for _, x := range nums[4:] {
			if x >= 1<<level {
				return bad("node index out of range"), nil
			}
			idx = append(idx, int(x))
		}
		var out []byte
		for _, h := range t.nodes(level, idx) {
			out = binary.BigEndian.AppendUint64(out, h)
		}
		return resp.AppendBulk(nil, out), nil
	case "ENTRIES":
		leaves := make([]int, 0, len(nums)-3)
		for _, x := range nums[3:] {
			leaves = append(leaves, int(x))
		}
		es, err := r.localEntries(ctx, seg, depth, leaves)
		if err != nil {
			return nil, err
		}
		out := resp.AppendArrayHeader(nil, 3*len(es))
		for k, e := range es {
			out = resp.AppendBulkString(out, k)
			out = resp.AppendBulk(out, e.Version)
			out = resp.AppendBulk(out, e.Digest)
		}
		return out, nil
	}
	return bad("not an anti-entropy request"), nil
}

// AntiEntropy runs one anti-entropy pass over the segments this node owns
// in its rack, against the replicas of the other racks of its datacenter,
// and reports what it found and repaired.
func (r *Repairer[R]) AntiEntropy(ctx context.Context) (Report, error) {
	r.run.Lock() // one pass at a time
	defer r.run.Unlock()
	start := time.Now()
	rep := Report{Node: r.cfg.Name}
	racks, members := r.node.LocalRacks()
	tokenSet := map[uint32]bool{}
	for _, rack := range racks {
		for _, e := range rack.Entries() {
			tokenSet[e.Token] = true
		}
	}
	tokens := make([]uint32, 0, len(tokenSet))
	for t := range tokenSet {
		tokens = append(tokens, t)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	self := slices.IndexFunc(members, func(m R) bool { return m.Local() }) // -1 when this node owns nothing (joining, removed)
	segs, owners := segmentsOf(tokens, func(rack int, t uint32) int { return racks[rack].Owner(t) }, len(racks), self)
	rep.Segments = len(segs)
	session := strconv.FormatInt(time.Now().UnixNano(), 36)
	limiter := NewLimiter(r.cfg.KeysPerSec)
	var traffic atomic.Int64 // copies count it from link goroutines
	count := func(req, raw []byte) { traffic.Add(int64(len(req) + len(raw))) }

	total := int64(0)
	if size, err := r.node.Size(); err == nil {
		total = size / 2 // a value and its version per key
	}
	for si, seg := range segs {
		depth := treeDepth(total, seg)
		local, err := r.buildTree(ctx, seg, depth)
		if err != nil {
			return rep, fmt.Errorf("local tree: %w", err)
		}
		compared := int64(local.keys)
		var replicas []R // rack order; replicas[0] is this node
		for _, idx := range owners[si] {
			replicas = append(replicas, members[idx])
		}
		leafSet := map[int]bool{}
		var asked []R
		for _, m := range replicas[1:] {
			if m.MarkedDown() != nil {
				rep.Skipped = append(rep.Skipped, m.Name()+" (marked down)")
				continue
			}
			segArgs := []string{strconv.FormatUint(uint64(seg.lo), 10), strconv.FormatUint(uint64(seg.hi), 10), strconv.Itoa(depth)}
			req := resp.AppendCommandStrings(nil, append([]string{"TREE", session}, segArgs...)...)
			raw, err := r.node.Ask(m, req)
			count(req, raw)
			v, perr := resp.Parse(raw)
			if err != nil || perr != nil || v.IsError() || len(v.Elems) != 2 || len(v.Elems[1].Str) != 8 {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (tree: %v %s)", m.Name(), err, raw))
				continue
			}
			compared = max(compared, v.Elems[0].Int)
			remoteRoot := binary.BigEndian.Uint64(v.Elems[1].Str)
			leaves, err := local.diffLeaves(func(level int, idx []int) ([]uint64, error) {
				if level == 0 {
					return []uint64{remoteRoot}, nil
				}
				args := append([]string{"TREENODES", session}, segArgs...)
				args = append(args, strconv.Itoa(level))
				for _, i := range idx {
					args = append(args, strconv.Itoa(i))
				}
				req := resp.AppendCommandStrings(nil, args...)
				raw, err := r.node.Ask(m, req)
				count(req, raw)
				if err != nil {
					return nil, err
				}
				v, err := resp.Parse(raw)
				if err != nil || v.IsError() || len(v.Str) != 8*len(idx) {
					return nil, fmt.Errorf("tree nodes: unexpected reply %.200s", raw)
				}
				out := make([]uint64, len(idx))
				for i := range out {
					out[i] = binary.BigEndian.Uint64(v.Str[8*i:])
				}
				return out, nil
			})
			if err != nil {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%v)", m.Name(), err))
				continue
			}
			for _, lf := range leaves {
				leafSet[lf] = true
			}
			asked = append(asked, m)
		}
		rep.KeysCompared += compared
		rep.LeavesDiffer += int64(len(leafSet))
		if len(leafSet) == 0 {
			continue
		}
		leaves := make([]int, 0, len(leafSet))
		for lf := range leafSet {
			leaves = append(leaves, lf)
		}
		sort.Ints(leaves)
		// Every replica's entries in those leaves, this node's first.
		holders := []R{replicas[0]}
		mine, err := r.localEntries(ctx, seg, depth, leaves)
		if err != nil {
			return rep, fmt.Errorf("local entries: %w", err)
		}
		lists := []map[string]Entry{mine}
		for _, m := range asked {
			args := []string{"ENTRIES", strconv.FormatUint(uint64(seg.lo), 10), strconv.FormatUint(uint64(seg.hi), 10), strconv.Itoa(depth)}
			for _, lf := range leaves {
				args = append(args, strconv.Itoa(lf))
			}
			req := resp.AppendCommandStrings(nil, args...)
			raw, err := r.node.Ask(m, req)
			count(req, raw)
			v, perr := resp.Parse(raw)
			if err != nil || perr != nil || v.IsError() || len(v.Elems)%3 != 0 {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (entries: %v %.200s)", m.Name(), err, raw))
				continue
			}
			es := map[string]Entry{}
			for i := 0; i < len(v.Elems); i += 3 {
				es[string(v.Elems[i].Str)] = Entry{v.Elems[i+1].Str, v.Elems[i+2].Str}
			}
			holders = append(holders, m)
			lists = append(lists, es)
		}
		keys := map[string]bool{}
		for _, l := range lists {
			for k := range l {
				keys[k] = true
			}
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			answers := make([]consistency.Reply, len(lists))
			for i, l := range lists {
				if e, ok := l[k]; ok {
					answers[i] = consistency.Reply{Version: e.Version, Raw: e.Digest}
				}
			}
			source, stale, _ := consistency.Resolve(answers)
			if len(stale) == 0 {
				continue
			}
			rep.Differing++
			if err := limiter.Wait(ctx); err != nil {
				return rep, err
			}
			targets := make([]R, len(stale))
			for i, s := range stale {
				targets[i] = holders[s]
			}
			changed, err := r.copyKeySync([]byte(k), holders[source], targets, count)
			if r.node.Promised(err) {
				changed, err = len(targets), r.node.ReadByConsensus([]byte(k))
			}
			switch {
			case err != nil:
				rep.Failed++
				r.cfg.Log.Debug("anti-entropy repair failed", "key", resp.Printable([]byte(k)), "err", err)
			case changed > 0:
				rep.Repaired++
			}
		}
	}
	rep.Bytes = traffic.Load()
	took := time.Since(start)
	rep.Took, rep.TookSeconds = took.Round(time.Millisecond).String(), took.Seconds()
	return rep, nil
}

// copyKeySync is copyKey, waited for.
func (r *Repairer[R]) copyKeySync(key []byte, src R, targets []R, count countFunc) (int, error) {
	done := make(chan struct {
		changed int
		err     error
	}, 1)
	r.copyKey(key, src, targets, count, func(changed int, err error) {
		done <- struct {
			changed int
			err     error
		}{changed, err}
	})
	res := <-done
	return res.changed, res.err
}

// treeDepth chooses a depth that puts about 16 keys in a leaf, for a
// datastore of total keys of which seg holds its share.
func treeDepth(total int64, seg segment) int {
	share := uint64(total) * seg.span() >> 32
	if share < 32 {
		return 1
	}
	return min(bits.Len64(share/16), 18)
}

// Limiter spaces events to at most perSec a second: anti-entropy's copies,
// and a membership change's handoff.
type Limiter struct {
	every time.Duration
	next  time.Time
}

// NewLimiter makes a Limiter of perSec events a second.
func NewLimiter(perSec int) *Limiter {
	return &Limiter{every: time.Second / time.Duration(max(perSec, 1))}
}

// Wait waits for the next event's turn, or for ctx to end.
func (r *Limiter) Wait(ctx context.Context) error {
	now := time.Now()
	if r.next.Before(now) {
		r.next = now
	}
	d := r.next.Sub(now)
	r.next = r.next.Add(r.every)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
