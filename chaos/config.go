package chaos

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Mode says whether groups take part unless they opt out, or only when they
// opt in. It is the default of every group's enabled.
type Mode string

// The modes.
const (
	OptIn  Mode = "opt-in"  // a group is enabled only with enabled: true
	OptOut Mode = "opt-out" // a group is enabled unless enabled: false
)

// Defaults of the config, as documented in docs/chaos.md.
const (
	DefaultMode                  = OptIn
	DefaultLeashed               = true
	DefaultMeanTimeBetweenKills  = 5.0 // work days, Chaos Monkey 2's default
	DefaultMinWorkDaysBetween    = 1   // at most one kill a work day
	DefaultMaxTerminationsPerDay = 1
	DefaultTemporaryDuration     = time.Minute // of pause and burn-cpu
	MaxTemporaryDuration         = time.Hour
	DefaultNamespace             = "default"
	minTokenLen                  = 16
	maxDailyRate                 = 100 // kills a day; mean_time_between_kills >= 0.01
	maxPerDayLimit               = 1000
)

// Config is a parsed and validated `troop chaos` config.
type Config struct {
	Source  string
	Leashed bool   // dry run: plan and record, never act
	Mode    Mode   // the default of each group's Enabled
	Token   string // bearer token of the REST API's POSTs
	// OnDemand enables POST /api/v1/chaos.
	OnDemand bool
	// DB is the records database, relative to the config's directory
	// unless absolute (see Path); its leases go in DB + ".leases".
	DB        string
	Retention time.Duration // records older than this are pruned; 0 keeps them
	Outage    Outage
	Calendar  Calendar
	Groups    []Group
}

// Group is a set of instances the monkey treats as one: it kills at most one
// of them per trial, and rates, gaps and maximums are counted per group.
type Group struct {
	Name     string
	Backend  Backend
	Selector Selector
	Enabled  bool
	// Exactly one of Probability and MeanTimeBetweenKills is set (> 0).
	Probability           float64 // per work day, Simian Army's setting
	MeanTimeBetweenKills  float64 // in work days, Chaos Monkey 2's setting
	MinTimeBetweenKills   Gap
	MaxTerminationsPerDay int
	Types                 []Action // chosen uniformly
	Exceptions            []Exception
}

// Gap is the minimum time between two kills of a group: a number of work
// days (Chaos Monkey 2's unit) or, when Duration is set, elapsed time.
type Gap struct {
	WorkDays int
	Duration time.Duration
}

func (g Gap) String() string {
	if g.Duration > 0 {
		return g.Duration.String()
	}
	if g.WorkDays == 1 {
		return "1 work day"
	}
	return strconv.Itoa(g.WorkDays) + " work days"
}

// DailyRate is the expected number of kills per work day: the probability,
// or 1/mean_time_between_kills.
func (g *Group) DailyRate() float64 {
	if g.Probability > 0 {
		return g.Probability
	}
	return 1 / g.MeanTimeBetweenKills
}

// Trials is the number of coin flips per work day: one while the daily rate
// is at most 1, else ceil(rate), each with probability rate/trials, so
// that the expected kills per day stay exactly the rate.
func (g *Group) Trials() (n int, p float64) {
	r := g.DailyRate()
	n = max(1, int(math.Ceil(r-1e-9)))
	return n, r / float64(n)
}

// Excepted reports whether one of the group's exceptions covers inst.
func (g *Group) Excepted(inst Instance) bool {
	for _, e := range g.Exceptions {
		if e.Matches(inst) {
			return true
		}
	}
	return false
}

// Group returns the named group, or nil.
func (c *Config) Group(name string) *Group {
	for i := range c.Groups {
		if c.Groups[i].Name == name {
			return &c.Groups[i]
		}
	}
	return nil
}

// ReadFileFunc reads a file the config names (the iCalendar file). Relative
// names are as written in the config.
type ReadFileFunc func(name string) ([]byte, error)

// LoadConfig reads and parses the config at path. It is the package's one
// edge: it reads the file and the iCalendar file the config names, relative
// to the config's directory.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	return ParseConfig(data, path, func(name string) ([]byte, error) {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return os.ReadFile(name)
	})
}

// ConfigError is one problem in a config. It reads
// "source:line: path: message", e.g.
// "chaos.yml:14: groups[1].mean_time_between_kills: must be > 0 work days".
type ConfigError struct {
	Source string
	Line   int    // 1-based; 0 when unknown
	Path   string // e.g. groups[1].types[0]; "" for the whole file
	Msg    string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// joinConfigErrors returns nil, the one error, or all of them joined one per
// line: errors.As finds the first *ConfigError either way.
func joinConfigErrors(errs []*ConfigError) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}
