// Package node is troop's store node: a RESP front end in front of one real
// redis-server that shards keys on Dynomite's token ring and replicates them
// across the racks of its datacenter (synchronously, as the consistency level
// asks) and to other datacenters (asynchronously).
//
// A request's path: front.go reads it from a client connection, coordinator.go
// decides where it goes and when it is done, a link (package link) carries it
// to the local redis-server or to a peer node (peer.go), and the reply goes back to the
// client in request order. admin.go serves the HTTP admin API.
package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	troopclient "github.com/troop-lab/troop/client" // aliased: the tests have a client type
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/health"
	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/node/reconfig"
	"github.com/troop-lab/troop/node/repair"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
	"github.com/troop-lab/troop/topology"
)

// Node states, settable over the admin API as in Dynomite.
const (
	stateNormal     int32 = iota
	stateStandby          // serves no client requests
	stateWritesOnly       // serves writes, refuses reads
)

var stateNames = []string{"normal", "standby", "writes_only"}

// A member is a node of the cluster, this one included, made once per peer
// address and kept (memberFor); its tokens are the view's (view.go).
type member struct {
	dc, rack string
	peerAddr string
	self     bool
	link     *link.Link // nil for self

	mu   sync.Mutex
	info peerInfo // what the peer said in its handshake

	health *health.Peer  // peers only: the failure detector's view
	hints  *repair.Hints // peers only, nil when hinted handoff is off
}

// peerInfo is what a node tells a peer about itself in the handshake.
type peerInfo struct {
	Name, DC, Rack, Listen, Stats string
}

// rackRing is one rack of the local datacenter, or the chosen rack of a
// remote one: its ring maps a token to a member index.
type rackRing struct {
	dc, name string
	ring     *ring.Ring
}

// Node is a running store node.
type Node struct {
	cfg      *topology.Config
	log      *slog.Logger
	clock    *hlc.Clock
	versions *versionCache  // nil when writes are unversioned or troop_version_cache_keys is 0
	blockers blockers       // clients waiting in a blocking pop, by key (blocking.go)
	clients  clientRegistry // the client connections, for CLIENT LIST, KILL and UNBLOCK (clients.go)
	pubsub   pubsub         // the subscriptions of this node's clients (pubsub.go)
	notify   notifier       // keyspace notifications (notify.go)
	server   serverLimits   // maxmemory, and a redis-server busy with a script (limits.go)
	// The redis-server's version, once the heartbeat read it (info.go).
	storeVersion atomic.Pointer[string]
	limits       resp.Limits
	auth         *authenticator // nil when clients need no password (auth.go)

	adminLimiter *failureLimiter // admin requests with a wrong token, per address
	tls          *tlsFiles       // the node's certificate and CA; nil without troop_tls_cert (tls.go)
	peerTLS      *tls.Config     // the peer listener's TLS: mutual, against troop_tls_ca

	cur       atomic.Pointer[view] // what requests are routed by (view.go)
	self      *member
	selfAddr  atomic.Pointer[string] // this node's address in the membership (me)
	peersMu   sync.Mutex
	peers     map[string]*member        // by peer address, made once and kept
	changes   *reconfig.Driver          // membership changes this node drives or takes part in (node/reconfig, membership.go)
	store     []*link.Link              // connections to the local redis-server
	datastore *health.Reachability      // whether the redis-server answers, for the log and /metrics
	dataDir   string                    // where hints live (troop_data_dir)
	repair    *repair.Repairer[*member] // read repair, anti-entropy, hints (node/repair, repairnode.go)
	proposers keyProposers              // this node's proposer of each key it decides by consensus (consensus.go)
	txs       ownTxs                    // the transactions on several keys this node runs (transact.go)

	// When the redis-server last answered the heartbeat's PING, Unix ns:
	// for /ready (ready.go).
	datastorePong atomic.Int64

	// Planted bugs (troop_planted_bug), for testing the testers; every
	// check of one is "planted && ...", compiled out of a build without
	// them.
	noReadFailover, localWritesOnly, noVersionQuery, noReadWriteBack, noHints, noMirror, noConsensus bool

	readLevel, writeLevel atomic.Int32
	state                 atomic.Int32
	inflight              atomic.Int64
	mem                   memBudget // bytes of requests in flight and unwritten replies (memory.go)
	stats                 *stats

	// The connections for long requests, made on first use (longlinks.go).
	longMu    sync.Mutex
	longStore *link.Link
	longPeers map[*member]*link.Link

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	loops     []*frontLoop // serve plain TCP clients, and read the links of the request path
	nextLoop  atomic.Uint32
	admin     *http.Server
	closed    bool
	wg        sync.WaitGroup
	export    *lineageExport // troop_lineage_export, nil when off (export.go)
}

