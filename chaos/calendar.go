package chaos

import "time"

// Calendar says on which days and in which hours kills may happen. The
// zero Calendar is not usable; take DefaultCalendar or a parsed Config's.
type Calendar struct {
	Zone      string          // IANA name, e.g. America/Los_Angeles
	Location  *time.Location  // loaded from Zone
	WorkDays  [7]bool         // indexed by time.Weekday
	StartHour int             // kills at or after StartHour:00 ...
	EndHour   int             // ... and before EndHour:00 (24 is midnight)
	Builtin   HolidayList     // computed per year
	Dates     map[Date]string // listed dates and iCalendar days, with names; nil when none
}

// DefaultCalendar is Monday to Friday, 09:00 to 15:00 in
// America/Los_Angeles, except on US federal holidays: the hours and zone both
// Simian Army and Chaos Monkey 2 shipped with.
func DefaultCalendar() (Calendar, error) {
	loc, err := time.LoadLocation(DefaultZone)
	if err != nil {
		return Calendar{}, err
	}
	c := Calendar{Zone: DefaultZone, Location: loc, StartHour: 9, EndHour: 15, Builtin: USFederal}
	for wd := time.Monday; wd <= time.Friday; wd++ {
		c.WorkDays[wd] = true
	}
	return c, nil
}

// DefaultZone is the calendar's default time zone.
const DefaultZone = "America/Los_Angeles"

// HolidayName returns the name of the holiday on d, or "" when d is none.
// Listed and iCalendar dates win over the built-in list.
func (c *Calendar) HolidayName(d Date) string {
	if name, ok := c.Dates[d]; ok {
		if name == "" {
			name = "listed holiday"
		}
		return name
	}
	for _, h := range c.Builtin.Holidays(d.Year) {
		if h.Date == d {
			return h.Name
		}
	}
	return ""
}

// DayOff returns why no kill may happen on d: Holiday, OffDay, or "" for a
// work day. A holiday on a day that is off anyway reports Holiday.
func (c *Calendar) DayOff(d Date) Reason {
	if c.HolidayName(d) != "" {
		return Holiday
	}
	if !c.WorkDays[d.Weekday()] {
		return OffDay
	}
	return ""
}

// IsWorkDay reports whether d is a work day that is not a holiday.
func (c *Calendar) IsWorkDay(d Date) bool { return c.DayOff(d) == "" }

// Window returns the instants between which kills may happen on d:
// [start, end), the first instants at which the local clock reads
// StartHour:00 and EndHour:00 on d (see Date.At). A DST change inside the
// window makes it an hour shorter or longer, and every instant in it still
// reads inside the hours on the local clock. When a change swallows the whole
// window (02:00 to 03:00 on a spring-forward day), ok is false.
func (c *Calendar) Window(d Date) (start, end time.Time, ok bool) {
	start, end = d.At(c.StartHour, c.Location), d.At(c.EndHour, c.Location)
	return start, end, end.After(start)
}

// InHours reports whether t falls inside the hours on its own local date.
func (c *Calendar) InHours(t time.Time) bool {
	start, end, ok := c.Window(DateOf(t.In(c.Location)))
	return ok && !t.Before(start) && t.Before(end)
}

// WorkDaysAfter counts the work days w with from < w <= to: 0 when both are
// the same day, 1 from one work day to the next. It is the unit of
// min_time_between_kills. It stops counting at limit, so that a kill long
// ago costs no more than a recent one.
func (c *Calendar) WorkDaysAfter(from, to Date, limit int) int {
	n := 0
	for d := from.AddDays(1); n < limit && !to.Before(d); d = d.AddDays(1) {
		if c.IsWorkDay(d) {
			n++
		}
	}
	return n
}
