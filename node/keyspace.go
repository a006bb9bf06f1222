package node

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
)

// DBSIZE and INFO keyspace count the cluster's keys: every rack holds a
// full copy, so they add up what the nodes of this node's rack hold. Each
// node counts its redis-server's keys with SCAN, leaving out troop's own
// (version keys and tombstones): that is O(keys), as KEYS is, and runs on
// the anti-entropy links, beside the request traffic.

// keyCount is what one node holds: keys, and how many have an expiry.
type keyCount struct{ keys, expires int64 }

// countExpiring counts the keys of KEYS that have an expiry.
const countExpiring = `
local e = 0
for i = 1, #KEYS do
  if redis.call('PTTL', KEYS[i]) > 0 then e = e + 1 end
end
return e
`

// localKeyCount scans this node's redis-server.
func (n *Node) localKeyCount() (keyCount, error) {
	store, _ := n.longLinks()
	var total keyCount
	cursor := "0"
	for {
		raw, err := doSync(context.Background(), store, resp.AppendCommandStrings(nil, "SCAN", cursor, "COUNT", "1000"))
		if err != nil {
			return total, err
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() || len(v.Elems) != 2 {
			return total, fmt.Errorf("SCAN: unexpected reply %s", raw)
		}
		var keys [][]byte
		for _, e := range userKeys(v.Elems[1].Elems) {
			keys = append(keys, e.Str)
		}
		if len(keys) > 0 {
			total.keys += int64(len(keys))
			raw, err := doSync(context.Background(), store, resp.AppendCommand(nil, scriptArgs("EVAL", countExpiring, keys)...))
			if err != nil {
				return total, err
			}
			if e, err := resp.Parse(raw); err == nil && e.Type == resp.Integer {
				total.expires += e.Int
			}
		}
		if cursor = string(v.Elems[0].Str); cursor == "0" {
			return total, nil
		}
	}
}

// rackKeyCount adds up the counts of the nodes of this node's rack.
func (n *Node) rackKeyCount() (keyCount, error) {
	_, peers := n.longLinks()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		total    keyCount
		failures []string
	)
	for _, m := range n.rackMembers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c keyCount
			var err error
			if m.self {
				c, err = n.localKeyCount()
			} else if m.isDown() {
				err = errMarkedDown(m)
			} else {
				c, err = peerKeyCount(peers[m])
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, m.name()+": "+err.Error())
				return
			}
			total.keys += c.keys
			total.expires += c.expires
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		return total, fmt.Errorf("every node of rack %s must answer (%s)", n.cfg.Rack, strings.Join(failures, "; "))
	}
	return total, nil
}

// peerKeyCount asks a peer for its count (peer request KEYCOUNT).
func peerKeyCount(l *link.Link) (keyCount, error) {
	raw, err := doSync(context.Background(), l, resp.AppendCommandStrings(nil, "KEYCOUNT"))
	if err == nil {
		fromPeer(func(r []byte, e error) { raw, err = r, e })(raw, nil)
	}
	if err != nil {
		return keyCount{}, err
	}
	v, perr := resp.Parse(raw)
	if perr != nil || len(v.Elems) != 2 || v.Elems[0].Type != resp.Integer || v.Elems[1].Type != resp.Integer {
		return keyCount{}, fmt.Errorf("unexpected KEYCOUNT answer %q", raw)
	}
	return keyCount{keys: v.Elems[0].Int, expires: v.Elems[1].Int}, nil
}

// appendKeyCount encodes a peer's KEYCOUNT answer.
func appendKeyCount(c keyCount) []byte {
	out := resp.AppendArrayHeader(nil, 2)
	out = resp.AppendInt(out, c.keys)
	return resp.AppendInt(out, c.expires)
}

