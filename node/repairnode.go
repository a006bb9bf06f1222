package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/repair"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// The node's side of repair (node/repair, docs/repair.md): what the
// repairer asks of the node (repairNode), what a replica is to it (the
// member's Local, MarkedDown and Name), and the parts of repair that are
// the node's own: the datastore's scripts and requests for a copy, the
// peer requests that serve a peer's repair, and the hints the request
// path keeps for a peer that missed a write.

// newRepairer makes the node's repairer, with hinted handoff's files
// under the data directory.
func (n *Node) newRepairer() *repair.Repairer[*member] {
	return repair.New[*member]((*repairNode)(n), repair.Config{Name: n.cfg.Name, ReadRepair: n.cfg.ReadRepair,
		AntiEntropyInterval: n.cfg.AntiEntropyInterval, KeysPerSec: n.cfg.RepairKeysPerSec,
		HintDir: n.hintDir(), MaxHintBytes: int64(n.cfg.MaxHintBytes), Log: n.log})
}

// hintDir is where hinted handoff keeps its files, "" when it is off.
func (n *Node) hintDir() string {
	if !n.cfg.HintedHandoff {
		return ""
	}
	return filepath.Join(n.dataDir, "hints")
}

// AntiEntropy runs one anti-entropy pass over the segments this node owns
// in its rack, against the replicas of the other racks of its datacenter,
// and reports what it found and repaired.
func (n *Node) AntiEntropy(ctx context.Context) (repair.Report, error) {
	return n.repair.AntiEntropy(ctx)
}

// Local says m is this node.
func (m *member) Local() bool { return m.self }

// MarkedDown is errMarkedDown when the failure detector marked m down.
func (m *member) MarkedDown() error {
	if m.isDown() {
		return errMarkedDown(m)
	}
	return nil
}

// Name is replicaName(m).
func (m *member) Name() string { return replicaName(m) }

// repairNode is the node as its repairer sees it (repair.Node).
type repairNode Node

func (r *repairNode) node() *Node { return (*Node)(r) }

func (r *repairNode) Token(key []byte) uint32 { return r.node().token(key) }

func (r *repairNode) LocalRacks() ([]*ring.Ring, []*member) {
	v := r.node().view()
	racks := make([]*ring.Ring, len(v.localRacks))
	for i, rr := range v.localRacks {
		racks[i] = rr.ring
	}
	return racks, v.members
}

func (r *repairNode) Fetch(key []byte, done func([]byte, error)) {
	r.node().storeFor(key).Do(appendFetch(nil, key), done)
}

func (r *repairNode) Install(key []byte, c repair.Copy, mirror bool, done func([]byte, error)) {
	r.node().repairLocal(nil, key, c, mirror, done)
}

func (r *repairNode) Send(m *member, reqs [][]byte, done func(int, []byte, error)) {
	for i, req := range reqs {
		m.link.Send(req, fromPeer(func(raw []byte, err error) { done(i, raw, err) }))
	}
	m.link.Flush()
}

func (r *repairNode) Scan(ctx context.Context, page func(keys [][]byte, tokens []uint32) error) error {
	return r.node().scanVersioned(ctx, page)
}

func (r *repairNode) Entries(keys [][]byte) ([]repair.Entry, error) {
	store, _ := r.node().longLinks()
	raw, err := doSync(context.Background(), store, resp.AppendCommand(nil, scriptArgs("EVALSHA", digestSHA, keys)...))
	if err != nil {
		return nil, err
	}
	d, err := resp.Parse(raw)
	if err != nil || d.IsError() || len(d.Elems) != 2*len(keys) {
		return nil, fmt.Errorf("digest: unexpected reply %.200s", raw)
	}
	es := make([]repair.Entry, len(keys))
	for i := range es {
		es[i] = repair.Entry{Version: d.Elems[2*i].Str, Digest: d.Elems[2*i+1].Str}
	}
	return es, nil
}

func (r *repairNode) Size() (int64, error) {
	raw, err := doSync(context.Background(), r.node().store[0], resp.AppendCommandStrings(nil, "DBSIZE"))
	if err != nil {
		return 0, err
	}
	v, err := resp.Parse(raw)
	return v.Int, err
}

func (r *repairNode) Ask(m *member, req []byte) ([]byte, error) {
	return doSync(context.Background(), r.node().longLink(m), req)
}

func (r *repairNode) Promised(err error) bool { return promised(err) }

// promised says whether err is a replica refusing a copy below a key's
// promise: a change by consensus was promised above the newest version
// and not decided (or not yet everywhere).
func promised(err error) bool {
	return err != nil && strings.Contains(err.Error(), promisedCode+" troop:")
}

