package monkey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"

	"github.com/troop-lab/troop/chaos"
)

// NewOutageChecker returns the checker the config's outage section
// describes, or nil when it has none (no outage source: kills go ahead).
// Relative file names are resolved against the config's directory.
func NewOutageChecker(cfg *chaos.Config) chaos.OutageChecker {
	switch {
	case cfg.Outage.File != "":
		return FileOutage(cfg.Path(cfg.Outage.File))
	case cfg.Outage.URL != "":
		return &URLOutage{URL: cfg.Outage.URL, Client: &http.Client{Timeout: cfg.Outage.Timeout}}
	}
	return nil
}

// FileOutage says an outage is on while the file exists: `touch` it to hold
// the monkey, remove it to let it go. An error other than "does not exist"
// (a permission problem) is an error, which CheckOutage counts as an
// outage.
type FileOutage string

// Outage implements chaos.OutageChecker.
func (f FileOutage) Outage(context.Context) (bool, error) {
	_, err := os.Stat(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("outage file: %w", err)
	}
	return true, nil
}

// URLOutage says an outage is on while GET URL answers 200, and none while
// it answers 404 or 204. Anything else, or no answer within the client's
// timeout, is an error, which CheckOutage counts as an outage.
type URLOutage struct {
	URL    string
	Client *http.Client
}

// Outage implements chaos.OutageChecker.
func (u *URLOutage) Outage(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL, nil)
	if err != nil {
		return true, fmt.Errorf("outage url: %w", err)
	}
	resp, err := u.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("outage url: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound, http.StatusNoContent:
		return false, nil
	}
	return true, fmt.Errorf("outage url %s: unexpected status %s", u.URL, resp.Status)
}
