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

// At returns the instant of hour:00 on d in loc. Hour 24 is the next
// midnight. An hour skipped by a DST change moves forward, as time.Date does.
func (d Date) At(hour int, loc *time.Location) time.Time {
	return time.Date(d.Year, d.Month, d.Day, hour, 0, 0, 0, loc)
}

// daysBetween returns e - d in days.
func daysBetween(d, e Date) int {
	return int(e.midnightUTC().Sub(d.midnightUTC()).Hours() / 24)
}
