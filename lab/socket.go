package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// The supervisor takes commands over a unix socket, DIR/supervisor.sock, as
// a small HTTP API:
//
//	GET  /status                   the Status as JSON
//	POST /kill?node=NAME&proc=P    SIGKILL; replaced after the delay
//	POST /stop?node=NAME&proc=P    stop and keep down
//	POST /start?node=NAME&proc=P   start again and wait until ready
//	POST /add-node?dc=D&rack=R&token=T  a new position that joins; its Node
//	POST /down                     stop everything; the supervisor exits
//
// P is node or redis. Replies are JSON: {"message": ...} or {"error": ...}.

// maxSocketPath is the room in sockaddr_un.sun_path on Linux, less the NUL.
const maxSocketPath = 107

func checkSocketPath(dir string) error {
	if p := SocketFile(dir); len(p) > maxSocketPath {
		return fmt.Errorf("socket path %s is %d bytes, more than unix sockets allow (%d): use a shorter lab directory", p, len(p), maxSocketPath)
	}
	return nil
}

type reply struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

func writeReply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// serve listens on DIR/supervisor.sock. A socket file left by a supervisor
// that died is removed first; a live one is an error.
func (l *Lab) serve() error {
	path := SocketFile(l.spec.Dir)
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("another supervisor answers on %s", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("supervisor socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, http.StatusOK, l.Status())
	})
	target := func(w http.ResponseWriter, r *http.Request) (string, Proc, bool) {
		name := r.URL.Query().Get("node")
		kind, err := ParseProc(r.URL.Query().Get("proc"))
		if err != nil {
			writeReply(w, http.StatusBadRequest, reply{Error: err.Error()})
			return "", "", false
		}
		return name, kind, true
	}
	act := func(do func(name string, kind Proc) (string, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name, kind, ok := target(w, r)
			if !ok {
				return
			}
			msg, err := do(name, kind)
			if err != nil {
				writeReply(w, http.StatusConflict, reply{Error: err.Error()})
				return
			}
			writeReply(w, http.StatusOK, reply{Message: msg})
		}
	}
	mux.HandleFunc("POST /kill", act(func(name string, kind Proc) (string, error) {
		pid, err := l.Kill(name, kind)
		return fmt.Sprintf("killed %s %s (pid %d); the supervisor replaces it after %s", name, kind, pid, l.spec.ReplaceAfter), err
	}))
	mux.HandleFunc("POST /stop", act(func(name string, kind Proc) (string, error) {
		return fmt.Sprintf("stopped %s %s; it stays down until: troop lab start %s", name, kind, name), l.StopNode(name, kind)
	}))
	mux.HandleFunc("POST /start", act(func(name string, kind Proc) (string, error) {
		return fmt.Sprintf("started %s %s", name, kind), l.StartNode(name, kind)
	}))
	mux.HandleFunc("POST /add-node", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		token, err := strconv.ParseUint(q.Get("token"), 10, 32)
		if err != nil {
			writeReply(w, http.StatusBadRequest, reply{Error: fmt.Sprintf("token %q: want a number from 0 to 4294967295", q.Get("token"))})
			return
		}
		n, err := l.AddNode(r.Context(), q.Get("dc"), q.Get("rack"), uint32(token))
		if err != nil {
			writeReply(w, http.StatusConflict, reply{Error: err.Error()})
			return
		}
		writeReply(w, http.StatusOK, n)
	})
	mux.HandleFunc("POST /down", func(w http.ResponseWriter, r *http.Request) {
		// Stop closes this server, so it runs after the reply is out; the
		// client waits for the supervisor to exit.
		writeReply(w, http.StatusOK, reply{Message: "stopping"})
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go l.Stop()
	})
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go l.srv.Serve(ln)
	return nil
}

// Client talks to a lab's supervisor over its socket.
type Client struct {
	dir string
	hc  *http.Client
}

// Dial connects to the supervisor of the lab in dir and checks that it
// answers.
func Dial(ctx context.Context, dir string) (*Client, error) {
	path := SocketFile(dir)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no lab running in %s (start one with: troop lab up --dir %s)", dir, dir)
	}
	c := &Client{dir: dir, hc: &http.Client{
		// start waits for readiness (20 s) and stop for a grace period.
		Timeout: time.Minute,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		return nil, fmt.Errorf("no lab supervisor answers in %s (start a lab with: troop lab up --dir %s): %w", dir, dir, err)
	}
	return c, nil
}

// Status asks the supervisor for the live status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if err := c.do(ctx, http.MethodGet, "/status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Kill, Stop and Start act on one process of a node, as Lab's methods do,
// and return the supervisor's message.
func (c *Client) Kill(ctx context.Context, node string, kind Proc) (string, error) {
	return c.act(ctx, "/kill", node, kind)
}
func (c *Client) Stop(ctx context.Context, node string, kind Proc) (string, error) {
	return c.act(ctx, "/stop", node, kind)
}
func (c *Client) Start(ctx context.Context, node string, kind Proc) (string, error) {
	return c.act(ctx, "/start", node, kind)
}

// AddNode asks the supervisor for a new position in rack dc/rack at
// token, whose node joins (Lab.AddNode).
func (c *Client) AddNode(ctx context.Context, dc, rack string, token uint32) (Node, error) {
	var n Node
	q := url.Values{"dc": {dc}, "rack": {rack}, "token": {strconv.FormatUint(uint64(token), 10)}}
	err := c.do(ctx, http.MethodPost, "/add-node", q, &n)
	return n, err
}

// Down asks the supervisor to stop everything and exit; it does not wait.
func (c *Client) Down(ctx context.Context) error {
	var r reply
	return c.do(ctx, http.MethodPost, "/down", nil, &r)
}

func (c *Client) act(ctx context.Context, path, node string, kind Proc) (string, error) {
	var r reply
	q := url.Values{"node": {node}, "proc": {string(kind)}}
	if err := c.do(ctx, http.MethodPost, path, q, &r); err != nil {
		return "", err
	}
	return r.Message, nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, out any) error {
	u := "http://lab" + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var r reply
		if json.Unmarshal(b, &r) == nil && r.Error != "" {
			return errors.New(r.Error)
		}
		return fmt.Errorf("supervisor: %s", resp.Status)
	}
	return json.Unmarshal(b, out)
}
