package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/node/reconfig"
)

// adminHandler serves the admin API on stats_listen (docs/node.md):
//
//	GET  /info                          counters and latency, JSON
//	GET  /metrics                       Prometheus metrics (metrics.go)
//	GET  /cluster_describe              datacenters, racks, nodes, tokens, addresses
//	GET  /get_consistency               {"read": ..., "write": ...}
//	POST /set_consistency/{read|write}/{level}
//	POST /state/{normal|standby|writes_only}, GET /state
//	POST /repair                        an anti-entropy pass now; its report, JSON
//	POST /clock/skew?offset=D&rate=R    skew the clock versions come from; 0 and 0 clear it
//	POST /cluster/add?addr=A&rack=R[&dc=D][&tokens=T,...]   add a node (node/reconfig)
//	POST /cluster/remove?addr=A, /cluster/replace?old=A&addr=B[&tokens=T,...]
//	POST /cluster/cancel, /cluster/resume   roll back or finish the change under way
//	GET  /cluster/membership            the membership step this node holds and its moves
//	GET  /ping                          always open
//	GET  /ready                         200 when the node can serve, else 503 and why (ready.go); always open
//	GET  /debug/pprof/...               Go's profiler and execution tracer, with troop_pprof only
//
// State changes take POST or PUT only (Dynomite's GET setters would let a
// crawler or a link change a node) and the bearer token of
// troop_admin_token when one is set; reads take GET and the token when
// troop_admin_protect_reads is set (docs/security.md).
func (n *Node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	read := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, n.adminGuard(adminRead, h)) }
	change := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, n.adminGuard(adminChange, h)) }
	read("/info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.Info()) })
	read("/metrics", n.metricsHandler().ServeHTTP)
	read("/cluster_describe", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.Describe()) })
	read("/get_consistency", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]string{"read": n.level(false).String(), "write": n.level(true).String()})
	})
	change("/set_consistency/{op}/{level}", func(w http.ResponseWriter, r *http.Request) {
		l, err := consistency.ParseLevel(r.PathValue("level"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch r.PathValue("op") {
		case "read":
			n.readLevel.Store(int32(l))
		case "write":
			n.writeLevel.Store(int32(l))
		default:
			http.Error(w, fmt.Sprintf("want /set_consistency/read/LEVEL or /set_consistency/write/LEVEL, got %q", r.PathValue("op")), http.StatusBadRequest)
			return
		}
		n.log.Info("consistency changed", r.PathValue("op"), l.String(), "remote", r.RemoteAddr)
		writeJSON(w, map[string]string{"read": n.level(false).String(), "write": n.level(true).String()})
	})
	change("/state/{state}", func(w http.ResponseWriter, r *http.Request) {
		for i, name := range stateNames {
			if name == r.PathValue("state") {
				n.state.Store(int32(i))
				n.log.Info("state changed", "state", name, "remote", r.RemoteAddr)
				writeJSON(w, map[string]string{"state": name})
				return
			}
		}
		http.Error(w, fmt.Sprintf("unknown state %q: want %s", r.PathValue("state"), strings.Join(stateNames, ", ")), http.StatusBadRequest)
	})
	read("/state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]string{"state": stateNames[n.state.Load()]})
	})
	change("/repair", func(w http.ResponseWriter, r *http.Request) {
		rep, err := n.AntiEntropy(r.Context())
		if err != nil {
			http.Error(w, "anti-entropy pass failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		n.log.Info("anti-entropy pass on request", "keys_compared", rep.KeysCompared, "differing", rep.Differing, "repaired", rep.Repaired, "bytes", rep.Bytes, "took", rep.Took)
		writeJSON(w, rep)
	})
	change("/clock/skew", func(w http.ResponseWriter, r *http.Request) {
		offset, rate, err := parseSkew(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.clock.SetSkew(offset, rate)
		n.log.Warn("clock skew set", "offset", offset.String(), "rate", rate, "remote", r.RemoteAddr)
		writeJSON(w, n.clockInfo())
	})
	read("/cluster/membership", func(w http.ResponseWriter, r *http.Request) {
		st := n.view().state
		writeJSON(w, reconfig.Report{State: st, Moves: st.Moves()})
	})
	change("/cluster/{op}", n.changes.ServeHTTP)
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "pong") })
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		if why := n.unready(time.Now()); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if n.cfg.Pprof {
		// Go's profiler, for finding where a node spends its time under
		// load: it costs CPU and shows the node's insides, so it wants the
		// token whenever one is set.
		mux.Handle("/debug/pprof/", n.adminGuard(adminProfile, pprof.Index))
		mux.Handle("/debug/pprof/profile", n.adminGuard(adminProfile, pprof.Profile))
		mux.Handle("/debug/pprof/trace", n.adminGuard(adminProfile, pprof.Trace))
	}
	return mux
}

