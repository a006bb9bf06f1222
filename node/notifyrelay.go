package node

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/resp"
)

// Some events are redis-server's to see, not a command's: a key that
// expired (x), was evicted (e) or came to be (n). Every replica's
// redis-server sees them, each at its own time, so each node subscribes
// to its own redis-server's and relays those of the keys it relays: of
// each key's replicas in the datacenter, one its token picks (whether up
// or not, so that no two nodes relay one), through the datacenter's
// pub/sub. Its redis-server then runs with notify-keyspace-events of E and
// those classes only, so it publishes nothing else. When that replica is
// down, its keys' events are lost, as a subscriber's messages are when
// its node is down.

// relayedEvents are the channels the relay subscribes to, with their class.
var relayedEvents = []struct {
	class uint32
	event string
}{{notifyExpired, "expired"}, {notifyEvicted, "evicted"}, {notifyNew, "new"}}

const relayedClasses = notifyExpired | notifyEvicted | notifyNew

// serverNotifyFlags are the notify-keyspace-events this node's redis-server
// runs with for flags: keyevents of the relayed classes, or none.
func serverNotifyFlags(flags uint32) string {
	if flags&relayedClasses == 0 || flags&(notifyKeyspace|notifyKeyevent) == 0 {
		return ""
	}
	return formatNotifyFlags(flags&relayedClasses | notifyKeyevent)
}

// relayServerEvents runs until ctx ends: idle while no relayed class is
// on, subscribed to the redis-server's events while one is (again after a
// broken connection, at most once a second).
func (n *Node) relayServerEvents(ctx context.Context) {
	for {
		for serverNotifyFlags(n.notify.flags.Load()) == "" {
			select {
			case <-ctx.Done():
				return
			case <-n.notify.wake:
			}
		}
		if err := n.relayOnce(ctx); err != nil && ctx.Err() == nil {
			n.log.Debug("keyspace notifications: relay of redis-server's events", "err", err)
		}
		if ctxtime.Sleep(ctx, time.Second) != nil {
			return
		}
	}
}

// relayOnce subscribes to the redis-server's relayed events, setting its
// notify-keyspace-events first (a redis-server that restarted lost it),
// and relays them until the connection or ctx ends.
func (n *Node) relayOnce(ctx context.Context) error {
	conn, err := net.DialTimeout("tcp", n.cfg.Servers[0].Addr, n.cfg.Timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	rd := resp.NewReader(conn, n.limits)
	if auth := n.storeAuth(); auth != nil {
		if err := auth(conn, rd); err != nil {
			return err
		}
	}
	req := resp.AppendCommandStrings(nil, "CONFIG", "SET", "notify-keyspace-events", serverNotifyFlags(n.notify.flags.Load()))
	sub := []string{"SUBSCRIBE"}
	for _, r := range relayedEvents {
		sub = append(sub, "__keyevent@0__:"+r.event)
	}
	if _, err := conn.Write(resp.AppendCommandStrings(req, sub...)); err != nil {
		return err
	}
	for {
		v, err := rd.ReadValue()
		if err != nil {
			return err
		}
		if len(v.Elems) != 3 || string(v.Elems[0].Str) != "message" {
			continue // CONFIG SET's OK, the subscriptions' confirmations
		}
		event, ok := bytes.CutPrefix(v.Elems[1].Str, []byte("__keyevent@0__:"))
		key := v.Elems[2].Str
		if !ok || bytes.HasPrefix(key, []byte(reservedPrefix)) || !n.relaysFor(key) {
			continue
		}
		for _, r := range relayedEvents {
			if r.event == string(event) {
				n.publishEvents(n.notify.flags.Load(), []keyEvent{{r.class, r.event, key}})
			}
		}
	}
}

// relaysFor says whether this node relays key's events: of the key's
// replicas in the datacenter, in rack order, the one its token picks, so
// that the relaying spreads over the racks, and no two nodes relay one key.
func (n *Node) relaysFor(key []byte) bool {
	token := n.token(key)
	reps := slices.SortedFunc(slices.Values(n.view().replicas(token)), func(a, b *member) int { return strings.Compare(a.rack, b.rack) })
	return reps[token%uint32(len(reps))].self
}
