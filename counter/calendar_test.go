package counter

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// calendarYear is a year whose calendars outlive the test, whatever the
// date it runs on.
func calendarYear() int { return time.Now().Year() + 2 }

// date is midnight of a civil date in loc.
func date(y int, m time.Month, d int, loc *time.Location) time.Time {
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

// calendarMarks is the sequence of changes several tests make, and the
// calendar it must leave for November.
func calendarMarks(t *testing.T, c *Client, user string) (want []Mark) {
	t.Helper()
	ctx := context.Background()
	y := calendarYear()
	shanghai := mustZone(t, "Asia/Shanghai")
	pinned(c, time.Date(y, 11, 20, 12, 0, 0, 0, time.UTC))
	// Half past midnight in Shanghai is still the day before in UTC: the
	// day is the caller's civil date.
	nov := func(d int) time.Time { return time.Date(y, 11, d, 0, 30, 0, 0, shanghai) }
	must := func(what string, ok bool, err error) {
		t.Helper()
		if err != nil || !ok {
			t.Fatalf("%s: %v %v, want done", what, ok, err)
		}
	}
	for _, d := range []int{1, 2, 3, 5, 8, 30} {
		ok, err := c.SignIn(ctx, user, nov(d))
		must("sign in", ok, err)
	}
	ok, err := c.MakeUp(ctx, user, nov(4))
	must("make up the 4th", ok, err)
	ok, err = c.MakeUp(ctx, user, nov(6))
	must("make up the 6th", ok, err)
	ok, err = c.Reward(ctx, user, nov(2))
	must("reward the 2nd, signed in", ok, err)
	ok, err = c.Reward(ctx, user, nov(6))
	must("reward the 6th, made up", ok, err)

	want = make([]Mark, 30)
	for _, d := range []int{1, 3, 5, 8, 30} {
		want[d-1] = SignedIn
	}
	want[1], want[3], want[5] = Rewarded, MadeUp, Rewarded
	return want
}

func TestCalendarMonthShowsTheMarks(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := redistest.Key(t)
		want := calendarMarks(t, c, user)
		y := calendarYear()

		v, err := c.Month(ctx, user, y, time.November)
		if err != nil {
			t.Fatal(err)
		}
		if v.Year != y || v.Month != time.November || len(v.Days) != 30 {
			t.Fatalf("Month: %d-%v with %d days, want %d-November with 30", v.Year, v.Month, len(v.Days), y)
		}
		for i := range want {
			if v.Days[i] != want[i] {
				t.Errorf("November %d: %v, want %v", i+1, v.Days[i], want[i])
			}
		}
		if v.Total != 8 {
			t.Errorf("Total %d, want 8", v.Total)
		}
		// The day before in UTC was not touched.
		if oct, err := c.Month(ctx, user, y, time.October); err != nil || len(oct.Days) != 31 || oct.Total != 0 {
			t.Errorf("October: %+v %v, want 31 unmarked days", oct, err)
		}
		if feb, err := c.Month(ctx, user, 2028, time.February); err != nil || len(feb.Days) != 29 || feb.Total != 0 {
			t.Errorf("February of a leap year: %d days, total %d, %v; want 29 unmarked", len(feb.Days), feb.Total, err)
		}
	})
}

