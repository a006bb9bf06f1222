package suite

import (
	"github.com/troop-lab/troop/internal/confdiff"
)

// RunSummary is what the report's trend shows of one run: the baseline's
// throughput and p99 per level, and the verdict.
type RunSummary struct {
	ID      string         `json:"id"` // the run's directory name, <time>-<seed>
	Started string         `json:"started"`
	Seed    uint64         `json:"seed"`
	Levels  []LevelFigures `json:"levels"`
	OK      bool           `json:"ok"`
	Broke   int            `json:"broke"`
	Stopped bool           `json:"stopped,omitempty"` // interrupted: a partial run
}

// LevelFigures are one level's baseline figures: requests per second over
// every task, and the worst task's p99 response time.
type LevelFigures struct {
	Level     string  `json:"level"`
	ReqPerSec float64 `json:"req_per_sec"`
	P99ms     float64 `json:"p99_ms"`
}

// Summarize sums a report up for the trend of later ones.
func Summarize(id string, rep *Report) RunSummary {
	s := RunSummary{ID: id, Started: rep.Started.Format("2006-01-02 15:04"), Seed: rep.Seed,
		OK: rep.Verdict.OK, Broke: len(rep.Verdict.Broke), Stopped: rep.Stopped != ""}
	for _, b := range rep.Baseline {
		f := LevelFigures{Level: b.Level}
		for _, r := range b.Result.Totals {
			f.ReqPerSec += r.ReqPerSec
			f.P99ms = max(f.P99ms, r.Response.P99)
		}
		s.Levels = append(s.Levels, f)
	}
	return s
}

// Differences lists the settings in which two runs' configurations differ,
// leaving out where their files went.
func Differences(a, b Config) []confdiff.Change {
	return confdiff.Diff(a, b, "dir", "out", "troop_version")
}

// Comparable says whether an earlier run checked the same things the same
// way as this one, so that its figures belong on one trend: the same
// configuration but for the seed (and where the files went).
func Comparable(a, b Config) bool {
	for _, c := range Differences(a, b) {
		if c.Key != "seed" {
			return false
		}
	}
	return true
}
