package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/troop-lab/troop/node/consistency"
)

// value is one key's value as found in the file.
type value struct {
	text  string // a scalar's text
	items []item // a sequence's entries (list keys only)
	line  int
}

type item struct {
	text string
	line int
}

// keySpec is everything troop knows about one key. A single table drives
// Parse, Validate, Default and Marshal, so they cannot drift apart.
type keySpec struct {
	name string
	list bool // the value is a YAML sequence of strings, not a scalar

	// set parses a value into c. Its errors say what is wrong with the
	// value; the caller adds source, line and key.
	set func(c *Config, v value) error
	// reset stores the default; nil when the zero value is the default.
	reset func(c *Config)
	// check validates the field as stored (nil: nothing to check). It runs
	// after Parse and in Validate, so ranges live in one place.
	check func(c *Config) error
	// emit returns the value Marshal writes, or nil to leave the key out
	// (because it holds its default, or because troop never writes it).
	emit func(c *Config) *yaml.Node
}

// keys lists every key troop accepts, in the order Marshal writes them,
// which follows Dynomite's example configs.
var keys = []keySpec{
	nameKey("datacenter", func(c *Config) *string { return &c.Datacenter }, DefaultDatacenter),
	nameKey("rack", func(c *Config) *string { return &c.Rack }, DefaultRack),
	addrKey("dyn_listen", func(c *Config) *string { return &c.DynListen }, ""),
	{
		name: "dyn_seed_provider",
		set: func(c *Config, v value) error {
			for _, p := range seedProviders {
				if strings.EqualFold(v.text, p) {
					c.SeedProvider = p
					if p == SimpleProvider {
						c.SeedProvider = "" // the default, which Marshal leaves out
					}
					return nil
				}
			}
			return fmt.Errorf("%q is not a seed provider (want %s)", v.text, strings.Join(seedProviders, ", "))
		},
		emit: func(c *Config) *yaml.Node {
			if c.SeedProvider == "" {
				return nil
			}
			return strNode(c.SeedProvider)
		},
	},
	{
		name: "dyn_seeds", list: true,
		set: func(c *Config, v value) error {
			for _, it := range v.items {
				s, err := parseSeed(it.text)
				if err != nil {
					return atLine(it.line, err.Error())
				}
				c.Seeds = append(c.Seeds, s)
			}
			return nil
		},
		emit: func(c *Config) *yaml.Node {
			if len(c.Seeds) == 0 {
				return nil
			}
			ss := make([]string, len(c.Seeds))
			for i, s := range c.Seeds {
				ss[i] = s.String()
			}
			return seqNode(ss)
		},
	},
	addrKey("listen", func(c *Config) *string { return &c.Listen }, ""),
	{
		name: "servers", list: true,
		set: func(c *Config, v value) error {
			for _, it := range v.items {
				s, err := parseServer(it.text)
				if err != nil {
					return atLine(it.line, err.Error())
				}
				c.Servers = append(c.Servers, s)
			}
			return nil
		},
		emit: func(c *Config) *yaml.Node {
			if len(c.Servers) == 0 {
				return nil
			}
			ss := make([]string, len(c.Servers))
			for i, s := range c.Servers {
				ss[i] = s.String()
			}
			return seqNode(ss)
		},
	},
	{
		name: "tokens",
		set: func(c *Config, v value) (err error) {
			c.Tokens, err = parseTokens(v.text)
			return err
		},
		// A quoted string, as Dynomite's examples write it: a bare list
		// "1,2" is a string anyway and a bare "1" an int, and quoting both
		// keeps one form.
		emit: func(c *Config) *yaml.Node {
			if len(c.Tokens) == 0 {
				return nil
			}
			n := strNode(formatTokens(c.Tokens))
			n.Style = yaml.SingleQuotedStyle
			return n
		},
	},
	{
		name: "data_store",
		set: func(c *Config, v value) (err error) {
			if c.DataStore, err = parseNum(v.text, ""); err != nil {
				return err
			}
			return checkDataStore(c.DataStore)
		},
		check: func(c *Config) error { return checkDataStore(c.DataStore) },
		emit:  func(c *Config) *yaml.Node { return intNode(c.DataStore) },
	},
	{
		// Dynomite's old spelling of data_store: true meant Redis.
		name: "redis",
		set: func(c *Config, v value) error {
			b, err := parseBool(v.text)
			if err != nil {
				return err
			}
			if !b {
				return fmt.Errorf("false (Memcached) is not supported by troop yet (only true, Redis)")
			}
			return nil
		},
	},
	addrKey("stats_listen", func(c *Config) *string { return &c.StatsListen }, DefaultStatsListen),
	levelKey("read_consistency", func(c *Config) *consistency.Level { return &c.ReadConsistency }),
	levelKey("write_consistency", func(c *Config) *consistency.Level { return &c.WriteConsistency }),
	msKey("timeout", func(c *Config) *time.Duration { return &c.Timeout }, 1, DefaultTimeout, true),
	onlyKey("hash", "murmur"),
	onlyKey("distribution", "vnode"),
	{
		name: "secure_server_option",
		set: func(c *Config, v value) error {
			c.SecureServerOption = strings.ToLower(v.text)
			return checkSecureOption(c.SecureServerOption)
		},
		reset: func(c *Config) { c.SecureServerOption = SecureNone },
		check: func(c *Config) error { return checkSecureOption(c.SecureServerOption) },
		emit: func(c *Config) *yaml.Node {
			if c.SecureServerOption == SecureNone {
				return nil
			}
			return strNode(c.SecureServerOption)
		},
	},
	{
		name: "enable_gossip",
		set: func(c *Config, v value) error {
			b, err := parseBool(v.text)
			if err != nil {
				return err
			}
			if b {
				return fmt.Errorf("true is not supported by troop yet (troop has no gossip: list every other node in dyn_seeds)")
			}
			return nil
		},
	},

	// Connection and failure tuning, recorded for the node.
	boolKey("preconnect", func(c *Config) *bool { return &c.Preconnect }, true),
	boolKey("auto_eject_hosts", func(c *Config) *bool { return &c.AutoEjectHosts }, true),
	msKey("server_retry_timeout", func(c *Config) *time.Duration { return &c.ServerRetryTimeout }, 1, 10000*time.Millisecond, false),
	intKey("server_failure_limit", func(c *Config) *int { return &c.ServerFailureLimit }, 1, 3),
	intKey("server_connections", func(c *Config) *int { return &c.ServerConnections }, 1, 1),
	intKey("datastore_connections", func(c *Config) *int { return &c.DatastoreConnections }, 1, 1),
	intKey("local_peer_connections", func(c *Config) *int { return &c.LocalPeerConnections }, 1, 1),
	intKey("remote_peer_connections", func(c *Config) *int { return &c.RemotePeerConnections }, 1, 1),
	intKey("dyn_connections", func(c *Config) *int { return &c.DynConnections }, 1, 100),
	msKey("dyn_read_timeout", func(c *Config) *time.Duration { return &c.DynReadTimeout }, 1, 10000*time.Millisecond, false),
	msKey("dyn_write_timeout", func(c *Config) *time.Duration { return &c.DynWriteTimeout }, 1, 10000*time.Millisecond, false),

	// Accepted and kept, with no effect in troop.
	textKey("env", func(c *Config) *string { return &c.Env }),
	msKey("gos_interval", func(c *Config) *time.Duration { return &c.GosInterval }, 0, 0, false),
	msKey("stats_interval", func(c *Config) *time.Duration { return &c.StatsInterval }, 0, 0, false),
	withCheck(intKey("mbuf_size", func(c *Config) *int { return &c.MbufSize }, 0, 0), func(c *Config) error {
		// Dynomite's own limits, so that a file troop accepts still
		// starts Dynomite.
		if n := c.MbufSize; n != 0 && (n < 512 || n > 16<<20 || n%16 != 0) {
			return fmt.Errorf("%d is out of range (a multiple of 16 from 512 to %d, as in Dynomite)", n, 16<<20)
		}
		return nil
	}),
	intKey("max_msgs", func(c *Config) *int { return &c.MaxMsgs }, 0, 0),
	intKey("backlog", func(c *Config) *int { return &c.Backlog }, 0, 0),
	intKey("client_connections", func(c *Config) *int { return &c.ClientConns }, 0, 0),
	withCheck(intKey("dyn_port", func(c *Config) *int { return &c.DynPort }, 0, 0), func(c *Config) error {
		return checkRange(c.DynPort, 0, 65535)
	}),
	withCheck(textKey("hash_tag", func(c *Config) *string { return &c.HashTag }), func(c *Config) error {
		return checkHashTag(c.HashTag)
	}),
	textKey("pem_key_file", func(c *Config) *string { return &c.PemKeyFile }),
	textKey("recon_key_file", func(c *Config) *string { return &c.ReconKeyFile }),
	textKey("recon_iv_file", func(c *Config) *string { return &c.ReconIVFile }),

	// Dynomite keys whose every value changes behaviour troop lacks.
	rejectKey("conn_msg_rate", "troop does not rate-limit connections"),
	rejectKey("dyn_secure_listen", "troop does not encrypt peer traffic"),

	// Passwords (docs/security.md): requirepass is the default user's, as
	// in Redis; redis_requirepass is the one the node gives its own
	// redis-server, as in Dynomite.
	passwordKey("requirepass", func(c *Config) *string { return &c.RequirePass }, true),
	passwordKey("redis_requirepass", func(c *Config) *string { return &c.RedisPassword }, false),

	// troop's own keys.
	{
		name: "troop_node_name",
		set:  func(c *Config, v value) error { c.Name = v.text; return nil },
		check: func(c *Config) error {
			if c.Name == "" {
				return nil // derived by Parse
			}
			return checkName(c.Name)
		},
		emit: func(c *Config) *yaml.Node {
			if c.Name == "" || c.Name == deriveName(c) {
				return nil
			}
			return strNode(c.Name)
		},
	},
	{
		name: "troop_users", list: true,
		set: func(c *Config, v value) error {
			for _, it := range v.items {
				u, err := parseUser(it.text)
				if err != nil {
					return atLine(it.line, err.Error())
				}
				c.Users = append(c.Users, u)
			}
			return nil
		},
		check: checkUsers,
		emit: func(c *Config) *yaml.Node {
			if len(c.Users) == 0 {
				return nil
			}
			ss := make([]string, len(c.Users))
			for i, u := range c.Users {
				ss[i] = u.String()
			}
			return seqNode(ss)
		},
	},
	withCheck(textKey("troop_redis_user", func(c *Config) *string { return &c.RedisUser }), func(c *Config) error {
		switch {
		case c.RedisUser == "":
			return nil
		case c.RedisPassword == "":
			return fmt.Errorf("%s is set without redis_requirepass, the password to give with it", c.RedisUser)
		}
		return checkUserName(c.RedisUser)
	}),
	textKey("troop_tls_cert", func(c *Config) *string { return &c.TLSCert }),
	textKey("troop_tls_key", func(c *Config) *string { return &c.TLSKey }),
	textKey("troop_tls_ca", func(c *Config) *string { return &c.TLSCA }),
	boolKey("troop_tls_client", func(c *Config) *bool { return &c.TLSClient }, false),
	boolKey("troop_tls_admin", func(c *Config) *bool { return &c.TLSAdmin }, false),
	passwordKey("troop_admin_token", func(c *Config) *string { return &c.AdminToken }, true),
	withCheck(boolKey("troop_admin_protect_reads", func(c *Config) *bool { return &c.AdminProtectReads }, false), func(c *Config) error {
		if c.AdminProtectReads && c.AdminToken == "" {
			return fmt.Errorf("true needs troop_admin_token, the token the read-only endpoints would then want")
		}
		return nil
	}),
	boolKey("troop_pprof", func(c *Config) *bool { return &c.Pprof }, false),
	intKey("troop_client_loops", func(c *Config) *int { return &c.ClientLoops }, 0, 0),
	intKey("troop_max_inflight_per_conn", func(c *Config) *int { return &c.MaxInflightPerConn }, 1, DefaultMaxInflightPerConn),
	intKey("troop_max_inflight", func(c *Config) *int { return &c.MaxInflight }, 1, DefaultMaxInflight),
	intKey("troop_max_request_bytes", func(c *Config) *int { return &c.MaxRequestBytes }, 1, DefaultMaxRequestBytes),
	intKey("troop_max_memory_mb", func(c *Config) *int { return &c.MaxMemoryMB }, MinMaxMemoryMB, DefaultMaxMemoryMB),
	msKey("troop_tombstone_grace_ms", func(c *Config) *time.Duration { return &c.TombstoneGrace }, 1, DefaultTombstoneGrace, false),
	msKey("troop_heartbeat_ms", func(c *Config) *time.Duration { return &c.Heartbeat }, 10, DefaultHeartbeat, false),
	intKey("troop_phi_threshold", func(c *Config) *int { return &c.PhiThreshold }, 1, DefaultPhiThreshold),
	textKey("troop_data_dir", func(c *Config) *string { return &c.DataDir }),
	boolKey("troop_hinted_handoff", func(c *Config) *bool { return &c.HintedHandoff }, true),
	intKey("troop_max_hint_bytes", func(c *Config) *int { return &c.MaxHintBytes }, 1, DefaultMaxHintBytes),
	boolKey("troop_read_repair", func(c *Config) *bool { return &c.ReadRepair }, true),
	msKey("troop_anti_entropy_interval_ms", func(c *Config) *time.Duration { return &c.AntiEntropyInterval }, 0, DefaultAntiEntropyInterval, false),
	intKey("troop_repair_keys_per_sec", func(c *Config) *int { return &c.RepairKeysPerSec }, 1, DefaultRepairKeysPerSec),
	intKey("troop_handoff_keys_per_sec", func(c *Config) *int { return &c.HandoffKeysPerSec }, 1, DefaultHandoffKeysPerSec),
	boolKey("troop_versions", func(c *Config) *bool { return &c.Versions }, true),
	boolKey("troop_allow_flush", func(c *Config) *bool { return &c.AllowFlush }, false),
	boolKey("troop_join", func(c *Config) *bool { return &c.Join }, false),
	intKey("troop_version_cache_keys", func(c *Config) *int { return &c.VersionCacheKeys }, 0, DefaultVersionCacheKeys),
	{
		name:  "troop_lineage_export",
		set:   func(c *Config, v value) error { c.LineageExport = v.text; return checkLineageExport(v.text) },
		check: func(c *Config) error { return checkLineageExport(c.LineageExport) },
		emit: func(c *Config) *yaml.Node {
			if c.LineageExport == "" {
				return nil
			}
			return strNode(c.LineageExport)
		},
	},
	{
		name: "troop_planted_bug",
		set: func(c *Config, v value) error {
			c.PlantedBug = v.text
			if strings.EqualFold(v.text, "none") {
				c.PlantedBug = ""
			}
			return checkPlantedBug(c.PlantedBug)
		},
		check: func(c *Config) error { return checkPlantedBug(c.PlantedBug) },
		emit: func(c *Config) *yaml.Node {
			if c.PlantedBug == "" {
				return nil
			}
			return strNode(c.PlantedBug)
		},
	},
}