func TestCalendarMarksChangeOnlyInOrder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := redistest.Key(t)
		y := calendarYear()
		pinned(c, time.Date(y, 11, 20, 12, 0, 0, 0, time.UTC))
		day, other := date(y, 11, 10, time.UTC), date(y, 11, 11, time.UTC)

		steps := []struct {
			what string
			call func(context.Context, string, time.Time) (bool, error)
			day  time.Time
			done bool
		}{
			{"reward an unmarked day", c.Reward, day, false},
			{"sign in", c.SignIn, day, true},
			{"sign in again", c.SignIn, day, false},
			{"make up a signed-in day", c.MakeUp, day, false},
			{"reward", c.Reward, day, true},
			{"reward again", c.Reward, day, false},
			{"sign in a rewarded day", c.SignIn, day, false},
			{"make up another day", c.MakeUp, other, true},
			{"make up again", c.MakeUp, other, false},
			{"sign in a made-up day", c.SignIn, other, false},
		}
		for _, s := range steps {
			if done, err := s.call(ctx, user, s.day); err != nil || done != s.done {
				t.Fatalf("%s: %v %v, want %v", s.what, done, err, s.done)
			}
		}
		v, err := c.Month(ctx, user, y, time.November)
		if err != nil {
			t.Fatal(err)
		}
		if v.Days[9] != Rewarded || v.Days[10] != MadeUp || v.Total != 2 {
			t.Fatalf("November 10 %v, 11 %v, total %d; want rewarded, made up, 2", v.Days[9], v.Days[10], v.Total)
		}
	})
}

// Two taps on "claim", from two devices: the reward is given once.
func TestCalendarRewardIsGivenOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := redistest.Key(t)
		day := date(calendarYear(), 3, 1, time.UTC)
		if _, err := c.SignIn(ctx, user, day); err != nil {
			t.Fatal(err)
		}
		var given atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := c.Reward(ctx, user, day)
				if err != nil {
					t.Error(err)
				}
				if ok {
					given.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := given.Load(); n != 1 {
			t.Fatalf("reward given %d times, want once", n)
		}
	})
}

func TestStreakCrossesMonthsAndSurvivesAnUnmarkedToday(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := redistest.Key(t)
		y := calendarYear()
		pinned(c, time.Date(y, 12, 1, 12, 0, 0, 0, time.UTC))
		tokyo := mustZone(t, "Asia/Tokyo")
		for d := date(y, 10, 28, tokyo); !d.After(date(y, 11, 3, tokyo)); d = d.AddDate(0, 0, 1) {
			mark := c.SignIn
			if d.Day() == 31 {
				mark = c.MakeUp
			}
			if ok, err := mark(ctx, user, d); err != nil || !ok {
				t.Fatalf("mark %v: %v %v", d, ok, err)
			}
		}
		// A day earlier, after a gap: not part of the streak.
		if _, err := c.SignIn(ctx, user, date(y, 10, 26, tokyo)); err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			today time.Time
			want  int
		}{
			{time.Date(y, 11, 3, 23, 59, 0, 0, tokyo), 7},
			{time.Date(y, 11, 4, 8, 0, 0, 0, tokyo), 7}, // not signed in yet today
			{time.Date(y, 11, 5, 8, 0, 0, 0, tokyo), 0}, // missed yesterday
			{time.Date(y, 10, 31, 8, 0, 0, 0, tokyo), 4},
			{time.Date(y, 10, 27, 8, 0, 0, 0, tokyo), 1},
			// 8:00 on the 5th in Tokyo is still the 4th in UTC: today
			// is the date in today's zone.
			{time.Date(y, 11, 5, 8, 0, 0, 0, tokyo).UTC(), 7},
		} {
			if n, err := c.Streak(ctx, user, s.today); err != nil || n != s.want {
				t.Errorf("streak on %v: %d %v, want %d", s.today, n, err, s.want)
			}
		}
		if _, err := c.SignIn(ctx, user, date(y, 11, 5, tokyo)); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Streak(ctx, user, date(y, 11, 5, tokyo)); err != nil || n != 1 {
			t.Errorf("streak after signing in again: %d %v, want 1", n, err)
		}
	})
}

