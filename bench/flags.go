package bench

import (
	"fmt"
	"strings"
)

// Target kinds, for the flags that apply to one kind only.
const (
	TargetRESP     = "resp"     // --target: plain RESP servers
	TargetTroop    = "troop"    // --lab, --cluster of troop nodes
	TargetDynomite = "dynomite" // --cluster of Dynomite nodes
)

// Inapplicable says, in a sentence each, which of the flags given on the
// command line (given reports whether one was) do nothing in this run: to
// its job, or to its kind of target. A run does not refuse them (a script
// may pass one set of flags to every job), but it says so.
func Inapplicable(cfg *Config, given func(flag string) bool, kind string) []string {
	var out []string
	warn := func(flag, format string, args ...any) {
		if given(flag) {
			out = append(out, fmt.Sprintf("--"+flag+" does not apply "+format, args...))
		}
	}
	def, err := jobSpec(cfg.Job)
	if err != nil {
		return nil
	}
	var tasks []string
	seq, dist := false, cfg.Distribution
	for _, ph := range def.phases {
		tasks = append(tasks, ph.Tasks...)
		for _, r := range ph.roles {
			seq = seq || r.seq
			if dist == "" {
				dist = r.dist
			}
		}
	}
	job := fmt.Sprintf("to the %s job (%s)", cfg.Job, strings.Join(tasks, ", "))
	if cfg.Job != JobMixed {
		for _, f := range []string{"ratio", "readers", "writers"} {
			warn(f, "%s: it is for mixed, which --workers replaces here", job)
		}
	} else {
		warn("workers", "to the mixed job: it runs --readers and --writers")
	}
	if seq {
		warn("distribution", "%s: it walks the keys in sequence", job)
		warn("hotspot", "%s: it walks the keys in sequence", job)
	} else if dist != Hotspot {
		warn("hotspot", "to the %s key distribution: only to --distribution hotspot", dist)
	}
	switch kind {
	case TargetRESP:
		warn("consistency", "to plain RESP servers, which have no consistency levels: it is only recorded")
		if cfg.Access.TLS {
			warn("conns", "with --tls: each worker has a connection of its own to each address")
		}
	case TargetTroop, TargetDynomite:
		warn("db", "to --lab and --cluster: a troop cluster has database 0 only")
		if kind == TargetDynomite {
			warn("consistency", "to a Dynomite cluster, whose levels are its own setting (its /set_consistency): it is only recorded")
		}
	}
	if kind != TargetDynomite {
		warn("client-port", "but to a --cluster of Dynomite nodes")
	}
	if !cfg.Access.TLS {
		for _, f := range []string{"cacert", "cert", "key", "sni", "insecure"} {
			warn(f, "without --tls")
		}
	}
	return out
}
