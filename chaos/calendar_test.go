package chaos

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests use, whatever the machine has
)

func d(s string) Date {
	day, err := ParseDate(s)
	if err != nil {
		panic(err)
	}
	return day
}

func TestNthWeekday(t *testing.T) {
	for _, tc := range []struct {
		year int
		m    time.Month
		wd   time.Weekday
		n    int
		want string
	}{
		{2026, time.November, time.Thursday, 4, "2026-11-26"}, // Thanksgiving
		{2024, time.November, time.Thursday, 4, "2024-11-28"},
		{2026, time.May, time.Monday, -1, "2026-05-25"}, // Memorial Day
		{2027, time.May, time.Monday, -1, "2027-05-31"},
		{2026, time.December, time.Thursday, -1, "2026-12-31"}, // month 13 wraps
		{2026, time.September, time.Monday, 1, "2026-09-07"},
		{2026, time.June, time.Monday, 1, "2026-06-01"}, // the 1st itself
	} {
		if got := NthWeekday(tc.year, tc.m, tc.wd, tc.n); got != d(tc.want) {
			t.Errorf("NthWeekday(%d, %s, %s, %d) = %s, want %s", tc.year, tc.m, tc.wd, tc.n, got, tc.want)
		}
	}
}

func TestUSFederalHolidays(t *testing.T) {
	fed := USFederal.Holidays
	names := func(year int) map[Date]string {
		m := map[Date]string{}
		for _, h := range fed(year) {
			m[h.Date] = h.Name
		}
		return m
	}
	for _, tc := range []struct {
		date, name string // name "" means: not a holiday
	}{
		{"2026-01-01", "New Year's Day"},
		{"2026-01-19", "Martin Luther King Jr. Day"},
		{"2026-02-16", "Washington's Birthday"},
		{"2026-05-25", "Memorial Day"},
		{"2026-06-19", "Juneteenth National Independence Day"},
		{"2026-07-03", "Independence Day (observed)"}, // July 4th 2026 is a Saturday
		{"2026-07-04", "Independence Day"},
		{"2027-07-05", "Independence Day (observed)"}, // July 4th 2027 is a Sunday
		{"2027-07-02", ""},
		{"2026-09-07", "Labor Day"},
		{"2026-10-12", "Columbus Day"},
		{"2026-11-11", "Veterans Day"},
		{"2026-11-26", "Thanksgiving Day"},
		{"2026-11-27", ""}, // federal offices work the day after
		{"2026-12-25", "Christmas Day"},
		{"2022-12-26", "Christmas Day (observed)"},
		{"2022-06-20", "Juneteenth National Independence Day (observed)"},
		{"2020-06-19", ""},                          // not federal before 2021
		{"2021-12-31", "New Year's Day (observed)"}, // Jan 1 2022 is a Saturday
		{"2023-01-02", "New Year's Day (observed)"}, // Jan 1 2023 is a Sunday
		{"2026-12-24", ""},
	} {
		day := d(tc.date)
		if got := names(day.Year)[day]; got != tc.name {
			t.Errorf("%s: got %q, want %q", tc.date, got, tc.name)
		}
	}
	// From 2021 on, every year has eleven holidays, each with a weekday on
	// which it is observed, and Holidays(year) holds only dates of year.
	for year := 2021; year <= 2060; year++ {
		weekday := map[string]bool{}
		for _, h := range USFederal.rawHolidays(year) {
			base := strings.TrimSuffix(h.Name, " (observed)")
			if wd := h.Date.Weekday(); wd != time.Saturday && wd != time.Sunday {
				weekday[base] = true
			}
		}
		if len(weekday) != 11 {
			t.Errorf("%d: %d holidays observed on a weekday, want 11: %v", year, len(weekday), weekday)
		}
		for _, h := range fed(year) {
			if h.Date.Year != year {
				t.Errorf("%d: %s dated %s", year, h.Name, h.Date)
			}
		}
	}
}