func TestALongStreakReachesBackToTheRetention(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := redistest.Key(t)
		last := date(calendarYear(), 12, 31, time.UTC)
		first := last.AddDate(0, 0, -(CalendarRetentionDays + 4))
		for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
			if _, err := c.SignIn(ctx, user, d); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []struct {
			today time.Time
			want  int
		}{
			{first.AddDate(0, 0, 70), 71},                  // three months: the second read
			{first.AddDate(0, 0, 71), 72},                  // the same, from the previous month's end
			{last, CalendarRetentionDays},                  // longer than kept
			{last.AddDate(0, 0, 1), CalendarRetentionDays}, // today unmarked
			{first.AddDate(0, 0, CalendarRetentionDays-2), CalendarRetentionDays - 1},
			{first.AddDate(0, 0, CalendarRetentionDays-1), CalendarRetentionDays}, // exactly as long as kept
		} {
			if n, err := c.Streak(ctx, user, s.today); err != nil || n != s.want {
				t.Errorf("streak on %v: %d %v, want %d", s.today.Format(time.DateOnly), n, err, s.want)
			}
		}
	})
}

func TestACalendarMonthIsTinyAndExpires(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		user := redistest.Key(t)
		y := calendarYear()
		for _, d := range []int{1, 15, 31} {
			if _, err := c.SignIn(ctx, user, date(y, 1, d, time.UTC)); err != nil {
				t.Fatal(err)
			}
		}
		k, exp, err := c.calendarKey(user, y, time.January)
		if err != nil {
			t.Fatal(err)
		}
		// 8 bytes of days, then the last change's token (16 bytes) and the
		// mark it replaced (1 digit).
		if n, err := rdb.StrLen(ctx, k).Result(); err != nil || n != 8+16+1 {
			t.Fatalf("STRLEN %d %v, want 25", n, err)
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("PTTL %v, want > 0", ttl)
		}
		// Two days more than the retention: the month ends at a time that
		// depends on the user's zone, from UTC-12 to UTC+14.
		kept := date(y, 2, 1, time.UTC).AddDate(0, 0, CalendarRetentionDays+2)
		if exp.Before(kept) || exp.After(kept.Add(2*time.Hour)) {
			t.Fatalf("expiry %v, want %d+2 days after the month, plus at most a jitter", exp, CalendarRetentionDays)
		}
		got := rdb.PExpireTime(ctx, k).Val()
		if d := got - time.Duration(exp.UnixMilli())*time.Millisecond; d < -5*time.Millisecond || d > 5*time.Millisecond {
			t.Fatalf("PEXPIRETIME %v, want %v", got, exp.UnixMilli())
		}
	})
}

// Redis's own BITFIELD reads the calendar as the package does: other
// tools can read it.
func TestCalendarIsTheLayoutOfBITFIELD(t *testing.T) {
	redistest.RunReal(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		user := redistest.Key(t)
		want := calendarMarks(t, c, user)
		k, _, err := c.calendarKey(user, calendarYear(), time.November)
		if err != nil {
			t.Fatal(err)
		}
		args := make([]any, 0, 3*len(want))
		for i := range want {
			args = append(args, "GET", "u2", "#"+strconv.Itoa(i))
		}
		got, err := rdb.BitField(ctx, k, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Month(ctx, user, calendarYear(), time.November)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(v.Days) {
			t.Fatalf("BITFIELD gave %d fields, Month %d days", len(got), len(v.Days))
		}
		for i := range got {
			if Mark(got[i]) != v.Days[i] || v.Days[i] != want[i] {
				t.Errorf("November %d: BITFIELD %d, Month %v, want %v", i+1, got[i], v.Days[i], want[i])
			}
		}
	})
}

// The same marks leave the same days on miniredis and on Redis, and they
// are the bytes of the documented layout; the last change's token and the
// mark it replaced follow.
func TestCalendarBytesAreTheSameOnBothBackends(t *testing.T) {
	var raw []string
	for _, name := range []string{redistest.Mini, redistest.Single} {
		rdb := redistest.Open(t, name).Client(t)
		c := newClient(t, rdb)
		user := redistest.Key(t)
		calendarMarks(t, c, user)
		k, _, err := c.calendarKey(user, calendarYear(), time.November)
		if err != nil {
			t.Fatal(err)
		}
		s, err := rdb.Get(context.Background(), k).Result()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw = append(raw, s)
	}
	// 1 signed in 01, 2 rewarded 11, 3 signed in 01, 4 made up 10 |
	// 5 signed in 01, 6 rewarded 11, 7 none, 8 signed in 01 | ... |
	// 29 none, 30 signed in 01.
	// Then a random token (16 bytes) and '2': the last change rewarded
	// the 6th, which was made up.
	want := "\x76\x71\x00\x00\x00\x00\x00\x10"
	for _, s := range raw {
		if len(s) != 8+16+1 || s[:8] != want || s[24] != '2' {
			t.Fatalf("miniredis % x, redis % x, want % x, 16 bytes of token, then '2'", raw[0], raw[1], want)
		}
	}
}

