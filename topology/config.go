// Package topology reads and writes the config file of a troop node.
//
// The format is Dynomite's: a YAML file with exactly one top-level key, the
// server pool name (normally dyn_o_mite), holding Dynomite's keys, plus a few
// keys of troop's own, all prefixed troop_. Existing Dynomite configs load
// unchanged as long as they ask only for what troop implements; anything
// else is an error that names the key and its line, so that a node never
// runs with a setting it silently ignores. docs/config.md is the reference.
//
// Everything here is a pure function of its input except Load, which reads
// one file.
package topology

import (
	"fmt"
	"os"
	"time"

	"github.com/troop-lab/troop/node/consistency"
)

// Config is one node's configuration.
type Config struct {
	Source string // file path or source name given to Parse
	Pool   string // the top-level key, e.g. "dyn_o_mite"

	// Name identifies the node in logs, metrics and reports
	// (troop_node_name). Parse derives "<datacenter>-<rack>-<listen port>"
	// when the file does not set it.
	Name string

	// Datacenter and Rack place the node. Dynomite, and so troop, default
	// them to "localdc" and "localrack", which is what single-node configs
	// that omit them rely on.
	Datacenter, Rack string

	Listen      string // host:port of the client (RESP) listener; required
	DynListen   string // host:port of the peer listener; required with dyn_seeds, else "<listen host>:8101"
	StatsListen string // host:port of the admin HTTP listener; default "127.0.0.1:22222"

	Seeds []Seed // dyn_seeds: the other nodes of the cluster
	// SeedProvider is dyn_seed_provider: "" (simple_provider) for
	// dyn_seeds, dns_provider or florida_provider for seeds the node asks
	// for when it starts (ProvidedSeeds).
	SeedProvider string
	Tokens       []uint32 // this node's tokens on the 32-bit ring; required
	Servers      []Server // the datastore (redis-server); exactly one

	DataStore int // 0 = Redis, the only data store troop supports

	// HashTag is Dynomite's hash_tag: two characters, such as "{}"; when a
	// key holds a non-empty part between them, that part alone places the
	// key (ring.Tag). "" hashes whole keys.
	HashTag string

	ReadConsistency, WriteConsistency consistency.Level // default DC_ONE
	Timeout                           time.Duration     // datastore and peer request timeout; default 5000 ms

	// Client authentication, and how the node authenticates to its
	// redis-server (docs/security.md).
	RequirePass   string // requirepass: the default user's password; "" = none
	Users         []User // troop_users: named users, full or read-only
	RedisUser     string // troop_redis_user: the ACL user for AUTH to redis-server; "" = AUTH with the password alone
	RedisPassword string // redis_requirepass: the password for AUTH to redis-server; "" = no AUTH

	// TLS (docs/security.md). SecureServerOption is Dynomite's
	// secure_server_option: which peer links are encrypted (PeerTLS); troop
	// encrypts them with TLS, both ends showing certificates of one CA.
	SecureServerOption string // none (default), rack, datacenter or all
	TLSCert, TLSKey    string // troop_tls_cert, troop_tls_key: this node's certificate and key (PEM)
	TLSCA              string // troop_tls_ca: the CA certificates peers' (and clients') certificates must chain to (PEM)
	TLSClient          bool   // troop_tls_client: the client listener speaks TLS only
	TLSAdmin           bool   // troop_tls_admin: the admin API is served over HTTPS

	// The admin API (docs/security.md).
	AdminToken        string // troop_admin_token: the bearer token that state changes need; "" = none
	AdminProtectReads bool   // troop_admin_protect_reads: the read-only endpoints need the token too
	Pprof             bool   // troop_pprof: serve Go's profiler under /debug/pprof/

	// troop's own keys.
	ClientLoops        int           // troop_client_loops: event loops serving plain TCP clients; 0 = one per 4 cores, at least 1
	MaxInflightPerConn int           // troop_max_inflight_per_conn, default 1024
	MaxInflight        int           // troop_max_inflight (per node), default 65536
	MaxRequestBytes    int           // troop_max_request_bytes, default 64 MiB
	MaxMemoryMB        int           // troop_max_memory_mb: the node's memory budget in MiB, default 256
	TombstoneGrace     time.Duration // troop_tombstone_grace_ms, default 10 minutes

	// Failure detection and repair (docs/repair.md).
	Heartbeat           time.Duration // troop_heartbeat_ms: PING period to each peer, default 250 ms
	PhiThreshold        int           // troop_phi_threshold: phi at which a peer is down, default 8
	DataDir             string        // troop_data_dir: where hints live; "" = <config dir>/troop-data/<name>
	HintedHandoff       bool          // troop_hinted_handoff, default true
	MaxHintBytes        int           // troop_max_hint_bytes: hints kept per peer, default 256 MiB
	ReadRepair          bool          // troop_read_repair, default true
	AntiEntropyInterval time.Duration // troop_anti_entropy_interval_ms: 0 = off, default 3000
	RepairKeysPerSec    int           // troop_repair_keys_per_sec: anti-entropy repair rate, default 1000
	HandoffKeysPerSec   int           // troop_handoff_keys_per_sec: keys a node streams to a new owner per second in a membership change, default 2000
	// Versions is troop_versions, default true. false writes the plain
	// command, without a version, as Dynomite does: it exists to measure
	// what versions cost (make bench), and needs hints, read repair and
	// anti-entropy off, which order replicas by version.
	Versions bool
	// VersionCacheKeys is troop_version_cache_keys: how many keys' versions
	// the node remembers so that a plain SET can skip the write script
	// (docs/repair.md); 0 = every versioned write runs the script.
	VersionCacheKeys int
	// AllowFlush is troop_allow_flush, default false: whether FLUSHALL and
	// FLUSHDB through this node empty every node of the cluster.
	AllowFlush    bool
	LineageExport string // troop_lineage_export: FILE or http(s)://OTLP endpoint for traced requests' lineage as spans; "" = off
	// Join is troop_join, default false: the node starts outside the
	// cluster its seeds describe, answers clients TRYAGAIN, and waits for
	// a membership change (POST /cluster/add or /cluster/replace on a
	// member) that names it (docs/store.md, Membership changes).
	Join bool

	// PlantedBug is troop_planted_bug: a deliberate defect, for testing the
	// testers (ldfi, troop run); "" (none) by default and for any real use.
	PlantedBug string

	// Dynomite's connection and failure tuning. Parse fills in Dynomite's
	// defaults; they are recorded for the node, which decides how far its
	// own connection model follows them (docs/config.md).
	Preconnect            bool          // preconnect, default true
	AutoEjectHosts        bool          // auto_eject_hosts, default true
	ServerRetryTimeout    time.Duration // server_retry_timeout, default 10000 ms
	ServerFailureLimit    int           // server_failure_limit, default 3
	ServerConnections     int           // server_connections, default 1
	DatastoreConnections  int           // datastore_connections, default 1
	LocalPeerConnections  int           // local_peer_connections, default 1
	RemotePeerConnections int           // remote_peer_connections, default 1
	DynConnections        int           // dyn_connections, default 100
	DynReadTimeout        time.Duration // dyn_read_timeout, default 10000 ms
	DynWriteTimeout       time.Duration // dyn_write_timeout, default 10000 ms

	// Dynomite keys that change nothing in troop. They are kept as written,
	// zero when absent, so that a config survives Parse and Marshal intact.
	Env           string        // env
	GosInterval   time.Duration // gos_interval (troop has no gossip)
	StatsInterval time.Duration // stats_interval
	MbufSize      int           // mbuf_size
	MaxMsgs       int           // max_msgs
	Backlog       int           // backlog
	ClientConns   int           // client_connections
	DynPort       int           // dyn_port
	PemKeyFile    string        // pem_key_file
	ReconKeyFile  string        // recon_key_file
	ReconIVFile   string        // recon_iv_file
}