// checkLineageExport accepts "" (off), a file (PATH or file:PATH), or an
// OTLP/HTTP endpoint (http:// or https:// URL, or otlp:URL); docs/config.md.
func checkLineageExport(s string) error {
	if err := checkText(s); err != nil {
		return err
	}
	rest, otlp := strings.CutPrefix(s, "otlp:")
	switch {
	case s == "file:" || rest == "http://" || rest == "https://",
		otlp && !strings.HasPrefix(rest, "http://") && !strings.HasPrefix(rest, "https://"):
		return fmt.Errorf("%q: want a file or an OTLP/HTTP endpoint such as http://localhost:4318/v1/traces", s)
	}
	return nil
}

// checkPlantedBug accepts "" (none) and, in a build that has them, the
// planted bugs troop knows.
func checkPlantedBug(s string) error {
	switch {
	case s == "":
		return nil
	case !PlantedBugsBuilt:
		return fmt.Errorf("%q: this troop is built without planted bugs, deliberate defects for testing checkers (make test builds troop with them: go build -tags planted)", s)
	case slices.Contains(PlantedBugs, s):
		return nil
	}
	return fmt.Errorf("%q is not a planted bug troop knows (want none, %s or %s)", s,
		strings.Join(PlantedBugs[:len(PlantedBugs)-1], ", "), PlantedBugs[len(PlantedBugs)-1])
}

