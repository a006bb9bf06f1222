package chaos

import (
	"sort"
	"sync"
	"time"
)

// HolidayList names a built-in list of holidays, computed per year.
type HolidayList string

// The built-in lists.
const (
	// USFederal is the eleven US federal holidays (5 U.S.C. 6103), each on its
	// day and, when that is a Saturday or Sunday, also on the Friday before
	// or the Monday after, the day federal offices close.
	USFederal HolidayList = "us-federal"
	// SimianArmy is the list Simian Army's calendar used: the federal
	// holidays of its time (no Juneteenth) plus the days engineers are
	// likely away: the day after Thanksgiving, December 24, 26 and 31.
	SimianArmy HolidayList = "simian-army"
	// NoHolidays turns the built-in list off; listed dates and the
	// iCalendar file still apply.
	NoHolidays HolidayList = "none"
)

// HolidayLists lists the built-in lists, the default first.
var HolidayLists = []HolidayList{USFederal, SimianArmy, NoHolidays}

// NamedDate is one holiday: its date and name.
type NamedDate struct {
	Date Date
	Name string
}

// Holidays returns the list's holidays that fall in year, sorted by date.
// The slice is shared between callers: do not modify it.
// An observed day can fall in the year before its holiday (New Year's Day on
// a Saturday is observed on December 31), so the next year's list is looked
// at too.
func (l HolidayList) Holidays(year int) []NamedDate {
	key := holidayKey{l, year}
	holidayMu.Lock()
	defer holidayMu.Unlock()
	if hs, ok := holidayCache[key]; ok {
		return hs
	}
	hs := l.compute(year)
	if len(holidayCache) > 1000 { // years are few; bound it anyway
		clear(holidayCache)
	}
	holidayCache[key] = hs
	return hs
}

// The lists are pure functions of the year; the calendar asks for the same
// year for every day it looks at, so they are kept.
type holidayKey struct {
	list HolidayList
	year int
}

var (
	holidayMu    sync.Mutex
	holidayCache = map[holidayKey][]NamedDate{}
)

func (l HolidayList) compute(year int) []NamedDate {
	var out []NamedDate
	for _, y := range []int{year, year + 1} {
		for _, h := range l.rawHolidays(y) {
			if h.Date.Year == year {
				out = append(out, h)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Date.Before(out[j].Date) })
	return out
}

// rawHolidays returns the holidays that belong to year, some of whose
// observed days may fall in the year before.
func (l HolidayList) rawHolidays(year int) []NamedDate {
	var hs []NamedDate
	fixed := func(m time.Month, d int, name string) {
		hs = append(hs, NamedDate{Date{year, m, d}, name})
	}
	// observed adds the day itself and, on a weekend, the weekday federal
	// offices close instead. The day itself stays, for calendars with weekend
	// work days.
	observed := func(m time.Month, d int, name string) {
		day := Date{year, m, d}
		hs = append(hs, NamedDate{day, name})
		switch day.Weekday() {
		case time.Saturday:
			hs = append(hs, NamedDate{day.AddDays(-1), name + " (observed)"})
		case time.Sunday:
			hs = append(hs, NamedDate{day.AddDays(1), name + " (observed)"})
		}
	}
	nth := func(m time.Month, wd time.Weekday, n int, name string) {
		hs = append(hs, NamedDate{NthWeekday(year, m, wd, n), name})
	}
	switch l {
	case USFederal:
		observed(time.January, 1, "New Year's Day")
		nth(time.January, time.Monday, 3, "Martin Luther King Jr. Day")
		nth(time.February, time.Monday, 3, "Washington's Birthday")
		nth(time.May, time.Monday, -1, "Memorial Day")
		if year >= 2021 { // made a federal holiday in June 2021
			observed(time.June, 19, "Juneteenth National Independence Day")
		}
		observed(time.July, 4, "Independence Day")
		nth(time.September, time.Monday, 1, "Labor Day")
		nth(time.October, time.Monday, 2, "Columbus Day")
		observed(time.November, 11, "Veterans Day")
		nth(time.November, time.Thursday, 4, "Thanksgiving Day")
		observed(time.December, 25, "Christmas Day")
	case SimianArmy:
		observed(time.January, 1, "New Year's Day")
		nth(time.January, time.Monday, 3, "Martin Luther King Jr. Day")
		nth(time.February, time.Monday, 3, "Presidents' Day")
		nth(time.May, time.Monday, -1, "Memorial Day")
		observed(time.July, 4, "Independence Day")
		nth(time.September, time.Monday, 1, "Labor Day")
		nth(time.October, time.Monday, 2, "Columbus Day")
		observed(time.November, 11, "Veterans Day")
		thanksgiving := NthWeekday(year, time.November, time.Thursday, 4)
		hs = append(hs, NamedDate{thanksgiving, "Thanksgiving Day"},
			// Simian Army took the 4th Friday, which is a week early when
			// November starts on a Friday; the day after is what it meant.
			NamedDate{thanksgiving.AddDays(1), "Day after Thanksgiving"})
		fixed(time.December, 24, "Christmas Eve")
		fixed(time.December, 25, "Christmas Day")
		fixed(time.December, 26, "Day after Christmas")
		fixed(time.December, 31, "New Year's Eve")
	}
	return hs
}

// NthWeekday returns the n-th wd of the month (n = 1..5), or the last one
// when n is -1.
func NthWeekday(year int, m time.Month, wd time.Weekday, n int) Date {
	if n < 0 {
		// AddDays normalizes month 13 of December to January.
		last := Date{year, m + 1, 1}.AddDays(-1)
		back := (int(last.Weekday()) - int(wd) + 7) % 7
		return last.AddDays(-back)
	}
	first := Date{year, m, 1}
	ahead := (int(wd) - int(first.Weekday()) + 7) % 7
	return first.AddDays(ahead + 7*(n-1))
}