// planted says whether this build runs planted bugs (topology.PlantedBugsBuilt).
const planted = topology.PlantedBugsBuilt

// New builds a node from its config. It does not listen yet.
func New(cfg *topology.Config, log *slog.Logger) (*Node, error) {
	if len(cfg.Servers) != 1 {
		return nil, fmt.Errorf("node: want exactly one server (redis-server), got %d", len(cfg.Servers))
	}
	n := &Node{
		cfg:    cfg,
		log:    log,
		conns:  map[net.Conn]struct{}{},
		stats:  newStats(),
		mem:    memBudget{limit: inflightShare(cfg.MaxMemoryMB)},
		notify: notifier{wake: make(chan struct{}, 1)},
		limits: resp.Limits{
			MaxBulk: cfg.MaxRequestBytes, MaxFrame: cfg.MaxRequestBytes,
			MaxElems: resp.DefaultLimits.MaxElems, MaxInline: resp.DefaultLimits.MaxInline, MaxDepth: 1,
		},
	}
	if cfg.PlantedBug != "" && !planted {
		return nil, fmt.Errorf("node: troop_planted_bug %q: this troop is built without planted bugs", cfg.PlantedBug)
	}
	n.noReadFailover = cfg.PlantedBug == topology.BugNoReadFailover
	n.localWritesOnly = cfg.PlantedBug == topology.BugLocalWritesOnly
	n.noVersionQuery = cfg.PlantedBug == topology.BugNoVersionQuery
	n.noConsensus = cfg.PlantedBug == topology.BugNoConsensus
	n.noReadWriteBack = cfg.PlantedBug == topology.BugNoReadWriteBack
	n.noHints = cfg.PlantedBug == topology.BugNoHintedHandoff
	n.noMirror = cfg.PlantedBug == topology.BugNoHandoffMirror
	n.auth = newAuthenticator(cfg)
	n.adminLimiter = newFailureLimiter(authFailureBurst, authFailureRefill, authLimiterHosts)
	var err error
	if n.tls, err = loadTLS(cfg, log); err != nil {
		return nil, err
	}
	if n.tls != nil {
		n.peerTLS = n.tls.serverConfig(tls.RequireAndVerifyClientCert)
	}
	n.readLevel.Store(int32(cfg.ReadConsistency))
	n.writeLevel.Store(int32(cfg.WriteConsistency))
	n.clock = hlc.NewClock(uint16(ring.Hash([]byte(cfg.Name))), time.Now)
	n.dataDir = resolveDataDir(cfg.DataDir, cfg.Source, cfg.Name)
	if err := n.openLineageExport(); err != nil {
		return nil, err
	}
	if cfg.Versions && cfg.VersionCacheKeys > 0 {
		n.versions = newVersionCache(cfg.VersionCacheKeys, cfg.DatastoreConnections <= 1)
	}
	// One line when the redis-server becomes unreachable and one when it is
	// back, whichever of the node's connections to it finds out.
	n.datastore = health.NewReachability(log.With("redis", cfg.Servers[0].Addr), "datastore unreachable", "datastore reachable")
	for range clientLoops(cfg.ClientLoops) {
		l, err := newFrontLoop(n)
		if err != nil {
			n.closeLoops()
			return nil, fmt.Errorf("event loop: %w", err)
		}
		n.loops = append(n.loops, l)
	}
	conns := max(cfg.DatastoreConnections, 1)
	for i := 0; i < conns; i++ {
		l := link.New("redis", cfg.Servers[0].Addr, cfg.Timeout, n.storeHandshake(true))
		l.Watch(func(reachable bool, err error) { n.datastore.Set(reachable, err) })
		l.PollWith(n.pickLoop())
		n.store = append(n.store, l)
	}
	n.server.side = link.New("redis-side", cfg.Servers[0].Addr, cfg.Timeout, n.storeAuth())
	n.repair = n.newRepairer()
	n.changes = reconfig.New((*changeNode)(n), reconfig.Config{Dir: n.dataDir, Datacenter: cfg.Datacenter, Timeout: cfg.Timeout, Log: log})
	if err := n.openHints(); err != nil {
		n.closeLinks()
		n.closeLoops()
		return nil, err
	}
	if err := n.buildTopology(); err != nil {
		n.closeLinks()
		n.closeLoops()
		return nil, err
	}
	return n, nil
}

