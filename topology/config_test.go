package topology

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/node/consistency"
)

// base is the smallest valid config; lines added with with() start at line 6.
const base = `dyn_o_mite:
  listen: 127.0.0.1:8102
  servers:
  - 127.0.0.1:6379:1
  tokens: '0'
`

func with(extra string) string { return base + extra }

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(base), "x.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Source: "x.yml", Pool: "dyn_o_mite", Name: "localdc-localrack-8102",
		Datacenter: "localdc", Rack: "localrack",
		Listen: "127.0.0.1:8102", DynListen: "127.0.0.1:8101", StatsListen: "127.0.0.1:22222",
		SecureServerOption: SecureNone,
		Tokens:             []uint32{0},
		Servers:            []Server{{Addr: "127.0.0.1:6379", Weight: 1}},
		Timeout:            5000 * time.Millisecond,

		MaxInflightPerConn: 1024, MaxInflight: 65536, MaxRequestBytes: 67108864, MaxMemoryMB: 256,
		TombstoneGrace: 10 * time.Minute,
		Heartbeat:      250 * time.Millisecond, PhiThreshold: 8,
		HintedHandoff: true, MaxHintBytes: 256 << 20, ReadRepair: true, AntiEntropyInterval: 3 * time.Second, RepairKeysPerSec: 1000, HandoffKeysPerSec: 2000, Versions: true, VersionCacheKeys: 1 << 20,

		Preconnect: true, AutoEjectHosts: true,
		ServerRetryTimeout: 10 * time.Second, ServerFailureLimit: 3,
		ServerConnections: 1, DatastoreConnections: 1,
		LocalPeerConnections: 1, RemotePeerConnections: 1, DynConnections: 100,
		DynReadTimeout: 10 * time.Second, DynWriteTimeout: 10 * time.Second,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestFixtures(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, c *Config)
	}{
		{"rack1.yml", func(t *testing.T, c *Config) {
			eq(t, "Name", c.Name, "dc-rack1-8102")
			eq(t, "Seeds", c.Seeds, []Seed{
				{Addr: "127.0.0.2:8101", Rack: "rack2", DC: "dc", Tokens: []uint32{1383429731}},
				{Addr: "127.0.0.3:8101", Rack: "rack3", DC: "dc", Tokens: []uint32{1383429731}},
			})
			eq(t, "PemKeyFile", c.PemKeyFile, "conf/dynomite.pem")
		}},
		{"single_legacy.yml", func(t *testing.T, c *Config) {
			eq(t, "Datacenter", c.Datacenter, "localdc")
			eq(t, "Rack", c.Rack, "localrack")
			eq(t, "Tokens", c.Tokens, []uint32{437425602})
			eq(t, "DataStore", c.DataStore, 0)
		}},
		{"single.yml", func(t *testing.T, c *Config) {
			eq(t, "Listen", c.Listen, "0.0.0.0:8102")
			eq(t, "DynListen", c.DynListen, "0.0.0.0:8101")
		}},
		{"multi_dc.yml", func(t *testing.T, c *Config) {
			eq(t, "len(Seeds)", len(c.Seeds), 3)
			eq(t, "StatsListen", c.StatsListen, "127.0.0.1:22221")
		}},
		{"manager.yml", func(t *testing.T, c *Config) {
			eq(t, "ReadConsistency", c.ReadConsistency, consistency.DCQuorum)
			eq(t, "WriteConsistency", c.WriteConsistency, consistency.DCSafeQuorum)
			eq(t, "Timeout", c.Timeout, 2*time.Second)
			eq(t, "Tokens", c.Tokens, []uint32{4294967294})
			eq(t, "DatastoreConnections", c.DatastoreConnections, 2)
			eq(t, "DynConnections", c.DynConnections, 50)
			eq(t, "DynReadTimeout", c.DynReadTimeout, 20*time.Second)
			eq(t, "ServerRetryTimeout", c.ServerRetryTimeout, 30*time.Second)
			eq(t, "GosInterval", c.GosInterval, 10*time.Second)
			eq(t, "MbufSize", c.MbufSize, 16384)
			eq(t, "MaxMsgs", c.MaxMsgs, 300000)
			eq(t, "Env", c.Env, "aws")
		}},
		{"troop.yml", func(t *testing.T, c *Config) {
			eq(t, "Pool", c.Pool, "lab")
			eq(t, "Name", c.Name, "r2-a")
			eq(t, "Tokens", c.Tokens, []uint32{0, 2147483648})
			eq(t, "ReadConsistency", c.ReadConsistency, consistency.DCSafeQuorum)
			eq(t, "WriteConsistency", c.WriteConsistency, consistency.DCQuorum)
			eq(t, "Timeout", c.Timeout, 250*time.Millisecond)
			eq(t, "MaxInflightPerConn", c.MaxInflightPerConn, 64)
			eq(t, "MaxInflight", c.MaxInflight, 4096)
			eq(t, "MaxRequestBytes", c.MaxRequestBytes, 1<<20)
			eq(t, "TombstoneGrace", c.TombstoneGrace, 30*time.Second)
			eq(t, "HashTag", c.HashTag, "{}")
			eq(t, "AllowFlush", c.AllowFlush, true)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "Source", c.Source, path)
			tt.check(t, c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			roundTrip(t, c)
		})
	}
}

