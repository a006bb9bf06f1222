package topology

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Dynomite's providers answer seeds as dyn_seeds lists them, separated by
// '|'; a bad entry is named, and an answer with none is an error.
func TestParseSeedList(t *testing.T) {
	got, err := ParseSeedList(" 10.0.0.2:8101:rack2:dc1:100|10.0.0.3:8101:rack3:dc1:1,2 |\n")
	want := []Seed{{Addr: "10.0.0.2:8101", Rack: "rack2", DC: "dc1", Tokens: []uint32{100}}, {Addr: "10.0.0.3:8101", Rack: "rack3", DC: "dc1", Tokens: []uint32{1, 2}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v", got, err)
	}
	for answer, wantErr := range map[string]string{
		"":                           "no seed in the answer",
		"|  |":                       "no seed in the answer",
		"10.0.0.2:8101:rack":         `"10.0.0.2:8101:rack" is not host:port:rack:dc:tokens`,
		"10.0.0.2:8101:r:d:1|<html>": `"<html>" is not host:port:rack:dc:tokens`,
	} {
		if _, err := ParseSeedList(answer); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: %v, want %q", answer, err, wantErr)
		}
	}
}

// dns_provider reads the TXT record Dynomite's would (DYNOMITE_DNS_NAME,
// by default _dynomite.ec2-internal), florida_provider GETs the URL
// Dynomite's would (DYNOMITE_FLORIDA_IP, _PORT, _REQUEST); the node itself
// is left out of the answer; what cannot be asked or read is one sentence
// naming where troop asked.
func TestProvidedSeeds(t *testing.T) {
	c, err := Parse([]byte(with("  dyn_listen: 10.0.0.1:8101\n  dyn_seed_provider: DNS_provider\n")), "x.yml")
	if err != nil || c.SeedProvider != DNSProvider {
		t.Fatalf("%+v, %v", c, err)
	}
	answer := "10.0.0.1:8101:rack1:dc1:0|10.0.0.2:8101:rack2:dc1:0"
	env := map[string]string{}
	var asked []string
	l := SeedLookup{
		Getenv: func(k string) string { return env[k] },
		LookupTXT: func(_ context.Context, name string) ([]string, error) {
			asked = append(asked, "TXT "+name)
			return []string{answer}, nil
		},
		Get: func(_ context.Context, url string) ([]byte, error) {
			asked = append(asked, "GET "+url)
			return []byte(answer), nil
		},
	}
	only := []Seed{{Addr: "10.0.0.2:8101", Rack: "rack2", DC: "dc1", Tokens: []uint32{0}}}
	ctx := context.Background()
	if got, err := ProvidedSeeds(ctx, c, l); err != nil || !reflect.DeepEqual(got, only) {
		t.Errorf("dns_provider: %+v, %v", got, err)
	}
	env["DYNOMITE_DNS_NAME"] = "_dynomite.store.svc"
	ProvidedSeeds(ctx, c, l)
	c.SeedProvider = FloridaProvider
	if got, err := ProvidedSeeds(ctx, c, l); err != nil || !reflect.DeepEqual(got, only) {
		t.Errorf("florida_provider: %+v, %v", got, err)
	}
	env["DYNOMITE_FLORIDA_IP"], env["DYNOMITE_FLORIDA_PORT"], env["DYNOMITE_FLORIDA_REQUEST"] = "10.9.9.9", "9090", "/seeds"
	ProvidedSeeds(ctx, c, l)
	wantAsked := []string{"TXT _dynomite.ec2-internal", "TXT _dynomite.store.svc",
		"GET http://127.0.0.1:8080/REST/v1/admin/get_seeds", "GET http://10.9.9.9:9090/seeds"}
	if !reflect.DeepEqual(asked, wantAsked) {
		t.Errorf("asked %q, want %q", asked, wantAsked)
	}

	l.Get = func(context.Context, string) ([]byte, error) { return nil, errors.New("connection refused") }
	if _, err := ProvidedSeeds(ctx, c, l); err == nil || err.Error() != "dyn_seed_provider: florida_provider: GET http://10.9.9.9:9090/seeds (DYNOMITE_FLORIDA_IP, _PORT and _REQUEST): connection refused" {
		t.Errorf("florida unreachable: %v", err)
	}
	answer = "10.0.0.1:8101:rack1:dc1:0"
	c.SeedProvider = DNSProvider
	if _, err := ProvidedSeeds(ctx, c, l); err == nil || !strings.Contains(err.Error(), "lists no node but this one") {
		t.Errorf("only this node: %v", err)
	}
	env["DYNOMITE_DNS_TYPE"] = "A"
	if _, err := ProvidedSeeds(ctx, c, l); err == nil || !strings.Contains(err.Error(), "TXT record only") {
		t.Errorf("DYNOMITE_DNS_TYPE=A: %v", err)
	}
	c.SeedProvider = ""
	c.Seeds = only
	if got, err := ProvidedSeeds(ctx, c, l); err != nil || !reflect.DeepEqual(got, only) {
		t.Errorf("simple_provider: %+v, %v", got, err)
	}
}

func FuzzParseSeedList(f *testing.F) {
	f.Add("10.0.0.2:8101:rack2:dc1:100|10.0.0.3:8101:rack3:dc1:1,2")
	f.Add("[::1]:8101:r:d:1 name|")
	f.Fuzz(func(t *testing.T, s string) {
		seeds, err := ParseSeedList(s)
		if err == nil && len(seeds) == 0 {
			t.Errorf("%q: no seeds and no error", s)
		}
		for _, seed := range seeds {
			if again, err := ParseSeedList(seed.String()); err != nil || !reflect.DeepEqual(again, []Seed{seed}) {
				t.Errorf("%q: seed %+v does not read back: %+v, %v", s, seed, again, err)
			}
		}
	})
}
