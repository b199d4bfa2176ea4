package delayqueue

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed
)

func cronLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func cronUTC(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

// TestCronNext walks schedules from a start, firing by firing. Wanted
// times are in UTC, so that the DST cases say which instant they mean;
// the comments give the wall times.
func TestCronNext(t *testing.T) {
	tests := []struct {
		name, expr, loc string
		after           time.Time
		want            []time.Time
	}{
		// Month ends and leap years.
		{"31st skips short months", "0 0 31 * *", "UTC", cronUTC(2025, 1, 31, 0, 0),
			[]time.Time{cronUTC(2025, 3, 31, 0, 0), cronUTC(2025, 5, 31, 0, 0), cronUTC(2025, 7, 31, 0, 0), cronUTC(2025, 8, 31, 0, 0)}},
		{"Feb 29 in leap years", "0 0 29 2 *", "UTC", cronUTC(2024, 3, 1, 0, 0),
			[]time.Time{cronUTC(2028, 2, 29, 0, 0), cronUTC(2032, 2, 29, 0, 0)}},
		{"Feb 29 skips 2100", "0 0 29 2 *", "UTC", cronUTC(2096, 3, 1, 0, 0),
			[]time.Time{cronUTC(2104, 2, 29, 0, 0)}},
		{"Feb 28 and 29", "0 6 28,29 2 *", "UTC", cronUTC(2023, 3, 1, 0, 0),
			[]time.Time{cronUTC(2024, 2, 28, 6, 0), cronUTC(2024, 2, 29, 6, 0), cronUTC(2025, 2, 28, 6, 0)}},
		{"last minute of the year", "59 23 31 12 *", "UTC", cronUTC(2025, 12, 31, 23, 59),
			[]time.Time{cronUTC(2026, 12, 31, 23, 59)}},
		{"new year", "0 0 1 1 *", "UTC", cronUTC(2025, 6, 15, 0, 0),
			[]time.Time{cronUTC(2026, 1, 1, 0, 0), cronUTC(2027, 1, 1, 0, 0)}},
		{"across a month end", "30 23 * * *", "UTC", cronUTC(2025, 4, 30, 12, 0),
			[]time.Time{cronUTC(2025, 4, 30, 23, 30), cronUTC(2025, 5, 1, 23, 30)}},

		// Strictly after, minutes, steps, lists, names.
		{"strictly after a firing", "* * * * *", "UTC", cronUTC(2025, 1, 1, 12, 1),
			[]time.Time{cronUTC(2025, 1, 1, 12, 2), cronUTC(2025, 1, 1, 12, 3)}},
		{"seconds round up", "* * * * *", "UTC", cronUTC(2025, 1, 1, 12, 0).Add(30 * time.Second),
			[]time.Time{cronUTC(2025, 1, 1, 12, 1)}},
		{"range with step, hour step", "5-20/5 */6 * * *", "UTC", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 1, 1, 0, 5), cronUTC(2025, 1, 1, 0, 10), cronUTC(2025, 1, 1, 0, 15), cronUTC(2025, 1, 1, 0, 20), cronUTC(2025, 1, 1, 6, 5)}},
		{"list of values, ranges and steps", "1,2,5-7,*/20 * * * *", "UTC", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 1, 1, 0, 1), cronUTC(2025, 1, 1, 0, 2), cronUTC(2025, 1, 1, 0, 5), cronUTC(2025, 1, 1, 0, 6),
				cronUTC(2025, 1, 1, 0, 7), cronUTC(2025, 1, 1, 0, 20), cronUTC(2025, 1, 1, 0, 40), cronUTC(2025, 1, 1, 1, 0)}},
		{"names, weekdays of Q1", "0 9 * jan-MAR mon-fri", "UTC", cronUTC(2025, 3, 28, 12, 0), // a Friday
			[]time.Time{cronUTC(2025, 3, 31, 9, 0), cronUTC(2026, 1, 1, 9, 0), cronUTC(2026, 1, 2, 9, 0), cronUTC(2026, 1, 5, 9, 0)}},
		{"7 is Sunday", "0 0 * * 7", "UTC", cronUTC(2025, 1, 1, 0, 0), // a Wednesday
			[]time.Time{cronUTC(2025, 1, 5, 0, 0), cronUTC(2025, 1, 12, 0, 0)}},
		{"Friday to Sunday", "0 0 * * 5-7", "UTC", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 1, 3, 0, 0), cronUTC(2025, 1, 4, 0, 0), cronUTC(2025, 1, 5, 0, 0), cronUTC(2025, 1, 10, 0, 0)}},
		{"sun by name", "0 0 * * Sun", "UTC", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 1, 5, 0, 0)}},

		// The day-of-month / day-of-week rule.
		{"both restricted: either matches", "0 12 1 * 1", "UTC", cronUTC(2025, 1, 1, 13, 0),
			[]time.Time{cronUTC(2025, 1, 6, 12, 0), cronUTC(2025, 1, 13, 12, 0), cronUTC(2025, 1, 20, 12, 0), cronUTC(2025, 1, 27, 12, 0),
				cronUTC(2025, 2, 1, 12, 0), cronUTC(2025, 2, 3, 12, 0)}},
		{"day of month starts with *: both must match", "0 12 */2 * 1", "UTC", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 1, 13, 12, 0), cronUTC(2025, 1, 27, 12, 0), cronUTC(2025, 2, 3, 12, 0), cronUTC(2025, 2, 17, 12, 0)}},
		{"Feb 30 or Mondays of February", "0 0 30 2 1", "UTC", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 2, 3, 0, 0), cronUTC(2025, 2, 10, 0, 0), cronUTC(2025, 2, 17, 0, 0), cronUTC(2025, 2, 24, 0, 0), cronUTC(2026, 2, 2, 0, 0)}},

		// Descriptors.
		{"@hourly", "@hourly", "UTC", cronUTC(2025, 1, 1, 10, 59).Add(59*time.Second + 999*time.Millisecond),
			[]time.Time{cronUTC(2025, 1, 1, 11, 0), cronUTC(2025, 1, 1, 12, 0)}},
		{"@daily", "@daily", "UTC", cronUTC(2025, 1, 1, 0, 0), []time.Time{cronUTC(2025, 1, 2, 0, 0)}},
		{"@midnight", "@midnight", "UTC", cronUTC(2025, 1, 1, 0, 0), []time.Time{cronUTC(2025, 1, 2, 0, 0)}},
		{"@weekly", "@weekly", "UTC", cronUTC(2025, 1, 1, 0, 0), []time.Time{cronUTC(2025, 1, 5, 0, 0), cronUTC(2025, 1, 12, 0, 0)}},
		{"@monthly", "@monthly", "UTC", cronUTC(2025, 1, 1, 0, 0), []time.Time{cronUTC(2025, 2, 1, 0, 0), cronUTC(2025, 3, 1, 0, 0)}},
		{"@yearly", "@yearly", "UTC", cronUTC(2025, 1, 1, 0, 0), []time.Time{cronUTC(2026, 1, 1, 0, 0)}},
		{"@annually", "@Annually", "UTC", cronUTC(2025, 1, 1, 0, 0), []time.Time{cronUTC(2026, 1, 1, 0, 0)}},

		// Other zones.
		{"midnight in Kolkata (+05:30)", "0 0 * * *", "Asia/Kolkata", cronUTC(2025, 1, 1, 0, 0),
			[]time.Time{cronUTC(2025, 1, 1, 18, 30), cronUTC(2025, 1, 2, 18, 30)}},

		// America/New_York springs from 02:00 EST to 03:00 EDT on 9 March
		// 2025 (07:00Z). Fixed-time jobs in the gap fire at the jump.
		{"spring: 02:30 moves to 03:00", "30 2 * * *", "America/New_York", cronUTC(2025, 3, 8, 17, 0),
			[]time.Time{cronUTC(2025, 3, 9, 7, 0), cronUTC(2025, 3, 10, 6, 30)}},
		{"spring: two skipped times fire once", "0,30 2 * * *", "America/New_York", cronUTC(2025, 3, 8, 17, 0),
			[]time.Time{cronUTC(2025, 3, 9, 7, 0), cronUTC(2025, 3, 10, 6, 0), cronUTC(2025, 3, 10, 6, 30)}},
		{"spring: 02:00 moved and 03:00 are one firing", "0 2,3 * * *", "America/New_York", cronUTC(2025, 3, 9, 5, 0),
			[]time.Time{cronUTC(2025, 3, 9, 7, 0), cronUTC(2025, 3, 10, 6, 0), cronUTC(2025, 3, 10, 7, 0)}},
		{"spring: from just before the jump", "30 2 * * *", "America/New_York", cronUTC(2025, 3, 9, 6, 59).Add(30 * time.Second),
			[]time.Time{cronUTC(2025, 3, 9, 7, 0)}},
		{"spring: from the jump", "30 2 * * *", "America/New_York", cronUTC(2025, 3, 9, 7, 0),
			[]time.Time{cronUTC(2025, 3, 10, 6, 30)}},
		// Wildcard jobs skip the wall times that do not exist.
		{"spring: */30 skips the gap", "*/30 * * * *", "America/New_York", cronUTC(2025, 3, 9, 6, 15),
			[]time.Time{cronUTC(2025, 3, 9, 6, 30), cronUTC(2025, 3, 9, 7, 0), cronUTC(2025, 3, 9, 7, 30)}},
		{"spring: 15 * skips 02:15", "15 * * * *", "America/New_York", cronUTC(2025, 3, 9, 6, 30),
			[]time.Time{cronUTC(2025, 3, 9, 7, 15), cronUTC(2025, 3, 9, 8, 15)}},

		// America/New_York falls back from 02:00 EDT to 01:00 EST on 2
		// November 2025 (06:00Z): 01:00-01:59 happen twice. Fixed-time
		// jobs fire at the first occurrence only.
		{"fall: 01:30 fires once", "30 1 * * *", "America/New_York", cronUTC(2025, 11, 1, 16, 0),
			[]time.Time{cronUTC(2025, 11, 2, 5, 30), cronUTC(2025, 11, 3, 6, 30)}},
		{"fall: 01:30 from the repeated hour", "30 1 * * *", "America/New_York", cronUTC(2025, 11, 2, 6, 10),
			[]time.Time{cronUTC(2025, 11, 3, 6, 30)}},
		{"fall: 01:00 fires once", "0 1 * * *", "America/New_York", cronUTC(2025, 11, 2, 4, 30),
			[]time.Time{cronUTC(2025, 11, 2, 5, 0), cronUTC(2025, 11, 3, 6, 0)}},
		{"fall: 02:00 EST", "0 2 * * *", "America/New_York", cronUTC(2025, 11, 2, 4, 0),
			[]time.Time{cronUTC(2025, 11, 2, 7, 0), cronUTC(2025, 11, 3, 7, 0)}},
		// Wildcard jobs follow the clock: the repeated hour fires twice.
		{"fall: */30 fires through both hours", "*/30 * * * *", "America/New_York", cronUTC(2025, 11, 2, 4, 50),
			[]time.Time{cronUTC(2025, 11, 2, 5, 0), cronUTC(2025, 11, 2, 5, 30), cronUTC(2025, 11, 2, 6, 0), cronUTC(2025, 11, 2, 6, 30), cronUTC(2025, 11, 2, 7, 0)}},
		{"fall: @hourly", "@hourly", "America/New_York", cronUTC(2025, 11, 2, 4, 30),
			[]time.Time{cronUTC(2025, 11, 2, 5, 0), cronUTC(2025, 11, 2, 6, 0), cronUTC(2025, 11, 2, 7, 0)}},

		// São Paulo sprang from 00:00 to 01:00 on 4 November 2018 (03:00Z):
		// that midnight did not exist.
		{"midnight gap: @daily fires at 01:00", "@daily", "America/Sao_Paulo", cronUTC(2018, 11, 3, 15, 0),
			[]time.Time{cronUTC(2018, 11, 4, 3, 0), cronUTC(2018, 11, 5, 2, 0)}},
		{"midnight gap: @hourly skips midnight", "@hourly", "America/Sao_Paulo", cronUTC(2018, 11, 4, 2, 30),
			[]time.Time{cronUTC(2018, 11, 4, 3, 0), cronUTC(2018, 11, 4, 4, 0)}},
		// Lord Howe springs by half an hour, from 02:00 (+10:30) to 02:30
		// (+11:00), on 5 October 2025 (4 Oct 15:30Z).
		{"half-hour gap", "15 2 * * *", "Australia/Lord_Howe", cronUTC(2025, 10, 4, 0, 0),
			[]time.Time{cronUTC(2025, 10, 4, 15, 30), cronUTC(2025, 10, 5, 15, 15)}},
		// Samoa skipped 30 December 2011 (-10:00 to +14:00): a correction
		// of a day, not a DST change, so the day's firings are skipped.
		{"a skipped day is skipped", "0 12 * * *", "Pacific/Apia", cronUTC(2011, 12, 29, 22, 0),
			[]time.Time{cronUTC(2011, 12, 30, 22, 0), cronUTC(2011, 12, 31, 22, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := cronLoc(t, tt.loc)
			s, err := Cron(tt.expr, loc)
			if err != nil {
				t.Fatal(err)
			}
			at := tt.after
			for i, want := range tt.want {
				got := s.Next(at)
				if !got.Equal(want) {
					t.Fatalf("firing %d after %v: got %v (%v), want %v (%v)", i+1, at.In(loc), got.UTC(), got, want, want.In(loc))
				}
				if got.Location() != loc {
					t.Fatalf("firing %d is in %v, want %v", i+1, got.Location(), loc)
				}
				at = got
			}
		})
	}
}