// keyspace answers DBSIZE, or INFO's keyspace section, through complete,
// from a goroutine of its own: the count takes a scan of every node of
// the rack.
func (n *Node) keyspace(dbsize bool, info string, complete func([]byte)) {
	go func() {
		c, err := n.rackKeyCount()
		if err != nil {
			what := "DBSIZE"
			if !dbsize {
				what = "INFO keyspace"
			}
			complete(resp.AppendError(nil, "ERR troop: "+what+" could not count the keys: "+err.Error()))
			return
		}
		if dbsize {
			complete(resp.AppendInt(nil, c.keys))
			return
		}
		section := "# Keyspace\r\n"
		if c.keys > 0 {
			section += fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=0\r\n", c.keys, c.expires)
		}
		if info != "" {
			section = info + "\r\n" + section
		}
		complete(resp.AppendBulkString(nil, section))
	}()
}

// rackMembers are the nodes of this node's rack, in token order: the
// nodes a SCAN visits one after the other, and KEYS asks.
func (n *Node) rackMembers() []*member {
	var out []*member
	var first []uint32
	v := n.view()
	for i, m := range v.members {
		if m.dc == n.cfg.Datacenter && m.rack == n.cfg.Rack {
			out = append(out, m)
			first = append(first, slices.Min(v.tokens[i]))
		}
	}
	sort.Sort(byFirstToken{out, first})
	return out
}

// A SCAN cursor through a node holds the node of the rack being scanned in
// its low bits and that node's redis-server cursor above them, so it is a
// number, as clients expect.
const (
	scanNodeBits = 10
	maxScanNodes = 1 << scanNodeBits
)

// scanCommand runs SCAN over the nodes of this node's rack, one after the
// other: each answer is one node's, without troop's own keys.
func (n *Node) scanCommand(args [][]byte, b *batch, complete func([]byte)) {
	nodes := n.rackMembers()
	cursor, err := strconv.ParseUint(string(args[1]), 10, 64)
	node := int(cursor % maxScanNodes)
	if err != nil || node >= len(nodes) || len(nodes) > maxScanNodes {
		complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: invalid cursor '%s': not one this cluster's SCAN gave", resp.Printable(args[1]))))
		return
	}
	m := nodes[node]
	req := append([][]byte{[]byte("SCAN"), []byte(strconv.FormatUint(cursor>>scanNodeBits, 10))}, args[2:]...)
	got := func(raw []byte, err error) {
		v, perr := resp.Parse(raw)
		switch {
		case err != nil:
			complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: SCAN needs every node of rack %s: %s: %v", n.cfg.Rack, m.name(), err)))
			return
		case perr != nil || v.IsError() || len(v.Elems) != 2:
			complete(raw) // redis-server's error (a bad option, say)
			return
		}
		next, err := strconv.ParseUint(string(v.Elems[0].Str), 10, 64)
		if err != nil || next >= 1<<(64-scanNodeBits) {
			complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: SCAN: %s answered a cursor troop cannot carry", m.name())))
			return
		}
		out := next<<scanNodeBits | uint64(node)
		if next == 0 {
			out = uint64(node + 1) // the next node, from its start
			if node+1 == len(nodes) {
				out = 0
			}
		}
		reply := resp.AppendArrayHeader(nil, 2)
		reply = resp.AppendBulkString(reply, strconv.FormatUint(out, 10))
		complete(resp.AppendValue(reply, resp.Value{Type: resp.Array, Elems: userKeys(v.Elems[1].Elems)}))
	}
	n.onNode(b, m, req, got)
}

// keysCommand runs KEYS on every node of this node's rack and merges the
// answers, without troop's own keys.
func (n *Node) keysCommand(args [][]byte, b *batch, complete func([]byte)) {
	var keys []resp.Value
	n.onNodes(b, n.rackMembers(), args, func(v resp.Value) { keys = append(keys, userKeys(v.Elems)...) },
		func(failures []string) {
			if len(failures) > 0 {
				complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: KEYS needs every node of rack %s (%s)", n.cfg.Rack, strings.Join(failures, "; "))))
				return
			}
			complete(resp.AppendValue(nil, resp.Value{Type: resp.Array, Elems: keys}))
		})
}

// userKeys leaves troop's own keys (versions, tombstones) out of keys.
func userKeys(keys []resp.Value) []resp.Value {
	var out []resp.Value
	for _, k := range keys {
		if !strings.HasPrefix(string(k.Str), reservedPrefix) {
			out = append(out, k)
		}
	}
	return out
}