// ReadByConsensus reads key at DC_QUORUM by consensus (consensusRead).
func (r *repairNode) ReadByConsensus(key []byte) error {
	n := r.node()
	done := make(chan []byte, 1)
	n.consensusRead(nil, consistency.DCQuorum, key, [][]byte{[]byte("EXISTS"), key}, n.replicas(key), func(reply []byte) { done <- reply })
	reply := <-done
	if v, err := resp.Parse(reply); err != nil || v.IsError() {
		return fmt.Errorf("read by consensus: %.200s", reply)
	}
	return nil
}

// serveAntiEntropy answers a peer's anti-entropy request off the
// connection's reader: a tree takes a while to build.
func (n *Node) serveAntiEntropy(op string, args [][]byte, s *slot) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		reply, err := n.repair.Serve(context.Background(), op, args[1:])
		if err != nil {
			reply = resp.AppendError(nil, unreachableCode+" "+err.Error())
		}
		s.complete(reply)
	}()
}

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

func appendFetch(dst, key []byte) []byte {
	dst = resp.AppendArrayHeader(dst, 5)
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, fetchSHA)
	dst = resp.AppendBulkString(dst, "2")
	dst = resp.AppendBulk(dst, key)
	return appendVersionKey(dst, key)
}

// repairLocal installs copy c of key on this node's redis-server, unless
// it holds a newer version. During a membership change a repair that
// changed a moving key is mirrored to its other owner, as a write is
// (applyWrite), when mirror says so: a HANDOFF, the change's own copy,
// never is.
func (n *Node) repairLocal(b *batch, key []byte, c repair.Copy, mirror bool, done func([]byte, error)) {
	n.versions.record(key, c.Version, mayExpire)
	if mirror {
		unmirrored, mirrored := done, n.mirrorAfter(n.view(), c.Version, [][]byte{key}, done)
		done = func(raw []byte, err error) {
			if err == nil && string(raw) == ":1\r\n" {
				mirrored(raw, err)
				return
			}
			unmirrored(raw, err)
		}
	}
	b.send(n.storeFor(key), appendRepair(nil, key, c), done)
}

func appendRepair(dst, key []byte, c repair.Copy) []byte {
	dst = resp.AppendArrayHeader(dst, 9)
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, repairSHA)
	dst = resp.AppendBulkString(dst, "2")
	dst = resp.AppendBulk(dst, key)
	dst = appendVersionKey(dst, key)
	dst = resp.AppendBulk(dst, c.Version)
	dst = resp.AppendBulk(dst, c.Dump)
	dst = resp.AppendBulkString(dst, strconv.FormatInt(c.PTTL, 10))
	return resp.AppendBulkString(dst, strconv.FormatInt(c.VPTTL, 10))
}

// openHints makes the hint directory under the data directory; each
// peer's file opens with its member (openHint).
func (n *Node) openHints() error {
	if dir := n.hintDir(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("hints: %w", err)
		}
	}
	return nil
}

// openHint opens (or creates) the hint file of a new peer m.
func (n *Node) openHint(m *member) error {
	h, err := n.repair.OpenHints(m.peerAddr)
	m.hints = h
	return err
}

// hint keeps a write for m, which did not get it.
func (n *Node) hint(m *member, req []byte) {
	if m.hints == nil || planted && n.noHints {
		return
	}
	if !m.hints.Add(req) {
		pending, _, _ := m.hints.Counts()
		n.log.Debug("hint dropped", "peer", m.peerAddr, "pending", pending)
	}
}

// replayHints starts delivering m's hints unless that is under way or
// there are none.
func (n *Node) replayHints(m *member) { n.repair.ReplayHints(m, m.hints) }

// hintTotals sums the hint counters of every peer.
func (n *Node) hintTotals() (pending, dropped, replayed int64) {
	for _, m := range n.allPeers() {
		if h := m.hints; h != nil {
			p, d, r := h.Counts()
			pending, dropped, replayed = pending+p, dropped+d, replayed+r
		}
	}
	return
}

// resolveDataDir is troop_data_dir, or by default troop-data/<node name>
// beside the config file (the lab gives every node its own directory), or
// under the system's temporary directory for a config built in code.
func resolveDataDir(dataDir, source, name string) string {
	if dataDir != "" {
		return dataDir
	}
	if source != "" {
		return filepath.Join(filepath.Dir(source), "troop-data", name)
	}
	return filepath.Join(os.TempDir(), "troop-data", name)
}
