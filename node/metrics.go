package node

import (
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/node/consistency"
)

// latencyBuckets are the upper bounds, in seconds, of the request latency
// histogram: 1-2-5 steps from 50 µs, below the fastest request through a
// node on loopback, to 1 s; slower requests count in +Inf only.
var latencyBuckets = []float64{
	50e-6, 100e-6, 200e-6, 500e-6,
	1e-3, 2e-3, 5e-3,
	10e-3, 20e-3, 50e-3,
	100e-3, 200e-3, 500e-3,
	1,
}

// metricsHandler serves /metrics: the node's own metrics labelled with its
// name, datacenter and rack, and the Go runtime's, the process's and the
// build's, from a registry of the node's own (a test process runs many
// nodes).
func (n *Node) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	own := prometheus.WrapRegistererWith(prometheus.Labels{"node": n.cfg.Name, "dc": n.cfg.Datacenter, "rack": n.cfg.Rack}, reg)
	own.MustRegister(&nodeCollector{n: n})
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewCollector("troop"),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelError),
		Registry: reg, // counts its own errors in promhttp_metric_handler_errors_total
	})
}

// nodeCollector turns the node's counters into metrics at scrape time: they
// are what the request path keeps anyway for /info (atomics, and an HDR
// histogram per operation and level), so the metrics add nothing to it.
type nodeCollector struct{ n *Node }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var peerLabels = []string{"peer", "peer_dc", "peer_rack"}

var (
	durationDesc  = desc("troop_request_duration_seconds", "Client request latency, from the request read to its reply queued, by operation and consistency level.", "op", "level")
	requestsDesc  = desc("troop_requests_total", "Client requests by operation and consistency level.", "op", "level")
	errorsDesc    = desc("troop_request_errors_total", "Client requests answered with an error.", "op", "level")
	commandsDesc  = desc("troop_commands_total", "Client requests by command.", "command")
	datastoreUp   = desc("troop_datastore_up", "Whether the node's redis-server is reachable (1) or not (0): its last dial or request failed and no dial succeeded since.")
	datastoreFail = desc("troop_datastore_failures_total", "Failures of the connections to the node's redis-server: connect (a dial failed), timeout (a request went unanswered), drop (an open connection was lost).", "kind")
	peerUp        = desc("troop_peer_up", "Whether the failure detector holds a peer up (1) or down (0). A peer is named as its handshake said, by its address until then.", peerLabels...)
	peerConnected = desc("troop_peer_connected", "Whether this node holds an open connection to a peer (1) or not (0).", peerLabels...)
	peerPhi       = desc("troop_peer_phi", "The failure detector's suspicion of a peer (phi).", peerLabels...)
	peerHints     = desc("troop_peer_hints_pending", "Hinted writes waiting for a peer.", peerLabels...)
	peerFail      = desc("troop_peer_failures_total", "Failures of the connection to a peer: connect, timeout or drop, as for the datastore.", append(peerLabels, "kind")...)
)

// scalar is one unlabelled metric read from the node's counters.
type scalar struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*Node) int64
}

