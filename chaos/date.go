package chaos

import (
	"fmt"
	"time"
)

// Date is a day of the civil calendar, with no time and no zone: a work day,
// a holiday. Times of day are built from it in the calendar's zone with
// time.Date, which is what keeps windows right across DST changes.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf returns the date of t in t's location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{y, m, d}
}

// ParseDate reads YYYY-MM-DD and refuses dates that do not exist (2026-02-30).
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Date{}, fmt.Errorf("%q is not a date in the form YYYY-MM-DD", s)
	}
	return DateOf(t), nil
}

func (d Date) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Day)
}

// MarshalText writes YYYY-MM-DD, in JSON too.
func (d Date) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads YYYY-MM-DD.
func (d *Date) UnmarshalText(b []byte) error {
	day, err := ParseDate(string(b))
	if err == nil {
		*d = day
	}
	return err
}

// midnightUTC is the date as a UTC instant, for date arithmetic only: UTC has
// no DST, so adding 24 hours always moves one day.
func (d Date) midnightUTC() time.Time {
	return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC)
}

// AddDays returns the date n days later (earlier when n < 0).
func (d Date) AddDays(n int) Date { return DateOf(d.midnightUTC().AddDate(0, 0, n)) }

// Weekday returns the day of the week.
func (d Date) Weekday() time.Weekday { return d.midnightUTC().Weekday() }

// Before reports whether d is earlier than e.
func (d Date) Before(e Date) bool { return d.midnightUTC().Before(e.midnightUTC()) }

// At returns the first instant at which the clock in loc reads hour:00 or
// later on d; hour 24 is the next midnight. It is time.Date with the DST
// cases pinned down, which time.Date leaves open: when a change skips
// hour:00 (02:00 on a spring-forward day), the answer is the instant of the
// change; when a change repeats it (a fall-back day), the earlier of the
// two.
func (d Date) At(hour int, loc *time.Location) time.Time {
	if hour == 24 {
		d, hour = d.AddDays(1), 0
	}
	want := time.Date(d.Year, d.Month, d.Day, hour, 0, 0, 0, time.UTC)
	t := time.Date(d.Year, d.Month, d.Day, hour, 0, 0, 0, loc)
	if c := clock(t); !c.Equal(want) {
		// hour:00 falls in a gap; the clock first reads past it at the
		// change, which is where t's zone period ends or starts.
		start, end := t.ZoneBounds()
		if c.Before(want) && !end.IsZero() {
			t = end
		} else if !start.IsZero() {
			t = start
		}
	}
	// A fall-back change just before t means the clock may have read
	// hour:00 once already, in the previous period.
	if start, _ := t.ZoneBounds(); !start.IsZero() {
		_, prev := start.Add(-time.Nanosecond).Zone()
		if _, cur := t.Zone(); prev > cur {
			alt := t.Add(-time.Duration(prev-cur) * time.Second)
			if alt.Before(start) && clock(alt).Equal(want) {
				t = alt
			}
		}
	}
	return t
}

// clock returns t's wall clock reading in its own location, as a UTC time,
// so that readings compare without zones getting in the way.
func clock(t time.Time) time.Time {
	y, m, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, m, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// daysBetween returns e - d in days.
func daysBetween(d, e Date) int {
	return int(e.midnightUTC().Sub(d.midnightUTC()).Hours() / 24)
}
