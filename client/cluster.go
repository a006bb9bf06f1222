package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// Options configure a Cluster. Zero values take the defaults.
type Options struct {
	// DC and Rack are where the client runs; it sends each key to its owner
	// in this rack. Default: the first node's datacenter and rack.
	DC, Rack string
	// ConnsPerNode is the number of connections to each node of the local
	// datacenter; a key always uses the same one, so its requests stay in
	// order. Default 1.
	ConnsPerNode int
	// Timeout bounds each request, and the connect (at most 2 s of it).
	// Default 5 s.
	Timeout time.Duration
	// Retry says what to do when a node cannot be reached.
	Retry Retry
	// ReadLevel and WriteLevel, if set, are sent on every new connection as
	// TROOP CONSISTENCY READ|WRITE <level>: DC_ONE, DC_QUORUM or
	// DC_SAFE_QUORUM. Empty: the node's own levels.
	ReadLevel, WriteLevel string
	// Dial authenticates every new connection (AUTH [user] password), for
	// nodes with requirepass or troop_users, and dials TLS when its TLS is
	// set, for nodes with troop_tls_client. Its DB must be 0.
	Dial Dial
	// Follow, if set, tells the cluster's nodes as they are now
	// (FollowDescribe asks a node's /cluster_describe): the client asks it
	// every FollowEvery (default 2 s) and routes by its answer from then
	// on, so it follows nodes added to its racks, removed or replaced,
	// without a restart. An answer that fails, or that lacks the client's
	// own rack, leaves the routing as it was.
	Follow      func(context.Context) ([]Node, error)
	FollowEvery time.Duration
}

// Retry is the policy for requests that fail on the way: the node is down,
// the connection broke, or no reply came within the timeout. An error reply
// is an answer and is never retried.
type Retry struct {
	// Attempts is how many times a failed request is sent again; 0 runs it
	// once. A retried write may be applied twice (once by a node that
	// answered too late): INCR and the like can count twice.
	Attempts int
	// CrossRack sends retries to the key's owner in the next rack of the
	// local datacenter (by name, wrapping around), and sends requests there
	// at once while the owner in the client's rack is known to be down.
	// Without it, retries go to the same node.
	CrossRack bool
}

// Cluster is a token-aware, rack-aware client for a troop cluster. It is
// safe for concurrent use.
type Cluster struct {
	opts      Options
	handshake link.Handshake
	routes    atomic.Pointer[routes]
	conns     atomic.Pointer[[]*conn] // every connection made, for Flush and Close: a request may sit on one that routing no longer uses
	rr        atomic.Uint32
	closed    atomic.Bool

	mu       sync.Mutex         // makes routes, one at a time
	byAddr   map[string][]*conn // the connections to each node address, kept across routes
	stop     context.CancelFunc // ends following; nil without Follow
	followed sync.WaitGroup
}

// routes are the nodes as last known, and the local datacenter's racks
// made of them: the client's rack first, then the next by name, wrapping.
type routes struct {
	nodes []Node
	racks []*rackRing
}

// rackRing is one rack's token ring and its nodes.
type rackRing struct {
	name    string
	ring    *ring.Ring
	members []*member // indexed by ring owner; members[0] holds the smallest token
}

type member struct {
	node  Node
	conns []*conn
}

// NewCluster makes a client for the cluster of nodes. It connects lazily: a
// node is dialled when the first request goes to it. Only nodes of the
// client's datacenter get connections; the nodes replicate to the others.
func NewCluster(nodes []Node, opts Options) (*Cluster, error) {
	if err := checkNodes(nodes); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults(nodes)
	if err != nil {
		return nil, err
	}
	// Every connect and reconnect authenticates and sets the levels before
	// any request, so none runs at the node's default level by mistake.
	c := &Cluster{opts: opts, handshake: handshake(opts.Dial.setup(opts.ReadLevel, opts.WriteLevel)), byAddr: map[string][]*conn{}}
	c.conns.Store(&[]*conn{})
	if err := c.route(nodes); err != nil {
		return nil, err
	}
	if opts.Follow != nil {
		ctx, stop := context.WithCancel(context.Background())
		c.stop = stop
		c.followed.Add(1)
		go c.follow(ctx)
	}
	return c, nil
}

