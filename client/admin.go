package client

import (
	"context"
	"net/http"
	"os"
)

// AdminTokenEnv is the environment variable troop's verbs take a node's
// admin token from (its troop_admin_token), so that the token stays out of
// the process list and every verb that calls the admin API finds it.
const AdminTokenEnv = "TROOP_ADMIN_TOKEN"

// NewAdminRequest is a request to a node's admin API at url, carrying the
// bearer token of $TROOP_ADMIN_TOKEN when that is set.
func NewAdminRequest(ctx context.Context, method, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	if token := os.Getenv(AdminTokenEnv); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, nil
}
