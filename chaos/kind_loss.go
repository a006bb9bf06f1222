package chaos

import "fmt"

// Loss drops a share of the packets an instance sends to the rest of its
// group, each at random.
const Loss Kind = "loss"

var lossKind = KindSpec{
	Kind: Loss, Temporary: true,
	Params: []Param{{
		Name:  "percent",
		Usage: "of loss: the share of packets dropped, more than 0 and at most 100",
		Set: func(a *Action, v string) error {
			return setNumber(&a.Percent, v, 0, 100, "a percentage more than 0 and at most 100")
		},
	}},
	Check: func(a Action) error {
		if a.Percent == 0 {
			return fmt.Errorf("no percent: the share of packets to drop, e.g. 20")
		}
		return nil
	},
	Describe:    func(a Action) string { return fmt.Sprintf("%g%%", a.Percent) },
	Unsupported: map[Backend]string{Kubernetes: networkUnsupported},
}
