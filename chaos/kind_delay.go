package chaos

import (
	"fmt"
	"time"
)

// Delay holds every packet an instance sends to the rest of its group for
// a delay, give or take a jitter.
const Delay Kind = "delay"

// MaxDelay bounds delay and jitter: past it a peer is down, which is a
// partition's job.
const MaxDelay = 10 * time.Second

var delayKind = KindSpec{
	Kind: Delay, Temporary: true,
	Params: []Param{{
		Name:  "delay",
		Usage: "of delay: how long each packet is held, e.g. 50ms (at most 10s)",
		Set:   func(a *Action, v string) error { return setDuration(&a.Delay, v, time.Millisecond, MaxDelay) },
	}, {
		Name:  "jitter",
		Usage: "of delay: each packet's delay varies by up to this much either way, uniformly (default 0, at most the delay)",
		Set:   func(a *Action, v string) error { return setDuration(&a.Jitter, v, 0, MaxDelay) },
	}},
	Check: func(a Action) error {
		if a.Delay == 0 {
			return fmt.Errorf("no delay: how long to hold each packet, e.g. 50ms")
		}
		if a.Jitter > a.Delay {
			return fmt.Errorf("jitter %v is more than the delay %v: a packet cannot leave before it is sent", a.Jitter, a.Delay)
		}
		return nil
	},
	Describe: func(a Action) string {
		if a.Jitter == 0 {
			return a.Delay.String()
		}
		return a.Delay.String() + "±" + a.Jitter.String()
	},
	Unsupported: map[Backend]string{Kubernetes: networkUnsupported},
}
