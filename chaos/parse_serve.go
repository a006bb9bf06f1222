package chaos

import (
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults of the daemon's keys, as documented in docs/chaos.md.
const (
	DefaultDB            = "chaos.db"           // next to the config
	DefaultRetention     = 365 * 24 * time.Hour // a year of records
	DefaultOutageTimeout = 5 * time.Second      // of an outage URL
	maxRetention         = 100 * 365 * 24 * time.Hour
)

// Outage is where `troop chaos serve` learns of an outage, in which case it
// kills nothing. At most one of File and URL is set; neither means no
// outage source (kills go ahead).
type Outage struct {
	File    string        // an outage is on while this file exists
	URL     string        // an outage is on while GET URL answers 200
	Timeout time.Duration // of the GET; an error or timeout counts as an outage
}

var outageKeys = []string{"file", "url", "timeout"}

func (p *parser) serveKeys(f map[string]*kv, c *Config) {
	if n := f["on_demand"]; n != nil {
		c.OnDemand, _ = p.boolean(n.v, "on_demand")
	}
	if n := f["db"]; n != nil {
		if s, ok := p.str(n.v, "db"); ok {
			if s == "" || strings.ContainsAny(s, "?#") {
				p.fail(n.v.Line, "db", "must be a file name without '?' or '#'")
			} else {
				c.DB = s
			}
		}
	}
	if n := f["retention"]; n != nil {
		c.Retention, _ = p.retention(n.v)
	}
	if n := f["outage"]; n != nil {
		p.outage(n.v, &c.Outage)
	}
}

// retention is a Go duration or a whole number of days ("90d"); 0 keeps
// the records forever.
func (p *parser) retention(n *yaml.Node) (time.Duration, bool) {
	s, ok := p.scalar(n, "retention", "a duration such as 90d or 2160h")
	if !ok {
		return 0, false
	}
	var d time.Duration
	var err error
	if days, found := strings.CutSuffix(s, "d"); found {
		var k int
		k, err = strconv.Atoi(days)
		d = time.Duration(k) * 24 * time.Hour
		if k < 0 || k > 36500 {
			err = strconv.ErrRange
		}
	} else if s == "0" {
		d = 0
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || n.Tag == "!!float" {
		p.fail(n.Line, "retention", "must be a number of days such as 90d, a duration such as 2160h, or 0 (forever), not %q", clip(s))
		return 0, false
	}
	if d != 0 && (d < time.Hour || d > maxRetention) {
		p.fail(n.Line, "retention", "must be 0 (forever) or from 1h to 36500d, not %v", d)
		return 0, false
	}
	return d, true
}

func (p *parser) outage(n *yaml.Node, o *Outage) {
	before := len(p.errs)
	f := p.fields(n, "outage", outageKeys)
	if len(f) == 0 && len(p.errs) > before {
		return // not a mapping, or only unknown keys: said already
	}
	if v := f["file"]; v != nil {
		if s, ok := p.str(v.v, "outage.file"); ok {
			if s == "" {
				p.fail(v.v.Line, "outage.file", "must not be empty")
			}
			o.File = s
		}
	}
	if v := f["url"]; v != nil {
		if s, ok := p.str(v.v, "outage.url"); ok {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.fail(v.v.Line, "outage.url", "must be an http:// or https:// URL, not %q", clip(s))
			} else {
				o.URL = s
			}
		}
	}
	if v := f["timeout"]; v != nil {
		if o.URL == "" && f["url"] == nil {
			p.fail(v.v.Line, "outage.timeout", "only applies to outage.url")
		}
		o.Timeout, _ = p.duration(v.v, "outage.timeout", 100*time.Millisecond, time.Minute)
	}
	if f["file"] != nil && f["url"] != nil {
		p.fail(n.Line, "outage", "set file or url, not both")
	}
	if f["file"] == nil && f["url"] == nil {
		p.fail(n.Line, "outage", "set file (an outage while it exists) or url (an outage while it answers 200)")
	}
	if o.URL != "" && o.Timeout == 0 {
		o.Timeout = DefaultOutageTimeout
	}
}

// Path resolves a file name of the config (db, outage.file) against the
// config's directory, as LoadConfig does for the iCalendar file.
func (c *Config) Path(name string) string {
	if name == "" || filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(filepath.Dir(c.Source), name)
}