// Seed is another node, from dyn_seeds ("host:port:rack:dc:tokens").
type Seed struct {
	Addr     string // host:port of its peer listener
	Rack, DC string
	Tokens   []uint32
}

// Server is the datastore behind the node, from servers ("host:port:weight").
type Server struct {
	Addr   string // host:port
	Weight int    // parsed for compatibility; troop, like Dynomite, uses one server
}

// Planted bugs (troop_planted_bug): deliberate defects for tests, never
// for real use (docs/config.md).
const (
	// BugNoReadFailover: a quorum read that gets an error from a replica it
	// asked fails at once instead of asking the remaining replicas.
	BugNoReadFailover = "no-read-failover"
	// BugLocalWritesOnly: the coordinator applies a write on its own rack's
	// replica only and acknowledges it at any level.
	BugLocalWritesOnly = "local-writes-only"
	// BugNoVersionQuery: a quorum write takes its version from the
	// coordinator's clock alone, without first asking a quorum of replicas
	// for theirs. Two coordinators writing one key within a millisecond can
	// then give the later write the lower version, and replicas keep the
	// earlier one: an acknowledged write is lost.
	BugNoVersionQuery = "no-version-query"
	// BugNoReadWriteBack: a quorum read answers the newest value it found at
	// once, and copies it to the replicas that lack it only afterwards, so a
	// later read may still miss a value an earlier read returned.
	BugNoReadWriteBack = "no-read-write-back"
	// BugNoHintedHandoff: a write a replica did not get (it was down, cut
	// off or slow) is not kept as a hint for it, so after a partition heals
	// its replicas differ until a read or anti-entropy repairs them.
	BugNoHintedHandoff = "no-hinted-handoff"
	// BugNoHandoffMirror: during a membership change a write to a moving
	// key is not copied to the key's other owner, so a write that lands on
	// the old owner after its range was streamed never reaches the new one.
	BugNoHandoffMirror = "no-handoff-mirror"
)