func TestBadCalendarCallsNeverReachRedis(t *testing.T) {
	f := redistest.NewFaults()
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t, f))
	calls := f.On(redistest.Any())
	ctx := context.Background()
	shanghai := mustZone(t, "Asia/Shanghai")
	// 23:00 UTC on the 10th is 07:00 on the 11th in Shanghai.
	now := time.Date(2030, 11, 10, 23, 0, 0, 0, time.UTC)
	pinned(c, now)
	for name, call := range map[string]func() error{
		"sign in, empty user": func() error { _, err := c.SignIn(ctx, "", now); return err },
		"sign in, broken tag": func() error { _, err := c.SignIn(ctx, "a{b", now); return err },
		"sign in a day whose calendar has expired": func() error {
			_, err := c.SignIn(ctx, "u", now.AddDate(-2, 0, 0))
			return err
		},
		"sign in, year 0":    func() error { _, err := c.SignIn(ctx, "u", date(0, 1, 1, time.UTC)); return err },
		"reward, empty user": func() error { _, err := c.Reward(ctx, "", now); return err },
		"make up, empty user": func() error {
			_, err := c.MakeUp(ctx, "", now.AddDate(0, 0, -1))
			return err
		},
		"make up today": func() error { _, err := c.MakeUp(ctx, "u", now); return err },
		"make up today in Shanghai, yesterday in UTC": func() error {
			_, err := c.MakeUp(ctx, "u", time.Date(2030, 11, 11, 1, 0, 0, 0, shanghai))
			return err
		},
		"make up tomorrow": func() error { _, err := c.MakeUp(ctx, "u", now.AddDate(0, 0, 1)); return err },
		"month, empty user": func() error {
			_, err := c.Month(ctx, "", 2030, time.November)
			return err
		},
		"month 13":       func() error { _, err := c.Month(ctx, "u", 2030, 13); return err },
		"month 0":        func() error { _, err := c.Month(ctx, "u", 2030, 0); return err },
		"year 10000":     func() error { _, err := c.Month(ctx, "u", 10000, time.January); return err },
		"streak, no one": func() error { _, err := c.Streak(ctx, "", now); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := calls.Hits(); n != 0 {
		t.Fatalf("%d calls reached Redis", n)
	}
	// The day before today in the day's own zone may be made up.
	if _, err := c.MakeUp(ctx, "u", time.Date(2030, 11, 10, 12, 0, 0, 0, shanghai)); err != nil {
		t.Fatalf("make up yesterday in Shanghai: %v", err)
	}
}

func TestADayPastTheRetentionByRedissClockIsNotMarked(t *testing.T) {
	// The Client's clock is 40 days behind Redis's. A day whose calendar
	// expires between the two passes the Client's check; Redis would
	// drop the month the moment it was written. The script refuses it by
	// Redis's clock: the mark must not be reported made.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const lag = 40 * 24 * time.Hour
		c := newClient(t, b.Client(t), WithClock(func() time.Time { return time.Now().Add(-lag) }))
		ctx := context.Background()
		user := redistest.Key(t)
		now := time.Now()
		// Month expiries are at most 31 days apart, so one lies inside the
		// 40 days between the clocks, with an hour to spare at each end.
		var day time.Time
		for m := now.AddDate(0, -20, 0); m.Before(now) && day.IsZero(); m = m.AddDate(0, 1, 0) {
			first := time.Date(m.Year(), m.Month(), 1, 12, 0, 0, 0, time.UTC)
			_, exp, err := c.calendarKey(user, first.Year(), first.Month())
			if err != nil {
				t.Fatal(err)
			}
			if exp.After(now.Add(-lag).Add(time.Hour)) && exp.Before(now.Add(-time.Hour)) {
				day = first
			}
		}
		if day.IsZero() {
			t.Fatal("no month's calendar expires between the two clocks")
		}
		for name, mark := range map[string]func() (bool, error){
			"sign in": func() (bool, error) { return c.SignIn(ctx, user, day) },
			"make up": func() (bool, error) { return c.MakeUp(ctx, user, day) },
		} {
			if ok, err := mark(); ok || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s %s: %v %v, want ErrInvalid", name, day.Format(time.DateOnly), ok, err)
			}
		}
		mv, err := c.Month(ctx, user, day.Year(), day.Month())
		if err != nil || mv.Total != 0 {
			t.Fatalf("the month: %+v %v, want nothing marked", mv, err)
		}
	})
}