// keyIndex finds a spec by name.
var keyIndex = func() map[string]*keySpec {
	m := make(map[string]*keySpec, len(keys))
	for i := range keys {
		m[keys[i].name] = &keys[i]
	}
	return m
}()

func checkDataStore(n int) error {
	switch n {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("1 (Memcached) is not supported by troop yet (only 0, Redis)")
	}
	return fmt.Errorf("%d is not a data store troop knows (only 0, Redis; Dynomite also has 1, Memcached)", n)
}

// nameKey is a datacenter or rack name, always written.
func nameKey(name string, field func(*Config) *string, def string) keySpec {
	return keySpec{
		name:  name,
		set:   func(c *Config, v value) error { *field(c) = v.text; return nil },
		reset: func(c *Config) { *field(c) = def },
		check: func(c *Config) error { return checkPlace(*field(c)) },
		emit:  func(c *Config) *yaml.Node { return strNode(*field(c)) },
	}
}

// addrKey is a listener address. An empty one is either derived (dyn_listen)
// or reported missing by the cross-key checks (listen).
func addrKey(name string, field func(*Config) *string, def string) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) (err error) {
			*field(c), err = parseAddr(v.text)
			return err
		},
		reset: func(c *Config) { *field(c) = def },
		check: func(c *Config) error {
			if *field(c) == "" {
				return nil
			}
			return checkAddr(*field(c))
		},
		emit: func(c *Config) *yaml.Node {
			if *field(c) == "" {
				return nil
			}
			return strNode(*field(c))
		},
	}
}

