package counter

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// A Window divides time into periods, and a windowed count starts again
// at zero in each period. Each period is counted under its own Redis key,
// named after the period (the local date of a day, the ISO week, the
// month, or the index of a fixed-length period), so the count of one
// period cannot be reset by an expiry at its boundary: the key's TTL only
// cleans up after the period is over.
//
// The zero Window has no periods: the count never starts again (it still
// expires, see Limit.TTL).
//
// Which period a call counts in is decided by the Redis clock, inside the
// script, not by the clock of the calling machine.
type Window struct {
	kind  windowKind
	every time.Duration  // Fixed
	loc   *time.Location // Daily, Weekly, Monthly
	// last caches the period of the latest call (see at).
	last *atomic.Pointer[periodArgs]
}

type windowKind int

const (
	noWindow windowKind = iota
	fixedWindow
	dayWindow
	weekWindow
	monthWindow
)

// Fixed returns a window of periods of length d, aligned to the Unix epoch:
// Fixed(time.Hour) periods start on the hour in UTC. d must be a whole
// number of milliseconds, at least one. A call names the period it counts
// in and Redis's clock must still be in it when the call runs (three tries
// each), so keep d well above a round trip under load: with periods of a
// few milliseconds, calls fail with "the Redis clock kept moving out of
// the period named for it" (a third of them at 2 ms from 16 goroutines
// on miniredis, which runs slower than a Redis server).
func Fixed(d time.Duration) Window {
	return Window{kind: fixedWindow, every: d, last: new(atomic.Pointer[periodArgs])}
}

// Daily returns a window whose periods are the calendar days of loc: from
// local midnight to the next. A day in which the clocks change lasts 23 or
// 25 hours; where local midnight does not exist (the clocks jump from 23:59
// to 01:00), the day starts at the jump.
func Daily(loc *time.Location) Window { return calendar(dayWindow, loc) }

// Weekly returns a window whose periods are the ISO weeks of loc, from
// Monday's start to the next Monday's.
func Weekly(loc *time.Location) Window { return calendar(weekWindow, loc) }

// Monthly returns a window whose periods are the calendar months of loc,
// from the start of the first day to the start of the next month's.
func Monthly(loc *time.Location) Window { return calendar(monthWindow, loc) }

func calendar(kind windowKind, loc *time.Location) Window {
	return Window{kind: kind, loc: loc, last: new(atomic.Pointer[periodArgs])}
}

// String describes w, e.g. "daily in Asia/Shanghai".
func (w Window) String() string {
	name := func() string {
		if w.loc == nil {
			return "<nil location>"
		}
		return w.loc.String()
	}
	switch w.kind {
	case fixedWindow:
		return "every " + w.every.String()
	case dayWindow:
		return "daily in " + name()
	case weekWindow:
		return "weekly in " + name()
	case monthWindow:
		return "monthly in " + name()
	}
	return "no window"
}

// check reports why w cannot count, or nil.
func (w Window) check() error {
	switch w.kind {
	case noWindow:
		return nil
	case fixedWindow:
		if w.every < time.Millisecond || w.every%time.Millisecond != 0 {
			return fmt.Errorf("%w: window length %v must be a whole number of milliseconds, at least one", ErrInvalid, w.every)
		}
	default:
		if w.loc == nil {
			return fmt.Errorf("%w: window %v needs a time zone, got a nil *time.Location", ErrInvalid, w)
		}
	}
	if w.last == nil {
		return fmt.Errorf("%w: window made without its constructor (Fixed, Daily, Weekly or Monthly)", ErrInvalid)
	}
	return nil
}

// A period is one period of a window: [start, end), named label.
type period struct {
	start, end time.Time
	label      string
}

// periodArgs is a period with its bounds as script arguments, in Unix
// ms, boxed once: they go with every call in the period.
type periodArgs struct {
	period
	start, end any
}

// at returns the period t is in. The latest one is cached: computing a
// calendar period in a zone with DST takes a search, and it changes once
// a day.
func (w Window) at(t time.Time) *periodArgs {
	if p := w.last.Load(); p != nil && !t.Before(p.period.start) && t.Before(p.period.end) {
		return p
	}
	cur := w.period(t)
	p := &periodArgs{period: cur, start: cur.start.UnixMilli(), end: cur.end.UnixMilli()}
	w.last.Store(p)
	return p
}