// onNodes runs a plain command on the redis-server of each of nodes at
// once. Each answer goes to got, one at a time; done runs once all have
// answered, with a line for each node that failed or answered an error.
func (n *Node) onNodes(b *batch, nodes []*member, args [][]byte, got func(resp.Value), done func(failures []string)) {
	n.onNodesWith(b, nodes, func(m *member, done func([]byte, error)) { n.onNode(b, m, args, done) }, got, done)
}

// onNodesWith is onNodes of what run sends to each node.
func (n *Node) onNodesWith(b *batch, nodes []*member, run func(m *member, done func([]byte, error)), got func(resp.Value), done func(failures []string)) {
	var mu sync.Mutex
	var failures []string
	remaining := len(nodes)
	for _, m := range nodes {
		run(m, func(raw []byte, err error) {
			v, perr := resp.Parse(raw)
			mu.Lock()
			switch {
			case err != nil:
				failures = append(failures, m.name()+": "+err.Error())
			case perr != nil || v.IsError():
				failures = append(failures, m.name()+": "+strings.TrimSpace(strings.TrimPrefix(string(raw), "-")))
			default:
				got(v)
			}
			remaining--
			last := remaining == 0
			mu.Unlock()
			if last {
				sort.Strings(failures)
				done(failures)
			}
		})
	}
}

// onNode runs a plain command on the redis-server of m: this node's own,
// or a peer's (peer request LOCAL).
func (n *Node) onNode(b *batch, m *member, args [][]byte, done func([]byte, error)) {
	if m.self {
		n.toStoreCommand(b, nil, n.store[0], args, done)
		return
	}
	if m.isDown() {
		done(nil, errMarkedDown(m))
		return
	}
	n.toPeer(b, nil, m, appendPeerRequest(nil, "LOCAL", nil, args), fromPeer(done))
}

// onEveryNode runs a plain command on the redis-server of every node of
// the cluster, every datacenter, and answers OK once all did; otherwise an
// error that names the nodes it did not reach.
func (n *Node) onEveryNode(what string, args [][]byte, b *batch, complete func([]byte)) {
	members := n.view().members
	n.onNodes(b, members, args, func(resp.Value) {}, func(failures []string) {
		if len(failures) > 0 {
			complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s reached %d of %d nodes; it was not applied on: %s",
				what, len(members)-len(failures), len(members), strings.Join(failures, "; "))))
			return
		}
		complete(resp.AppendSimple(nil, "OK"))
	})
}

// flush answers FLUSHALL and FLUSHDB: every node's redis-server is emptied
// (there is one database), when troop_allow_flush says so. FUNCTION FLUSH
// comes as FLUSH: it empties redis-server's functions, which troop does not
// use (its own scripts are loaded with SCRIPT LOAD, and stay).
func (n *Node) flush(args [][]byte, b *batch, complete func([]byte)) {
	name := strings.ToUpper(string(args[0]))
	cmd := [][]byte{[]byte(name)}
	if name == "FLUSH" {
		name, cmd = "FUNCTION FLUSH", [][]byte{[]byte("FUNCTION"), []byte("FLUSH")}
	}
	if !n.cfg.AllowFlush {
		complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: '%s' is disabled: it empties every node of the cluster; set troop_allow_flush: true in the node's config to allow it", name)))
		return
	}
	mode := "SYNC"
	switch {
	case len(args) == 2 && (strings.EqualFold(string(args[1]), "SYNC") || strings.EqualFold(string(args[1]), "ASYNC")):
		mode = strings.ToUpper(string(args[1]))
	case len(args) != 1:
		complete(resp.AppendError(nil, "ERR syntax error"))
		return
	}
	n.onEveryNode(string(bytes.Join(cmd, []byte(" "))), append(cmd, []byte(mode)), b, complete)
}

