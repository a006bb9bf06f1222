package node

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

	"github.com/troop-lab/troop/link"
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

// digestScript returns {version, digest} for each key of KEYS: the key's
// version ("" for none) and the first 16 hex digits of the SHA-1 of its
// DUMP ("" when it has no value: a tombstone).
const digestScript = `
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', '` + VersionPrefix + `' .. KEYS[i]) or ''
  local d = redis.call('DUMP', KEYS[i])
  if d then d = string.sub(redis.sha1hex(d), 1, 16) else d = '' end
  out[#out+1] = v
  out[#out+1] = d
end
return out
`

// RepairReport is what an anti-entropy pass did.
type RepairReport struct {
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

// aeConn is what an anti-entropy pass uses to reach a replica: its own
// connections, with a long timeout, so that a tree being built (seconds on
// a large redis-server) delays neither client traffic nor the failure
// detector's heartbeats.
const aeTimeout = 10 * time.Minute

func (n *Node) aeLinks() (store *link.Link, peers map[*member]*link.Link) {
	n.aeMu.Lock()
	defer n.aeMu.Unlock()
	if n.aeStore == nil {
		n.aeStore = link.New("redis-repair", n.cfg.Servers[0].Addr, aeTimeout, n.storeHandshake(false))
		n.aePeers = map[*member]*link.Link{}
	}
	for _, m := range n.view().peers() { // members join: each gets its link on first use
		if n.aePeers[m] == nil {
			n.aePeers[m] = n.peerLink("peer-repair", m, aeTimeout)
		}
	}
	return n.aeStore, n.aePeers
}

// aeLink returns the long-timeout connection to peer m, made on first use.
func (n *Node) aeLink(m *member) *link.Link {
	n.aeLinks()
	n.aeMu.Lock()
	defer n.aeMu.Unlock()
	l := n.aePeers[m]
	if l == nil {
		l = n.peerLink("peer-repair", m, aeTimeout)
		n.aePeers[m] = l
	}
	return l
}

// doSync runs one request on l and waits for its reply.
func doSync(l *link.Link, req []byte) ([]byte, error) {
	ch := make(chan struct {
		raw []byte
		err error
	}, 1)
	l.Do(req, func(raw []byte, err error) {
		ch <- struct {
			raw []byte
			err error
		}{raw, err}
	})
	r := <-ch
	return r.raw, r.err
}

// scanPages scans this node's redis-server for the versioned keys of seg,
// a SCAN page at a time, and calls page with those whose leaf (in a tree
// of depth) want accepts (nil: all). The keys share the page's reply: a
// key kept beyond the call must be copied.
func (n *Node) scanPages(ctx context.Context, seg segment, depth int, want map[int]bool, page func(keys [][]byte, leaves []int) error) error {
	store, _ := n.aeLinks()
	cursor := "0"
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := doSync(store, resp.AppendCommandStrings(nil, "SCAN", cursor, "MATCH", VersionPrefix+"*", "COUNT", "1000"))
		if err != nil {
			return err
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() || len(v.Elems) != 2 {
			return fmt.Errorf("SCAN: unexpected reply %s", raw)
		}
		var keys [][]byte
		var leaves []int
		for _, e := range v.Elems[1].Elems {
			key := e.Str[len(VersionPrefix):]
			leaf, ok := seg.leafOf(n.token(key), depth)
			if ok && (want == nil || want[leaf]) {
				keys = append(keys, key)
				leaves = append(leaves, leaf)
			}
		}
		if len(keys) > 0 {
			if err := page(keys, leaves); err != nil {
				return err
			}
		}
		cursor = string(v.Elems[0].Str)
		if cursor == "0" {
			return nil
		}
	}
}

// scanLocal is scanPages calling visit for each key, with its version and
// value digest (digestScript).
func (n *Node) scanLocal(ctx context.Context, seg segment, depth int, want map[int]bool, visit func(key, version, digest []byte, leaf int)) error {
	store, _ := n.aeLinks()
	return n.scanPages(ctx, seg, depth, want, func(keys [][]byte, leaves []int) error {
		raw, err := doSync(store, resp.AppendCommand(nil, scriptArgs("EVALSHA", digestSHA, keys)...))
		if err != nil {
			return err
		}
		d, err := resp.Parse(raw)
		if err != nil || d.IsError() || len(d.Elems) != 2*len(keys) {
			return fmt.Errorf("digest: unexpected reply %.200s", raw)
		}
		for i, k := range keys {
			if len(d.Elems[2*i].Str) > 0 { // the version may have expired since SCAN
				visit(k, d.Elems[2*i].Str, d.Elems[2*i+1].Str, leaves[i])
			}
		}
		return nil
	})
}

// buildTree builds this replica's tree of seg.
func (n *Node) buildTree(ctx context.Context, seg segment, depth int) (*merkleTree, error) {
	t := newMerkleTree(depth)
	err := n.scanLocal(ctx, seg, depth, nil, func(key, version, digest []byte, leaf int) {
		t.add(leaf, entryHash(key, version, digest))
	})
	if err != nil {
		return nil, err
	}
	t.seal()
	return t, nil
}

// entry is one key of a differing leaf, as one replica holds it.
type entry struct{ version, digest []byte }

// localEntries lists this replica's keys in the given leaves.
func (n *Node) localEntries(ctx context.Context, seg segment, depth int, leaves []int) (map[string]entry, error) {
	want := map[int]bool{}
	for _, l := range leaves {
		want[l] = true
	}
	out := map[string]entry{}
	err := n.scanLocal(ctx, seg, depth, want, func(key, version, digest []byte, _ int) {
		out[string(key)] = entry{append([]byte(nil), version...), append([]byte(nil), digest...)}
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

// serveAntiEntropy answers a peer's anti-entropy requests, off the
// connection's reader (a tree takes a while to build):
//
//	TREE session lo hi depth            -> [keys, root (8 bytes)]
//	TREENODES session lo hi depth level idx...  -> hashes, 8 bytes each, in one bulk
//	ENTRIES lo hi depth leaf...         -> [key, version, digest, ...]
func (n *Node) serveAntiEntropy(op string, args [][]byte, s *slot) {
	bad := func(why string) { s.complete(resp.AppendError(nil, "ERR troop peer protocol: "+op+": "+why)) }
	first := 2 // where lo starts
	if op == "ENTRIES" {
		first = 1
	}
	if len(args) < first+3 {
		bad("too few arguments")
		return
	}
	nums := make([]int64, 0, len(args)-first)
	for _, a := range args[first:] {
		x, err := strconv.ParseInt(string(a), 10, 64)
		if err != nil || x < 0 || x > 1<<32-1 {
			bad(fmt.Sprintf("bad number '%s'", printableArg(a)))
			return
		}
		nums = append(nums, x)
	}
	seg, depth := segment{lo: uint32(nums[0]), hi: uint32(nums[1])}, int(nums[2])
	if depth > maxMerkleDepth {
		bad("depth above " + strconv.Itoa(maxMerkleDepth))
		return
	}
	cacheKey := fmt.Sprintf("%s/%d/%d/%d", args[1], seg.lo, seg.hi, depth)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx := context.Background()
		switch op {
		case "TREE":
			t, err := n.buildTree(ctx, seg, depth)
			if err != nil {
				s.complete(resp.AppendError(nil, unreachableCode+" "+err.Error()))
				return
			}
			n.trees.put(cacheKey, t)
			out := resp.AppendArrayHeader(nil, 2)
			out = resp.AppendInt(out, int64(t.keys))
			s.complete(resp.AppendBulk(out, binary.BigEndian.AppendUint64(nil, t.root())))
		case "TREENODES":
			t := n.trees.get(cacheKey)
			if t == nil || len(nums) < 4 || int(nums[3]) > t.depth {
				bad("no such tree (ask TREE first) or level")
				return
			}
			level := int(nums[3])
			idx := make([]int, 0, len(nums)-4)
			for _, x := range nums[4:] {
				if x >= 1<<level {
					bad("node index out of range")
					return
				}
				idx = append(idx, int(x))
			}
			var out []byte
			for _, h := range t.nodes(level, idx) {
				out = binary.BigEndian.AppendUint64(out, h)
			}
			s.complete(resp.AppendBulk(nil, out))
		case "ENTRIES":
			leaves := make([]int, 0, len(nums)-3)
			for _, x := range nums[3:] {
				leaves = append(leaves, int(x))
			}
			es, err := n.localEntries(ctx, seg, depth, leaves)
			if err != nil {
				s.complete(resp.AppendError(nil, unreachableCode+" "+err.Error()))
				return
			}
			out := resp.AppendArrayHeader(nil, 3*len(es))
			for k, e := range es {
				out = resp.AppendBulkString(out, k)
				out = resp.AppendBulk(out, e.version)
				out = resp.AppendBulk(out, e.digest)
			}
			s.complete(out)
		}
	}()
}

// AntiEntropy runs one anti-entropy pass over the segments this node owns
// in its rack, against the replicas of the other racks of its datacenter,
// and reports what it found and repaired.
func (n *Node) AntiEntropy(ctx context.Context) (RepairReport, error) {
	n.aeRun.Lock() // one pass at a time
	defer n.aeRun.Unlock()
	start := time.Now()
	rep := RepairReport{Node: n.cfg.Name}
	_, peerLinks := n.aeLinks()
	v := n.view()
	tokenSet := map[uint32]bool{}
	for _, r := range v.localRacks {
		for _, e := range r.ring.Entries() {
			tokenSet[e.Token] = true
		}
	}
	tokens := make([]uint32, 0, len(tokenSet))
	for t := range tokenSet {
		tokens = append(tokens, t)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	self := slices.Index(v.members, n.self) // -1 when this node owns nothing (joining, removed)
	segs, owners := segmentsOf(tokens, func(r int, t uint32) int { return v.localRacks[r].ring.Owner(t) }, len(v.localRacks), self)
	rep.Segments = len(segs)
	session := strconv.FormatInt(time.Now().UnixNano(), 36)
	limiter := newRateLimiter(n.cfg.RepairKeysPerSec)
	var traffic atomic.Int64 // copies count it from link goroutines
	count := func(req, raw []byte) { traffic.Add(int64(len(req) + len(raw))) }

	total := int64(0)
	if raw, err := doSync(n.store[0], resp.AppendCommandStrings(nil, "DBSIZE")); err == nil {
		if v, err := resp.Parse(raw); err == nil {
			total = v.Int / 2 // a value and its version per key
		}
	}
	for si, seg := range segs {
		depth := treeDepth(total, seg)
		local, err := n.buildTree(ctx, seg, depth)
		if err != nil {
			return rep, fmt.Errorf("local tree: %w", err)
		}
		compared := int64(local.keys)
		var replicas []*member // rack order; replicas[0] is this node
		for _, idx := range owners[si] {
			replicas = append(replicas, v.members[idx])
		}
		leafSet := map[int]bool{}
		var asked []*member
		for _, m := range replicas[1:] {
			if m.isDown() {
				rep.Skipped = append(rep.Skipped, replicaName(m)+" (marked down)")
				continue
			}
			l := peerLinks[m]
			segArgs := []string{strconv.FormatUint(uint64(seg.lo), 10), strconv.FormatUint(uint64(seg.hi), 10), strconv.Itoa(depth)}
			req := resp.AppendCommandStrings(nil, append([]string{"TREE", session}, segArgs...)...)
			raw, err := doSync(l, req)
			count(req, raw)
			v, perr := resp.Parse(raw)
			if err != nil || perr != nil || v.IsError() || len(v.Elems) != 2 || len(v.Elems[1].Str) != 8 {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (tree: %v %s)", replicaName(m), err, raw))
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
				raw, err := doSync(l, req)
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
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (%v)", replicaName(m), err))
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
		holders := []*member{replicas[0]}
		mine, err := n.localEntries(ctx, seg, depth, leaves)
		if err != nil {
			return rep, fmt.Errorf("local entries: %w", err)
		}
		lists := []map[string]entry{mine}
		for _, m := range asked {
			args := []string{"ENTRIES", strconv.FormatUint(uint64(seg.lo), 10), strconv.FormatUint(uint64(seg.hi), 10), strconv.Itoa(depth)}
			for _, lf := range leaves {
				args = append(args, strconv.Itoa(lf))
			}
			req := resp.AppendCommandStrings(nil, args...)
			raw, err := doSync(peerLinks[m], req)
			count(req, raw)
			v, perr := resp.Parse(raw)
			if err != nil || perr != nil || v.IsError() || len(v.Elems)%3 != 0 {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s (entries: %v %.200s)", replicaName(m), err, raw))
				continue
			}
			es := map[string]entry{}
			for i := 0; i < len(v.Elems); i += 3 {
				es[string(v.Elems[i].Str)] = entry{v.Elems[i+1].Str, v.Elems[i+2].Str}
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
					answers[i] = consistency.Reply{Version: e.version, Raw: e.digest}
				}
			}
			source, stale, _ := consistency.Resolve(answers)
			if len(stale) == 0 {
				continue
			}
			rep.Differing++
			if err := limiter.wait(ctx); err != nil {
				return rep, err
			}
			targets := make([]*member, len(stale))
			for i, s := range stale {
				targets[i] = holders[s]
			}
			changed, err := n.copyKeySync([]byte(k), holders[source], targets, count)
			if promised(err) {
				changed, err = len(targets), n.repair.settle([]byte(k))
			}
			switch {
			case err != nil:
				rep.Failed++
				n.log.Debug("anti-entropy repair failed", "key", printableArg([]byte(k)), "err", err)
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

// copyKeySync is repairer.copyKey, waited for.
func (n *Node) copyKeySync(key []byte, src *member, targets []*member, count countFunc) (int, error) {
	done := make(chan struct {
		changed int
		err     error
	}, 1)
	n.repair.copyKey(key, src, targets, count, func(changed int, err error) {
		done <- struct {
			changed int
			err     error
		}{changed, err}
	})
	r := <-done
	return r.changed, r.err
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

// rateLimiter spaces events to at most perSec a second.
type rateLimiter struct {
	every time.Duration
	next  time.Time
}

func newRateLimiter(perSec int) *rateLimiter {
	return &rateLimiter{every: time.Second / time.Duration(max(perSec, 1))}
}

func (r *rateLimiter) wait(ctx context.Context) error {
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
