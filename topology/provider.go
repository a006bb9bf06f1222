package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The seed providers of dyn_seed_provider: where a node finds its peers.
const (
	SimpleProvider  = "simple_provider"  // dyn_seeds (the default)
	DNSProvider     = "dns_provider"     // a DNS TXT record
	FloridaProvider = "florida_provider" // an HTTP answer
)

// seedProviders are the providers troop takes, as Dynomite names them.
var seedProviders = []string{SimpleProvider, DNSProvider, FloridaProvider}

// Dynomite's defaults for where its providers ask, and the environment
// variables that change them (src/seedsprovider).
const (
	defaultDNSName        = "_dynomite.ec2-internal"
	defaultFloridaIP      = "127.0.0.1"
	defaultFloridaPort    = "8080"
	defaultFloridaRequest = "/REST/v1/admin/get_seeds"
)

// SeedLookup is how ProvidedSeeds reaches the world: the environment, a DNS
// resolver's TXT records and an HTTP GET's body.
type SeedLookup struct {
	Getenv    func(string) string
	LookupTXT func(ctx context.Context, name string) ([]string, error)
	Get       func(ctx context.Context, url string) ([]byte, error)
}

// ProvidedSeeds are the node's seeds as its dyn_seed_provider gives them,
// as Dynomite's providers ask: dns_provider the TXT record of
// $DYNOMITE_DNS_NAME (default _dynomite.ec2-internal), florida_provider
// GET http://$DYNOMITE_FLORIDA_IP:$DYNOMITE_FLORIDA_PORT$DYNOMITE_FLORIDA_REQUEST
// (default 127.0.0.1:8080/REST/v1/admin/get_seeds); each answers the seeds
// as a list "host:port:rack:dc:tokens|...". The node itself, if listed, is
// left out. simple_provider gives dyn_seeds. troop asks once, when the node
// starts; Dynomite asks again every 30 s.
func ProvidedSeeds(ctx context.Context, c *Config, l SeedLookup) ([]Seed, error) {
	env := func(name, def string) string {
		if v := l.Getenv(name); v != "" {
			return v
		}
		return def
	}
	var answer, from string
	switch c.SeedProvider {
	case "", SimpleProvider:
		return c.Seeds, nil
	case DNSProvider:
		name := env("DYNOMITE_DNS_NAME", defaultDNSName)
		if t := l.Getenv("DYNOMITE_DNS_TYPE"); t != "" && t != "TXT" {
			return nil, fmt.Errorf("dyn_seed_provider: dns_provider: DYNOMITE_DNS_TYPE=%s: troop reads the seeds from a TXT record only (Dynomite reads an A record's address as a seed list)", t)
		}
		from = "the TXT record of " + name + " (DYNOMITE_DNS_NAME)"
		txt, err := l.LookupTXT(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("dyn_seed_provider: dns_provider: %s: %w", from, err)
		}
		answer = strings.Join(txt, "|")
	case FloridaProvider:
		url := "http://" + env("DYNOMITE_FLORIDA_IP", defaultFloridaIP) + ":" + env("DYNOMITE_FLORIDA_PORT", defaultFloridaPort) +
			env("DYNOMITE_FLORIDA_REQUEST", defaultFloridaRequest)
		from = "GET " + url + " (DYNOMITE_FLORIDA_IP, _PORT and _REQUEST)"
		body, err := l.Get(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("dyn_seed_provider: florida_provider: %s: %w", from, err)
		}
		answer = string(body)
	default:
		return nil, fmt.Errorf("dyn_seed_provider: %q is not a seed provider (want %s)", c.SeedProvider, strings.Join(seedProviders, ", "))
	}
	listed, err := ParseSeedList(answer)
	if err != nil {
		return nil, fmt.Errorf("dyn_seed_provider: %s: %s: %w", c.SeedProvider, from, err)
	}
	var seeds []Seed
	for _, s := range listed {
		if s.Addr != c.DynListen {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("dyn_seed_provider: %s: %s lists no node but this one", c.SeedProvider, from)
	}
	return seeds, nil
}

// ParseSeedList reads the seed list Dynomite's providers answer: seeds as
// dyn_seeds lists them, separated by '|', around any white space.
func ParseSeedList(s string) ([]Seed, error) {
	var seeds []Seed
	var errs []error
	for _, entry := range strings.Split(s, "|") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		seed, err := parseSeed(entry)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seeds = append(seeds, seed)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no seed in the answer (%d bytes)", len(s))
	}
	return seeds, nil
}
