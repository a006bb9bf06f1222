package node

import (
	"bytes"
	"sync"
)

// A keyGate keeps a client connection's requests on one key in the order
// the client sent them, as Redis runs a pipeline. Requests are queued on
// the datastore and peer links as they are read, and each link keeps their
// order, with one exception: a quorum write of a whole value queues its
// writes only once its version query is answered. Meanwhile its key is
// held, and a later request of the connection on that key waits (the
// connection's reader stops), so that `SET k v` then `GET k` in one
// pipeline reads v. Requests on other keys go on.
type keyGate struct {
	mu   sync.Mutex
	held []heldKey // a handful at most: the writes of one pipeline
}

type heldKey struct {
	key      []byte
	released chan struct{}
}

// hold holds key until release is called.
func (g *keyGate) hold(key []byte) (release func()) {
	h := heldKey{key: key, released: make(chan struct{})}
	g.mu.Lock()
	g.held = append(g.held, h)
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		for i := range g.held {
			if g.held[i].released == h.released {
				g.held = append(g.held[:i], g.held[i+1:]...)
				break
			}
		}
		g.mu.Unlock()
		close(h.released)
	}
}

// await returns once no key of keys is held. Before it waits, it flushes
// the connection's batch: the requests it waits for may be in it.
func (g *keyGate) await(keys [][]byte, b *batch) {
	for {
		var wait chan struct{}
		g.mu.Lock()
		for _, h := range g.held {
			for _, k := range keys {
				if bytes.Equal(h.key, k) {
					wait = h.released
				}
			}
		}
		g.mu.Unlock()
		if wait == nil {
			return
		}
		b.beforeWait()
		<-wait
	}
}
