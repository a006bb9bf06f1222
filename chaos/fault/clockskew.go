package fault

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/client"
)

// clockSkew sets the skew of the troop node's clock, the one its versions
// come from, through its admin API (POST /clock/skew), and clears it. The
// skew lives in the node's memory: a node replaced meanwhile starts with a
// true clock, and clearing it again does no harm.
type clockSkew struct{}

func init() { register(chaos.ClockSkew, clockSkew{}) }

func (clockSkew) Apply(ctx context.Context, t Target) error {
	a := t.Lease.Action
	return SetSkew(ctx, t.Node, a.Offset, a.Rate)
}

func (clockSkew) Revert(ctx context.Context, t Target) error {
	return SetSkew(ctx, t.Node, 0, 0)
}

// Present asks the node's /info whether its clock is skewed; a node that
// does not answer has no skew to speak of (a restarted node's clock is
// true), so the error says what happened.
func (clockSkew) Present(ctx context.Context, t Target) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, skewTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Node.Admin+"/info", nil)
	if err != nil {
		return false, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("clock-skew: %s: %w", t.Node.ID, err)
	}
	defer res.Body.Close()
	var info struct {
		Clock struct {
			OffsetMS float64 `json:"offset_ms"`
			Rate     float64 `json:"rate"`
		} `json:"clock"`
	}
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		return false, fmt.Errorf("clock-skew: %s: /info: %w", t.Node.ID, err)
	}
	return info.Clock.OffsetMS != 0 || info.Clock.Rate != 0, nil
}

// skewTimeout bounds one call to a node's admin API.
const skewTimeout = 5 * time.Second

// SetSkew sets the skew of n's clock through its admin API (offset 0 and
// rate 0: a true clock again).
func SetSkew(ctx context.Context, n Node, offset time.Duration, rate float64) error {
	if n.Admin == "" {
		return fmt.Errorf("clock-skew: %s has no admin API address", n.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, skewTimeout)
	defer cancel()
	q := url.Values{"offset": {offset.String()}, "rate": {strconv.FormatFloat(rate, 'g', -1, 64)}}
	req, err := client.NewAdminRequest(ctx, http.MethodPost, "http://"+n.Admin+"/clock/skew?"+q.Encode())
	if err != nil {
		return fmt.Errorf("clock-skew: %s: %w", n.ID, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("clock-skew: %s: %w", n.ID, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("clock-skew: %s: POST /clock/skew: %s: %s", n.ID, res.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