// The layout of Dynomite's conf/redis_rack1_node.yml loads, encryption
// line included: with every seed in its own datacenter, "datacenter"
// encrypts no link and needs no certificate. Given a seed in another
// datacenter, it needs troop's TLS files, and says so at its line.
func TestDynomiteSecureExample(t *testing.T) {
	c, err := Load("testdata/rack1_secure.yml")
	if err != nil {
		t.Fatal(err)
	}
	if c.SecureServerOption != SecureDatacenter || c.PeerTLS("dc", "rack2") || !c.PeerTLS("dc2", "rack1") {
		t.Errorf("secure_server_option %q: PeerTLS same dc %v, other dc %v", c.SecureServerOption, c.PeerTLS("dc", "rack2"), c.PeerTLS("dc2", "rack1"))
	}
	data, _ := os.ReadFile("testdata/rack1_secure.yml")
	_, err = Parse([]byte(strings.Replace(string(data), "127.0.0.3:8101:rack3:dc:", "127.0.0.3:8101:rack3:dc2:", 1)), "x.yml")
	want := `x.yml:12: secure_server_option: datacenter encrypts the link to 127.0.0.3:8101 (dc2/rack3): it needs troop_tls_cert, troop_tls_key and troop_tls_ca (PEM files: this node's certificate and key, and the CA its peers' certificates chain to)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 12 || e.Key != "secure_server_option" {
		t.Errorf("error fields: %+v", e)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/no-such-file.yml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // the whole error text, source "x.yml"
	}{
		// Values troop does not implement.
		{"secure unknown", with("  secure_server_option: dc\n"),
			`x.yml:6: secure_server_option: "dc" is not a secure_server_option (want none, rack, datacenter or all)`},
		{"tls files apart", with("  troop_tls_cert: a.crt\n"),
			`x.yml:6: troop_tls_cert: troop_tls_cert, troop_tls_key and troop_tls_ca go together: set all three or none`},
		{"tls client without files", with("  troop_tls_client: true\n"),
			`x.yml:6: troop_tls_client: true encrypts the client listener: it needs troop_tls_cert, troop_tls_key and troop_tls_ca (PEM files: this node's certificate and key, and the CA its peers' certificates chain to)`},
		{"hash", with("  hash: md5\n"),
			`x.yml:6: hash: "md5" is not supported by troop yet (only "murmur")`},
		{"distribution", with("  distribution: ketama\n"),
			`x.yml:6: distribution: "ketama" is not supported by troop yet (only "vnode")`},
		{"seed provider", with("  dyn_seed_provider: zookeeper_provider\n"),
			`x.yml:6: dyn_seed_provider: "zookeeper_provider" is not a seed provider (want simple_provider, dns_provider, florida_provider)`},
		{"memcached", with("  data_store: 1\n"),
			`x.yml:6: data_store: 1 (Memcached) is not supported by troop yet (only 0, Redis)`},
		{"data store 2", with("  data_store: 2\n"),
			`x.yml:6: data_store: 2 is not a data store troop knows (only 0, Redis; Dynomite also has 1, Memcached)`},
		{"legacy redis false", with("  redis: false\n"),
			`x.yml:6: redis: false (Memcached) is not supported by troop yet (only true, Redis)`},
		{"gossip", with("  enable_gossip: true\n"),
			`x.yml:6: enable_gossip: true is not supported by troop yet (troop has no gossip: list every other node in dyn_seeds)`},
		// Passwords are never echoed.
		{"password with a space", with("  requirepass: 'hunter 2'\n"),
			`x.yml:6: requirepass: has an unprintable or space character (at byte 6)`},
		{"bad hash", with("  requirepass: '#abc'\n"),
			`x.yml:6: requirepass: starts with '#' but is not '#' and the 64 hex digits of a SHA-256 (sha256sum of the password)`},
		{"user entry", with("  troop_users: [alice-hunter2]\n"),
			`x.yml:6: troop_users: an entry is not NAME:ACCESS:PASSWORD (ACCESS is full or readonly)`},
		{"user access", with("  troop_users: ['alice:admin:hunter2']\n"),
			`x.yml:6: troop_users: user alice: access "admin": want full or readonly`},
		{"user password", with("  troop_users: ['alice:full:']\n"),
			`x.yml:6: troop_users: user alice: password is empty`},
		{"user name", with("  troop_users: [' :full:hunter2']\n"),
			`x.yml:6: troop_users: user name " " has ' '; use printable ASCII without spaces or ':'`},
		{"user twice", with("  troop_users: ['a:full:x1', 'a:readonly:x2']\n"),
			`x.yml:6: troop_users: user a is listed twice`},
		{"default twice", with("  requirepass: x1\n  troop_users: ['default:readonly:x2']\n"),
			`x.yml:7: troop_users: user default is listed and requirepass is set: set the default user's password in one place`},
		{"redis user alone", with("  troop_redis_user: node\n"),
			`x.yml:6: troop_redis_user: node is set without redis_requirepass, the password to give with it`},
		{"hash tag of one character", with("  hash_tag: \"{\"\n"),
			`x.yml:6: hash_tag: "{" is not two printable ASCII characters, the start and the end of a key's tag (for example "{}")`},
		{"hash tag of three", with("  hash_tag: \"{}}\"\n"),
			`x.yml:6: hash_tag: "{}}" is not two printable ASCII characters, the start and the end of a key's tag (for example "{}")`},
		{"hash tag not ASCII", with("  hash_tag: \"«»\"\n"),
			`x.yml:6: hash_tag: "«»" is not two printable ASCII characters, the start and the end of a key's tag (for example "{}")`},
		{"rate limit", with("  conn_msg_rate: 100\n"),
			`x.yml:6: conn_msg_rate: "100" is not supported by troop yet (troop does not rate-limit connections)`},
		{"each safe quorum", with("  write_consistency: DC_EACH_SAFE_QUORUM\n"),
			`x.yml:6: write_consistency: "DC_EACH_SAFE_QUORUM" is not supported by troop yet (only DC_ONE, DC_QUORUM and DC_SAFE_QUORUM)`},
		{"unknown level", with("  read_consistency: dc_two\n"),
			`x.yml:6: read_consistency: unknown consistency level "dc_two" (want DC_ONE, DC_QUORUM or DC_SAFE_QUORUM)`},
		{"unix socket", strings.Replace(base, "127.0.0.1:6379:1", "/var/run/redis.sock:1", 1),
			`x.yml:4: servers: "/var/run/redis.sock:1": unix socket datastores are not supported by troop yet (use host:port:weight)`},

		// Unknown keys.
		{"typo swap", with("  dyn_lisetn: 127.0.0.1:8101\n"),
			`x.yml:6: dyn_lisetn: unknown key (did you mean "dyn_listen"?)`},
		{"typo letter", with("  timout: 10\n"),
			`x.yml:6: timout: unknown key (did you mean "timeout"?)`},
		{"typo case", with("  Rack: r1\n"),
			`x.yml:6: Rack: unknown key (did you mean "rack"?)`},
		{"typo dash", with("  stats-listen: 127.0.0.1:1\n"),
			`x.yml:6: stats-listen: unknown key (did you mean "stats_listen"?)`},
		{"forgot troop_", with("  max_inflight: 10\n"),
			`x.yml:6: max_inflight: unknown key (did you mean "troop_max_inflight"?)`},
		{"troop typo", with("  troop_max_inflite: 10\n"),
			`x.yml:6: troop_max_inflite: unknown key (did you mean "troop_max_inflight"?)`},
		{"unknown far", with("  colour: blue\n"),
			`x.yml:6: colour: unknown key`},
		{"duplicate", with("  listen: 127.0.0.1:9999\n"),
			`x.yml:6: listen: set twice (first at line 2)`},

		// Wrong types.
		{"list for scalar", with("  timeout: [1, 2]\n"),
			`x.yml:6: timeout: want a single value, got a list`},
		{"mapping for scalar", with("  datacenter:\n    name: dc1\n"),
			`x.yml:7: datacenter: want a single value, got a mapping`},
		{"not a number", with("  timeout: soon\n"),
			`x.yml:6: timeout: "soon" is not a whole number of milliseconds`},
		{"fraction", with("  timeout: 1.5\n"),
			`x.yml:6: timeout: "1.5" is not a whole number of milliseconds`},
		{"negative", with("  dyn_connections: -5\n"),
			`x.yml:6: dyn_connections: "-5" is not a whole number`},
		{"hex", with("  backlog: 0x10\n"),
			`x.yml:6: backlog: "0x10" is not a whole number`},
		{"huge", with("  backlog: 99999999999\n"),
			`x.yml:6: backlog: 99999999999 is too large (at most 2147483647)`},
		{"zero timeout", with("  timeout: 0\n"),
			`x.yml:6: timeout: 0 ms is out of range (1 to 2147483647)`},
		{"zero connections", with("  dyn_connections: 0\n"),
			`x.yml:6: dyn_connections: 0 is out of range (1 to 2147483647)`},
		{"bool", with("  preconnect: yes\n"),
			`x.yml:6: preconnect: "yes" is not true or false`},
		{"null", with("  datacenter:\n"),
			`x.yml:6: datacenter: has no value`},
		{"empty string", with("  rack: \"\"\n"),
			`x.yml:6: rack: has no value`},
		{"scalar for list", strings.Replace(base, "servers:\n  - 127.0.0.1:6379:1", "servers: 127.0.0.1:6379:1\n  env: x", 1),
			`x.yml:3: servers: want a list (one "- entry" per line), got "127.0.0.1:6379:1"`},
		{"mapping in list", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - a: b\n"),
			`x.yml:8: dyn_seeds: each entry must be a single non-empty value`},
		{"bad name", with("  datacenter: dc:1\n"),
			`x.yml:6: datacenter: "dc:1" has ':'; use letters, digits, '.', '_' and '-'`},
		{"bad node name", with("  troop_node_name: node one\n"),
			`x.yml:6: troop_node_name: "node one" has ' '; use letters, digits, '.', '_' and '-'`},
		{"mbuf", with("  mbuf_size: 100\n"),
			`x.yml:6: mbuf_size: 100 is out of range (a multiple of 16 from 512 to 16777216, as in Dynomite)`},

		// Tokens.
		{"token too big", strings.Replace(base, "'0'", "4294967296", 1),
			`x.yml:5: tokens: token 4294967296 does not fit in 32 bits (the ring runs from 0 to 4294967295)`},
		{"token empty", strings.Replace(base, "'0'", "'1,,2'", 1),
			`x.yml:5: tokens: "1,,2" has an empty token (want numbers separated by commas)`},
		{"token repeated", strings.Replace(base, "'0'", "'7,7'", 1),
			`x.yml:5: tokens: token 7 is listed twice`},
		{"token word", strings.Replace(base, "'0'", "abc", 1),
			`x.yml:5: tokens: token "abc" is not a whole number`},
		{"token list", strings.Replace(base, "'0'", "[1, 2]", 1),
			`x.yml:5: tokens: want a single value, got a list`},

		// Required keys, reported at the pool's line.
		{"no listen", "dyn_o_mite:\n  servers:\n  - 127.0.0.1:6379:1\n  tokens: '0'\n",
			`x.yml:1: listen: missing: the address clients connect to, e.g. listen: 127.0.0.1:8102`},
		{"no tokens", "dyn_o_mite:\n  listen: 127.0.0.1:8102\n  servers:\n  - 127.0.0.1:6379:1\n",
			`x.yml:1: tokens: missing: this node's place on the ring, e.g. tokens: '0'`},
		{"no servers", "dyn_o_mite:\n  listen: 127.0.0.1:8102\n  tokens: '0'\n",
			`x.yml:1: servers: missing: the redis-server behind this node, e.g. servers: ["127.0.0.1:6379:1"]`},
		{"two servers", strings.Replace(base, "  - 127.0.0.1:6379:1\n", "  - 127.0.0.1:6379:1\n  - 127.0.0.1:6380:1\n", 1),
			`x.yml:5: servers: 2 entries; troop, like Dynomite, supports exactly one datastore per node`},
		{"seeds without dyn_listen", with("  dyn_seeds:\n  - 127.0.0.2:8101:r2:localdc:0\n"),
			`x.yml:1: dyn_listen: missing: with dyn_seeds, peers need the address to reach this node, e.g. dyn_listen: 127.0.0.1:8101`},

		// Addresses.
		{"no port", strings.Replace(base, "127.0.0.1:8102", "127.0.0.1", 1),
			`x.yml:2: listen: "127.0.0.1" is not host:port`},
		{"port zero", strings.Replace(base, "127.0.0.1:8102", "127.0.0.1:0", 1),
			`x.yml:2: listen: "127.0.0.1:0": port 0 is out of range (1 to 65535)`},
		{"port too big", strings.Replace(base, "127.0.0.1:6379", "127.0.0.1:65536", 1),
			`x.yml:4: servers: "127.0.0.1:65536": port 65536 is out of range (1 to 65535)`},
		{"port word", strings.Replace(base, "127.0.0.1:8102", "127.0.0.1:http", 1),
			`x.yml:2: listen: "127.0.0.1:http": port "http" is not a number`},
		{"bad host", strings.Replace(base, "127.0.0.1:8102", "local host:8102", 1),
			`x.yml:2: listen: "local host:8102": host "local host" is neither an IP address nor a host name`},
		{"bad ip", strings.Replace(base, "127.0.0.1:8102", "127.0.0.300:8102", 1),
			`x.yml:2: listen: "127.0.0.300:8102": host "127.0.0.300" is neither an IP address nor a host name`},
		{"empty host", strings.Replace(base, "127.0.0.1:8102", "\":8102\"", 1),
			`x.yml:2: listen: ":8102": the host is empty (use 0.0.0.0 to listen on every interface)`},
		{"listeners collide", with("  stats_listen: 0.0.0.0:8102\n"),
			`x.yml:6: stats_listen: 0.0.0.0:8102 overlaps listen 127.0.0.1:8102`},
		{"derived dyn_listen collides", strings.Replace(base, "127.0.0.1:8102", "127.0.0.1:8101", 1),
			`x.yml:2: listen: 127.0.0.1:8101 overlaps dyn_listen, which defaults to 127.0.0.1:8101; set dyn_listen`},
		{"server is listen", strings.Replace(base, "127.0.0.1:6379", "127.0.0.1:22222", 1),
			`x.yml:4: servers: 127.0.0.1:22222 is this node's own stats_listen address; it must be the redis-server's`},

		// Seeds and the ring.
		{"bad seed", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:rack2:1\n"),
			`x.yml:8: dyn_seeds: "127.0.0.2:8101:rack2:1" is not host:port:rack:dc:tokens`},
		{"seed bad token", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:r2:dc:x\n"),
			`x.yml:8: dyn_seeds: "127.0.0.2:8101:r2:dc:x": token "x" is not a whole number`},
		{"seed twice", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:r2:dc:0\n  - 127.0.0.2:8101:r3:dc:0\n"),
			`x.yml:9: dyn_seeds: 127.0.0.2:8101 is listed twice (also at line 8)`},
		{"seed is self", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.1:8101:r2:dc:0\n"),
			`x.yml:8: dyn_seeds: 127.0.0.1:8101 is this node's own dyn_listen address`},
		{"token shared with self", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:localrack:localdc:0\n"),
			`x.yml:8: dyn_seeds: 127.0.0.2:8101: token 0 in rack localrack of datacenter localdc is also owned by this node`},
		{"token shared by seeds", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:r2:dc:5\n  - 127.0.0.3:8101:r2:dc:5\n"),
			`x.yml:9: dyn_seeds: 127.0.0.3:8101: token 5 in rack r2 of datacenter dc is also owned by 127.0.0.2:8101`},

		// troop's keys.
		{"versions off with hints on", with("  troop_versions: false\n  troop_read_repair: false\n"),
			`x.yml:6: troop_versions: false needs troop_hinted_handoff: false, troop_read_repair: false and no troop_anti_entropy_interval_ms: they order replicas by version`},
		{"inflight per conn above node", with("  troop_max_inflight_per_conn: 100\n  troop_max_inflight: 10\n"),
			`x.yml:6: troop_max_inflight_per_conn: 100 is more than troop_max_inflight (10), the limit for the whole node`},
		{"zero grace", with("  troop_tombstone_grace_ms: 0\n"),
			`x.yml:6: troop_tombstone_grace_ms: 0 ms is out of range (1 to 2147483647)`},
		{"heartbeat too short", with("  troop_heartbeat_ms: 5\n"),
			`x.yml:6: troop_heartbeat_ms: 5 ms is out of range (10 to 2147483647)`},
		{"zero phi threshold", with("  troop_phi_threshold: 0\n"),
			`x.yml:6: troop_phi_threshold: 0 is out of range (1 to 2147483647)`},
		{"hinted handoff not a bool", with("  troop_hinted_handoff: yes\n"),
			`x.yml:6: troop_hinted_handoff: "yes" is not true or false`},
		{"zero repair rate", with("  troop_repair_keys_per_sec: 0\n"),
			`x.yml:6: troop_repair_keys_per_sec: 0 is out of range (1 to 2147483647)`},
		{"lineage export without an endpoint", with("  troop_lineage_export: http://\n"),
			`x.yml:6: troop_lineage_export: "http://": want a file or an OTLP/HTTP endpoint such as http://localhost:4318/v1/traces`},

		// The file's shape.
		{"empty", "", `x.yml: the config is empty; want one top-level key, the pool name (e.g. dyn_o_mite:), with the keys under it`},
		{"comment only", "# nothing\n", `x.yml: the config is empty; want one top-level key, the pool name (e.g. dyn_o_mite:), with the keys under it`},
		{"scalar root", "hello\n", `x.yml:1: want one top-level key, the pool name (e.g. dyn_o_mite:), with the keys under it`},
		{"list root", "- a\n", `x.yml:1: want one top-level key, the pool name (e.g. dyn_o_mite:), with the keys under it`},
		{"keys at top level", "listen: 127.0.0.1:8102\ntokens: '0'\n",
			`x.yml:2: "tokens" is a second top-level key; a config has exactly one, the pool name "listen" (indent "tokens" under it?)`},
		{"second pool", base + "auto_bootstrap: true\n",
			`x.yml:6: "auto_bootstrap" is a second top-level key; a config has exactly one, the pool name "dyn_o_mite" (indent "auto_bootstrap" under it?)`},
		{"pool without keys", "dyn_o_mite:\n", `x.yml:1: dyn_o_mite: want the node's keys under the pool name, indented`},
		{"pool with a value", "dyn_o_mite: 3\n", `x.yml:1: dyn_o_mite: want the node's keys under the pool name, indented`},
		{"two documents", base + "---\n" + base, `x.yml:6: a second YAML document; a config holds exactly one`},
		{"alias", "dyn_o_mite:\n  listen: &a 127.0.0.1:8102\n  dyn_listen: *a\n",
			`x.yml:3: dyn_listen: YAML aliases (*name) are not supported in a config`},
		{"custom tag", with("  env: !secret x\n"), `x.yml:6: env: YAML tag !secret is not supported in a config`},
		{"bad yaml", "dyn_o_mite:\n  listen: [\n", `x.yml:2: invalid YAML: did not find expected node content`},
		{"tab indent", "dyn_o_mite:\n\tlisten: 127.0.0.1:8102\n", `x.yml:2: invalid YAML: found character that cannot start any token`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in), "x.yml")
			if err == nil {
				t.Fatalf("no error; parsed %+v", c)
			}
			if c != nil {
				t.Errorf("got a config along with the error")
			}
			if err.Error() != tt.want {
				t.Errorf("got  %s\nwant %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error echoes a password: %s", err)
			}
		})
	}
}

