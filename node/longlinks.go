package node

import (
	"context"
	"fmt"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
)

// longTimeout is that of the node's connections for long requests
// (anti-entropy's trees, a membership change's streaming and cleanup, key
// counts): their own connections, made on first use, so that a tree being
// built (seconds on a large redis-server) delays neither client traffic
// nor the failure detector's heartbeats.
const longTimeout = 10 * time.Minute

// longLinks returns the connections of long timeout to this node's
// redis-server and to every peer.
func (n *Node) longLinks() (store *link.Link, peers map[*member]*link.Link) {
	n.longMu.Lock()
	defer n.longMu.Unlock()
	if n.longStore == nil {
		n.longStore = link.New("redis-repair", n.cfg.Servers[0].Addr, longTimeout, n.storeHandshake(false))
		n.longPeers = map[*member]*link.Link{}
	}
	for _, m := range n.view().peers() { // members join: each gets its link on first use
		if n.longPeers[m] == nil {
			n.longPeers[m] = n.peerLink("peer-repair", m, longTimeout)
		}
	}
	return n.longStore, n.longPeers
}

// longLink returns the long-timeout connection to peer m, made on first use.
func (n *Node) longLink(m *member) *link.Link {
	n.longLinks()
	n.longMu.Lock()
	defer n.longMu.Unlock()
	l := n.longPeers[m]
	if l == nil {
		l = n.peerLink("peer-repair", m, longTimeout)
		n.longPeers[m] = l
	}
	return l
}

// doSync runs one request on l and waits for its reply, or for ctx to end.
func doSync(ctx context.Context, l *link.Link, req []byte) ([]byte, error) {
	type result struct {
		raw []byte
		err error
	}
	ch := make(chan result, 1) // the link's answer may come after ctx ends
	l.Do(req, func(raw []byte, err error) { ch <- result{raw, err} })
	select {
	case r := <-ch:
		return r.raw, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// scanVersioned scans this node's redis-server for the keys it holds a
// version of, a SCAN page at a time over the long-timeout connection, and
// calls page with them and their tokens. The keys share the page's reply:
// a key kept beyond the call must be copied.
func (n *Node) scanVersioned(ctx context.Context, page func(keys [][]byte, tokens []uint32) error) error {
	store, _ := n.longLinks()
	cursor := "0"
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := doSync(ctx, store, resp.AppendCommandStrings(nil, "SCAN", cursor, "MATCH", VersionPrefix+"*", "COUNT", "1000"))
		if err != nil {
			return err
		}
		v, err := resp.Parse(raw)
		if err != nil || v.IsError() || len(v.Elems) != 2 {
			return fmt.Errorf("SCAN: unexpected reply %s", raw)
		}
		keys := make([][]byte, 0, len(v.Elems[1].Elems))
		tokens := make([]uint32, 0, len(v.Elems[1].Elems))
		for _, e := range v.Elems[1].Elems {
			key := e.Str[len(VersionPrefix):]
			keys = append(keys, key)
			tokens = append(tokens, n.token(key))
		}
		if len(keys) > 0 {
			if err := page(keys, tokens); err != nil {
				return err
			}
		}
		cursor = string(v.Elems[0].Str)
		if cursor == "0" {
			return nil
		}
	}
}
