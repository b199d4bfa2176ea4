package counter

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestDailyPeriodsFollowTheLocalCalendar(t *testing.T) {
	shanghai := mustZone(t, "Asia/Shanghai")
	w := Daily(shanghai)
	p := w.period(time.Date(2026, 11, 23, 23, 59, 59, 0, shanghai))
	if want := time.Date(2026, 11, 23, 0, 0, 0, 0, shanghai); !p.start.Equal(want) {
		t.Errorf("start %v, want %v", p.start, want)
	}
	if want := time.Date(2026, 11, 24, 0, 0, 0, 0, shanghai); !p.end.Equal(want) {
		t.Errorf("end %v, want %v", p.end, want)
	}
	if p.label != "d2026-11-23" {
		t.Errorf("label %q, want d2026-11-23", p.label)
	}
}

func TestDaysInWhichTheClocksChangeLast23Or25Hours(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	for _, c := range []struct {
		day  time.Time
		want time.Duration
	}{
		{time.Date(2026, 3, 8, 12, 0, 0, 0, ny), 23 * time.Hour},
		{time.Date(2026, 11, 1, 12, 0, 0, 0, ny), 25 * time.Hour},
		{time.Date(2026, 11, 2, 12, 0, 0, 0, ny), 24 * time.Hour},
	} {
		p := Daily(ny).period(c.day)
		if got := p.end.Sub(p.start); got != c.want {
			t.Errorf("%s lasts %v, want %v", p.label, got, c.want)
		}
	}
}

func TestADayWhoseMidnightDoesNotExistStartsAtTheJump(t *testing.T) {
	// Cuba moves its clocks from 00:00 to 01:00 on the second Sunday of
	// March: 2026-03-08 has no midnight, and lasts 23 hours.
	havana := mustZone(t, "America/Havana")
	p := Daily(havana).period(time.Date(2026, 3, 8, 12, 0, 0, 0, havana))
	if got := p.start.In(havana).Format("2006-01-02 15:04"); got != "2026-03-08 01:00" {
		t.Errorf("the day starts at %s local, want 2026-03-08 01:00 (the jump)", got)
	}
	if got := p.start.Add(-time.Second).In(havana).Format("2006-01-02 15:04:05"); got != "2026-03-07 23:59:59" {
		t.Errorf("the instant before the start is %s local, want the end of the day before", got)
	}
	if got := p.end.Sub(p.start); got != 23*time.Hour {
		t.Errorf("the day lasts %v, want 23h", got)
	}
	// The day before ends where this one starts.
	if prev := Daily(havana).period(p.start.Add(-time.Nanosecond)); !prev.end.Equal(p.start) {
		t.Errorf("the day before ends at %v, want %v", prev.end, p.start)
	}
}

func TestASkippedDayBelongsToNoPeriod(t *testing.T) {
	// Samoa skipped 2011-12-30 when it crossed the date line.
	apia := mustZone(t, "Pacific/Apia")
	p := Daily(apia).period(time.Date(2011, 12, 29, 12, 0, 0, 0, apia))
	next := Daily(apia).period(p.end)
	if p.label != "d2011-12-29" || next.label != "d2011-12-31" || !next.start.Equal(p.end) {
		t.Errorf("periods %s then %s starting %v (end of the first %v), want 2011-12-29 then 2011-12-31 back to back",
			p.label, next.label, next.start, p.end)
	}
}

func TestADayThatBeganTwiceLeavesNoInstantOutside(t *testing.T) {
	// On 2010-03-05 at 02:00 Antarctica/Casey went back to 23:00 of the
	// 4th: local midnight of the 5th came twice, three hours apart.
	casey := mustZone(t, "Antarctica/Casey")
	change := time.Date(2010, 3, 4, 15, 0, 0, 0, time.UTC)
	for _, w := range []Window{Daily(casey), Weekly(casey), Monthly(casey)} {
		for at := change.Add(-26 * time.Hour); at.Before(change.Add(26 * time.Hour)); at = at.Add(15 * time.Minute) {
			p := w.period(at)
			if at.Before(p.start) || !at.Before(p.end) {
				t.Fatalf("%v: %v is outside its period %s [%v, %v)", w, at, p.label, p.start, p.end)
			}
			if next := w.period(p.end); !next.start.Equal(p.end) {
				t.Fatalf("%v: %s ends at %v, the next period starts at %v", w, p.label, p.end, next.start)
			}
		}
	}
}

