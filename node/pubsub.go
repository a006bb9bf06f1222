package node

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/troop-lab/troop/resp"
)

// Pub/sub spans the datacenter: each node keeps the subscriptions of its
// own clients, and PUBLISH through any node delivers the message to its own
// subscribers and sends it once to every other node of the datacenter,
// which delivers it to theirs. A subscriber gets a message at most once;
// a node that is down, or a peer link that fails, loses the messages
// meant for its subscribers, and nobody sends them again: pub/sub is
// fire-and-forget, as in Redis. Remote datacenters do not get them.
// Sharded pub/sub (SSUBSCRIBE, SPUBLISH) is the same, on channels of its
// own.

// subscriber is one connection's subscriptions.
type subscriber struct {
	conn     *clientConn
	channels map[string]bool
	patterns map[string]bool
	shard    map[string]bool
	proto    int // of the connection when it last (un)subscribed
}

func (s *subscriber) count() int { return len(s.channels) + len(s.patterns) }

// pubsub holds a node's subscriptions, by channel and pattern.
type pubsub struct {
	mu       sync.Mutex
	channels map[string]map[*subscriber]bool
	patterns map[string]map[*subscriber]bool
	shard    map[string]map[*subscriber]bool
}

// kinds of subscription.
const (
	subChannel = iota
	subPattern
	subShard
)

func (p *pubsub) index(kind int) *map[string]map[*subscriber]bool {
	switch kind {
	case subPattern:
		return &p.patterns
	case subShard:
		return &p.shard
	}
	return &p.channels
}

func (s *subscriber) set(kind int) map[string]bool {
	switch kind {
	case subPattern:
		return s.patterns
	case subShard:
		return s.shard
	}
	return s.channels
}

// subscribeVerbs are the replies' first words, by kind: subscribe, then
// unsubscribe.
var subscribeVerbs = [3][2]string{{"subscribe", "unsubscribe"}, {"psubscribe", "punsubscribe"}, {"ssubscribe", "sunsubscribe"}}

// appendPush encodes a pub/sub frame: a push in RESP3, an array in RESP2;
// words are bulk strings (nil for a null) and count, when not negative,
// ends it as an integer.
func appendPush(dst []byte, proto int, count int64, words ...[]byte) []byte {
	n := len(words)
	if count >= 0 {
		n++
	}
	if proto == 3 {
		dst = append(dst, '>')
		dst = strconv.AppendInt(dst, int64(n), 10)
		dst = append(dst, '\r', '\n')
	} else {
		dst = resp.AppendArrayHeader(dst, n)
	}
	for _, w := range words {
		if w == nil {
			dst = resp.AppendNullBulk(dst)
			continue
		}
		dst = resp.AppendBulk(dst, w)
	}
	if count >= 0 {
		dst = resp.AppendInt(dst, count)
	}
	return dst
}

// subscribe is SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE (unsub false) and their
// UNSUBSCRIBE forms, for this node's connection sess.
func (n *Node) subscribe(kind int, unsub bool, names [][]byte, sess *session) []byte {
	c := sess.client
	if c == nil {
		return resp.AppendError(nil, "ERR troop: pub/sub is for client connections")
	}
	p := &n.pubsub
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	s := c.sub
	if s == nil {
		s = &subscriber{conn: c, channels: map[string]bool{}, patterns: map[string]bool{}, shard: map[string]bool{}}
		c.sub = s
	}
	c.mu.Unlock()
	s.proto = max(sess.proto, 2)
	mine, index := s.set(kind), p.index(kind)
	if *index == nil {
		*index = map[string]map[*subscriber]bool{}
	}
	count := func() int64 {
		if kind == subShard {
			return int64(len(s.shard))
		}
		return int64(s.count())
	}
	var out []byte
	verb := []byte(subscribeVerbs[kind][0])
	if unsub {
		verb = []byte(subscribeVerbs[kind][1])
		if len(names) == 0 {
			for name := range mine {
				names = append(names, []byte(name))
			}
			sort.Slice(names, func(i, j int) bool { return string(names[i]) < string(names[j]) })
			if len(names) == 0 {
				sess.subscriptions = s.count() + len(s.shard)
				return appendPush(nil, s.proto, count(), verb, nil)
			}
		}
	}
	for _, name := range names {
		key := string(name)
		if unsub {
			if mine[key] {
				delete(mine, key)
				delete((*index)[key], s)
				if len((*index)[key]) == 0 {
					delete(*index, key)
				}
			}
		} else if !mine[key] {
			mine[key] = true
			if (*index)[key] == nil {
				(*index)[key] = map[*subscriber]bool{}
			}
			(*index)[key][s] = true
		}
		out = appendPush(out, s.proto, count(), verb, name)
	}
	sess.subscriptions = s.count() + len(s.shard)
	return out
}

