package delayqueue

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Cron returns the schedule of a standard five-field cron expression,
// read in loc:
//
//	minute hour day-of-month month day-of-week
//	0-59   0-23 1-31         1-12  0-7 (0 and 7 are Sunday)
//
// Each field is * or a comma-separated list of values and ranges (1-5),
// each of them (and *) optionally with a step (*/15, 9-17/2). Months
// and days of the week may be given by their English three-letter names,
// in any case (jan-dec, sun-sat). A step needs * or a range before it, as
// in Vixie cron: 5/10 is invalid. Cron also accepts @yearly (or
// @annually), @monthly, @weekly, @daily (or @midnight) and @hourly.
//
// A day matches as in Vixie cron: when the day-of-month and day-of-week
// fields both start with something other than *, a day matches if either
// does (0 0 1,15 * 1 fires on the 1st, the 15th and every Monday);
// otherwise it must match both (0 0 */2 * 1 fires on odd-numbered days
// that are Mondays).
//
// Daylight-saving changes are handled as Vixie cron does. A job is
// "wildcard" if its minute or hour field starts with * (*/5 * * * *,
// 0 * * * *, @hourly), and "fixed-time" otherwise (30 2 * * *, @daily).
// Wildcard jobs follow the clock: wall times the clock skips do not fire,
// and wall times it repeats fire twice (once per occurrence). Fixed-time
// jobs run once per matching day: a wall time the clock skips fires at
// the instant the clock jumps (30 2 * * * fires at 03:00 on the day
// America/New_York springs from 02:00 to 03:00, and several skipped times
// fire once, together), and a wall time the clock repeats fires at its
// first occurrence only. A change of three hours or more is treated as a
// correction of the clock, not a daylight-saving change: every job then
// follows the new clock, like a wildcard one.
//
// An expression that can never fire (0 0 30 2 *), a field out of range,
// an unknown name or a nil loc is ErrInvalid.
func Cron(expr string, loc *time.Location) (Schedule, error) {
	if loc == nil {
		return nil, fmt.Errorf("%w: cron %q: nil location", ErrInvalid, expr)
	}
	c, err := parseCron(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: %v", ErrInvalid, expr, err)
	}
	c.expr, c.loc = expr, loc
	return c, nil
}

// cronSchedule is a parsed cron expression: one bit per allowed value.
type cronSchedule struct {
	expr                     string
	loc                      *time.Location
	minute, hour, dom, month uint64 // bits 0-59, 0-23, 1-31, 1-12
	dow                      uint64 // bits 0-6, Sunday 0
	domStar, dowStar         bool   // the field starts with '*'
	wild                     bool   // the minute or hour field starts with '*'
}

var _ Schedule = (*cronSchedule)(nil)

// String returns the expression and the location.
func (c *cronSchedule) String() string { return "cron " + c.expr + " in " + c.loc.String() }

func (c *cronSchedule) check() error {
	if c == nil || c.loc == nil {
		return fmt.Errorf("%w: nil cron schedule", ErrInvalid)
	}
	return nil
}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is value i+offset
	offset   int
}