// Every period of a year, in zones with every kind of clock change, must
// contain the instants it is asked about and meet its neighbours exactly.
func TestPeriodsTileTimeInEveryZone(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "America/Havana", "America/Santiago", "Asia/Beirut",
		"Australia/Lord_Howe", "Asia/Kolkata", "Europe/London", "Pacific/Apia"}
	for _, name := range zones {
		loc := mustZone(t, name)
		for _, w := range []Window{Daily(loc), Weekly(loc), Monthly(loc), Fixed(7 * time.Hour)} {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			p := w.period(start)
			for p.start.Before(start.AddDate(1, 0, 0)) {
				for _, probe := range []time.Time{p.start, p.end.Add(-time.Second), p.start.Add(p.end.Sub(p.start) / 2)} {
					if q := w.period(probe); q != p {
						t.Fatalf("%s %v: %v is in %+v, want %+v", name, w, probe, q, p)
					}
				}
				next := w.period(p.end)
				if !next.start.Equal(p.end) || next.label == p.label {
					t.Fatalf("%s %v: %+v is followed by %+v", name, w, p, next)
				}
				p = next
			}
		}
	}
}

func TestWeeksAreISOWeeksStartingMonday(t *testing.T) {
	p := Weekly(time.UTC).period(time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)) // a Friday
	if p.label != "w2026-W53" || p.start.Weekday() != time.Monday || p.start.Day() != 28 {
		t.Errorf("period %+v, want ISO week 2026-W53 from Monday 2026-12-28", p)
	}
}

func TestFixedPeriodsAlignToTheEpoch(t *testing.T) {
	w := Fixed(time.Minute)
	p := w.period(time.Unix(90, 0))
	if p.start.Unix() != 60 || p.end.Unix() != 120 || p.label != "t60000:1" {
		t.Errorf("period %+v, want [60s, 120s) labelled t60000:1", p)
	}
	if q := w.period(time.Unix(-30, 0)); q.start.Unix() != -60 {
		t.Errorf("period of -30s starts at %v, want -60s", q.start.Unix())
	}
}

func TestExpiriesComeAfterThePeriodAndSpreadOut(t *testing.T) {
	p := Daily(time.UTC).period(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
	seconds := map[int64]bool{}
	for i := range 1000 {
		k := "user" + string(rune('a'+i%26)) + time.Duration(i).String()
		e := expiry(p, k)
		if e.Before(p.end.Add(5*time.Minute)) || e.After(p.end.Add(65*time.Minute)) {
			t.Fatalf("expiry %v of %q is outside [end+5m, end+65m] (end %v)", e, k, p.end)
		}
		if e2 := expiry(p, k); !e2.Equal(e) {
			t.Fatalf("two expiries for %q: %v and %v", k, e, e2)
		}
		seconds[e.Unix()] = true
	}
	if len(seconds) < 500 {
		t.Errorf("1000 keys expire within %d distinct seconds, want them spread over most of an hour", len(seconds))
	}
}

func TestWindowsWithoutWhatTheyNeedAreInvalid(t *testing.T) {
	for name, w := range map[string]Window{
		"nil location":       Daily(nil),
		"zero length":        Fixed(0),
		"sub-millisecond":    Fixed(time.Microsecond),
		"fraction of a ms":   Fixed(1500 * time.Microsecond),
		"built without New*": {kind: dayWindow, loc: time.UTC},
	} {
		if err := w.check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := (Window{}).check(); err != nil {
		t.Errorf("the zero Window: %v, want nil", err)
	}
}
