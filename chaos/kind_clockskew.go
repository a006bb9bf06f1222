package chaos

import (
	"fmt"
	"strconv"
	"time"
)

// ClockSkew makes a troop node's clock, the one its versions come from,
// jump by an offset or drift at a rate, at run time.
const ClockSkew Kind = "clock-skew"

// The bounds of a skew: the node's admin API refuses more.
const (
	MaxSkewOffset = 24 * time.Hour
	MaxSkewRate   = 1.0
)

var clockSkewKind = KindSpec{
	Kind: ClockSkew, Temporary: true,
	Params: []Param{{
		Name:  "offset",
		Usage: "of clock-skew: how far the clock jumps, e.g. 2s or -500ms (at most 24h either way)",
		Set:   func(a *Action, v string) error { return setDuration(&a.Offset, v, -MaxSkewOffset, MaxSkewOffset) },
	}, {
		Name:  "rate",
		Usage: "of clock-skew: how fast the clock drifts, in seconds per second, e.g. 0.01 (above -1, at most 1)",
		Set: func(a *Action, v string) error {
			return setNumber(&a.Rate, v, -MaxSkewRate, MaxSkewRate, "a number above -1 and at most 1 (seconds of drift per second)")
		},
	}},
	Check: func(a Action) error {
		if a.Offset == 0 && a.Rate == 0 {
			return fmt.Errorf("no offset and no rate: give a jump (offset, e.g. 2s), a drift (rate, e.g. 0.01) or both")
		}
		return nil
	},
	Describe: func(a Action) string {
		s := ""
		if a.Offset != 0 {
			s = signed(a.Offset)
		}
		if a.Rate != 0 {
			if s != "" {
				s += " "
			}
			s += "rate " + strconv.FormatFloat(a.Rate, 'g', -1, 64)
		}
		return s
	},
	Unsupported: map[Backend]string{Kubernetes: "it does not reach a pod's admin API"},
}

// signed writes d with its sign, as a skew reads best.
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}