// textKey is a free-form string troop keeps but does not use.
func textKey(name string, field func(*Config) *string) keySpec {
	return keySpec{
		name:  name,
		set:   func(c *Config, v value) error { *field(c) = v.text; return nil },
		check: func(c *Config) error { return checkText(*field(c)) },
		emit: func(c *Config) *yaml.Node {
			if *field(c) == "" {
				return nil
			}
			return strNode(*field(c))
		},
	}
}

// intKey is a count in [min, maxNum]; written when it is not def.
func intKey(name string, field func(*Config) *int, min, def int) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) (err error) {
			*field(c), err = parseNum(v.text, "")
			return err
		},
		reset: func(c *Config) { *field(c) = def },
		check: func(c *Config) error { return checkRange(*field(c), min, maxNum) },
		emit: func(c *Config) *yaml.Node {
			if *field(c) == def {
				return nil
			}
			return intNode(*field(c))
		},
	}
}

// msKey is a duration written in milliseconds; written when always is set
// or it is not def.
func msKey(name string, field func(*Config) *time.Duration, min int, def time.Duration, always bool) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) error {
			n, err := parseNum(v.text, "milliseconds")
			*field(c) = msOf(n)
			return err
		},
		reset: func(c *Config) { *field(c) = def },
		check: func(c *Config) error { return checkMillis(*field(c), min) },
		emit: func(c *Config) *yaml.Node {
			if !always && *field(c) == def {
				return nil
			}
			return intNode(int(*field(c) / time.Millisecond))
		},
	}
}

