package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/internal/jsondur"
)

// Job names, as `troop bench JOB` takes them.
const (
	JobCRUD  = "crud"
	JobMixed = "mixed"
	JobWrite = "write"
)

// Config holds every option of a run; the CLI maps its flags onto it (the
// json names are the flag names). Zero values mean "the default": Defaults
// fills them in, Validate then rejects what cannot work.
type Config struct {
	Job          string        `json:"job"`          // crud, mixed, write, ycsb-a ... ycsb-f
	Keys         uint64        `json:"keys"`         // --keys: size of the key set
	KeySize      int           `json:"key-size"`     // --key-size: bytes per key, after the prefix
	KeyPrefix    string        `json:"key-prefix"`   // --key-prefix: put before every key
	ValueSize    Range         `json:"value-size"`   // --value-size: 1024 or 100-1900
	Distribution string        `json:"distribution"` // --distribution: uniform, zipfian, latest, hotspot; "" = the job's own
	Hotspot      HotspotSpec   `json:"hotspot"`      // --hotspot 0.2:0.8
	Ratio        Ratio         `json:"ratio"`        // --ratio 80:20, GET:SET for mixed
	Readers      int           `json:"readers"`      // --readers, per node, mixed
	Writers      int           `json:"writers"`      // --writers, per node, mixed
	Workers      int           `json:"workers"`      // --workers, per node, the other jobs
	Rate         float64       `json:"rate"`         // --rate ops/s for the whole run; 0 = closed loop
	Pipeline     Range         `json:"pipeline"`     // --pipeline 1, 10, 3-10
	Duration     time.Duration `json:"duration"`     // --duration per task
	Requests     int64         `json:"requests"`     // --requests per task
	Iterations   int           `json:"iterations"`   // --iterations
	Warmup       time.Duration `json:"warmup"`       // --warmup: unmeasured load before each job
	Seed         uint64        `json:"seed"`         // --seed
	Consistency  string        `json:"consistency"`  // --consistency, recorded and passed to cluster targets
	Staleness    int           `json:"staleness"`    // --staleness: older acknowledged writes a read may return
	Timeout      time.Duration `json:"timeout"`      // --timeout per request (and connect)
	Conns        int           `json:"conns"`        // --conns: links per target address

	// A run that several processes drive together: this one's part of it
	// (--shard I/N) and when the measured load begins (--start-at), the
	// same wall-clock time for every shard.
	Shard   Shard     `json:"shard,omitzero"`
	StartAt time.Time `json:"start-at,omitzero"`

	// How a plain RESP target is reached (--target; the credentials for
	// --cluster too).
	Access  Access `json:"access"`
	Cleanup bool   `json:"cleanup"`           // --cleanup: delete the keys the run wrote, at its end
	CSV     string `json:"csv,omitempty"`     // --csv: the table as CSV, to this file
	HdrOut  string `json:"hdr-out,omitempty"` // --hdr-out: per-second latency histograms, HdrHistogram log format

	Version  string    `json:"troop_version"` // set by the CLI from the build
	Progress io.Writer `json:"-"`             // progress line; nil = quiet (not a TTY)
	// HdrLog receives the per-second response-time histograms of each task
	// (--hdr-out), in HdrHistogram's interval log format; nil = none.
	HdrLog io.Writer `json:"-"`
}

// Ratio is a GET:SET mix such as 80:20.
type Ratio struct {
	Get int `json:"get"`
	Set int `json:"set"`
}

func (r Ratio) String() string { return fmt.Sprintf("%d:%d", r.Get, r.Set) }

// ParseRatio reads "80:20".
func ParseRatio(s string) (Ratio, error) {
	a, b, ok := strings.Cut(s, ":")
	g, err1 := strconv.Atoi(a)
	w, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || g < 0 || w < 0 || g+w == 0 {
		return Ratio{}, fmt.Errorf("ratio %q is not GET:SET such as 80:20", s)
	}
	return Ratio{g, w}, nil
}

// ParseHotspot reads "0.2:0.8": 20% of the keys get 80% of the operations.
func ParseHotspot(s string) (HotspotSpec, error) {
	a, b, ok := strings.Cut(s, ":")
	k, err1 := strconv.ParseFloat(a, 64)
	o, err2 := strconv.ParseFloat(b, 64)
	h := HotspotSpec{k, o}
	if !ok || err1 != nil || err2 != nil {
		return h, fmt.Errorf("hotspot %q is not KEYS:OPS such as 0.2:0.8", s)
	}
	return h, h.validate()
}

// Consistency levels, as the cluster targets take them.
var consistencyLevels = []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"}

// DefaultConfig is the seed's setup: 1M keys, 1 KB values, 80:20 with 32
// readers and 8 writers per node, one iteration of 60 s per task.
func DefaultConfig() Config {
	return Config{
		Job: JobMixed, Keys: 1_000_000, KeySize: 16, KeyPrefix: DefaultKeyPrefix, ValueSize: Range{1024, 1024},
		Hotspot: HotspotSpec{0.2, 0.8}, Ratio: Ratio{80, 20},
		Readers: 32, Writers: 8, Workers: 40, Pipeline: Range{1, 1},
		Duration: 60 * time.Second, Iterations: 1, Seed: 1,
		Consistency: "DC_ONE", Timeout: 5 * time.Second, Conns: 4,
	}
}

