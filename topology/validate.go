package topology

import (
	"fmt"
	"strings"
)

// validate runs every per-key check, then the checks that involve several
// keys: required keys, listeners that would collide, and the ring.
func (p *parser) validate(c *Config) {
	if err := checkPool(c.Pool); err != nil {
		p.add(p.poolLine, "", err.Error())
	}
	for i := range keys {
		k := &keys[i]
		if k.check == nil {
			continue
		}
		if err := k.check(c); err != nil {
			p.addErr(p.line(k.name), k.name, err)
		}
	}
	p.required(c)
	p.servers(c)
	p.listeners(c)
	p.seeds(c)
	p.ring(c)
	if key, err := checkTLS(c); err != nil {
		p.add(p.line(key), key, err.Error())
	}
	if !c.Versions && (c.HintedHandoff || c.ReadRepair || c.AntiEntropyInterval > 0) {
		p.add(p.line("troop_versions"), "troop_versions",
			"false needs troop_hinted_handoff: false, troop_read_repair: false and no troop_anti_entropy_interval_ms: they order replicas by version")
	}
	if c.MaxInflightPerConn > c.MaxInflight {
		p.add(p.line("troop_max_inflight_per_conn"), "troop_max_inflight_per_conn",
			fmt.Sprintf("%d is more than troop_max_inflight (%d), the limit for the whole node", c.MaxInflightPerConn, c.MaxInflight))
	}
}

func (p *parser) required(c *Config) {
	if c.Listen == "" {
		p.add(p.poolLine, "listen", "missing: the address clients connect to, e.g. listen: 127.0.0.1:8102")
	}
	if len(c.Tokens) == 0 {
		p.add(p.poolLine, "tokens", "missing: this node's place on the ring, e.g. tokens: '0'")
	} else if err := checkTokens(c.Tokens); err != nil {
		p.add(p.line("tokens"), "tokens", err.Error())
	}
	if c.DynListen == "" && len(c.Seeds) > 0 {
		p.add(p.poolLine, "dyn_listen", "missing: with dyn_seeds, peers need the address to reach this node, e.g. dyn_listen: 127.0.0.1:8101")
	}
}

// servers checks the datastore: exactly one, as in Dynomite, which keeps a
// single datastore per node whatever the file lists.
func (p *parser) servers(c *Config) {
	switch len(c.Servers) {
	case 0:
		p.add(p.poolLine, "servers", "missing: the redis-server behind this node, e.g. servers: [\"127.0.0.1:6379:1\"]")
		return
	case 1:
	default:
		p.add(p.line("servers.1"), "servers", fmt.Sprintf("%d entries; troop, like Dynomite, supports exactly one datastore per node", len(c.Servers)))
	}
	for i, s := range c.Servers {
		line := p.line(fmt.Sprintf("servers.%d", i))
		if err := checkAddr(s.Addr); err != nil {
			p.add(line, "servers", err.Error())
		}
		if err := checkRange(s.Weight, 0, maxNum); err != nil {
			p.add(line, "servers", "weight "+err.Error())
		}
	}
}

// listener is one address this node binds.
type listener struct{ key, addr string }

// listeners rejects two listeners on one port of one interface, which would
// fail at bind time with a less helpful message, and a datastore address
// that is one of the node's own listeners, which would make the node its
// own backend.
func (p *parser) listeners(c *Config) {
	ls := []listener{{"listen", c.Listen}, {"dyn_listen", c.DynListen}, {"stats_listen", c.StatsListen}}
	for j := range ls {
		for i := 0; i < j; i++ {
			if !sameSocket(ls[i].addr, ls[j].addr) {
				continue
			}
			key, msg := ls[j].key, fmt.Sprintf("%s overlaps %s %s", ls[j].addr, ls[i].key, ls[i].addr)
			if p.derived[key] {
				// The user never wrote this address; say where it came from.
				key, msg = ls[i].key, fmt.Sprintf("%s overlaps dyn_listen, which defaults to %s; set dyn_listen", ls[i].addr, ls[j].addr)
			}
			p.add(p.line(key), key, msg)
		}
	}
	for i, s := range c.Servers {
		for _, l := range ls {
			if dialsListener(s.Addr, l.addr) {
				p.add(p.line(fmt.Sprintf("servers.%d", i)), "servers",
					fmt.Sprintf("%s is this node's own %s address; it must be the redis-server's", s.Addr, l.key))
			}
		}
	}
}

// sameSocket reports whether two listeners would compete for one port.
func sameSocket(a, b string) bool {
	ah, ap, err1 := splitHostPort(a)
	bh, bp, err2 := splitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp {
		return false
	}
	return strings.EqualFold(ah, bh) || isWildcard(ah) || isWildcard(bh)
}

// dialsListener reports whether dialing addr reaches the listener l.
func dialsListener(addr, l string) bool {
	ah, ap, err1 := splitHostPort(addr)
	lh, lp, err2 := splitHostPort(l)
	if err1 != nil || err2 != nil || ap != lp {
		return false
	}
	return strings.EqualFold(ah, lh) || (isWildcard(lh) && (isLoopback(ah) || isWildcard(ah)))
}

// seeds checks each seed on its own line, then duplicates and self.
func (p *parser) seeds(c *Config) {
	first := map[string]int{}
	for i, s := range c.Seeds {
		key := fmt.Sprintf("dyn_seeds.%d", i)
		line := p.line(key)
		bad := func(err error) {
			p.add(line, "dyn_seeds", fmt.Sprintf("%s: %v", s, err))
		}
		if err := checkAddr(s.Addr); err != nil {
			bad(err)
		}
		if err := checkPlace(s.Rack); err != nil {
			bad(fmt.Errorf("rack %v", err))
		}
		if err := checkPlace(s.DC); err != nil {
			bad(fmt.Errorf("datacenter %v", err))
		}
		if err := checkTokens(s.Tokens); err != nil {
			bad(err)
		}
		if j, dup := first[s.Addr]; dup {
			p.add(line, "dyn_seeds", fmt.Sprintf("%s is listed twice (also at %s)", s.Addr, p.where(fmt.Sprintf("dyn_seeds.%d", j))))
		} else {
			first[s.Addr] = i
		}
		if c.DynListen != "" && strings.EqualFold(s.Addr, c.DynListen) {
			p.add(line, "dyn_seeds", fmt.Sprintf("%s is this node's own dyn_listen address", s.Addr))
		}
	}
}

// ring rejects two nodes of one rack owning the same token: the ring could
// not say which of them holds the keys.
func (p *parser) ring(c *Config) {
	type slot struct {
		dc, rack string
		token    uint32
	}
	owner := map[slot]string{}
	for _, t := range c.Tokens {
		owner[slot{c.Datacenter, c.Rack, t}] = "this node"
	}
	for i, s := range c.Seeds {
		key := fmt.Sprintf("dyn_seeds.%d", i)
		for _, t := range s.Tokens {
			k := slot{s.DC, s.Rack, t}
			if who, taken := owner[k]; taken {
				p.add(p.line(key), "dyn_seeds", fmt.Sprintf("%s: token %d in rack %s of datacenter %s is also owned by %s", s.Addr, t, s.Rack, s.DC, who))
				continue
			}
			owner[k] = s.Addr
		}
	}
}

// where names a key's position for a message: its line when known.
func (p *parser) where(key string) string {
	if l := p.line(key); l > 0 {
		return fmt.Sprintf("line %d", l)
	}
	return "an earlier entry"
}