func TestSimianArmyHolidays(t *testing.T) {
	in := func(day string) bool {
		for _, h := range SimianArmy.Holidays(d(day).Year) {
			if h.Date == d(day) {
				return true
			}
		}
		return false
	}
	for _, day := range []string{
		"2026-11-26", "2026-11-27", "2026-12-24", "2026-12-25", "2026-12-26", "2026-12-31",
		"2024-11-29", // the day after Thanksgiving 2024, not the 4th Friday (Nov 22)
		"2026-07-03",
	} {
		if !in(day) {
			t.Errorf("%s is not in the simian-army list", day)
		}
	}
	for _, day := range []string{"2024-11-22", "2026-06-19"} {
		if in(day) {
			t.Errorf("%s is in the simian-army list", day)
		}
	}
	if len(NoHolidays.Holidays(2026)) != 0 {
		t.Error("none has holidays")
	}
}

func TestCalendarDays(t *testing.T) {
	cal, err := DefaultCalendar()
	if err != nil {
		t.Fatal(err)
	}
	cal.Dates = map[Date]string{d("2026-03-10"): "team offsite"}
	for _, tc := range []struct {
		day  string
		want Reason
	}{
		{"2026-03-09", ""},
		{"2026-03-10", Holiday},
		{"2026-03-07", OffDay},
		{"2026-03-08", OffDay},
		{"2026-11-26", Holiday},
		{"2026-07-04", Holiday}, // a holiday on a Saturday says holiday
	} {
		if got := cal.DayOff(d(tc.day)); got != tc.want {
			t.Errorf("DayOff(%s) = %q, want %q", tc.day, got, tc.want)
		}
	}
	if got := cal.HolidayName(d("2026-03-10")); got != "team offsite" {
		t.Errorf("HolidayName = %q", got)
	}
	// From Friday to Monday is one work day; Wednesday the 11th is two
	// after Monday the 9th because the 10th is off.
	for _, tc := range []struct {
		from, to string
		want     int
	}{
		{"2026-03-06", "2026-03-09", 1},
		{"2026-03-09", "2026-03-09", 0},
		{"2026-03-09", "2026-03-11", 1},
		{"2026-03-09", "2026-03-12", 2},
		{"2026-03-12", "2026-03-09", 0},
	} {
		if got := cal.WorkDaysAfter(d(tc.from), d(tc.to), 99); got != tc.want {
			t.Errorf("WorkDaysAfter(%s, %s) = %d, want %d", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestWindowAcrossDST(t *testing.T) {
	la, _ := time.LoadLocation("America/Los_Angeles")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, tc := range []struct {
		loc        *time.Location
		day        string
		start, end int
		want       time.Duration // elapsed length of the window
		ok         bool
	}{
		{la, "2026-03-08", 9, 15, 6 * time.Hour, true},  // spring forward at 02:00, before the window
		{la, "2026-03-08", 1, 4, 2 * time.Hour, true},   // the window loses an hour
		{la, "2026-03-08", 2, 3, 0, false},              // 02:00-03:00 does not exist
		{la, "2026-11-01", 1, 4, 4 * time.Hour, true},   // fall back: 01:00-02:00 twice
		{la, "2026-11-01", 0, 24, 25 * time.Hour, true}, // the 25-hour day
		{berlin, "2026-03-29", 0, 24, 23 * time.Hour, true},
		{berlin, "2026-10-25", 2, 3, 2 * time.Hour, true},
	} {
		cal := Calendar{Location: tc.loc, StartHour: tc.start, EndHour: tc.end}
		s, e, ok := cal.Window(d(tc.day))
		if ok != tc.ok || (ok && e.Sub(s) != tc.want) {
			t.Errorf("%s %s %d-%d: window %v to %v (%v, ok %v), want %v ok %v", tc.loc, tc.day, tc.start, tc.end, s, e, e.Sub(s), ok, tc.want, tc.ok)
		}
	}
}