// DefaultKeyPrefix keeps a run's keys apart from the user's own, and
// findable: SCAN MATCH troop:bench:* lists them.
const DefaultKeyPrefix = "troop:bench:"

// maxKeyPrefix bounds --key-prefix: it goes into every key and value.
const maxKeyPrefix = 256

// Key appends the name of key i to dst: the prefix, then FormatKey's.
func (c *Config) Key(dst []byte, i uint64) []byte {
	return FormatKey(append(dst, c.KeyPrefix...), i, c.KeySize)
}

// Validate says, in one sentence, what is wrong with the configuration.
func (c *Config) Validate() error {
	if _, err := jobSpec(c.Job); err != nil {
		return err
	}
	switch {
	case c.Keys < 1:
		return fmt.Errorf("--keys must be at least 1")
	case c.KeySize < minKeySize(c.Keys):
		return fmt.Errorf("--key-size %d is too short to name %d keys: use at least %d", c.KeySize, c.Keys, minKeySize(c.Keys))
	case c.ValueSize.Min > c.ValueSize.Max:
		return fmt.Errorf("--value-size %s: the low end exceeds the high end", c.ValueSize)
	case len(c.KeyPrefix) > maxKeyPrefix:
		return fmt.Errorf("--key-prefix is %d bytes long: at most %d", len(c.KeyPrefix), maxKeyPrefix)
	case c.ValueSize.Min < MinValueSize(len(c.KeyPrefix)+c.KeySize):
		min := MinValueSize(len(c.KeyPrefix) + c.KeySize)
		return fmt.Errorf("--value-size %s is too small: every value carries a %d-byte header (key, version, checksum) for verification, so use at least %d", c.ValueSize, min, min)
	case c.ValueSize.Max > 512<<20:
		return fmt.Errorf("--value-size %s exceeds Redis's 512 MB limit", c.ValueSize)
	case c.Pipeline.Min < 1 || c.Pipeline.Max < c.Pipeline.Min:
		return fmt.Errorf("--pipeline %s must be a depth of at least 1, or a range such as 3-10", c.Pipeline)
	case c.Pipeline.Max > 10000:
		return fmt.Errorf("--pipeline %s is deeper than 10000", c.Pipeline)
	case c.Job == JobMixed && (c.Readers < 0 || c.Writers < 0 || c.Readers+c.Writers == 0):
		return fmt.Errorf("--readers and --writers must not be negative and not both 0")
	case c.Job == JobMixed && c.Ratio.Get+c.Ratio.Set == 0:
		return fmt.Errorf("--ratio must not be 0:0")
	case c.Job == JobMixed && (c.Ratio.Get > 0) != (c.Readers > 0):
		return fmt.Errorf("--ratio %s and --readers %d disagree: reads need readers and readers need reads", c.Ratio, c.Readers)
	case c.Job == JobMixed && (c.Ratio.Set > 0) != (c.Writers > 0):
		return fmt.Errorf("--ratio %s and --writers %d disagree: writes need writers and writers need writes", c.Ratio, c.Writers)
	case c.Job != JobMixed && c.Workers < 1:
		return fmt.Errorf("--workers must be at least 1")
	case c.Rate < 0:
		return fmt.Errorf("--rate must not be negative (0 runs closed loop)")
	case c.Duration <= 0 && c.Requests <= 0:
		return fmt.Errorf("give --duration or --requests: a task needs an end")
	case c.Duration > 0 && c.Requests > 0:
		return fmt.Errorf("give --duration or --requests, not both")
	case c.Requests < 0:
		return fmt.Errorf("--requests must not be negative")
	case c.Iterations < 1:
		return fmt.Errorf("--iterations must be at least 1")
	case c.Warmup < 0:
		return fmt.Errorf("--warmup must not be negative")
	case c.Staleness < 0:
		return fmt.Errorf("--staleness must not be negative")
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout must be positive")
	case c.Conns < 1:
		return fmt.Errorf("--conns must be at least 1")
	}
	if err := c.Shard.validate(); err != nil {
		return err
	}
	if c.Keys < uint64(c.Shard.of()) {
		return fmt.Errorf("--keys %d is fewer than the %d shards: each shard needs keys of its own", c.Keys, c.Shard.Count)
	}
	if err := c.Access.Check(); err != nil {
		return err
	}
	if c.Consistency != "" && !slices.Contains(consistencyLevels, c.Consistency) { // "": the target's own
		return fmt.Errorf("--consistency %q: use DC_ONE, DC_QUORUM or DC_SAFE_QUORUM", c.Consistency)
	}
	if c.Distribution != "" {
		if _, err := NewKeyDist(c.Distribution, 1, c.Hotspot); err != nil {
			return err
		}
	}
	if c.Distribution == Hotspot || c.Distribution == "" {
		if err := c.Hotspot.validate(); err != nil && c.Distribution == Hotspot {
			return err
		}
	}
	return nil
}

// MarshalJSON writes durations as text ("1m0s"), as the flags take them.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	return jsondur.Marshal(plain(c))
}

// UnmarshalJSON reads durations as text or, from older files, nanoseconds.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config
	return jsondur.Unmarshal(b, (*plain)(c))
}