// What an admin endpoint does, for its guard.
type adminAccess int

const (
	adminRead    adminAccess = iota // GET; the token with troop_admin_protect_reads
	adminChange                     // POST or PUT; the token when one is set
	adminProfile                    // GET; the token when one is set
)

// adminGuard lets a request through to h when its method fits what h does
// and it carries the token h needs. Failed tokens are counted and limited
// per address, as failed AUTHs are.
func (n *Node) adminGuard(access adminAccess, h http.HandlerFunc) http.Handler {
	methods := []string{http.MethodGet, http.MethodHead}
	if access == adminChange {
		methods = []string{http.MethodPost, http.MethodPut}
	}
	needToken := n.cfg.AdminToken != "" && (access != adminRead || n.cfg.AdminProtectReads)
	want := passwordHash(n.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			what := "reads the node"
			if access == adminChange {
				what = "changes the node"
			}
			http.Error(w, fmt.Sprintf("%s %s: method not allowed: %s answers %s only, as it %s", r.Method, r.URL.Path, r.URL.Path, strings.Join(methods, " or "), what), http.StatusMethodNotAllowed)
			return
		}
		if needToken {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			now := time.Now()
			if wait := n.adminLimiter.wait(host, now); wait > 0 {
				n.stats.authRateLimited.Add(1)
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
				http.Error(w, fmt.Sprintf("too many requests with a wrong token from %s: retry in %v", host, wait.Round(time.Millisecond)), http.StatusTooManyRequests)
				return
			}
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || !hashMatches(want, token) {
				n.stats.adminAuthFailures.Add(1)
				if n.adminLimiter.fail(host, now) {
					n.log.Warn("admin requests with a wrong token from a client address reached the limit; they are refused until it slows down", "remote", host)
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="troop admin"`)
				http.Error(w, fmt.Sprintf("%s %s needs the admin token (troop_admin_token): send Authorization: Bearer TOKEN", r.Method, r.URL.Path), http.StatusUnauthorized)
				return
			}
		}
		h(w, r)
	})
}

// parseSkew reads offset (a Go duration, signed) and rate (seconds of
// drift per second); a missing one is 0, but one must be given.
func parseSkew(q url.Values) (time.Duration, float64, error) {
	var (
		offset time.Duration
		rate   float64
		err    error
	)
	for k := range q {
		if k != "offset" && k != "rate" {
			return 0, 0, fmt.Errorf("unknown parameter %q: want offset and rate", k)
		}
	}
	if !q.Has("offset") && !q.Has("rate") {
		return 0, 0, errors.New("want offset=DURATION (e.g. 2s, -500ms) and/or rate=R (seconds of drift per second, e.g. 0.01); offset=0&rate=0 clears the skew")
	}
	if q.Has("offset") {
		if offset, err = time.ParseDuration(q.Get("offset")); err != nil || offset < -hlc.MaxSkewOffset || offset > hlc.MaxSkewOffset {
			return 0, 0, fmt.Errorf("offset %q: want a duration from -%v to %v", q.Get("offset"), hlc.MaxSkewOffset, hlc.MaxSkewOffset)
		}
	}
	if q.Has("rate") {
		if rate, err = strconv.ParseFloat(q.Get("rate"), 64); err != nil || math.IsNaN(rate) || rate <= -hlc.MaxSkewRate || rate > hlc.MaxSkewRate {
			return 0, 0, fmt.Errorf("rate %q: want a number above -%g and at most %g (seconds of drift per second)", q.Get("rate"), hlc.MaxSkewRate, hlc.MaxSkewRate)
		}
	}
	return offset, rate, nil
}

// ClockInfo is the clock's skew in /info; all zero for a true clock.
type ClockInfo struct {
	OffsetMS float64 `json:"offset_ms"` // the jump set
	Rate     float64 `json:"rate"`      // the drift set, seconds per second
	SkewMS   float64 `json:"skew_ms"`   // how far off the clock is now: the jump plus the drift so far
	Since    string  `json:"since,omitempty"`
}

func (n *Node) clockInfo() ClockInfo {
	s, off := n.clock.SkewNow()
	ci := ClockInfo{OffsetMS: float64(s.Offset) / float64(time.Millisecond), Rate: s.Rate, SkewMS: float64(off) / float64(time.Millisecond)}
	if s.Offset != 0 || s.Rate != 0 {
		ci.Since = s.Since.UTC().Format(time.RFC3339Nano)
	}
	return ci
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Info is the /info document.
type Info struct {
	Name              string                     `json:"name"`
	Datacenter        string                     `json:"datacenter"`
	Rack              string                     `json:"rack"`
	State             string                     `json:"state"`
	UptimeSeconds     int64                      `json:"uptime_seconds"`
	ReadConsistency   string                     `json:"read_consistency"`
	WriteConsistency  string                     `json:"write_consistency"`
	Requests          map[string]map[string]Rate `json:"requests"` // "read"/"write" -> level -> figures
	Commands          map[string]int64           `json:"commands"`
	Forwarded         int64                      `json:"forwarded"`
	Busy              int64                      `json:"busy"`
	QuorumFailures    int64                      `json:"quorum_failures"`
	ReadFailovers     int64                      `json:"read_failovers"`
	ScriptlessWrites  int64                      `json:"scriptless_writes"`
	StampedWrites     int64                      `json:"stamped_writes"`
	Timeouts          int64                      `json:"timeouts"`
	AsyncFailures     int64                      `json:"async_replication_failures"`
	ProtocolErrors    int64                      `json:"protocol_errors"`
	Connections       int64                      `json:"client_connections"`
	Inflight          int64                      `json:"inflight"`
	AuthFailures      int64                      `json:"auth_failures"`       // AUTH with a wrong user or password
	AuthRateLimited   int64                      `json:"auth_rate_limited"`   // AUTH or admin requests refused unchecked after too many failures
	AdminAuthFailures int64                      `json:"admin_auth_failures"` // admin requests with a missing or wrong token
	PeerTLSRefused    int64                      `json:"peer_tls_refused"`    // peer connections refused: failed TLS handshake, or plain where TLS is due
	ACLDenied         int64                      `json:"acl_denied"`          // commands refused to a read-only user
	Links             []LinkInfo                 `json:"links"`
	Clock             ClockInfo                  `json:"clock"`

	// Failure detection and repair (docs/repair.md).
	Peers           []PeerState `json:"peers"`
	PeersMarkedDown int64       `json:"peers_marked_down"` // times a peer was marked down
	LocalPauses     int64       `json:"local_pauses"`      // times this node stood still a heartbeat period or more
	HintsPending    int64       `json:"hints_pending"`
	HintsDropped    int64       `json:"hints_dropped"`
	HintsReplayed   int64       `json:"hints_replayed"`
	ReadRepairs     int64       `json:"read_repairs"`
	ReadRepairsLost int64       `json:"read_repairs_lost"`
	ReadWriteBacks  int64       `json:"read_write_backs"`

	// Membership changes (docs/store.md, Membership changes).
	MembershipEpoch       uint64 `json:"membership_epoch"`
	MembershipPhase       string `json:"membership_phase"`
	HandoffMirrorFailures int64  `json:"handoff_mirror_failures"` // writes to a moving key whose copy to its other owner failed
	HandoffKeys           int64  `json:"handoff_keys"`            // keys this node streamed to a new owner
	DataDir               string `json:"data_dir"`

	// PlantedBug is troop_planted_bug, a deliberate defect for tests.
	PlantedBug string `json:"planted_bug,omitempty"`
}

// Rate is one operation's figures at one level; latencies in microseconds.
type Rate struct {
	Count   int64            `json:"count"`
	Errors  int64            `json:"errors"`
	Latency map[string]int64 `json:"latency_us"`
}

// LinkInfo describes a connection to the datastore or a peer.
type LinkInfo struct {
	Name        string `json:"name"`
	Addr        string `json:"addr"`
	Up          bool   `json:"up"`
	Connects    int64  `json:"connects"`
	Failures    int64  `json:"failures"`
	Timeouts    int64  `json:"timeouts"`
	LastFailure string `json:"last_failure,omitempty"`
}

// Info gathers the node's counters.
func (n *Node) Info() Info {
	s := n.stats
	info := Info{
		Name: n.cfg.Name, Datacenter: n.cfg.Datacenter, Rack: n.cfg.Rack, State: stateNames[n.state.Load()],
		UptimeSeconds:   int64(time.Since(s.started).Seconds()),
		ReadConsistency: n.level(false).String(), WriteConsistency: n.level(true).String(),
		Requests: map[string]map[string]Rate{"read": {}, "write": {}}, Commands: map[string]int64{},
		Forwarded: s.forwarded.Load(), Busy: s.busy.Load(), QuorumFailures: s.quorumFailures.Load(), ReadFailovers: s.readFailovers.Load(),
		ScriptlessWrites: s.scriptlessWrites.Load(),
		StampedWrites:    s.stampedWrites.Load(),
		Timeouts:         s.timeouts.Load(), AsyncFailures: s.asyncFailures.Load(), ProtocolErrors: s.protocolErrors.Load(),
		Connections: s.connections.Load(), Inflight: n.inflight.Load(),
		AuthFailures: s.authFailures.Load(), AuthRateLimited: s.authRateLimited.Load(), ACLDenied: s.aclDenied.Load(),
		AdminAuthFailures: s.adminAuthFailures.Load(), PeerTLSRefused: s.peerTLSRefused.Load(),
		Peers: n.peerStates(), PeersMarkedDown: s.peersMarkedDown.Load(), LocalPauses: s.localPauses.Load(),
		ReadRepairs: n.repair.ReadRepairs.Load(), ReadRepairsLost: n.repair.ReadRepairsLost.Load(), ReadWriteBacks: s.readWriteBacks.Load(), DataDir: n.dataDir,
		HandoffMirrorFailures: s.mirrorFailures.Load(), HandoffKeys: s.handoffKeys.Load(),
		PlantedBug: n.cfg.PlantedBug, Clock: n.clockInfo(),
	}
	info.HintsPending, info.HintsDropped, info.HintsReplayed = n.hintTotals()
	st := n.view().state
	info.MembershipEpoch, info.MembershipPhase = st.Epoch, string(st.Phase)
	for l := consistency.Level(0); l < levels; l++ {
		for op, ls := range map[string]*levelStats{"read": &s.reads[l], "write": &s.writes[l]} {
			lat := ls.latency()
			info.Requests[op][l.String()] = Rate{Count: ls.requests.Load(), Errors: ls.errors.Load(), Latency: map[string]int64{
				"p50": lat.P50, "p95": lat.P95, "p99": lat.P99, "p99.9": lat.P999, "max": lat.Max}}
		}
	}
	for name, c := range commandTable {
		if v := s.commands[c.id].Load(); v > 0 {
			info.Commands[name] = v
		}
	}
	for _, l := range n.store {
		info.Links = append(info.Links, linkInfo(l))
	}
	for _, m := range n.view().peers() {
		info.Links = append(info.Links, linkInfo(m.link))
	}
	return info
}

func linkInfo(l *link.Link) LinkInfo {
	st := l.Stats()
	return LinkInfo{Name: l.Name(), Addr: l.Addr(), Up: l.Up(), Connects: st.Connects, Failures: st.Failures,
		Timeouts: st.Timeouts, LastFailure: st.LastFailure}
}

// ClusterNode is one node in /cluster_describe.
type ClusterNode struct {
	Name        string   `json:"name"`
	Datacenter  string   `json:"datacenter"`
	Rack        string   `json:"rack"`
	Tokens      []uint32 `json:"tokens"`
	Listen      string   `json:"listen"`       // client address; "" until the peer has been reached
	DynListen   string   `json:"dyn_listen"`   // peer address
	StatsListen string   `json:"stats_listen"` // admin address
	Self        bool     `json:"self"`
	Up          bool     `json:"up"`    // this node holds an open connection to it (always true for self)
	State       string   `json:"state"` // "up" or "down", as the failure detector says ("up" for self)
}

// Describe lists the cluster as this node sees it: the members requests
// are routed by, sorted by datacenter, rack and token.
func (n *Node) Describe() []ClusterNode {
	var out []ClusterNode
	v := n.view()
	for i, m := range v.members {
		m.mu.Lock()
		info := m.info
		m.mu.Unlock()
		up := m.self || m.link.Connected()
		out = append(out, ClusterNode{Name: info.Name, Datacenter: m.dc, Rack: m.rack, Tokens: v.tokens[i],
			Listen: info.Listen, DynListen: m.peerAddr, StatsListen: info.Stats, Self: m.self, Up: up, State: stateName(m.isDown())})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Datacenter != b.Datacenter {
			return a.Datacenter < b.Datacenter
		}
		if a.Rack != b.Rack {
			return a.Rack < b.Rack
		}
		return a.Tokens[0] < b.Tokens[0]
	})
	return out
}