// storeAuth is the AUTH a connection to the redis-server sends first when
// redis_requirepass is set; nil when it is not.
func (n *Node) storeAuth() link.Handshake {
	return troopclient.Dial{User: n.cfg.RedisUser, Password: n.cfg.RedisPassword}.Handshake()
}

// storeHandshake is what a new connection to the redis-server sends first:
// AUTH when redis_requirepass is set, then troop's scripts. A connection of
// the request path (forget) may reach a redis-server that restarted with
// other data: what the version cache knows of its versions no longer holds.
func (n *Node) storeHandshake(forget bool) link.Handshake {
	auth := n.storeAuth()
	return func(conn net.Conn, rd *resp.Reader) error {
		if auth != nil {
			if err := auth(conn, rd); err != nil {
				return err
			}
		}
		if forget {
			n.versions.forget()
		}
		return loadScripts(conn, rd)
	}
}

// buildTopology makes this node's member and its first view: of the
// membership it saved last (troop_data_dir/membership.json), else of its
// config.
func (n *Node) buildTopology() error {
	c := n.cfg
	n.self = &member{dc: c.Datacenter, rack: c.Rack, peerAddr: c.DynListen, self: true,
		info: peerInfo{Name: c.Name, DC: c.Datacenter, Rack: c.Rack, Listen: c.Listen, Stats: c.StatsListen}}
	n.peers = map[string]*member{}
	saved, err := reconfig.Load(n.dataDir)
	if err != nil {
		return err
	}
	self := c.DynListen
	if saved != nil && saved.Self != "" {
		self = saved.Self
	}
	n.selfAddr.Store(&self)
	v, err := n.buildView(initialState(c, saved))
	if err != nil && c.Join && saved == nil {
		return fmt.Errorf("troop_join: %w: a node joins a datacenter that has members among its dyn_seeds", err)
	}
	if err != nil {
		return err
	}
	n.cur.Store(v)
	return nil
}

// catchUpEvery is how often a node asks its peers for the membership
// step they hold (reconfig's Driver.Run).
const catchUpEvery = 2 * time.Second