func TestCalendarReportsRedisErrors(t *testing.T) {
	broken := errors.New("connection reset")
	f := redistest.NewFaults()
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t, f))
	f.On(redistest.Any()).Fail(broken)
	ctx := context.Background()
	day := date(calendarYear(), 1, 1, time.UTC)
	pinned(c, day.AddDate(0, 0, 10))
	for name, call := range map[string]func() error{
		"SignIn": func() error { _, err := c.SignIn(ctx, "u", day); return err },
		"MakeUp": func() error { _, err := c.MakeUp(ctx, "u", day); return err },
		"Reward": func() error { _, err := c.Reward(ctx, "u", day); return err },
		"Month":  func() error { _, err := c.Month(ctx, "u", 2030, time.January); return err },
		"Streak": func() error { _, err := c.Streak(ctx, "u", day); return err },
	} {
		if err := call(); !errors.Is(err, broken) {
			t.Errorf("%s: %v, want the connection's error", name, err)
		}
	}
}

func TestCalendarMarkNames(t *testing.T) {
	for m, want := range map[Mark]string{Unmarked: "unmarked", SignedIn: "signed in", MadeUp: "made up", Rewarded: "rewarded", 4: "Mark(4)"} {
		if got := m.String(); got != want {
			t.Errorf("Mark(%d).String() = %q, want %q", m, got, want)
		}
	}
}

// go-redis sends a script again when its reply is lost. A mark whose first
// run changed the day then finds its own mark there: the call must still
// report the change, or a reward reported false is never given, and can
// never be claimed again.
func TestCalendarResentMarkReportsItsChange(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		ctx := context.Background()
		user := redistest.Key(t)
		y := calendarYear()
		pinned(c, time.Date(y, 11, 20, 12, 0, 0, 0, time.UTC))
		day, missed := date(y, 11, 10, time.UTC), date(y, 11, 9, time.UTC)

		for _, s := range []struct {
			what string
			call func(context.Context, string, time.Time) (bool, error)
			day  time.Time
		}{
			{"sign in", c.SignIn, day},
			{"make up", c.MakeUp, missed},
			{"reward a signed-in day", c.Reward, day},
			{"reward a made-up day", c.Reward, missed},
		} {
			var done bool
			var err error
			resent(t, f, calendarMarkScript, func() { done, err = s.call(ctx, user, s.day) })
			if err != nil || !done {
				t.Fatalf("%s, resent: %v %v, want done", s.what, done, err)
			}
		}
		// Each reward is still given once.
		for _, d := range []time.Time{day, missed} {
			if done, err := c.Reward(ctx, user, d); err != nil || done {
				t.Fatalf("reward %v again: %v %v, want not done", d.Format(time.DateOnly), done, err)
			}
		}
		v, err := c.Month(ctx, user, y, time.November)
		if err != nil {
			t.Fatal(err)
		}
		if v.Days[8] != Rewarded || v.Days[9] != Rewarded || v.Total != 2 {
			t.Fatalf("November 9 %v, 10 %v, total %d; want rewarded, rewarded, 2", v.Days[8], v.Days[9], v.Total)
		}
	})
}