func TestCronInvalid(t *testing.T) {
	for _, expr := range []string{
		"", "   ", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 0 *", "* * * 13 *", "* * * * 8", "*/0 * * * *", "*/61 * * * *", "5/10 * * * *",
		"10-5 * * * *", "1-2-3 * * * *", "a * * * *", "1,,2 * * * *", "1, * * * *", "-1 * * * *",
		"+1 * * * *", "1- * * * *", "-5 * * * *", "* * * FOO *", "* * * * MONDAY", "* * * * 1/2",
		"* * * jan-* *", "** * * * *", "*/ * * * *", "00001 * * * *",
		"@reboot", "@every 5m", "@", "@daily *",
		"0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30,31 feb *",
	} {
		_, err := Cron(expr, time.UTC)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Cron(%q): got %v, want ErrInvalid", expr, err)
		} else if !strings.Contains(err.Error(), "cron") {
			t.Errorf("Cron(%q): error %q does not say what it is about", expr, err)
		}
	}
	if _, err := Cron("* * * * *", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Cron with a nil location: got %v, want ErrInvalid", err)
	}
	// Valid ones of the same shapes.
	for _, expr := range []string{"0 0 29 2 *", "0 0 30 2 1", "*/60 * * * *", "0 0 31 * *", " 1 2 3 4 5 ", "1\t2 3 4 5", "0 0 * * 0-7/7"} {
		if _, err := Cron(expr, time.UTC); err != nil {
			t.Errorf("Cron(%q): %v", expr, err)
		}
	}
}

