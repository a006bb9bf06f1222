// Package api is the REST API of `troop chaos serve`:
//
//	GET  /api/v1/chaos?since=RFC3339&group=NAME&type=KIND  the recorded terminations, JSON
//	POST /api/v1/chaos   {"group": NAME, "type": KIND, "duration": "30s"}  an on-demand kill
//	POST /api/v1/stop    the global stop
//	POST /api/v1/resume  ends the global stop
//	GET  /healthz        "ok"
//	GET  /metrics        Prometheus metrics (metrics.go)
//
// The POSTs need "Authorization: Bearer TOKEN" with the config's token;
// on-demand kills also need to be enabled. A request that fails either
// check is answered before anything is killed, stopped or resumed.
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/troop-lab/troop/chaos"
)

// Killer carries out one on-demand kill of one of group's instances. The
// daemon implements it: it applies the global stop, the outage check, the
// group's gap and daily maximum and the leash, and records the result, so
// the returned termination may be Skipped with a reason.
type Killer interface {
	Kill(ctx context.Context, group string, action chaos.Action) (chaos.Termination, error)
}

// ErrUnknownGroup is what a Killer returns (wrapped or not) for a group the
// config does not have; the API answers 404.
var ErrUnknownGroup = errors.New("unknown group")

// Switch is the global stop. Stop reverts active faults and blocks new kills
// until Resume.
type Switch interface {
	Stop(ctx context.Context) error
	Resume(ctx context.Context) error
	Stopped() bool
}

// Lister is the part of chaos.Recorder the API reads.
type Lister interface {
	Terminations(ctx context.Context, q chaos.Query) ([]chaos.Termination, error)
}

// Options configure the Handler. Records, Killer and Switch are required.
type Options struct {
	Records Lister
	Killer  Killer
	Switch  Switch
	// Config names the groups (an unknown one is a 404 before the Killer
	// is called). Nil leaves that to the Killer and ErrUnknownGroup.
	Config *chaos.Config
	// OnDemand enables POST /api/v1/chaos.
	OnDemand bool
	// Token is the bearer token of the POSTs. Empty refuses every POST.
	Token string
	// Logger gets one line per refused or failed POST; nil discards them.
	Logger *slog.Logger
}

// Handler serves the API. Build it with New.
type Handler struct {
	opt Options
	mux *http.ServeMux
}

// maxBody bounds a POST body: a kill request is a few dozen bytes.
const maxBody = 64 << 10

// New returns the API handler.
func New(opt Options) (*Handler, error) {
	switch {
	case opt.Records == nil:
		return nil, errors.New("api: Options.Records is nil")
	case opt.Killer == nil:
		return nil, errors.New("api: Options.Killer is nil")
	case opt.Switch == nil:
		return nil, errors.New("api: Options.Switch is nil")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opt: opt, mux: http.NewServeMux()}
	// Method patterns make the mux answer 405 with an Allow header for
	// the wrong method.
	h.mux.HandleFunc("GET /api/v1/chaos", h.list)
	h.mux.HandleFunc("POST /api/v1/chaos", h.authorized(h.kill))
	h.mux.HandleFunc("POST /api/v1/stop", h.authorized(h.stop))
	h.mux.HandleFunc("POST /api/v1/resume", h.authorized(h.resume))
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.Handle("GET /metrics", h.metricsHandler())
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// list answers GET /api/v1/chaos.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ts, err := h.opt.Records.Terminations(r.Context(), q)
	if err != nil {
		h.opt.Logger.Error("chaos api: list terminations", "err", err)
		writeError(w, http.StatusInternalServerError, "cannot read the records")
		return
	}
	if ts == nil {
		ts = []chaos.Termination{} // [] rather than null
	}
	writeJSON(w, http.StatusOK, ts)
}

func parseQuery(r *http.Request) (chaos.Query, error) {
	v := r.URL.Query()
	var q chaos.Query
	if s := v.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, fmt.Errorf("parameter since: %q is not an RFC 3339 time like 2026-03-10T09:00:00Z", s)
		}
		q.Since = t
	}
	q.Group = v.Get("group")
	if s := v.Get("type"); s != "" {
		k, err := chaos.ParseKind(s)
		if err != nil {
			return q, fmt.Errorf("parameter type: %w", err)
		}
		q.Kind = k
	}
	return q, nil
}