// Calendars written before the marks kept their token (at most 8 bytes of
// days, fewer if the last days were never marked) are read and changed as
// before.
func TestCalendarsWithoutATokenStillWork(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		user := redistest.Key(t)
		y := calendarYear()
		pinned(c, time.Date(y, 11, 20, 12, 0, 0, 0, time.UTC))
		k, exp, err := c.calendarKey(user, y, time.November)
		if err != nil {
			t.Fatal(err)
		}
		// 1 signed in, 2 rewarded, 3 signed in, 4 made up | 5 signed in,
		// 6 rewarded, 7 none, 8 signed in: the first two bytes of
		// TestCalendarBytesAreTheSameOnBothBackends, as SETRANGE left them.
		if err := rdb.Set(ctx, k, "\x76\x71", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.PExpireAt(ctx, k, exp).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Streak(ctx, user, date(y, 11, 6, time.UTC)); err != nil || n != 6 {
			t.Fatalf("Streak to the 6th: %d %v, want 6", n, err)
		}
		for _, s := range []struct {
			what string
			call func(context.Context, string, time.Time) (bool, error)
			day  int
			done bool
		}{
			{"reward the 1st", c.Reward, 1, true},
			{"reward the 2nd again", c.Reward, 2, false},
			{"sign in the 3rd again", c.SignIn, 3, false},
			{"make up the 7th", c.MakeUp, 7, true},
			{"sign in the 30th", c.SignIn, 30, true},
		} {
			if done, err := s.call(ctx, user, date(y, 11, s.day, time.UTC)); err != nil || done != s.done {
				t.Fatalf("%s: %v %v, want %v", s.what, done, err, s.done)
			}
		}
		v, err := c.Month(ctx, user, y, time.November)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]Mark{1: Rewarded, 2: Rewarded, 3: SignedIn, 4: MadeUp, 5: SignedIn, 6: Rewarded, 7: MadeUp, 8: SignedIn, 30: SignedIn}
		for i, m := range v.Days {
			if m != want[i+1] {
				t.Errorf("November %d: %v, want %v", i+1, m, want[i+1])
			}
		}
		if v.Total != len(want) {
			t.Errorf("Total %d, want %d", v.Total, len(want))
		}
	})
}

// A streak as long as the calendar keeps, read in the evening west of UTC
// (where the user's today is a day behind UTC's): its first day's month
// must still be stored. miniredis's clock is moved to that evening, and
// its keys expired as if the time had passed.
func TestAStreakReadWestOfUTCStillFindsItsFirstDay(t *testing.T) {
	srv := miniredis.RunT(t)
	hnl, err := time.LoadLocation("Pacific/Honolulu")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	ctx := context.Background()
	markedAt := time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)
	srv.SetTime(markedAt)
	set := pinned(c, markedAt)
	// Every day from 2025-01-30 to 2026-03-06 in Honolulu: 401 days.
	for d := date(2025, 1, 30, hnl); d.Before(date(2026, 3, 7, hnl)); d = d.AddDate(0, 0, 1) {
		if ok, err := c.SignIn(ctx, "u", d); err != nil || !ok {
			t.Fatal(d, ok, err)
		}
	}
	// 20:00 on 2026-03-07 in Honolulu is 06:00 on the 8th in UTC; the
	// streak's first day, 400 days back, is 2025-01-31, whose month ended
	// 400 days and 6 hours before by UTC.
	today := time.Date(2026, 3, 7, 20, 0, 0, 0, hnl)
	set(today)
	srv.SetTime(today)
	srv.FastForward(today.Sub(markedAt))
	if n, err := c.Streak(ctx, "u", today); err != nil || n != CalendarRetentionDays {
		t.Fatalf("streak of a user signed in on each of the last 401 days, today not yet: %d %v, want %d", n, err, CalendarRetentionDays)
	}
}