// period returns the period t is in.
func (w Window) period(t time.Time) period {
	if w.kind == fixedWindow {
		ms := w.every.Milliseconds()
		i := t.UnixMilli() / ms
		if t.UnixMilli() < 0 && t.UnixMilli()%ms != 0 {
			i-- // floor, for instants before 1970
		}
		return period{
			start: time.UnixMilli(i * ms),
			end:   time.UnixMilli((i + 1) * ms),
			label: "t" + strconv.FormatInt(ms, 10) + ":" + strconv.FormatInt(i, 10),
		}
	}
	y, m, d := t.In(w.loc).Date()
	for {
		var p period
		switch w.kind {
		case dayWindow:
			p = period{
				start: startOfDay(y, m, d, w.loc),
				end:   startOfDay(y, m, d+1, w.loc),
				label: "d" + time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Format(time.DateOnly),
			}
		case weekWindow:
			// Monday of t's week: Go's Weekday counts from Sunday.
			back := (int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday()) + 6) % 7
			monday := time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
			wy, wn := monday.ISOWeek()
			p = period{
				start: startOfDay(y, m, d-back, w.loc),
				end:   startOfDay(y, m, d-back+7, w.loc),
				label: fmt.Sprintf("w%04d-W%02d", wy, wn),
			}
		default:
			p = period{
				start: startOfDay(y, m, 1, w.loc),
				end:   startOfDay(y, m+1, 1, w.loc),
				label: "m" + time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Format("2006-01"),
			}
		}
		if t.Before(p.start) {
			// The clocks went back over midnight by more than the time
			// since it (Antarctica/Casey, 2010-03-05 02:00 became 23:00):
			// the date began twice and its day starts at the second
			// midnight, so the first pass counts in the day before.
			y, m, d = p.start.Add(-time.Nanosecond).In(w.loc).Date()
			continue
		}
		if t.Before(p.end) {
			return p
		}
		// When the clocks go back over midnight, the local date of the
		// repeated hour is the day before, but the next day has begun.
		y, m, d = p.end.In(w.loc).Date()
	}
}

// startOfDay returns the first instant whose date in loc is y-m-d or
// later. It is local midnight unless the clocks change around midnight:
// time.Date may then answer either side of the change, and the day really
// starts at the change (or at one of two midnights: period puts what
// comes before it in the day before).
func startOfDay(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // normalised y-m-d
	onOrAfter := func(x time.Time) bool {
		xy, xm, xd := x.In(loc).Date()
		return !time.Date(xy, xm, xd, 0, 0, 0, 0, time.UTC).Before(want)
	}
	if onOrAfter(t) && !onOrAfter(t.Add(-time.Second)) {
		return t
	}
	// Search whole seconds (every zone change is on one) within two days:
	// wide enough even for a day a zone skipped (Pacific/Apia, 2011-12-30).
	lo, hi := t.Add(-48*time.Hour).Truncate(time.Second), t.Add(48*time.Hour).Truncate(time.Second)
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if onOrAfter(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// retention returns how long, in milliseconds, after a period of w ends
// its unique count must be kept for the n periods after it to reach back
// to it (in milliseconds: 400 periods of a long Fixed window overflow a
// time.Duration, 292 years, not an int64 of milliseconds). The n
// periods last at most n times the longest a period lasts without a
// change of the clocks (a month: 31 days), plus however far the zone's
// clocks went back over them. zoneShift bounds that: no zone has moved
// its clocks back by more than 3 hours in one go since 1970
// (Antarctica/Casey, 2010; Troll goes back 2 hours every October), and
// moves back and forth cancel out over a span.
func (w Window) retention(n int) int64 {
	if n == 0 {
		return 0 // no later period reaches back: nothing to allow for
	}
	var d time.Duration
	switch w.kind {
	case fixedWindow:
		return int64(n) * w.every.Milliseconds()
	case dayWindow:
		d = 24 * time.Hour
	case weekWindow:
		d = 7 * 24 * time.Hour
	case monthWindow:
		d = 31 * 24 * time.Hour
	}
	return int64(n)*d.Milliseconds() + zoneShift.Milliseconds()
}

// zoneShift is retention's allowance for clocks that went back.
const zoneShift = 24 * time.Hour

// expiry returns when the key of period p, named key, may go: after the
// period ends, plus a margin well above the clock skew between Redis
// servers (a failover to a replica whose clock is a little behind must
// still find the count), plus a jitter taken from the key's hash, so that
// the keys of a million users do not all expire in the same second and a
// key rewritten many times keeps one expiry.
func expiry(p period, key string) time.Time {
	length := p.end.Sub(p.start)
	margin := min(length, 5*time.Minute)
	spread := min(length, time.Hour)
	jitter := time.Duration(fnv1a(key)%uint64(spread.Milliseconds())) * time.Millisecond
	return p.end.Add(margin + jitter)
}

// fnv1a is the 64-bit FNV-1a hash of s, without the allocations of
// hash/fnv: it is computed on every count.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
