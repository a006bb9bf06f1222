// Package records keeps troop chaos's record of terminations and daily plans
// in an embedded SQLite database file (modernc.org/sqlite, pure Go, so the
// binary stays cgo-free). Store implements chaos.Recorder.
//
// Several monkeys may share one database file: RecordIfAdmitted reads a
// group's history and records the kill in one write transaction, so that
// they cannot both pass the minimum gap or the daily maximum.
//
// Times are stored as UTC text in RFC 3339 with exactly nine fractional
// digits (a fixed-width form of RFC3339Nano): fixed width makes text order
// time order, so SQL compares and sorts them as strings. They are read back
// in UTC.
package records

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/troop-lab/troop/chaos"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// timeFormat is RFC3339Nano with the fraction always nine digits long.
// RFC3339Nano itself trims trailing zeros, which would sort "…:05Z" after
// "…:05.1Z".
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// busyTimeout is how long a connection waits for another one's write
// transaction (another monkey's admission) before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

const schema = `
CREATE TABLE IF NOT EXISTS terminations (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	grp         TEXT NOT NULL,
	instance_id TEXT NOT NULL DEFAULT '',
	instance    TEXT NOT NULL DEFAULT '{}', -- the chaos.Instance as JSON
	kind        TEXT NOT NULL,
	duration_ns INTEGER NOT NULL DEFAULT 0,
	action      TEXT NOT NULL DEFAULT '',    -- the chaos.Action as JSON, with its parameters
	planned     TEXT,                        -- NULL for on-demand kills
	executed    TEXT,
	at          TEXT NOT NULL,               -- Termination.At(), what queries filter on
	outcome     TEXT NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	error       TEXT NOT NULL DEFAULT '',
	recovery_ns INTEGER                      -- NULL until recovery time is measured
);
CREATE INDEX IF NOT EXISTS terminations_grp_at ON terminations (grp, at);
CREATE INDEX IF NOT EXISTS terminations_at ON terminations (at);

-- state holds the global stop: key 'stopped', value '1' or '0'.
CREATE TABLE IF NOT EXISTS state (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);

-- plan_days marks a day as planned, so that an empty plan is told apart
-- from no plan.
CREATE TABLE IF NOT EXISTS plan_days (
	day      TEXT PRIMARY KEY,               -- YYYY-MM-DD
	recorded TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plan_kills (
	day         TEXT NOT NULL REFERENCES plan_days (day) ON DELETE CASCADE,
	seq         INTEGER NOT NULL,            -- position in the plan
	grp         TEXT NOT NULL,
	at          TEXT NOT NULL,
	kind        TEXT NOT NULL,
	duration_ns INTEGER NOT NULL DEFAULT 0,
	action      TEXT NOT NULL DEFAULT '',    -- the chaos.Action as JSON, with its parameters
	pick        INTEGER NOT NULL,            -- the uint64 Pick, bit for bit
	skip        TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (day, seq)
);
`

// Store is a chaos.Recorder over one SQLite database file. It is safe for
// concurrent use, also by several processes on the same file.
type Store struct {
	path      string
	db        *sql.DB
	retention time.Duration
	now       func() time.Time // stamps recorded plans; tests may replace it
}

var _ chaos.Recorder = (*Store)(nil)

// Open opens, or creates, the database at path. Records older than
// retention are deleted by Prune; retention 0 keeps them forever.
func Open(path string, retention time.Duration) (*Store, error) {
	if path == "" {
		return nil, errors.New("records: empty database path")
	}
	if strings.ContainsAny(path, "?#") {
		// They would be read as the start of the DSN's parameters.
		return nil, fmt.Errorf("records: database path %q must not contain '?' or '#'", path)
	}
	if retention < 0 {
		return nil, fmt.Errorf("records: retention %v is negative", retention)
	}
	// WAL lets readers (the REST API) go on while a monkey writes; the busy
	// timeout makes a second writer wait instead of failing; foreign keys
	// make deleting a plan day delete its kills.
	dsn := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)",
		path, busyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("records: open %s: %w", path, err)
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("records: create tables in %s: %w", path, err)
	}
	if err := addActionColumns(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("records: upgrade %s: %w", path, err)
	}
	return &Store{path: path, db: db, retention: retention, now: time.Now}, nil
}