// Every problem is reported, in file order, not just the first.
func TestSeveralErrors(t *testing.T) {
	in := "dyn_o_mite:\n  hash: md5\n  listne: 127.0.0.1:8102\n  timeout: x\n"
	_, err := Parse([]byte(in), "x.yml")
	want := `x.yml:2: hash: "md5" is not supported by troop yet (only "murmur")
x.yml:3: listne: unknown key (did you mean "listen"?)
x.yml:4: timeout: "x" is not a whole number of milliseconds`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

func TestAccepted(t *testing.T) {
	tests := []struct {
		name, in string
		check    func(t *testing.T, c *Config)
	}{
		{"any pool name", strings.Replace(base, "dyn_o_mite", "my pool", 1), func(t *testing.T, c *Config) {
			eq(t, "Pool", c.Pool, "my pool")
		}},
		{"odd pool name and env", strings.Replace(base, "dyn_o_mite:", "\"- a: #b\":", 1) + "  env: \" 'x' \\\"y\\\" \"\n  pem_key_file: 'yes'\n", func(t *testing.T, c *Config) {
			eq(t, "Pool", c.Pool, "- a: #b")
			eq(t, "Env", c.Env, ` 'x' "y" `)
			eq(t, "PemKeyFile", c.PemKeyFile, "yes")
		}},
		{"null-looking pool name", strings.Replace(base, "dyn_o_mite:", "~:", 1), func(t *testing.T, c *Config) {
			eq(t, "Pool", c.Pool, "~")
		}},
		{"int tokens", strings.Replace(base, "'0'", "101134286", 1), func(t *testing.T, c *Config) {
			eq(t, "Tokens", c.Tokens, []uint32{101134286})
		}},
		{"token list with spaces", strings.Replace(base, "'0'", "'1, 1001'", 1), func(t *testing.T, c *Config) {
			eq(t, "Tokens", c.Tokens, []uint32{1, 1001})
		}},
		{"max token", strings.Replace(base, "'0'", "4294967295", 1), func(t *testing.T, c *Config) {
			eq(t, "Tokens", c.Tokens, []uint32{4294967295})
		}},
		{"quoted number", with("  timeout: '250'\n"), func(t *testing.T, c *Config) {
			eq(t, "Timeout", c.Timeout, 250*time.Millisecond)
		}},
		{"level case", with("  read_consistency: Dc_Quorum\n"), func(t *testing.T, c *Config) {
			eq(t, "ReadConsistency", c.ReadConsistency, consistency.DCQuorum)
		}},
		{"only values any case", with("  hash: MURMUR\n  distribution: vnode\n  secure_server_option: None\n  dyn_seed_provider: simple_provider\n  enable_gossip: false\n  redis: true\n"), nil},
		{"ipv6", strings.Replace(base, "127.0.0.1:8102", "'[::1]:8102'", 1), func(t *testing.T, c *Config) {
			eq(t, "Listen", c.Listen, "[::1]:8102")
			eq(t, "DynListen", c.DynListen, "[::1]:8101")
		}},
		{"ipv6 unbracketed, as Dynomite splits", strings.Replace(base, "127.0.0.1:8102", "'::1:8102'", 1), func(t *testing.T, c *Config) {
			eq(t, "Listen", c.Listen, "[::1]:8102")
		}},
		{"host name and leading zero port", strings.Replace(base, "127.0.0.1:6379", "redis-1.lab:06379", 1), func(t *testing.T, c *Config) {
			eq(t, "Servers", c.Servers, []Server{{Addr: "redis-1.lab:6379", Weight: 1}})
		}},
		{"server and seed names dropped", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:r2:dc:3 peer2\n"), func(t *testing.T, c *Config) {
			eq(t, "Seeds", c.Seeds, []Seed{{Addr: "127.0.0.2:8101", Rack: "r2", DC: "dc", Tokens: []uint32{3}}})
		}},
		{"seed with token list", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:r2:dc:5,5005\n"), func(t *testing.T, c *Config) {
			eq(t, "Seed tokens", c.Seeds[0].Tokens, []uint32{5, 5005})
		}},
		{"same token in other racks", with("  dyn_listen: 127.0.0.1:8101\n  dyn_seeds:\n  - 127.0.0.2:8101:r2:localdc:0\n  - 127.0.0.3:8101:localrack:dc2:0\n"), nil},
		{"empty seed list", with("  dyn_seeds: []\n"), func(t *testing.T, c *Config) {
			eq(t, "Seeds", c.Seeds, []Seed(nil))
		}},
		{"listeners on different interfaces", with("  dyn_listen: 127.0.0.2:8102\n"), nil},
		{"ignored keys", with("  env: network\n  gos_interval: 0\n  stats_interval: 5000\n  backlog: 1024\n  client_connections: 0\n  dyn_port: 8101\n  max_msgs: 1000\n  recon_key_file: conf/recon_key.pem\n  recon_iv_file: conf/recon_iv.pem\n"), func(t *testing.T, c *Config) {
			eq(t, "Env", c.Env, "network")
			eq(t, "Backlog", c.Backlog, 1024)
			eq(t, "StatsInterval", c.StatsInterval, 5*time.Second)
		}},
		{"repair settings", with("  troop_heartbeat_ms: 100\n  troop_phi_threshold: 12\n  troop_data_dir: /var/lib/troop\n  troop_hinted_handoff: false\n  troop_max_hint_bytes: 1048576\n  troop_read_repair: false\n  troop_anti_entropy_interval_ms: 600000\n  troop_repair_keys_per_sec: 50\n"), func(t *testing.T, c *Config) {
			eq(t, "Heartbeat", c.Heartbeat, 100*time.Millisecond)
			eq(t, "PhiThreshold", c.PhiThreshold, 12)
			eq(t, "DataDir", c.DataDir, "/var/lib/troop")
			eq(t, "HintedHandoff", c.HintedHandoff, false)
			eq(t, "MaxHintBytes", c.MaxHintBytes, 1<<20)
			eq(t, "ReadRepair", c.ReadRepair, false)
			eq(t, "AntiEntropyInterval", c.AntiEntropyInterval, 10*time.Minute)
			eq(t, "RepairKeysPerSec", c.RepairKeysPerSec, 50)
		}},
		{"lineage export", with("  troop_lineage_export: /tmp/spans.json\n"), func(t *testing.T, c *Config) {
			if c.LineageExport != "/tmp/spans.json" {
				t.Errorf("LineageExport %q", c.LineageExport)
			}
		}},
		{"no planted bug", with("  troop_planted_bug: none\n"), func(t *testing.T, c *Config) {
			eq(t, "PlantedBug", c.PlantedBug, "")
		}},
		{"passwords and users", with("  requirepass: 'p:w'\n  redis_requirepass: rp\n  troop_redis_user: troop\n  troop_users:\n  - 'alice:full:a:b'\n  - 'bob:readonly:#5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8'\n"), func(t *testing.T, c *Config) {
			eq(t, "RequirePass", c.RequirePass, "p:w")
			eq(t, "RedisPassword", c.RedisPassword, "rp")
			eq(t, "RedisUser", c.RedisUser, "troop")
			eq(t, "Users", c.Users, []User{{Name: "alice", Access: AccessFull, Password: "a:b"},
				{Name: "bob", Access: AccessReadOnly, Password: "#5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"}})
			eq(t, "AuthRequired", c.AuthRequired(), true)
		}},
		{"tls", with("  secure_server_option: ALL\n  troop_tls_cert: n.crt\n  troop_tls_key: n.key\n  troop_tls_ca: ca.crt\n  troop_tls_client: true\n  troop_tls_admin: true\n"), func(t *testing.T, c *Config) {
			eq(t, "SecureServerOption", c.SecureServerOption, SecureAll)
			eq(t, "TLS", [3]string{c.TLSCert, c.TLSKey, c.TLSCA}, [3]string{"n.crt", "n.key", "ca.crt"})
			eq(t, "TLSClient", c.TLSClient, true)
			eq(t, "TLSAdmin", c.TLSAdmin, true)
		}},
		{"server_connections", with("  server_connections: 4\n  server_failure_limit: 2\n  auto_eject_hosts: false\n"), func(t *testing.T, c *Config) {
			eq(t, "ServerConnections", c.ServerConnections, 4)
			eq(t, "ServerFailureLimit", c.ServerFailureLimit, 2)
			eq(t, "AutoEjectHosts", c.AutoEjectHosts, false)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in), "x.yml")
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
			roundTrip(t, c)
		})
	}
}