// Serve listens on the client, peer and admin addresses and serves until
// ctx ends; then it closes every listener and connection and returns.
func (n *Node) Serve(ctx context.Context) error {
	// A member that missed membership steps while it was down routes by
	// the current one before it serves anybody; it listens on nothing
	// meanwhile, so that peers starting at once do not wait on it.
	n.changes.CatchUp(ctx)
	front, err := net.Listen("tcp", n.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen (client): %w", err)
	}
	peers, err := net.Listen("tcp", n.cfg.DynListen)
	if err != nil {
		front.Close()
		return fmt.Errorf("dyn_listen (peers): %w", err)
	}
	adminLn, err := net.Listen("tcp", n.cfg.StatsListen)
	if err != nil {
		front.Close()
		peers.Close()
		return fmt.Errorf("stats_listen (admin): %w", err)
	}
	if n.cfg.TLSClient {
		front = tls.NewListener(front, n.tls.serverConfig(tls.VerifyClientCertIfGiven))
	}
	if n.cfg.TLSAdmin {
		adminLn = tls.NewListener(adminLn, n.tls.serverConfig(tls.VerifyClientCertIfGiven))
	}
	n.mu.Lock()
	n.listeners = []net.Listener{front, peers, adminLn}
	n.admin = &http.Server{Handler: n.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	n.mu.Unlock()

	n.log.Info("node serving", "name", n.cfg.Name, "dc", n.cfg.Datacenter, "rack", n.cfg.Rack,
		"listen", front.Addr().String(), "dyn_listen", peers.Addr().String(), "stats_listen", adminLn.Addr().String(),
		"redis", n.cfg.Servers[0].Addr, "racks", len(n.view().localRacks), "remote_dcs", len(n.view().remoteDCs), "membership_epoch", n.view().state.Epoch,
		"read_consistency", n.level(false).String(), "write_consistency", n.level(true).String())
	if ip, ok := adminLn.Addr().(*net.TCPAddr); ok && !ip.IP.IsLoopback() && n.cfg.AdminToken == "" {
		n.log.Warn("the admin API listens beyond loopback without troop_admin_token: whoever reaches it can change this node's state and consistency", "stats_listen", adminLn.Addr().String())
	}
	if n.cfg.PlantedBug != "" {
		n.log.Warn("this node runs with a PLANTED BUG, a deliberate defect for testing testers: never use it for real data", "troop_planted_bug", n.cfg.PlantedBug)
	}

	n.wg.Add(8)
	go func() { defer n.wg.Done(); n.acceptLoop(front, n.serveClient) }()
	go func() { defer n.wg.Done(); n.acceptLoop(peers, n.acceptPeer) }()
	go func() { defer n.wg.Done(); n.admin.Serve(adminLn) }()
	go func() { defer n.wg.Done(); n.heartbeatLoop(ctx) }()
	go func() { defer n.wg.Done(); n.repair.RunAntiEntropy(ctx) }()
	go func() { defer n.wg.Done(); n.changes.Run(ctx, catchUpEvery) }()
	go func() { defer n.wg.Done(); n.relayServerEvents(ctx) }()
	go func() { defer n.wg.Done(); n.watchServer(ctx) }()
	<-ctx.Done()
	n.shutdown()
	return nil
}

// clientLoops is how many event loops the node runs (for its clients, its
// peers and its links): as configured, or one per four cores. One loop on
// two cores cost less CPU per request than two, as more connections are
// ready at each wait.
func clientLoops(configured int) int {
	if configured > 0 {
		return configured
	}
	return max(1, runtime.GOMAXPROCS(0)/4)
}

func (n *Node) acceptLoop(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			c.Close()
			return
		}
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			serve(c)
			n.mu.Lock()
			delete(n.conns, c)
			n.mu.Unlock()
		}()
	}
}

func (n *Node) shutdown() {
	n.mu.Lock()
	n.closed = true
	for _, l := range n.listeners {
		l.Close()
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	n.closeLoops()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	n.admin.Shutdown(shutdownCtx)
	cancel()
	n.closeLinks()
	n.repair.Stop()
	n.wg.Wait()
	n.datastore.Stop()
	for _, m := range n.allPeers() {
		m.health.Stop()
	}
	n.closeLineageExport()
	for _, m := range n.allPeers() {
		if m.hints != nil {
			m.hints.Close()
		}
	}
	n.log.Info("node stopped", "name", n.cfg.Name)
}

// pickLoop picks, in turn, the event loop a new connection or link goes to.
func (n *Node) pickLoop() *frontLoop {
	return n.loops[n.nextLoop.Add(1)%uint32(len(n.loops))]
}

func (n *Node) closeLoops() {
	for _, l := range n.loops {
		l.close()
	}
}

func (n *Node) closeLinks() {
	for _, m := range n.allPeers() {
		m.link.Close()
	}
	for _, l := range n.store {
		l.Close()
	}
	n.server.side.Close()
	n.longMu.Lock()
	defer n.longMu.Unlock()
	if n.longStore != nil {
		n.longStore.Close()
		for _, l := range n.longPeers {
			l.Close()
		}
	}
}

// Addrs returns the addresses the node listens on (client, peer, admin),
// useful when the config asked for port 0.
func (n *Node) Addrs() (client, peer, admin string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.listeners) < 3 {
		return "", "", ""
	}
	return n.listeners[0].Addr().String(), n.listeners[1].Addr().String(), n.listeners[2].Addr().String()
}

func (n *Node) level(write bool) consistency.Level {
	if write {
		return consistency.Level(n.writeLevel.Load())
	}
	return consistency.Level(n.readLevel.Load())
}

// allPeers returns every peer this node ever made a member for, sorted by
// address: the links, failure detectors and hint files it holds.
func (n *Node) allPeers() []*member {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	out := make([]*member, 0, len(n.peers))
	for _, m := range n.peers {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].peerAddr < out[j].peerAddr })
	return out
}