// addActionColumns adds the action column to the tables of a database
// made before actions had parameters; their rows keep ” and are read from
// kind and duration_ns.
func addActionColumns(db *sql.DB) error {
	for _, table := range []string{"terminations", "plan_kills"} {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM pragma_table_info(?) WHERE name = 'action'", table).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := db.Exec("ALTER TABLE " + table + " ADD COLUMN action TEXT NOT NULL DEFAULT ''"); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeAction is the action column's value.
func encodeAction(a chaos.Action) (string, error) {
	b, err := json.Marshal(a)
	return string(b), err
}

// decodeAction reads an action back: from its JSON, or from kind and
// duration alone in rows made before the action column.
func decodeAction(kind string, dur int64, js string) (chaos.Action, error) {
	a := chaos.Action{Kind: chaos.Kind(kind), Duration: time.Duration(dur)}
	if js == "" {
		return a, nil
	}
	err := json.Unmarshal([]byte(js), &a)
	return a, err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Retention returns the retention the store was opened with.
func (s *Store) Retention() time.Duration { return s.retention }

// Record stores one termination.
func (s *Store) Record(ctx context.Context, t chaos.Termination) error {
	_, err := s.Add(ctx, t)
	return err
}

// Add stores one termination and returns it with its ID.
func (s *Store) Add(ctx context.Context, t chaos.Termination) (chaos.Termination, error) {
	if err := validate(t); err != nil {
		return t, err
	}
	id, err := insertTermination(ctx, s.db, t)
	t.ID = id
	return t, err
}

// execer is what *sql.DB, *sql.Conn and *sql.Tx share.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func validate(t chaos.Termination) error {
	switch {
	case t.Group == "":
		return errors.New("records: termination has no group")
	case t.Outcome == "":
		return fmt.Errorf("records: termination of group %q has no outcome", t.Group)
	case t.At().IsZero():
		return fmt.Errorf("records: termination of group %q has neither a planned nor an executed time", t.Group)
	}
	return nil
}

func insertTermination(ctx context.Context, db execer, t chaos.Termination) (int64, error) {
	inst, err := json.Marshal(t.Instance)
	if err != nil {
		return 0, fmt.Errorf("records: encode instance %q: %w", t.Instance.ID, err)
	}
	action, err := encodeAction(t.Action)
	if err != nil {
		return 0, fmt.Errorf("records: encode action %s: %w", t.Action, err)
	}
	res, err := db.ExecContext(ctx, `INSERT INTO terminations
		(grp, instance_id, instance, kind, duration_ns, action, planned, executed, at, outcome, reason, error, recovery_ns)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.Group, t.Instance.ID, string(inst), string(t.Action.Kind), int64(t.Action.Duration), action,
		nullTime(t.Planned), nullTime(t.Executed), formatTime(t.At()),
		string(t.Outcome), string(t.Reason), t.Error, nullDuration(t.Recovery))
	if err != nil {
		return 0, fmt.Errorf("records: record termination of group %q: %w", t.Group, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("records: ID of the termination of group %q: %w", t.Group, err)
	}
	return id, nil
}

func nullDuration(d time.Duration) sql.NullInt64 {
	return sql.NullInt64{Int64: int64(d), Valid: d != 0}
}

// Terminations returns the terminations q selects, oldest first. Since
// compares with Termination.At (executed, else planned).
func (s *Store) Terminations(ctx context.Context, q chaos.Query) ([]chaos.Termination, error) {
	return queryTerminations(ctx, s.db, q, false)
}

// queryTerminations runs q; countingOnly keeps the terminations that count
// against gaps and maximums (chaos.Termination.Counts), in SQL.
func queryTerminations(ctx context.Context, db execer, q chaos.Query, countingOnly bool) ([]chaos.Termination, error) {
	var where []string
	var args []any
	if !q.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, formatTime(q.Since))
	}
	if q.Group != "" {
		where = append(where, "grp = ?")
		args = append(args, q.Group)
	}
	if q.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, string(q.Kind))
	}
	if countingOnly {
		// Keep in step with chaos.Termination.Counts.
		where = append(where, "(outcome IN (?, ?) OR (outcome = ? AND reason = ?))")
		args = append(args, string(chaos.Executed), string(chaos.Failed), string(chaos.Skipped), string(chaos.Leashed))
	}
	query := `SELECT id, grp, instance, kind, duration_ns, action, planned, executed, outcome, reason, error, recovery_ns
		FROM terminations`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY at, id"
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("records: query terminations: %w", err)
	}
	defer rows.Close()
	var out []chaos.Termination
	for rows.Next() {
		t, err := scanTermination(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("records: read terminations: %w", err)
	}
	return out, nil
}

func scanTermination(rows *sql.Rows) (chaos.Termination, error) {
	var (
		t                 chaos.Termination
		inst, kind, act   string
		dur               int64
		planned, executed sql.NullString
		outcome, reason   string
		recovery          sql.NullInt64
	)
	if err := rows.Scan(&t.ID, &t.Group, &inst, &kind, &dur, &act, &planned, &executed, &outcome, &reason, &t.Error, &recovery); err != nil {
		return t, fmt.Errorf("records: read termination: %w", err)
	}
	if err := json.Unmarshal([]byte(inst), &t.Instance); err != nil {
		return t, fmt.Errorf("records: termination of group %q: bad instance %q: %w", t.Group, inst, err)
	}
	var err error
	if t.Action, err = decodeAction(kind, dur, act); err != nil {
		return t, fmt.Errorf("records: termination of group %q: bad action %q: %w", t.Group, act, err)
	}
	t.Outcome, t.Reason = chaos.Outcome(outcome), chaos.Reason(reason)
	t.Recovery = time.Duration(recovery.Int64)
	if t.Planned, err = parseNullTime(planned); err != nil {
		return t, fmt.Errorf("records: termination of group %q: planned: %w", t.Group, err)
	}
	if t.Executed, err = parseNullTime(executed); err != nil {
		return t, fmt.Errorf("records: termination of group %q: executed: %w", t.Group, err)
	}
	return t, nil
}

// RecordIfAdmitted decides and records kill in one write transaction. It
// reads kill's group's history (its terminations that count against the
// gap and the daily maximum, oldest first), asks admit, and records kill
// executed at now: with kill's own Outcome (Executed when empty) if admit
// says yes, or as Skipped with admit's reason if not. While the global stop
// is on (SetStopped) admit is not asked and the kill is recorded as Skipped
// with reason stopped: the stop is read in the same transaction, so no kill
// admitted after a stop has been recorded. The returned termination is what
// was recorded, with its ID.
//
// The transaction starts with BEGIN IMMEDIATE, which takes the database's
// write lock before reading: a second monkey on the same file waits until
// the first has committed and then sees its kill, so two of them cannot
// both pass the minimum gap or the daily maximum. admit runs under the
// lock, so it should be quick and must not use the store.
//
// A kill that is admitted and then fails can be corrected with SetOutcome;
// it counts against the gap and the maximum either way.
func (s *Store) RecordIfAdmitted(ctx context.Context, kill chaos.Termination, now time.Time,
	admit func(history []chaos.Termination) (bool, chaos.Reason)) (chaos.Termination, error) {
	if now.IsZero() {
		return kill, errors.New("records: RecordIfAdmitted needs a time")
	}
	kill.Executed = now
	if kill.Group == "" {
		return kill, errors.New("records: termination has no group")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return kill, fmt.Errorf("records: get a connection: %w", err)
	}
	defer conn.Close()
	// database/sql's BeginTx says BEGIN (deferred), which takes the write
	// lock only at the first write, after the read: too late. Hence the
	// explicit statements on one pinned connection.
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return kill, fmt.Errorf("records: begin admission of group %q: %w", kill.Group, err)
	}
	committed := false
	defer func() {
		if !committed {
			// A fresh context: ctx may be what was cancelled.
			conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	stopped, err := readStopped(ctx, conn)
	if err != nil {
		return kill, err
	}
	history, err := queryTerminations(ctx, conn, chaos.Query{Group: kill.Group}, true)
	if err != nil {
		return kill, err
	}
	if stopped {
		kill.Outcome, kill.Reason, kill.Error = chaos.Skipped, chaos.Stopped, ""
	} else if ok, why := admit(history); ok {
		if kill.Outcome == "" {
			kill.Outcome = chaos.Executed
		}
	} else {
		kill.Outcome, kill.Reason, kill.Error = chaos.Skipped, why, ""
	}
	if kill.ID, err = insertTermination(ctx, conn, kill); err != nil {
		return kill, err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return kill, fmt.Errorf("records: commit admission of group %q: %w", kill.Group, err)
	}
	committed = true
	return kill, nil
}

// SetOutcome corrects the outcome, reason, error, instance and executed
// time of the recorded termination t.ID (as RecordIfAdmitted returned it):
// the daemon records a kill as executed when it is admitted, and only then
// learns whether the action worked, and when its fault was in place.
func (s *Store) SetOutcome(ctx context.Context, t chaos.Termination) error {
	inst, err := json.Marshal(t.Instance)
	if err != nil {
		return fmt.Errorf("records: encode instance %q: %w", t.Instance.ID, err)
	}
	return s.updateOne(ctx, t.ID, "outcome = ?, reason = ?, error = ?, instance_id = ?, instance = ?, executed = ?, at = ?",
		string(t.Outcome), string(t.Reason), t.Error, t.Instance.ID, string(inst), nullTime(t.Executed), formatTime(t.At()))
}

// SetRecovery records how long the group took to recover after the
// termination id.
func (s *Store) SetRecovery(ctx context.Context, id int64, recovery time.Duration) error {
	return s.updateOne(ctx, id, "recovery_ns = ?", int64(recovery))
}

func (s *Store) updateOne(ctx context.Context, id int64, set string, args ...any) error {
	res, err := s.db.ExecContext(ctx, `UPDATE terminations SET `+set+` WHERE id = ?`, append(args, id)...)
	if err != nil {
		return fmt.Errorf("records: update termination %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("records: no termination %d", id)
	}
	return nil
}

// SetStopped turns the global stop on or off. It persists, so that a stop
// outlives the daemon and blocks every monkey sharing the database.
func (s *Store) SetStopped(ctx context.Context, stopped bool) error {
	v := "0"
	if stopped {
		v = "1"
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO state (key, value) VALUES ('stopped', ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, v); err != nil {
		return fmt.Errorf("records: set the global stop: %w", err)
	}
	return nil
}

// Stopped reports whether the global stop is on.
func (s *Store) Stopped(ctx context.Context) (bool, error) { return readStopped(ctx, s.db) }

func readStopped(ctx context.Context, db execer) (bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT value FROM state WHERE key = 'stopped'`)
	if err != nil {
		return false, fmt.Errorf("records: read the global stop: %w", err)
	}
	defer rows.Close()
	stopped := false
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return false, fmt.Errorf("records: read the global stop: %w", err)
		}
		stopped = v == "1"
	}
	return stopped, rows.Err()
}

