package suite

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/jsondur"
	"github.com/troop-lab/troop/internal/suggest"
	"github.com/troop-lab/troop/lab"
	"gopkg.in/yaml.v3"
)

// LoadConfig reads a suite config file over base (DefaultConfig or
// QuickConfig): keys the file sets replace base's, the rest stay. Every
// problem is an error naming the file, the line and the key, as the node's
// config errors do: an unknown key with the key it most likely meant
// ("did you mean"), a value of the wrong kind with the kind wanted, a key
// set twice, and what Validate finds, at the line of the key it is about.
func LoadConfig(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, err
	}
	return parseConfig(path, data, base)
}

// parseConfig is LoadConfig of data, the file at path.
func parseConfig(path string, data []byte, base Config) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// "yaml: line 3: did not find ..." as the other errors: FILE:3: ...
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if n, text, ok := strings.Cut(rest, ": "); ok {
				if _, err := strconv.Atoi(n); err == nil {
					return base, fmt.Errorf("%s:%s: %s", path, n, text)
				}
			}
		}
		return base, fmt.Errorf("%s: %s", path, msg)
	}
	cfg := base
	d := &configDecoder{file: path, lines: map[string]int{}}
	if len(doc.Content) > 0 {
		d.mapping(reflect.ValueOf(&cfg).Elem(), doc.Content[0], "")
	}
	if len(d.errs) > 0 {
		return base, errors.New(strings.Join(d.errs, "\n"))
	}
	if err := cfg.Validate(); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			if line, ok := d.lines[fe.key]; ok {
				return base, fmt.Errorf("%s:%d: %s", path, line, fe.msg)
			}
		}
		return base, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// configDecoder sets a Config from a YAML mapping, key by key, noting the
// line of each key (by its path, "register.writes") and every problem.
type configDecoder struct {
	file  string
	lines map[string]int
	errs  []string
}

func (d *configDecoder) fail(line int, key, format string, args ...any) {
	d.errs = append(d.errs, fmt.Sprintf("%s:%d: %s: %s", d.file, line, key, fmt.Sprintf(format, args...)))
}

var durationType = reflect.TypeFor[time.Duration]()

// mapping decodes node, a mapping, into the struct v; prefix is v's path.
func (d *configDecoder) mapping(v reflect.Value, node *yaml.Node, prefix string) {
	if node.Kind != yaml.MappingNode {
		if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
			return // an empty file, or "register:" with nothing under it
		}
		name := strings.TrimSuffix(prefix, ".")
		if name == "" {
			name = "the file"
		}
		d.fail(node.Line, name, "want keys and values (key: value), not %s", describeNode(node))
		return
	}
	fields := map[string]int{}
	var names []string
	for i := range v.NumField() {
		tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if tag != "" && tag != "-" {
			fields[tag] = i
			names = append(names, tag)
		}
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, val := node.Content[i], node.Content[i+1]
		key := prefix + k.Value
		fi, ok := fields[k.Value]
		if !ok {
			msg := "unknown key"
			if s := suggest.Closest(k.Value, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.fail(k.Line, key, "%s", msg)
			continue
		}
		if first, ok := d.lines[key]; ok {
			d.fail(k.Line, key, "set twice (first at line %d)", first)
			continue
		}
		d.lines[key] = k.Line
		f := v.Field(fi)
		if f.Kind() == reflect.Struct {
			d.mapping(f, val, key+".")
			continue
		}
		if err := val.Decode(f.Addr().Interface()); err != nil {
			d.fail(val.Line, key, "want %s, not %s", kindOf(f.Type()), describeNode(val))
		}
	}
}

// kindOf says in words what a field takes.
func kindOf(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 20s or 1m30s"
	case t.Kind() == reflect.Slice:
		return "a list such as [DC_ONE, DC_QUORUM]"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Uint64, reflect.Uint:
		return "a whole number, not negative"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "text"
}

// describeNode says what a YAML value is, for errors: a scalar quoted, a
// list or a mapping by its kind.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "keys and values"
	}
	if len(n.Value) > 40 {
		return strconv.Quote(n.Value[:40] + "...")
	}
	return strconv.Quote(n.Value)
}

