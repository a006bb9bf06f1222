package reconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/resp"
)

// Serve answers a peer's MEMBERSHIP request (args[0] is MEMBERSHIP) with
// a RESP frame; streaming and cleanup scan the keyspace, so the node
// calls it off the connection's reader:
//
//	MEMBERSHIP STATE              -> the step this node holds, JSON
//	MEMBERSHIP STEP json addr     -> +OK once saved and routed by; addr
//	                                 is this node's address in the step
//	MEMBERSHIP STREAM lo hi addr  -> :keys copied to addr
//	MEMBERSHIP CLEANUP            -> :keys dropped
func (d *Driver) Serve(ctx context.Context, args [][]byte) []byte {
	bad := func(why string) []byte { return resp.AppendError(nil, "ERR troop peer protocol: MEMBERSHIP: "+why) }
	if len(args) < 2 {
		return bad("want STATE, STEP, STREAM or CLEANUP")
	}
	op := strings.ToUpper(string(args[1]))
	switch {
	case op == "STATE" && len(args) == 2:
		raw, _ := json.Marshal(d.node.State())
		return resp.AppendBulk(nil, raw)
	case op == "STEP" && (len(args) == 3 || len(args) == 4):
		var st membership.State
		if err := json.Unmarshal(args[2], &st); err != nil {
			return bad("bad step: " + err.Error())
		}
		self := "" // the address the driver dialled: this node's in st
		if len(args) == 4 {
			self = string(args[3])
		}
		if err := d.TakeStep(st, self); err != nil {
			return resp.AppendError(nil, "ERR troop: "+err.Error())
		}
		return resp.AppendSimple(nil, "OK")
	case op == "STREAM" && len(args) == 5:
		lo, err1 := strconv.ParseUint(string(args[2]), 10, 32)
		hi, err2 := strconv.ParseUint(string(args[3]), 10, 32)
		if err1 != nil || err2 != nil {
			return bad("bad range")
		}
		c, err := d.node.Stream(ctx, membership.Range{Lo: uint32(lo), Hi: uint32(hi)}, string(args[4]))
		if err != nil {
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: streaming (%d, %d] to %s: %v (%d keys copied)", lo, hi, args[4], err, c))
		}
		return resp.AppendInt(nil, c)
	case op == "CLEANUP" && len(args) == 2:
		c, err := d.node.Cleanup(ctx)
		if err != nil {
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: cleanup: %v (%d keys dropped)", err, c))
		}
		return resp.AppendInt(nil, c)
	}
	return bad(fmt.Sprintf("unknown request %q or wrong number of arguments", op))
}

// ServeHTTP serves POST /cluster/{add,remove,replace,cancel,resume} (the
// op path value): it drives the change to its end and answers a Report,
// 409 when the change is refused, 500 when it stopped part way (resume or
// cancel it then).
func (d *Driver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tokens, err := parseTokens(q.Get("tokens"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var rep Report
	op := r.PathValue("op")
	switch op {
	case "add":
		m := membership.Member{Addr: q.Get("addr"), DC: q.Get("dc"), Rack: q.Get("rack"), Tokens: tokens}
		if m.DC == "" {
			m.DC = d.cfg.Datacenter
		}
		if m.Addr == "" || m.Rack == "" {
			http.Error(w, "want addr=PEER_ADDRESS and rack=RACK (dc= and tokens= are optional: this node's datacenter, and the middle of the rack's widest range)", http.StatusBadRequest)
			return
		}
		rep, err = d.start(r.Context(), func(s membership.State) (membership.State, error) {
			if len(m.Tokens) == 0 {
				if t, err := membership.SplitToken(s.New, m.DC, m.Rack); err == nil {
					m.Tokens = []uint32{t}
				} // else the core refuses the add, and says why
			}
			return s.Add(m)
		})
	case "remove":
		if q.Get("addr") == "" {
			http.Error(w, "want addr=PEER_ADDRESS of the node to remove", http.StatusBadRequest)
			return
		}
		rep, err = d.start(r.Context(), func(s membership.State) (membership.State, error) { return s.Remove(q.Get("addr")) })
	case "replace":
		if q.Get("old") == "" || q.Get("addr") == "" {
			http.Error(w, "want old=PEER_ADDRESS of the node to replace and addr=PEER_ADDRESS of its replacement (tokens= is optional: the old node's)", http.StatusBadRequest)
			return
		}
		rep, err = d.start(r.Context(), func(s membership.State) (membership.State, error) {
			return s.Replace(q.Get("old"), membership.Member{Addr: q.Get("addr"), Tokens: tokens})
		})
	case "cancel", "resume":
		rep, err = d.resume(r.Context(), op == "cancel")
	default:
		http.Error(w, fmt.Sprintf("unknown membership change %q: want add, remove, replace, cancel or resume", op), http.StatusNotFound)
		return
	}
	status := http.StatusOK
	if err != nil {
		rep.Error = err.Error()
		status = http.StatusInternalServerError
		var refused errRefused
		if errors.As(err, &refused) {
			status = http.StatusConflict
		}
		d.cfg.Log.Warn("membership change failed", "op", op, "err", err, "remote", r.RemoteAddr)
	} else {
		d.cfg.Log.Info("membership change done", "op", op, "epoch", rep.State.Epoch, "remote", r.RemoteAddr)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(rep)
}

// parseTokens reads a comma-separated list of tokens; "" is none.
func parseTokens(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		t, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tokens=%s: %q is not a token (0 to 4294967295)", s, f)
		}
		out = append(out, uint32(t))
	}
	return out, nil
}