// BugNoConsensus: a quorum write that changes a value in place (INCR,
// SET NX, RPUSH) runs on every replica in the order it arrives there,
// answered by the first replica's reply, instead of being decided by
// consensus per key.
const BugNoConsensus = "no-consensus"

// PlantedBugs lists the values troop_planted_bug accepts besides none.
var PlantedBugs = []string{BugNoReadFailover, BugLocalWritesOnly, BugNoVersionQuery, BugNoReadWriteBack, BugNoHintedHandoff, BugNoHandoffMirror, BugNoConsensus}

// Defaults of the keys troop honours. Dynomite's own defaults where the key
// is Dynomite's.
const (
	DefaultPool               = "dyn_o_mite"
	DefaultDatacenter         = "localdc"
	DefaultRack               = "localrack"
	DefaultDynPort            = "8101"
	DefaultStatsListen        = "127.0.0.1:22222" // loopback: Dynomite's 0.0.0.0 opened the admin API to the network
	DefaultTimeout            = 5000 * time.Millisecond
	DefaultMaxInflightPerConn = 1024
	DefaultMaxInflight        = 65536
	DefaultMaxRequestBytes    = 64 << 20
	DefaultMaxMemoryMB        = 256
	MinMaxMemoryMB            = 64
	DefaultTombstoneGrace     = 10 * time.Minute
	DefaultHeartbeat          = 250 * time.Millisecond
	DefaultPhiThreshold       = 8
	DefaultMaxHintBytes       = 256 << 20
	DefaultRepairKeysPerSec   = 1000
	DefaultHandoffKeysPerSec  = 2000
	DefaultVersionCacheKeys   = 1 << 20

	// DefaultAntiEntropyInterval runs an anti-entropy pass every 3 s, so
	// that replicas left differing (a write that missed a replica, a
	// change behind troop's back) converge within 10 s of the writes
	// stopping, with no `troop repair`: a pass's repairs are bounded by
	// troop_repair_keys_per_sec, and its Merkle trees cost a scan of the
	// keys (docs/repair.md).
	DefaultAntiEntropyInterval = 3 * time.Second
)

// Default returns a config holding every default and none of the required
// keys (listen, servers, tokens). Parse starts from it; programs that
// generate configs can start from it too, fill in the rest and Marshal.
func Default() *Config {
	c := &Config{Pool: DefaultPool}
	for i := range keys {
		if keys[i].reset != nil {
			keys[i].reset(c)
		}
	}
	return c
}

// Load reads and parses the config file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse parses a config. source names it in error messages, normally the
// file path. Every error carries the key and line it is about; when there are
// several, the returned error joins them, one per line.
func Parse(data []byte, source string) (*Config, error) {
	p := &parser{source: source, lines: map[string]int{}}
	c := p.parse(data)
	if len(p.errs) > 0 {
		return nil, p.err()
	}
	return c, nil
}

// Validate checks a config as Parse would after reading it: required keys,
// ranges, addresses, and the ring (no two nodes of a rack share a token).
// Name and, without seeds, DynListen may be empty: Parse derives them.
func (c *Config) Validate() error {
	p := &parser{source: c.Source}
	p.validate(c)
	return p.err()
}

// deriveName is the node name used when troop_node_name is absent.
func deriveName(c *Config) string {
	_, port, _ := splitHostPort(c.Listen)
	return fmt.Sprintf("%s-%s-%s", c.Datacenter, c.Rack, port)
}

// deriveDynListen is the peer listener used when dyn_listen is absent:
// Dynomite's usual peer port on the client listener's host.
func deriveDynListen(c *Config) string {
	host, _, err := splitHostPort(c.Listen)
	if err != nil {
		return ""
	}
	return joinHostPort(host, DefaultDynPort)
}