// A program builds a config from Default, validates it and writes it; the
// file reads back as the same config plus the derived name.
func TestBuildValidateMarshal(t *testing.T) {
	c := Default()
	c.Source = "gen"
	c.Datacenter, c.Rack = "dc1", "r1"
	c.Listen, c.DynListen, c.StatsListen = "127.0.0.1:7001", "127.0.0.1:7101", "127.0.0.1:7201"
	c.Tokens = []uint32{0}
	c.Servers = []Server{{Addr: "127.0.0.1:6379", Weight: 1}}
	c.Seeds = []Seed{{Addr: "127.0.0.1:7102", Rack: "r2", DC: "dc1", Tokens: []uint32{0}}}
	c.WriteConsistency = consistency.DCQuorum
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(c.Marshal(), "gen")
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Marshal())
	}
	c.Name = "dc1-r1-7001"
	if !reflect.DeepEqual(got, c) {
		t.Errorf("got  %+v\nwant %+v", got, c)
	}
}

func TestValidateBuiltConfig(t *testing.T) {
	valid := func() *Config {
		c := Default()
		c.Listen = "127.0.0.1:7001"
		c.Tokens = []uint32{1}
		c.Servers = []Server{{Addr: "127.0.0.1:6379"}}
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"sub-millisecond", func(c *Config) { c.Timeout = 1500 * time.Microsecond },
			"config: timeout: 1.5ms is not a whole number of milliseconds"},
		{"non-canonical address", func(c *Config) { c.Listen = "::1:7001" },
			`config: listen: "::1:7001" is not in canonical form (write "[::1]:7001")`},
		{"bad level", func(c *Config) { c.ReadConsistency = 7 },
			"config: read_consistency: Level(7) is not a consistency level"},
		{"zero connections", func(c *Config) { c.DatastoreConnections = 0 },
			"config: datastore_connections: 0 is out of range (1 to 2147483647)"},
		{"memcached", func(c *Config) { c.DataStore = 1 },
			"config: data_store: 1 (Memcached) is not supported by troop yet (only 0, Redis)"},
		{"seed without tokens", func(c *Config) {
			c.DynListen = "127.0.0.1:7101"
			c.Seeds = []Seed{{Addr: "127.0.0.1:7102", Rack: "r", DC: "d"}}
		}, "config: dyn_seeds: 127.0.0.1:7102:r:d:: no tokens"},
		{"empty pool", func(c *Config) { c.Pool = "" }, "config: the pool name (the top-level key) is empty"},
		{"bad env", func(c *Config) { c.Env = "a\nb" }, `config: env: "a\nb" has the unprintable character U+000A`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.change(c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Errorf("got  %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestMarshalLayout(t *testing.T) {
	c, err := Load("testdata/rack1.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := `dyn_o_mite:
  datacenter: dc
  rack: rack1
  dyn_listen: 127.0.0.1:8101
  dyn_seeds:
    - 127.0.0.2:8101:rack2:dc:1383429731
    - 127.0.0.3:8101:rack3:dc:1383429731
  listen: 127.0.0.1:8102
  servers:
    - 127.0.0.1:22121:1
  tokens: '1383429731'
  data_store: 0
  stats_listen: 127.0.0.1:22222
  read_consistency: DC_ONE
  write_consistency: DC_ONE
  timeout: 5000
  pem_key_file: conf/dynomite.pem
`
	if got := string(c.Marshal()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestSuggest(t *testing.T) {
	for in, want := range map[string]string{
		"listne": "listen", "LISTEN": "listen", "dyn-seeds": "dyn_seeds", "tokns": "tokens",
		"node_name": "troop_node_name", "rak": "rack", "xyz": "", "server": "servers",
		strings.Repeat("a", 100): "",
	} {
		if got := suggest(in); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// roundTrip checks that Marshal's output parses to the same config and that
// writing it again gives the same bytes.
func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	out := c.Marshal()
	back, err := Parse(out, c.Source)
	if err != nil {
		t.Fatalf("Marshal output does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip changed the config\n got  %+v\n want %+v\n%s", back, c, out)
	}
	if again := back.Marshal(); string(again) != string(out) {
		t.Fatalf("Marshal is not stable\n%s\n---\n%s", out, again)
	}
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// The complete example in docs/config.md loads and round-trips.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Skip("docs/config.md not found:", err)
	}
	i := strings.LastIndex(string(doc), "```yaml\n")
	if i < 0 {
		t.Fatal("no yaml example in docs/config.md")
	}
	example, _, _ := strings.Cut(string(doc)[i+len("```yaml\n"):], "```")
	c, err := Parse([]byte(example), "docs/config.md example")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "Name", c.Name, "dc1-rack1-a")
	eq(t, "ReadConsistency", c.ReadConsistency, consistency.DCQuorum)
	roundTrip(t, c)
}

// A cluster of one node has no seeds: "dyn_seeds:" with no entries is an
// empty list, as a lab of one rack writes it; an empty servers list is
// still refused, as servers wants exactly one.
func TestEmptyList(t *testing.T) {
	c, err := Parse([]byte(with("  dyn_seeds:\n")), "x.yml")
	if err != nil {
		t.Fatalf("empty dyn_seeds: %v", err)
	}
	if len(c.Seeds) != 0 {
		t.Errorf("Seeds = %v, want none", c.Seeds)
	}
	_, err = Parse([]byte(strings.Replace(base, "servers:\n  - 127.0.0.1:6379:1", "servers:", 1)), "x.yml")
	if err == nil || !strings.Contains(err.Error(), "servers") {
		t.Errorf("empty servers: %v, want an error naming servers", err)
	}
}