// authorized wraps a POST handler with the bearer token check. A missing
// token is 401 (who are you?), a wrong one 403 (not you).
func (h *Handler) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.opt.Token == "" {
			h.refuse(w, r, http.StatusForbidden, "the config has no API token, so POST requests are refused")
			return
		}
		auth := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(auth, " ")
		if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="troop chaos"`)
			h.refuse(w, r, http.StatusUnauthorized, "missing Authorization: Bearer token")
			return
		}
		// Constant time, so the answer's timing does not tell how much of
		// a guess was right.
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(h.opt.Token)) != 1 {
			h.refuse(w, r, http.StatusForbidden, "wrong bearer token")
			return
		}
		next(w, r)
	}
}

// refuse answers a refused POST and logs it, without the token.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	h.opt.Logger.Warn("chaos api: refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", code, "why", msg)
	writeError(w, code, msg)
}

// killRequest is the body of POST /api/v1/chaos: the group, the type
// (default terminate), the duration of a temporary type (a Go duration,
// default 1m), and the type's parameters, each under its own name
// (chaos.Param): {"group": "g", "type": "loss", "percent": 20}.
type killRequest struct {
	Group    string
	Type     string
	Duration string
	Params   map[string]string
}

// kill answers POST /api/v1/chaos. The response is the recorded
// termination: 200 when executed, 409 when skipped (stopped, leashed,
// min-gap, ...), 500 when the action failed.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	if !h.opt.OnDemand {
		h.refuse(w, r, http.StatusForbidden, "on-demand terminations are disabled in the config")
		return
	}
	req, action, err := decodeKill(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if h.opt.Config != nil && h.opt.Config.Group(req.Group) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown group %q", req.Group))
		return
	}
	t, err := h.opt.Killer.Kill(r.Context(), req.Group, action)
	if errors.Is(err, ErrUnknownGroup) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown group %q", req.Group))
		return
	}
	if err != nil {
		h.opt.Logger.Error("chaos api: on-demand kill", "group", req.Group, "action", action.String(), "err", err)
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("kill in group %q: %v", req.Group, err))
		return
	}
	code := http.StatusOK
	switch t.Outcome {
	case chaos.Skipped:
		code = http.StatusConflict
	case chaos.Failed:
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, t)
}

func decodeKill(w http.ResponseWriter, r *http.Request) (killRequest, chaos.Action, error) {
	var req killRequest
	var body map[string]json.RawMessage
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(&body); err != nil || body == nil {
		return req, chaos.Action{}, fmt.Errorf("body: want {\"group\": NAME, \"type\": KIND}: %v", err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return req, chaos.Action{}, errors.New("body: want one JSON object and nothing after it")
	}
	req.Params = map[string]string{}
	for key, raw := range body {
		v, err := jsonScalar(raw)
		if err != nil {
			return req, chaos.Action{}, fmt.Errorf("body: %s: %w", key, err)
		}
		switch key {
		case "group":
			req.Group = v
		case "type":
			req.Type = v
		case "duration":
			req.Duration = v
		default:
			req.Params[key] = v
		}
	}
	if req.Group == "" {
		return req, chaos.Action{}, errors.New("body: group is missing")
	}
	kind := chaos.Terminate
	if req.Type != "" {
		k, err := chaos.ParseKind(req.Type)
		if err != nil {
			return req, chaos.Action{}, fmt.Errorf("body: type: %w", err)
		}
		kind = k
	}
	var d time.Duration
	if req.Duration != "" {
		var err error
		if d, err = time.ParseDuration(req.Duration); err != nil || d == 0 {
			return req, chaos.Action{}, fmt.Errorf("body: duration: %q is not a duration from 1s to %v", req.Duration, chaos.MaxTemporaryDuration)
		}
	}
	a, err := chaos.NewAction(kind, d, req.Params)
	if err != nil {
		return req, a, fmt.Errorf("body: %w", err)
	}
	return req, a, nil
}

// jsonScalar is a JSON string's text, or a number's or boolean's as
// written.
func jsonScalar(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), nil
	}
	return "", fmt.Errorf("want a string or a number, not %s", raw)
}

func (h *Handler) stop(w http.ResponseWriter, r *http.Request) {
	if err := h.opt.Switch.Stop(r.Context()); err != nil {
		h.opt.Logger.Error("chaos api: stop", "err", err)
		writeError(w, http.StatusInternalServerError, "stop: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"stopped": h.opt.Switch.Stopped()})
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	if err := h.opt.Switch.Resume(r.Context()); err != nil {
		h.opt.Logger.Error("chaos api: resume", "err", err)
		writeError(w, http.StatusInternalServerError, "resume: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"stopped": h.opt.Switch.Stopped()})
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // the status is sent; a write error has no one to go to
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