// didYouMean is " (did you mean X?)" for the name among names that name
// most likely meant, or "".
func didYouMean(name string, names []string) string {
	if s := suggest.Closest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// fieldError is what Validate finds about one key, by its path in the
// config file ("register.writes"), so that LoadConfig can name its line.
type fieldError struct{ key, msg string }

func (e *fieldError) Error() string { return e.msg }

func fieldErr(key, format string, args ...any) error {
	return &fieldError{key: key, msg: fmt.Sprintf(format, args...)}
}

var levels = []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"}

// Validate says, in one sentence, what is wrong with the configuration.
func (c *Config) Validate() error {
	r := c.Register
	if err := c.Access.Check(); err != nil {
		return err
	}
	if c.Access != (bench.Access{}) && len(c.Target) == 0 && c.Cluster == "" {
		return errors.New("--db, --user, --password and --tls are for a cluster troop did not start (--target, --cluster): a lab troop starts needs none")
	}
	if c.Chaos != nil && len(c.Target) == 0 && c.Cluster == "" {
		return errors.New("--chaos-config is for a cluster troop did not start (--target, --cluster): a lab's faults come from the lab")
	}
	engine, err := lab.ParseEngine(c.Engine)
	if err != nil {
		return fmt.Errorf("--engine: %w", err)
	}
	if engine == lab.EngineDynomite && (c.Lab != "" || len(c.Target) > 0 || c.Cluster != "") {
		return errors.New("--engine is the engine of the lab the run starts: a --lab, --target or --cluster runs what it runs")
	}
	if c.Level != "" {
		if len(c.Target) == 0 && c.Cluster == "" && engine != lab.EngineDynomite {
			return errors.New("--level is for a cluster troop did not start (--target, --cluster) or a Dynomite lab (--engine dynomite): troop's levels are set per request (levels: in --config)")
		}
		if _, err := client.ParseLevel(c.Level); err != nil {
			return fmt.Errorf("--level: %w", err)
		}
	}
	if c.Cluster != "" && c.Access.DB != 0 {
		return errors.New("--db is for --target endpoints: a troop or Dynomite cluster (--cluster) has database 0 only")
	}
	switch {
	case c.Keys == 0:
		return fieldErr("keys", "keys must be at least 1")
	case c.ValueSize < 64:
		return fieldErr("value_size", "value_size %d is below 64 bytes, too small for troop bench's self-checking values", c.ValueSize)
	case c.ReadersPerNode < 0 || c.WritersPerNode < 0 || c.ReadersPerNode+c.WritersPerNode == 0:
		return fieldErr("readers_per_node", "readers_per_node and writers_per_node must not be negative, and not both 0")
	case c.Baseline <= 0 || c.Fault <= 0:
		return fieldErr("baseline", "baseline and fault must be positive durations such as 20s")
	case c.KillAt <= 0 || c.KillAt >= c.Fault:
		return fieldErr("kill_at", "kill_at %s must be inside the failure phase (fault %s)", c.KillAt, c.Fault)
	case c.ReplaceAfter < 0:
		return fieldErr("replace_after", "replace_after must not be negative")
	case c.ContendedKeys != 0 && c.ContendedKeys >= c.Keys:
		return fieldErr("contended_keys", "contended_keys %d must be fewer than keys %d (0: none)", c.ContendedKeys, c.Keys)
	case c.FaultRate < 0:
		return fieldErr("fault_rate", "fault_rate must not be negative (0 means 60%% of the baseline's DC_QUORUM throughput)")
	case c.LDFIMaxFaults < 0 || c.LDFIMaxFaults > 3:
		return fieldErr("ldfi_max_faults", "ldfi_max_faults %d: want 0 (skip the phase) to 3", c.LDFIMaxFaults)
	case len(c.Levels) == 0:
		return fieldErr("levels", "levels must name at least one consistency level")
	case c.Coordination && c.CoordinationDuration <= 0:
		return fieldErr("coordination_duration", "coordination_duration must be a positive duration such as 3s (each coordination workload's)")
	case r.Keys < 1 || r.Clients < 1 || r.Duration <= 0 || r.Timeout <= 0:
		return fieldErr("register", "register: keys, clients, duration and timeout must be positive")
	case r.Ops < 0:
		return fieldErr("register.ops", "register: ops must not be negative (0: no bound but the duration)")
	case r.Writes < 0 || r.Writes > 1:
		return fieldErr("register.writes", "register: writes %v must be a share between 0 and 1", r.Writes)
	}
	for _, l := range c.Levels {
		if !slices.Contains(levels, l) {
			return fieldErr("levels", "levels: %q is not one of %s%s", l, strings.Join(levels, ", "), didYouMean(l, levels))
		}
	}
	given := 0
	for _, s := range []string{c.Lab, strings.Join(c.Target, ","), c.Cluster} {
		if s != "" {
			given++
		}
	}
	if given > 1 {
		return errors.New("give at most one of --lab DIR, --target HOST:PORT[,...] and --cluster FILE|ADMIN_ADDR")
	}
	if c.RequestTimeout <= 0 {
		return fieldErr("request_timeout", "request_timeout must be positive")
	}
	for _, l := range c.Nemesis.Levels {
		if !slices.Contains(levels, l) {
			return fieldErr("nemesis.levels", "nemesis: levels: %q is not one of %s%s", l, strings.Join(levels, ", "), didYouMean(l, levels))
		}
	}
	if len(c.Nemesis.Faults) > 0 && (c.Nemesis.Fault < time.Second || c.Nemesis.Lead < 0 || c.Nemesis.Settle <= 0) {
		return fieldErr("nemesis", "nemesis: fault must be at least 1s, lead not negative and settle positive")
	}
	for _, f := range c.Nemesis.Faults {
		if _, err := nemesisAction(f, c.Nemesis.Fault, rand.New(rand.NewPCG(0, 0))); err != nil {
			return fieldErr("nemesis.faults", "%v", err)
		}
	}
	return nil
}

// The configurations are written with durations as text ("20s"), as the
// config file takes them, and read back in either form.

func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	return jsondur.Marshal(plain(c))
}

func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config
	return jsondur.Unmarshal(b, (*plain)(c))
}

func (c RegisterConfig) MarshalJSON() ([]byte, error) {
	type plain RegisterConfig
	return jsondur.Marshal(plain(c))
}

func (c *RegisterConfig) UnmarshalJSON(b []byte) error {
	type plain RegisterConfig
	return jsondur.Unmarshal(b, (*plain)(c))
}

func (c NemesisConfig) MarshalJSON() ([]byte, error) {
	type plain NemesisConfig
	return jsondur.Marshal(plain(c))
}

func (c *NemesisConfig) UnmarshalJSON(b []byte) error {
	type plain NemesisConfig
	return jsondur.Unmarshal(b, (*plain)(c))
}