// route makes the client route by nodes from now on. A node keeps its
// connections from one routing to the next.
func (c *Cluster) route(nodes []Node) error {
	if err := checkNodes(nodes); err != nil {
		return err
	}
	if len(inRack(nodes, c.opts.DC, c.opts.Rack)) == 0 {
		return fmt.Errorf("client: no node in the client's rack %s/%s", c.opts.DC, c.opts.Rack)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &routes{nodes: append([]Node(nil), nodes...)}
	for _, name := range rackOrder(nodes, c.opts.DC, c.opts.Rack) {
		rk, err := newRackRing(name, inRack(nodes, c.opts.DC, name))
		if err != nil {
			return err
		}
		for _, m := range rk.members {
			m.conns = c.connsTo(m.node)
		}
		r.racks = append(r.racks, rk)
	}
	c.routes.Store(r)
	return nil
}

// connsTo returns the connections to node's address, made on first use.
// c.mu is held.
func (c *Cluster) connsTo(node Node) []*conn {
	if conns, ok := c.byAddr[node.Addr]; ok {
		return conns
	}
	var conns []*conn
	for range c.opts.ConnsPerNode {
		conns = append(conns, &conn{l: link.NewDial(node.String(), node.Addr, c.opts.Timeout, c.opts.Dial.Dialer(), c.handshake)})
	}
	c.byAddr[node.Addr] = conns
	all := append(append([]*conn(nil), *c.conns.Load()...), conns...)
	c.conns.Store(&all)
	if c.closed.Load() { // Close ran meanwhile: it did not see these
		closeAll(conns)
	}
	return conns
}

// follow routes by Follow's answer every FollowEvery, until Close.
func (c *Cluster) follow(ctx context.Context) {
	defer c.followed.Done()
	ctxtime.Every(ctx, c.opts.FollowEvery, func() {
		ask, cancel := context.WithTimeout(ctx, c.opts.FollowEvery)
		nodes, err := c.opts.Follow(ask)
		cancel()
		if err == nil {
			c.route(nodes) // a routing it refuses leaves the last one
		}
	})
}

func (o Options) withDefaults(nodes []Node) (Options, error) {
	var err error
	if o.DC, o.Rack, err = place(nodes, o.DC, o.Rack); err != nil {
		return o, err
	}
	if err := connDefaults(&o.ConnsPerNode, &o.Timeout, "node"); err != nil {
		return o, err
	}
	if o.Dial.DB != 0 {
		return o, fmt.Errorf("client: database %d: a troop cluster has database 0 only", o.Dial.DB)
	}
	if o.FollowEvery == 0 {
		o.FollowEvery = 2 * time.Second
	}
	if o.FollowEvery < 0 {
		return o, fmt.Errorf("client: follow every %v: must be positive", o.FollowEvery)
	}
	if o.Retry.Attempts < 0 {
		return o, fmt.Errorf("client: %d retry attempts: must not be negative", o.Retry.Attempts)
	}
	if o.ReadLevel, err = normalizeLevel("read", o.ReadLevel); err != nil {
		return o, err
	}
	if o.WriteLevel, err = normalizeLevel("write", o.WriteLevel); err != nil {
		return o, err
	}
	return o, nil
}

func normalizeLevel(what, level string) (string, error) {
	up := strings.ToUpper(level)
	switch up {
	case "", "DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM":
		return up, nil
	}
	return "", fmt.Errorf("client: %s consistency %q: want DC_ONE, DC_QUORUM or DC_SAFE_QUORUM", what, level)
}

// Racks lists the racks of datacenter dc that nodes have, sorted by name.
func Racks(nodes []Node, dc string) []string {
	var racks []string
	for _, n := range nodes {
		if n.DC == dc {
			racks = appendNew(racks, n.Rack)
		}
	}
	sort.Strings(racks)
	return racks
}

// rackOrder lists the racks of dc in the order the client tries them: its
// own, then the following ones by name, wrapping around, so that the
// failover load of each rack falls on a different neighbour.
func rackOrder(nodes []Node, dc, own string) []string {
	racks := Racks(nodes, dc)
	i := sort.SearchStrings(racks, own)
	return append(racks[i:], racks[:i]...)
}

// Replicas returns, for key, its owner in each rack of datacenter dc, the
// racks by name: the replicas a troop node writes the key to.
func Replicas(nodes []Node, dc string, key []byte) ([]Node, error) {
	h := ring.Hash(key)
	var out []Node
	for _, name := range Racks(nodes, dc) {
		rk, err := newRackRing(name, inRack(nodes, dc, name))
		if err != nil {
			return nil, err
		}
		out = append(out, rk.members[rk.ring.Owner(h)].node)
	}
	return out, nil
}

func inRack(nodes []Node, dc, rack string) []Node {
	var out []Node
	for _, n := range nodes {
		if n.DC == dc && n.Rack == rack {
			out = append(out, n)
		}
	}
	return out
}

func newRackRing(name string, nodes []Node) (*rackRing, error) {
	sort.Slice(nodes, func(i, j int) bool { return minToken(nodes[i]) < minToken(nodes[j]) })
	rk := &rackRing{name: name}
	var entries []ring.Entry
	for i, n := range nodes {
		rk.members = append(rk.members, &member{node: n})
		for _, t := range n.Tokens {
			entries = append(entries, ring.Entry{Token: t, Owner: i})
		}
	}
	r, err := ring.New(entries)
	if err != nil {
		return nil, fmt.Errorf("client: rack %s/%s: %w", nodes[0].DC, name, err)
	}
	rk.ring = r
	return rk, nil
}

func minToken(n Node) uint32 {
	m := n.Tokens[0]
	for _, t := range n.Tokens[1:] {
		m = min(m, t)
	}
	return m
}

// Send queues one command, routed by its key (see Route), and calls done
// with the reply frame or with the error that stopped it. The command is
// not on the wire until the next Flush. done runs exactly once, often on a
// connection's reader goroutine, so it must not block; an error reply comes
// as a raw frame with a nil error. args may be reused once Send returns.
//
// Multi-key commands (MGET, MSET, DEL, EXISTS ...) go to the owner of their
// first key; the node splits them among the other keys' owners.
func (c *Cluster) Send(args [][]byte, done func(raw []byte, err error)) { c.send(args, done) }

// Flush writes out every command queued by Send, one write per connection
// that has any.
func (c *Cluster) Flush() { flushAll(*c.conns.Load()) }

// Do runs one command and waits for its reply, or for ctx. An error reply
// is returned as a *ReplyError along with the raw frame.
func (c *Cluster) Do(ctx context.Context, args ...[]byte) ([]byte, error) {
	return do(ctx, args, c.send)
}

// Close closes every connection; requests in flight fail.
func (c *Cluster) Close() error {
	if c.stop != nil {
		c.stop()
		c.followed.Wait()
	}
	c.mu.Lock()
	c.closed.Store(true)
	c.mu.Unlock()
	closeAll(*c.conns.Load())
	return nil
}

// Nodes returns the topology the client routes by.
func (c *Cluster) Nodes() []Node { return append([]Node(nil), c.routes.Load().nodes...) }

// Place returns the client's datacenter and rack.
func (c *Cluster) Place() (dc, rack string) { return c.opts.DC, c.opts.Rack }

// Route returns the node a request for key goes to now: its owner in the
// client's rack or, with CrossRack, while that node is known to be down,
// its owner in the next rack that is not.
func (c *Cluster) Route(key []byte) Node {
	h := ring.Hash(key)
	r := c.routes.Load()
	i, _ := c.first(r, h, true)
	rk := r.racks[i]
	return rk.members[rk.ring.Owner(h)].node
}

// send routes and queues one command and returns the connection it was
// handed to, or nil when it was refused before reaching one.
func (c *Cluster) send(args [][]byte, done func([]byte, error)) *conn {
	if len(args) == 0 {
		done(nil, errors.New("client: empty command"))
		return nil
	}
	if c.closed.Load() {
		done(nil, ErrClosed)
		return nil
	}
	key, keyed := commandKey(args)
	var h uint32
	if keyed {
		h = ring.Hash(key)
	}
	i, cn := c.first(c.routes.Load(), h, keyed)
	if c.opts.Retry.Attempts == 0 { // nothing to resend: no copy of the request to keep
		sendEncoded(cn, args, done)
		return cn
	}
	r := &retrying{c: c, req: resp.AppendCommand(nil, args...), h: h, keyed: keyed, rack: i,
		left: c.opts.Retry.Attempts, done: done}
	r.cb = r.reply
	cn.send(r.req, r.cb)
	return cn
}

// connAt returns the connection for a request in rack i: the key's owner
// there (keyless commands go to the rack's first node), and the owner's
// connection for that key.
func (c *Cluster) connAt(r *routes, i int, h uint32, keyed bool) *conn {
	rk := r.racks[i]
	m := rk.members[0]
	if keyed {
		m = rk.members[rk.ring.Owner(h)]
	}
	switch {
	case len(m.conns) == 1:
		return m.conns[0]
	case keyed:
		return m.conns[h%uint32(len(m.conns))]
	default:
		return m.conns[c.rr.Add(1)%uint32(len(m.conns))]
	}
}

// first picks where a request goes first: the client's rack, unless
// CrossRack is on and that connection is down (it would fail at once), in
// which case the next rack whose connection is not.
func (c *Cluster) first(r *routes, h uint32, keyed bool) (int, *conn) {
	cn := c.connAt(r, 0, h, keyed)
	if !c.opts.Retry.CrossRack || cn.l.Up() {
		return 0, cn
	}
	for i := 1; i < len(r.racks); i++ {
		if alt := c.connAt(r, i, h, keyed); alt.l.Up() {
			return i, alt
		}
	}
	return 0, cn // every rack is down: let the local node's error speak
}

// next picks where a retry goes after a failure in rack i.
// The routing may have changed since the request's last try: a rack index
// past the end wraps around.
func (c *Cluster) next(i int, h uint32, keyed bool) (int, *conn) {
	r := c.routes.Load()
	n := len(r.racks)
	if !c.opts.Retry.CrossRack {
		i %= n
		return i, c.connAt(r, i, h, keyed)
	}
	for k := 1; k <= n; k++ {
		j := (i + k) % n
		if cn := c.connAt(r, j, h, keyed); cn.l.Up() {
			return j, cn
		}
	}
	j := (i + 1) % n
	return j, c.connAt(r, j, h, keyed)
}

// retrying is a request under a retry policy: it keeps its encoding and
// the errors of its tries. Its callback runs once per try, one at a time.
type retrying struct {
	c     *Cluster
	req   []byte
	h     uint32
	keyed bool
	rack  int
	left  int
	errs  []error
	done  func([]byte, error)
	cb    func([]byte, error)
}

func (r *retrying) reply(raw []byte, err error) {
	if err == nil {
		r.done(raw, nil)
		return
	}
	r.errs = append(r.errs, err)
	if r.left == 0 || r.c.closed.Load() {
		r.done(nil, r.failure())
		return
	}
	r.left--
	var cn *conn
	r.rack, cn = r.c.next(r.rack, r.h, r.keyed)
	// The caller's Flush may be long past: push the retry out now.
	cn.send(r.req, r.cb)
	cn.flush()
}

func (r *retrying) failure() error {
	if len(r.errs) == 1 {
		return r.errs[0]
	}
	name := "request"
	if v, err := resp.Parse(r.req); err == nil && len(v.Elems) > 0 {
		name = printable(v.Elems[0].Str)
	}
	return &FailedError{Command: name, Errs: r.errs}
}

// FailedError is a request that failed on every try; Errs says why, try by
// try, each naming the node, its rack and its address.
type FailedError struct {
	Command string
	Errs    []error
}

func (e *FailedError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("%s failed on %d tries: %s", e.Command, len(e.Errs), strings.Join(msgs, "; then "))
}

func (e *FailedError) Unwrap() []error { return e.Errs }