// Streak reads months with MGET, which takes a key of another type for a
// missing one: it must fail as Month does, not read an empty month.
func TestAStreakOverAMonthOfAnotherTypeFails(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		user := redistest.Key(t)
		y := calendarYear()
		if _, err := c.SignIn(ctx, user, date(y, 12, 1, time.UTC)); err != nil {
			t.Fatal(err)
		}
		k, _, err := c.calendarKey(user, y, 11)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, k, "x", "y").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Month(ctx, user, y, 11); err == nil {
			t.Fatal("Month of a hash: no error")
		}
		if n, err := c.Streak(ctx, user, date(y, 12, 1, time.UTC)); !errors.Is(err, ErrWrongType) {
			t.Fatalf("Streak over a hash: %d %v, want ErrWrongType", n, err)
		}
	})
}

// Streak reads this month and the last in one round trip, a month not
// stored (the user's first sign-in this month, none the month before)
// included: the check that a month read as nil is not of another type
// goes in the same script.
func TestAStreakOfAFewDaysIsOneRoundTrip(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		user := redistest.Key(t)
		today := date(calendarYear(), 3, 10, time.UTC)
		if _, err := c.SignIn(ctx, user, today); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Streak(ctx, user, today); err != nil { // the script loaded
			t.Fatal(err)
		}
		sent := f.On(redistest.Any())
		if n, err := c.Streak(ctx, user, today); err != nil || n != 1 {
			t.Fatalf("Streak: %d %v, want 1", n, err)
		}
		if n := sent.Hits(); n != 1 {
			t.Fatalf("Streak of one day sent %d commands, want one", n)
		}
	})
}

// Calendars and unique counts on a key that holds another type fail with
// ErrWrongType, as counts do, and leave the key as it is.
func TestCalendarsAndUniqueCountsRefuseKeysOfAnotherType(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		user := redistest.Key(t)
		y := calendarYear()
		month, _, err := c.calendarKey(user, y, 5)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, month, "x", "y").Err(); err != nil {
			t.Fatal(err)
		}
		key := redistest.Key(t)
		unique, err := c.key(key, uniqueSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, unique, "x", "y").Err(); err != nil {
			t.Fatal(err)
		}
		for name, call := range map[string]func() error{
			"SignIn":      func() error { _, err := c.SignIn(ctx, user, date(y, 5, 3, time.UTC)); return err },
			"Month":       func() error { _, err := c.Month(ctx, user, y, 5); return err },
			"AddUnique":   func() error { _, err := c.AddUnique(ctx, key, Window{}, "a"); return err },
			"CountUnique": func() error { _, err := c.CountUnique(ctx, key, Window{}); return err },
		} {
			if err := call(); !errors.Is(err, ErrWrongType) {
				t.Errorf("%s: %v, want ErrWrongType", name, err)
			}
		}
		for _, k := range []string{month, unique} {
			if typ := rdb.Type(ctx, k).Val(); typ != "hash" {
				t.Errorf("%s is now a %s", k, typ)
			}
		}
	})
}

func TestAStreakInTheFirstMonthOfYearOneIsNotInvalid(t *testing.T) {
	// Month and SignIn take years 1 to 9999. A streak that reaches back
	// from January of year 1 finds nothing before it, rather than
	// failing on a month of year 0 the caller never named.
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t))
	ctx := context.Background()
	if _, err := c.Month(ctx, "u", 1, time.January); err != nil {
		t.Fatalf("Month of 0001-01: %v", err)
	}
	if n, err := c.Streak(ctx, "u", time.Date(1, 1, 15, 0, 0, 0, 0, time.UTC)); err != nil || n != 0 {
		t.Fatalf("Streak on 0001-01-15: %d %v, want 0 and no error", n, err)
	}
}