// subscribedOnly are the commands a RESP2 connection with subscriptions
// may run, as in Redis.
var subscribedOnly = map[string]bool{"SUBSCRIBE": true, "PSUBSCRIBE": true, "SSUBSCRIBE": true, "UNSUBSCRIBE": true,
	"PUNSUBSCRIBE": true, "SUNSUBSCRIBE": true, "PING": true, "QUIT": true, "RESET": true}

// drop ends a closed connection's subscriptions.
func (p *pubsub) drop(c *clientConn) {
	c.mu.Lock()
	s := c.sub
	c.mu.Unlock()
	if s == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for kind := subChannel; kind <= subShard; kind++ {
		index := p.index(kind)
		for name := range s.set(kind) {
			delete((*index)[name], s)
			if len((*index)[name]) == 0 {
				delete(*index, name)
			}
		}
	}
}

// deliver hands a message to this node's subscribers of channel (and, but
// for shard channels, of the patterns it matches), and counts them.
func (p *pubsub) deliver(shard bool, channel, msg []byte) int64 {
	type target struct {
		s       *subscriber
		pattern string // "" for the channel itself
	}
	var targets []target
	p.mu.Lock()
	kind := subChannel
	if shard {
		kind = subShard
	}
	for s := range (*p.index(kind))[string(channel)] {
		targets = append(targets, target{s: s})
	}
	if !shard {
		for pattern, subs := range p.patterns {
			if globMatch([]byte(pattern), channel) {
				for s := range subs {
					targets = append(targets, target{s, pattern})
				}
			}
		}
	}
	for i := range targets { // what the frames need, read under the lock
		targets[i].s = &subscriber{conn: targets[i].s.conn, proto: targets[i].s.proto}
	}
	p.mu.Unlock()
	var delivered int64
	for _, t := range targets {
		var frame []byte
		switch {
		case shard:
			frame = appendPush(nil, t.s.proto, -1, []byte("smessage"), channel, msg)
		case t.pattern != "":
			frame = appendPush(nil, t.s.proto, -1, []byte("pmessage"), []byte(t.pattern), channel, msg)
		default:
			frame = appendPush(nil, t.s.proto, -1, []byte("message"), channel, msg)
		}
		t.s.conn.mu.Lock()
		push := t.s.conn.push
		t.s.conn.mu.Unlock()
		if push != nil && push(frame) {
			delivered++
		}
	}
	return delivered
}

// dcPeers are the other nodes of this node's datacenter.
func (n *Node) dcPeers() []*member {
	var out []*member
	for _, m := range n.view().members {
		if !m.self && m.dc == n.cfg.Datacenter {
			out = append(out, m)
		}
	}
	return out
}

// publish is PUBLISH and SPUBLISH: this node's subscribers, then every
// other node of the datacenter's, once each; it answers how many received
// it, not counting the nodes that could not be reached.
func (n *Node) publish(shard bool, channel, msg []byte, b *batch, complete func([]byte)) {
	total := n.pubsub.deliver(shard, channel, msg)
	op := "PUBLISH"
	if shard {
		op = "SPUBLISH"
	}
	n.onDCPeers(b, resp.AppendCommand(nil, []byte(op), channel, msg), func(v resp.Value) {
		if v.Type == resp.Integer {
			total += v.Int
		}
	}, func() { complete(resp.AppendInt(nil, total)) })
}

// onDCPeers sends req to every other node of the datacenter, hands each
// answer that is not an error to got, one at a time, and calls finish once
// all answered or failed (a node down, or unreachable, counts nothing).
func (n *Node) onDCPeers(b *batch, req []byte, got func(resp.Value), finish func()) {
	peers := n.dcPeers()
	if len(peers) == 0 {
		finish()
		return
	}
	var mu sync.Mutex
	remaining := len(peers)
	for _, m := range peers {
		answer := func(raw []byte, err error) {
			v, perr := resp.Parse(raw)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && perr == nil && !v.IsError() {
				got(v)
			}
			if remaining--; remaining == 0 {
				finish()
			}
		}
		if m.isDown() {
			answer(nil, errMarkedDown(m))
			continue
		}
		n.toPeer(b, nil, m, req, fromPeer(answer))
	}
}

