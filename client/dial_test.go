package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testredis"
)

func bs(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// A Plain client and a Pipe authenticate (requirepass, or an ACL user) and
// select a database on every connection; a wrong password is refused with
// a message that does not quote it.
func TestDialAuthAndDB(t *testing.T) {
	srv := testredis.StartArgs(t, "--requirepass", "s3cret", "--user", "alice", "on", ">wonder", "~*", "&*", "+@all")
	ctx := context.Background()
	for _, d := range []Dial{{Password: "s3cret", DB: 3}, {User: "alice", Password: "wonder", DB: 3}} {
		p, err := NewPlain([]string{srv.Addr}, PlainOptions{Dial: d})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Do(ctx, bs("SET", "k:"+d.User, "v")...); err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		p.Close()
		pipe, err := NewPipe([]string{srv.Addr}, time.Second, d)
		if err != nil {
			t.Fatal(err)
		}
		pipe.Send(bs("GET", "k:"+d.User))
		if r := pipe.Exchange(nil); r[0].Err != nil || string(r[0].Raw) != "$1\r\nv\r\n" {
			t.Fatalf("%+v: pipe GET: %q %v", d, r[0].Raw, r[0].Err)
		}
		pipe.Close()
	}
	// The key went to database 3, not 0.
	check, _ := NewPlain([]string{srv.Addr}, PlainOptions{Dial: Dial{Password: "s3cret"}})
	defer check.Close()
	if raw, _ := check.Do(ctx, bs("EXISTS", "k:")...); string(raw) != ":0\r\n" {
		t.Errorf("database 0 holds the key: %q", raw)
	}
	bad, _ := NewPlain([]string{srv.Addr}, PlainOptions{Dial: Dial{Password: "wrong-horse"}, Timeout: time.Second})
	defer bad.Close()
	_, err := bad.Do(ctx, bs("PING")...)
	if err == nil || !strings.Contains(err.Error(), "AUTH refused") || strings.Contains(err.Error(), "wrong-horse") {
		t.Errorf("wrong password: %v", err)
	}
}

// A Pipe speaks TLS to redis-server, with the CA and the client
// certificate it asks for; a server its CA did not sign is refused. A
// Plain client's shared links speak TLS too.
func TestDialTLS(t *testing.T) {
	srv := testredis.StartTLS(t)
	cfg := srv.Files.ClientConfig(t)
	p, err := NewPipe([]string{srv.TLSAddr}, 2*time.Second, Dial{TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(); err != nil {
		t.Fatalf("TLS ping: %v", err)
	}
	other := testredis.MakeTLS(t).ClientConfig(t) // another CA
	q, _ := NewPipe([]string{srv.TLSAddr}, 2*time.Second, Dial{TLS: other})
	defer q.Close()
	if err := q.Ping(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server of another CA: %v", err)
	}
	pl, err := NewPlain([]string{srv.TLSAddr}, PlainOptions{Dial: Dial{TLS: cfg}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if raw, err := pl.Do(ctx, bs("PING")...); err != nil || string(raw) != "+PONG\r\n" {
		t.Errorf("Plain over TLS: PING = %q, %v", raw, err)
	}
}