// configSettable are the redis-server parameters CONFIG SET passes on to
// every node: they change how redis-server encodes values, never what a
// command answers, so replicas stay alike and troop's own use of
// redis-server (scripts, versions, persistence) is untouched; and
// lua-time-limit (busy-reply-threshold), after which a script makes its
// redis-server answer BUSY, which the node then gives its clients as Redis
// does (limits.go).
var configSettable = map[string]bool{
	"hash-max-listpack-entries": true, "hash-max-listpack-value": true,
	"hash-max-ziplist-entries": true, "hash-max-ziplist-value": true,
	"list-max-listpack-size": true, "list-max-ziplist-size": true, "list-compress-depth": true,
	"set-max-intset-entries": true, "set-max-listpack-entries": true, "set-max-listpack-value": true,
	"zset-max-listpack-entries": true, "zset-max-listpack-value": true,
	"zset-max-ziplist-entries": true, "zset-max-ziplist-value": true,
	"hll-sparse-max-bytes": true, "stream-node-max-bytes": true, "stream-node-max-entries": true,
	"active-defrag-ignore-bytes": true, "activedefrag": true,
	"lua-time-limit": true, "busy-reply-threshold": true,
}

// configCommand answers CONFIG GET from this node's redis-server (but for
// the parameters the node keeps, nodeSettings, the node's), and CONFIG SET
// of configSettable parameters and of nodeSettings on every node.
func (n *Node) configCommand(args [][]byte, b *batch, complete func([]byte)) {
	sub := strings.ToUpper(string(args[1]))
	switch {
	case sub == "GET" && len(args) >= 3:
		n.onNode(b, n.selfMember(), args, func(raw []byte, err error) {
			if err != nil {
				complete(resp.AppendError(nil, "ERR troop: CONFIG GET: "+err.Error()))
				return
			}
			complete(n.withNodeSettings(raw))
		})
	case sub == "SET" && len(args) >= 4 && len(args)%2 == 0:
		var own [][]byte // the node's own parameters and their values (limits.go)
		passed := args[:2:2]
		for i := 2; i < len(args); i += 2 {
			p := strings.ToLower(string(args[i]))
			if s, ok := nodeSettings[p]; ok {
				if bad := s.check(string(args[i+1])); bad != "" {
					complete(resp.AppendError(nil, bad))
					return
				}
				own = append(own, []byte(p), args[i+1])
				continue
			}
			passed = append(passed, args[i], args[i+1])
			if !configSettable[p] {
				complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: CONFIG SET '%s' is not passed on: only %s and the parameters that change how redis-server encodes values are (%s); configure each redis-server directly", resp.Printable(args[i]), strings.Join(ownNames(), ", "), strings.Join(settableNames(), ", "))))
				return
			}
		}
		switch {
		case own == nil:
			n.onEveryNode("CONFIG SET", args, b, complete)
		case len(passed) == 2:
			n.configSetNodes(own, b, complete)
		default:
			n.onEveryNode("CONFIG SET", passed, b, func(reply []byte) {
				if reply[0] == '-' {
					complete(reply)
					return
				}
				n.configSetNodes(own, nil, complete)
			})
		}
	case sub == "RESETSTAT" && len(args) == 2:
		n.stats.replies.reset(n.stats.commands) // this node's INFO commandstats and errorstats
		n.onEveryNode("CONFIG RESETSTAT", args, b, complete)
	default:
		complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: 'CONFIG %s' is not supported: CONFIG GET, CONFIG SET of encoding parameters, %s, and CONFIG RESETSTAT are", strings.ToUpper(resp.Printable(args[1])), strings.Join(ownNames(), ", "))))
	}
}

func ownNames() []string {
	var out []string
	for p := range nodeSettings {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func settableNames() []string {
	var out []string
	for p := range configSettable {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (n *Node) selfMember() *member { return n.self }

// byFirstToken sorts members by their smallest token.
type byFirstToken struct {
	ms    []*member
	first []uint32
}

func (s byFirstToken) Len() int           { return len(s.ms) }
func (s byFirstToken) Less(i, j int) bool { return s.first[i] < s.first[j] }
func (s byFirstToken) Swap(i, j int) {
	s.ms[i], s.ms[j] = s.ms[j], s.ms[i]
	s.first[i], s.first[j] = s.first[j], s.first[i]
}