var scalars = []scalar{
	{desc("troop_forwarded_total", "Requests whose local-rack replica is another node."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.forwarded.Load() }},
	{desc("troop_busy_total", "Requests refused with -BUSY."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.busy.Load() }},
	{desc("troop_quorum_failures_total", "Requests that could not reach their consistency level."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.quorumFailures.Load() }},
	{desc("troop_read_failovers_total", "DC_ONE reads that went on to another replica after one failed."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.readFailovers.Load() }},
	{desc("troop_stamped_writes_total", "Quorum writes of a whole value whose version query and write met on another replica, which stamped them."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.stampedWrites.Load() }},
	{desc("troop_scriptless_writes_total", "Versioned SETs applied as MSET of value and version, without the write script."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.scriptlessWrites.Load() }},
	{desc("troop_timeouts_total", "Replica calls that timed out."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.timeouts.Load() }},
	{desc("troop_async_replication_failures_total", "Asynchronous replica writes that failed."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.asyncFailures.Load() }},
	{desc("troop_protocol_errors_total", "Client connections closed for malformed RESP."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.protocolErrors.Load() }},
	{desc("troop_client_connections", "Open client connections."), prometheus.GaugeValue, func(n *Node) int64 { return n.stats.connections.Load() }},
	{desc("troop_blocked_clients", "Clients waiting in a blocking pop."), prometheus.GaugeValue, func(n *Node) int64 { return n.stats.blocked.Load() }},
	{desc("troop_inflight", "Requests in progress."), prometheus.GaugeValue, func(n *Node) int64 { return n.inflight.Load() }},
	{desc("troop_peers_marked_down_total", "Times the failure detector marked a peer down."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.peersMarkedDown.Load() }},
	{desc("troop_local_pauses_total", "Times this node stood still (starved of CPU, stopped, paused) a heartbeat period or more; its peers' silence in that time is not counted against them."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.localPauses.Load() }},
	{desc("troop_read_repairs_total", "Stale replicas written back after a quorum read."), prometheus.CounterValue, func(n *Node) int64 { return n.repair.ReadRepairs.Load() }},
	{desc("troop_read_repairs_lost_total", "Read repairs not done (too many under way, or failed)."), prometheus.CounterValue, func(n *Node) int64 { return n.repair.ReadRepairsLost.Load() }},
	{desc("troop_handoff_mirror_failures_total", "Writes to a key moving in a membership change that failed because their copy to the key's other owner failed."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.mirrorFailures.Load() }},
	{desc("troop_handoff_keys_total", "Keys this node streamed to their new owner in membership changes."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.handoffKeys.Load() }},
	{desc("troop_consensus_writes_total", "Quorum writes that change a value in place, decided by consensus per key."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.consensusWrites.Load() }},
	{desc("troop_read_write_backs_total", "Quorum reads that wrote their answer back to a quorum of replicas before giving it."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.readWriteBacks.Load() }},
	{desc("troop_auth_failures_total", "AUTH attempts with a wrong user or password."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.authFailures.Load() }},
	{desc("troop_auth_rate_limited_total", "AUTH attempts refused unchecked after too many failures from the address."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.authRateLimited.Load() }},
	{desc("troop_acl_denied_total", "Commands refused to a read-only user (NOPERM)."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.aclDenied.Load() }},
	{desc("troop_peer_tls_refused_total", "Peer connections refused: a failed TLS handshake (a certificate of another CA, or none), or plain where TLS is due."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.peerTLSRefused.Load() }},
	{desc("troop_admin_auth_failures_total", "Admin API requests with a missing or wrong token."), prometheus.CounterValue, func(n *Node) int64 { return n.stats.adminAuthFailures.Load() }},
}

var (
	hintsPending  = desc("troop_hints_pending", "Hinted writes waiting for their peer.")
	hintsDropped  = desc("troop_hints_dropped_total", "Hinted writes dropped because their peer's hints were full.")
	hintsReplayed = desc("troop_hints_replayed_total", "Hinted writes delivered to their peer.")
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{durationDesc, requestsDesc, errorsDesc, commandsDesc, datastoreUp, datastoreFail,
		peerUp, peerConnected, peerPhi, peerHints, peerFail, hintsPending, hintsDropped, hintsReplayed} {
		ch <- d
	}
	for _, s := range scalars {
		ch <- s.desc
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n, s := c.n, c.n.stats
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for l := consistency.Level(0); l < levels; l++ {
		for op, ls := range map[string]*levelStats{"read": &s.reads[l], "write": &s.writes[l]} {
			counter(requestsDesc, ls.requests.Load(), op, l.String())
			counter(errorsDesc, ls.errors.Load(), op, l.String())
			count, sum, buckets := ls.buckets(latencyBuckets)
			ch <- prometheus.MustNewConstHistogram(durationDesc, count, sum, buckets, op, l.String())
		}
	}
	for name, cmd := range commandTable {
		if v := s.commands[cmd.id].Load(); v > 0 {
			counter(commandsDesc, v, name)
		}
	}
	for _, sc := range scalars {
		ch <- prometheus.MustNewConstMetric(sc.desc, sc.kind, float64(sc.value(n)))
	}
	pending, dropped, replayed := n.hintTotals()
	gauge(hintsPending, float64(pending))
	counter(hintsDropped, dropped)
	counter(hintsReplayed, replayed)

	gauge(datastoreUp, bool01(n.datastore.Reachable()))
	var store link.Stats
	for _, l := range n.store {
		st := l.Stats()
		store.Failures, store.Timeouts, store.Drops = store.Failures+st.Failures, store.Timeouts+st.Timeouts, store.Drops+st.Drops
	}
	failures(counter, datastoreFail, store)

	now := time.Now()
	for _, m := range n.view().peers() {
		ps := m.state(now)
		labels := []string{ps.Name, ps.Datacenter, ps.Rack}
		if ps.Name == "" {
			labels[0] = ps.Addr
		}
		gauge(peerUp, bool01(ps.State == "up"), labels...)
		gauge(peerConnected, bool01(ps.Connected), labels...)
		gauge(peerPhi, ps.Phi, labels...)
		gauge(peerHints, float64(ps.HintsPending), labels...)
		failures(counter, peerFail, m.link.Stats(), labels...)
	}
}

// failures emits a link's failure counters, one per kind.
func failures(counter func(*prometheus.Desc, int64, ...string), d *prometheus.Desc, st link.Stats, labels ...string) {
	for kind, v := range map[string]int64{"connect": st.Failures, "timeout": st.Timeouts, "drop": st.Drops} {
		counter(d, v, slices.Concat(labels, []string{kind})...)
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