// pubsubCommand is PUBSUB CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS and
// SHARDNUMSUB over the datacenter: each node answers for its own
// subscribers (peer request PUBSUB), and the answers are merged.
func (n *Node) pubsubCommand(args [][]byte, b *batch, complete func([]byte)) {
	sub := strings.ToUpper(string(args[1]))
	switch {
	case (sub == "CHANNELS" || sub == "SHARDCHANNELS") && len(args) <= 3,
		sub == "NUMSUB" || sub == "SHARDNUMSUB",
		sub == "NUMPAT" && len(args) == 2:
	default:
		complete(resp.AppendError(nil, fmt.Sprintf("ERR unknown subcommand or wrong number of arguments for '%s'. Try PUBSUB HELP.", resp.Printable(args[1]))))
		return
	}
	own, _ := resp.Parse(n.pubsub.local(args[1:]))
	answers := []resp.Value{own}
	n.onDCPeers(b, resp.AppendCommand(nil, args...), func(v resp.Value) { answers = append(answers, v) },
		func() { complete(mergePubsub(sub, args[2:], answers)) })
}

// local answers PUBSUB's subcommand (args[0]) for this node's subscribers.
func (p *pubsub) local(args [][]byte) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	sub := strings.ToUpper(string(args[0]))
	switch sub {
	case "CHANNELS", "SHARDCHANNELS":
		index := p.channels
		if sub == "SHARDCHANNELS" {
			index = p.shard
		}
		var names []string
		for name := range index {
			if len(args) < 2 || globMatch(args[1], []byte(name)) {
				names = append(names, name)
			}
		}
		out := resp.AppendArrayHeader(nil, len(names))
		for _, name := range names {
			out = resp.AppendBulkString(out, name)
		}
		return out
	case "NUMSUB", "SHARDNUMSUB":
		index := p.channels
		if sub == "SHARDNUMSUB" {
			index = p.shard
		}
		out := resp.AppendArrayHeader(nil, 2*(len(args)-1))
		for _, name := range args[1:] {
			out = resp.AppendBulk(out, name)
			out = resp.AppendInt(out, int64(len(index[string(name)])))
		}
		return out
	case "NUMPAT":
		return resp.AppendInt(nil, int64(len(p.patterns)))
	}
	return resp.AppendError(nil, "ERR troop peer protocol: bad PUBSUB request")
}

// mergePubsub merges the nodes' answers to PUBSUB sub: channels as a
// sorted union, counts added up.
func mergePubsub(sub string, names [][]byte, answers []resp.Value) []byte {
	switch sub {
	case "CHANNELS", "SHARDCHANNELS":
		seen := map[string]bool{}
		for _, a := range answers {
			for _, e := range a.Elems {
				seen[string(e.Str)] = true
			}
		}
		var all []string
		for name := range seen {
			all = append(all, name)
		}
		sort.Strings(all)
		out := resp.AppendArrayHeader(nil, len(all))
		for _, name := range all {
			out = resp.AppendBulkString(out, name)
		}
		return out
	case "NUMSUB", "SHARDNUMSUB":
		counts := make([]int64, len(names))
		for _, a := range answers {
			for i := range names {
				if 2*i+1 < len(a.Elems) {
					counts[i] += a.Elems[2*i+1].Int
				}
			}
		}
		out := resp.AppendArrayHeader(nil, 2*len(names))
		for i, name := range names {
			out = resp.AppendBulk(out, name)
			out = resp.AppendInt(out, counts[i])
		}
		return out
	}
	var total int64 // NUMPAT
	for _, a := range answers {
		total += a.Int
	}
	return resp.AppendInt(nil, total)
}

// globMatch is Redis's glob-style match (stringmatchlen): * and ? match
// any run and any byte, [...] a set (^ negates, a-z a range), and \ makes
// the next byte plain.
func globMatch(pattern, s []byte) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			pattern = pattern[1:]
			not := len(pattern) > 0 && pattern[0] == '^'
			if not {
				pattern = pattern[1:]
			}
			match := false
			for len(pattern) > 0 && pattern[0] != ']' {
				switch {
				case pattern[0] == '\\' && len(pattern) >= 2:
					pattern = pattern[1:]
					match = match || pattern[0] == s[0]
				case len(pattern) >= 3 && pattern[1] == '-':
					lo, hi := pattern[0], pattern[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					match = match || (s[0] >= lo && s[0] <= hi)
					pattern = pattern[2:]
				default:
					match = match || pattern[0] == s[0]
				}
				pattern = pattern[1:]
			}
			if len(pattern) == 0 { // no closing ]: Redis takes the set as it is
				return match != not && len(s) == 1
			}
			if match == not {
				return false
			}
			s = s[1:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != pattern[0] {
				return false
			}
			s = s[1:]
		}
		pattern = pattern[1:]
	}
	return len(s) == 0
}