var cronFields = [5]cronField{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, offset: 1,
		names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{name: "day of week", min: 0, max: 7,
		names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

func parseCron(expr string) (*cronSchedule, error) {
	spec := strings.TrimSpace(expr)
	if strings.HasPrefix(spec, "@") {
		m, ok := cronMacros[strings.ToLower(spec)]
		if !ok {
			return nil, fmt.Errorf("unknown descriptor %s", spec)
		}
		spec = m
	}
	fields := strings.Fields(spec)
	if len(fields) != 5 {
		return nil, fmt.Errorf("%d fields, want 5 (minute hour day-of-month month day-of-week)", len(fields))
	}
	var set [5]uint64
	for i, f := range fields {
		b, err := parseCronField(f, cronFields[i])
		if err != nil {
			return nil, fmt.Errorf("%s field %q: %v", cronFields[i].name, f, err)
		}
		set[i] = b
	}
	c := &cronSchedule{
		minute: set[0], hour: set[1], dom: set[2], month: set[3],
		dow:     (set[4] | set[4]>>7) & 0x7f, // 7 is Sunday too
		domStar: fields[2][0] == '*',
		dowStar: fields[4][0] == '*',
		wild:    fields[0][0] == '*' || fields[1][0] == '*',
	}
	if !c.canFire() {
		return nil, fmt.Errorf("no month has the day of the month it names, so it never fires")
	}
	return c, nil
}

// canFire reports whether some day matches. Only a day-of-month field
// that does not start with * and a day-of-week field that does can rule
// out every day (0 0 30 2 *): otherwise some weekday matches, or the 1st
// of the month (which every *-started day-of-month field holds) falls on
// every weekday of every month in some year.
func (c *cronSchedule) canFire() bool {
	if c.domStar || !c.dowStar {
		return true
	}
	longest := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if c.month&(1<<m) != 0 && c.dom&(1<<(longest[m]+1)-1) != 0 {
			return true
		}
	}
	return false
}

func parseCronField(s string, f cronField) (uint64, error) {
	var set uint64
	for _, item := range strings.Split(s, ",") {
		rng, stepStr, hasStep := strings.Cut(item, "/")
		lo, hi := f.min, f.max
		if rng != "*" {
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = parseCronValue(a, f); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = parseCronValue(b, f); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("range %s runs backwards", rng)
				}
			} else if hasStep {
				return 0, fmt.Errorf("step %s needs * or a range before it", item)
			}
		}
		step := 1
		if hasStep {
			n, err := parseCronNumber(stepStr)
			if err != nil || n < 1 || n > f.max-f.min+1 {
				return 0, fmt.Errorf("step %q must be a number from 1 to %d", stepStr, f.max-f.min+1)
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func parseCronValue(s string, f cronField) (int, error) {
	if n, err := parseCronNumber(s); err == nil {
		if n < f.min || n > f.max {
			return 0, fmt.Errorf("%s is out of range %d-%d", s, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return i + f.offset, nil
		}
	}
	if s == "" {
		return 0, fmt.Errorf("empty value")
	}
	return 0, fmt.Errorf("%q is not a %s", s, f.name)
}

// parseCronNumber reads a decimal number: digits only, no sign.
func parseCronNumber(s string) (int, error) {
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(s)
}

// cronHorizon bounds the search for the next firing. Every expression Cron
// accepts fires far more often (Feb 29 at worst: 8 years apart around
// 2100; a first of a month on a given weekday: 12).
const cronHorizon = 50 * 366 * 24 * time.Hour

// cronMaxDSTChange is the largest clock change treated as a daylight-saving
// change; larger ones are corrections of the clock (Vixie cron: 3 hours).
const cronMaxDSTChange = 3 * time.Hour

// Next returns the first firing strictly after after, in the schedule's
// location.
//
// It walks the zone periods of the location (ZoneBounds) from after: in
// one period the UTC offset is fixed, so wall times and instants map one
// to one and the search for a matching wall time is plain calendar
// arithmetic (done on wall times held in UTC). A fixed-time job skips the
// wall times that repeat those of the period before (a fall-back), and
// fires at the end of a period for the wall times the next one skips (a
// spring-forward).
func (c *cronSchedule) Next(after time.Time) time.Time {
	if c == nil || c.loc == nil {
		return time.Time{}
	}
	limit := after.Add(cronHorizon)
	cur := after
	for cur.Before(limit) {
		lt := cur.In(c.loc)
		_, offSec := lt.Zone()
		off := time.Duration(offSec) * time.Second
		start, end := lt.ZoneBounds()

		var lo time.Time
		if cur.Equal(after) {
			lo = ceilMinute(wallTime(after, off).Add(time.Nanosecond)) // strictly after
		} else {
			lo = ceilMinute(wallTime(cur, off)) // cur starts a period: it may fire
		}
		hi := wallTime(limit, off)
		if !end.IsZero() && end.Before(limit) {
			hi = wallTime(end, off)
		}
		// Wall times before repeated were already shown by the period
		// before, whose offset was larger (the clock went back).
		var repeated time.Time
		if !start.IsZero() && !c.wild {
			_, prevSec := start.Add(-time.Nanosecond).In(c.loc).Zone()
			if back := time.Duration(prevSec)*time.Second - off; back > 0 && back < cronMaxDSTChange {
				repeated = wallTime(start, off+back)
			}
		}
		for {
			w, ok := c.nextWall(lo, hi)
			if !ok {
				break
			}
			if w.Before(repeated) {
				lo = ceilMinute(repeated)
				continue
			}
			return w.Add(-off).In(c.loc)
		}
		if end.IsZero() || !end.Before(limit) {
			return time.Time{}
		}
		// The clock jumps forward at end: a fixed-time job fires then for
		// the wall times it skips.
		_, nextSec := end.In(c.loc).Zone()
		if jump := time.Duration(nextSec)*time.Second - off; !c.wild && jump > 0 && jump < cronMaxDSTChange {
			if _, ok := c.nextWall(ceilMinute(wallTime(end, off)), wallTime(end, off+jump)); ok {
				return end.In(c.loc)
			}
		}
		cur = end
	}
	return time.Time{}
}

// wallTime returns the wall clock of instant t at UTC offset off, as a
// time in UTC.
func wallTime(t time.Time, off time.Duration) time.Time { return t.Add(off).UTC() }

// ceilMinute rounds a time in UTC up to the minute.
func ceilMinute(t time.Time) time.Time {
	m := t.Truncate(time.Minute)
	if m.Before(t) {
		m = m.Add(time.Minute)
	}
	return m
}

// nextWall returns the first wall time in [lo, hi) that matches, lo and
// hi being wall times held in UTC and lo on a minute.
func (c *cronSchedule) nextWall(lo, hi time.Time) (time.Time, bool) {
	t := lo
	for t.Before(hi) {
		y, mo, d := t.Date()
		h, mi := t.Hour(), t.Minute()
		switch {
		case c.month&(1<<mo) == 0:
			t = time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(d, t.Weekday()):
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		case c.hour&(1<<h) == 0:
			t = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
		case c.minute&(1<<mi) == 0:
			rest := c.minute >> mi // bit 0 is minute mi, which is not set
			if rest == 0 {
				t = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
			} else {
				t = time.Date(y, mo, d, h, mi+bits.TrailingZeros64(rest), 0, 0, time.UTC)
			}
		default:
			return t, true
		}
	}
	return time.Time{}, false
}

func (c *cronSchedule) dayMatches(d int, wd time.Weekday) bool {
	inDom, inDow := c.dom&(1<<d) != 0, c.dow&(1<<wd) != 0
	if c.domStar || c.dowStar {
		return inDom && inDow
	}
	return inDom || inDow
}