// RecordPlan stores day's plan, replacing any plan stored for that day
// before (a restarted daemon re-plans the same day the same way).
func (s *Store) RecordPlan(ctx context.Context, day chaos.Date, plan []chaos.PlannedKill) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("records: begin plan of %s: %w", day, err)
	}
	defer tx.Rollback()
	// The cascade deletes the day's old kills.
	if _, err := tx.ExecContext(ctx, "DELETE FROM plan_days WHERE day = ?", day.String()); err != nil {
		return fmt.Errorf("records: replace plan of %s: %w", day, err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO plan_days (day, recorded) VALUES (?, ?)",
		day.String(), formatTime(s.now())); err != nil {
		return fmt.Errorf("records: record plan of %s: %w", day, err)
	}
	for i, k := range plan {
		if k.Day != day {
			return fmt.Errorf("records: plan of %s: kill %d is for %s", day, i, k.Day)
		}
		action, err := encodeAction(k.Action)
		if err != nil {
			return fmt.Errorf("records: plan of %s, kill %d: %w", day, i, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO plan_kills
			(day, seq, grp, at, kind, duration_ns, action, pick, skip) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			day.String(), i, k.Group, formatTime(k.At), string(k.Action.Kind), int64(k.Action.Duration), action,
			int64(k.Pick), string(k.Skip)); err != nil {
			return fmt.Errorf("records: record plan of %s, kill %d: %w", day, i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("records: commit plan of %s: %w", day, err)
	}
	return nil
}

// Plan returns day's stored plan; found is false when none is stored. The
// kills' times are in UTC: the store does not know the calendar's zone.
func (s *Store) Plan(ctx context.Context, day chaos.Date) (plan []chaos.PlannedKill, found bool, err error) {
	var recorded string
	err = s.db.QueryRowContext(ctx, "SELECT recorded FROM plan_days WHERE day = ?", day.String()).Scan(&recorded)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("records: read plan of %s: %w", day, err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT grp, at, kind, duration_ns, action, pick, skip
		FROM plan_kills WHERE day = ? ORDER BY seq`, day.String())
	if err != nil {
		return nil, false, fmt.Errorf("records: read plan of %s: %w", day, err)
	}
	defer rows.Close()
	for rows.Next() {
		k := chaos.PlannedKill{Day: day}
		var at, kind, act, skip string
		var dur, pick int64
		if err := rows.Scan(&k.Group, &at, &kind, &dur, &act, &pick, &skip); err != nil {
			return nil, false, fmt.Errorf("records: read plan of %s: %w", day, err)
		}
		if k.At, err = parseTime(at); err != nil {
			return nil, false, fmt.Errorf("records: plan of %s, group %q: %w", day, k.Group, err)
		}
		if k.Action, err = decodeAction(kind, dur, act); err != nil {
			return nil, false, fmt.Errorf("records: plan of %s, group %q: bad action %q: %w", day, k.Group, act, err)
		}
		k.Pick, k.Skip = uint64(pick), chaos.Reason(skip)
		plan = append(plan, k)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("records: read plan of %s: %w", day, err)
	}
	return plan, true, nil
}

// Prune deletes the terminations older than the retention (by
// Termination.At) and the plans of days that ended before it, as of now.
// It returns how many terminations and plan days it deleted. With
// retention 0 it deletes nothing.
func (s *Store) Prune(ctx context.Context, now time.Time) (terminations, days int64, err error) {
	if s.retention == 0 {
		return 0, 0, nil
	}
	cutoff := now.Add(-s.retention).UTC()
	res, err := s.db.ExecContext(ctx, "DELETE FROM terminations WHERE at < ?", formatTime(cutoff))
	if err != nil {
		return 0, 0, fmt.Errorf("records: prune terminations before %s: %w", formatTime(cutoff), err)
	}
	terminations, _ = res.RowsAffected()
	// Plan days have no zone here; a day goes once the whole of it, in any
	// zone, is older than the cutoff: compare with the day before the
	// cutoff's UTC date.
	res, err = s.db.ExecContext(ctx, "DELETE FROM plan_days WHERE day < ?", chaos.DateOf(cutoff).AddDays(-1).String())
	if err != nil {
		return terminations, 0, fmt.Errorf("records: prune plans before %s: %w", formatTime(cutoff), err)
	}
	days, _ = res.RowsAffected()
	return terminations, days, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func nullTime(t time.Time) sql.NullString {
	if t.IsZero() {
		return sql.NullString{}
	}
	return sql.NullString{String: formatTime(t), Valid: true}
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}
