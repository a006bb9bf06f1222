package suite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/internal/jsondur"
	"gopkg.in/yaml.v3"
)

// LoadConfig reads a suite config file over base (DefaultConfig or
// QuickConfig): keys the file sets replace base's, the rest stay. Unknown
// keys and values of the wrong type are errors naming the file and line.
func LoadConfig(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, err
	}
	cfg := base
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return base, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := cfg.Validate(); err != nil {
		return base, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

var levels = []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"}

// Validate says, in one sentence, what is wrong with the configuration.
func (c *Config) Validate() error {
	r := c.Register
	switch {
	case c.Keys == 0:
		return errors.New("keys must be at least 1")
	case c.ValueSize < 64:
		return fmt.Errorf("value_size %d is below 64 bytes, too small for troop bench's self-checking values", c.ValueSize)
	case c.ReadersPerNode < 0 || c.WritersPerNode < 0 || c.ReadersPerNode+c.WritersPerNode == 0:
		return errors.New("readers_per_node and writers_per_node must not be negative, and not both 0")
	case c.Baseline <= 0 || c.Fault <= 0:
		return errors.New("baseline and fault must be positive durations such as 20s")
	case c.KillAt <= 0 || c.KillAt >= c.Fault:
		return fmt.Errorf("kill_at %s must be inside the failure phase (fault %s)", c.KillAt, c.Fault)
	case c.ReplaceAfter < 0:
		return errors.New("replace_after must not be negative")
	case c.ContendedKeys != 0 && c.ContendedKeys >= c.Keys:
		return fmt.Errorf("contended_keys %d must be fewer than keys %d (0: none)", c.ContendedKeys, c.Keys)
	case c.FaultRate < 0:
		return errors.New("fault_rate must not be negative (0 means 60% of the baseline's DC_QUORUM throughput)")
	case c.LDFIMaxFaults < 0 || c.LDFIMaxFaults > 3:
		return fmt.Errorf("ldfi_max_faults %d: want 0 (skip the phase) to 3", c.LDFIMaxFaults)
	case len(c.Levels) == 0:
		return errors.New("levels must name at least one consistency level")
	case r.Keys < 1 || r.Clients < 1 || r.Duration <= 0 || r.Timeout <= 0:
		return errors.New("register: keys, clients, duration and timeout must be positive")
	case r.Ops < 0:
		return errors.New("register: ops must not be negative (0: no bound but the duration)")
	case r.Writes < 0 || r.Writes > 1:
		return fmt.Errorf("register: writes %v must be a share between 0 and 1", r.Writes)
	}
	for _, l := range c.Levels {
		if !slices.Contains(levels, l) {
			return fmt.Errorf("levels: %q is not one of %s", l, strings.Join(levels, ", "))
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
		return errors.New("request_timeout must be positive")
	}
	for _, l := range c.Nemesis.Levels {
		if !slices.Contains(levels, l) {
			return fmt.Errorf("nemesis: levels: %q is not one of %s", l, strings.Join(levels, ", "))
		}
	}
	if len(c.Nemesis.Faults) > 0 && (c.Nemesis.Fault < time.Second || c.Nemesis.Lead < 0 || c.Nemesis.Settle <= 0) {
		return errors.New("nemesis: fault must be at least 1s, lead not negative and settle positive")
	}
	for _, f := range c.Nemesis.Faults {
		if _, err := nemesisAction(f, c.Nemesis.Fault, rand.New(rand.NewPCG(0, 0))); err != nil {
			return err
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