// boolKey is true or false; written when it is not def.
func boolKey(name string, field func(*Config) *bool, def bool) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) (err error) {
			*field(c), err = parseBool(v.text)
			return err
		},
		reset: func(c *Config) { *field(c) = def },
		emit: func(c *Config) *yaml.Node {
			if *field(c) == def {
				return nil
			}
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(*field(c))}
		},
	}
}

// levelKey is a consistency level, always written.
func levelKey(name string, field func(*Config) *consistency.Level) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) error {
			if strings.EqualFold(v.text, "DC_EACH_SAFE_QUORUM") {
				return fmt.Errorf("%q is not supported by troop yet (only DC_ONE, DC_QUORUM and DC_SAFE_QUORUM)", v.text)
			}
			l, err := consistency.ParseLevel(v.text)
			if err != nil {
				return err
			}
			*field(c) = l
			return nil
		},
		reset: func(c *Config) { *field(c) = consistency.DCOne },
		check: func(c *Config) error {
			l := *field(c)
			if _, err := consistency.ParseLevel(l.String()); err != nil {
				return fmt.Errorf("%v is not a consistency level", l)
			}
			return nil
		},
		emit: func(c *Config) *yaml.Node { return strNode(field(c).String()) },
	}
}

// onlyKey is a Dynomite choice of which troop implements one value, the
// default; any other is refused. troop keeps nothing: the value is implied.
func onlyKey(name, only string) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) error {
			if strings.EqualFold(v.text, only) {
				return nil
			}
			return fmt.Errorf("%q is not supported by troop yet (only %q)", v.text, only)
		},
	}
}

// rejectKey is a Dynomite key troop refuses whatever its value.
func rejectKey(name string, why string) keySpec {
	return keySpec{
		name: name,
		set: func(c *Config, v value) error {
			return fmt.Errorf("%q is not supported by troop yet (%s)", v.text, why)
		},
	}
}

// passwordKey is a password; "" is none. Its errors never quote it. hashOK
// accepts a "#"-prefixed SHA-256 in its place, for a password troop checks
// rather than sends.
func passwordKey(name string, field func(*Config) *string, hashOK bool) keySpec {
	check := func(c *Config) error {
		if *field(c) == "" {
			return nil
		}
		return checkPassword(*field(c), hashOK)
	}
	return keySpec{
		name:  name,
		set:   func(c *Config, v value) error { *field(c) = v.text; return check(c) },
		check: check,
		emit: func(c *Config) *yaml.Node {
			if *field(c) == "" {
				return nil
			}
			return strNode(*field(c))
		},
	}
}

// withCheck replaces a spec's check.
func withCheck(k keySpec, check func(*Config) error) keySpec {
	k.check = check
	return k
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func intNode(n int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(n)}
}

func seqNode(ss []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, s := range ss {
		n.Content = append(n.Content, strNode(s))
	}
	return n
}