// TestCronNextMatchesBruteForce checks the search against a walk through
// every minute, in UTC, for random expressions.
func TestCronNextMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	field := func(min, max int) string {
		switch r.IntN(5) {
		case 0:
			return "*"
		case 1:
			return "*/" + strconv.Itoa(1+r.IntN(max-min+1))
		case 2:
			a := min + r.IntN(max-min+1)
			b := a + r.IntN(max-a+1)
			return strconv.Itoa(a) + "-" + strconv.Itoa(b) + "/" + strconv.Itoa(1+r.IntN(3))
		case 3:
			return strconv.Itoa(min+r.IntN(max-min+1)) + "," + strconv.Itoa(min+r.IntN(max-min+1))
		}
		return strconv.Itoa(min + r.IntN(max-min+1))
	}
	for range 200 {
		expr := strings.Join([]string{field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 7)}, " ")
		s, err := Cron(expr, time.UTC)
		if err != nil {
			continue // it may never fire
		}
		c := s.(*cronSchedule)
		after := cronUTC(2024, time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60)).Add(time.Duration(r.IntN(60)) * time.Second)
		want := time.Time{}
		for m := ceilMinute(after.Add(time.Nanosecond)); m.Before(after.AddDate(12, 0, 0)); m = m.Add(time.Minute) {
			if !c.dayMatches(m.Day(), m.Weekday()) || c.month&(1<<m.Month()) == 0 {
				m = time.Date(m.Year(), m.Month(), m.Day()+1, 0, 0, 0, 0, time.UTC).Add(-time.Minute)
				continue
			}
			if c.hour&(1<<m.Hour()) != 0 && c.minute&(1<<m.Minute()) != 0 {
				want = m
				break
			}
		}
		if got := s.Next(after); !got.Equal(want) {
			t.Errorf("%q after %v: got %v, want %v", expr, after, got, want)
		}
	}
}

func TestCronString(t *testing.T) {
	s, err := Cron("@daily", cronLoc(t, "Europe/Paris"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.(interface{ String() string }).String(), "cron @daily in Europe/Paris"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
