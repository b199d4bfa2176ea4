package counter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sign-in calendars: which days a user signed in, made up and was
// rewarded for. Kept as a hash of dates per user, such calendars once cost
// 30 GB; here a month is one Redis string under prefix{user}:cal:YYYY-MM,
// 25 bytes: 8 bytes of 2-bit marks per day, then the random token of the
// call that made the last change (16 bytes) and the mark it replaced (one
// digit), by which a call that go-redis sends again after a lost reply
// knows the change it finds is its own. Day d of the month is the field
// at bit offset 2*(d-1), most significant bit first: the layout of
// BITFIELD key GET u2 #(d-1), so other tools can read a calendar with
// plain Redis commands. Calendars written before the token was kept are
// only the bytes of days up to the last one marked; they read the same,
// and their next change writes the whole 25 bytes.
//
// A day is a civil date, the caller's: the Date of the time.Time passed in,
// in its own Location. The caller knows the user's time zone and so
// decides when the user's day begins.

// CalendarRetentionDays is how long a month's calendar is kept after the
// month ends, in days (two more by UTC, to cover every time zone). It is
// also the longest streak Streak reports: a streak reaches back at most
// this far, so all of it is still stored.
const CalendarRetentionDays = 400

// Mark is what a user's calendar says about one day. The marks are two
// bits, in the order of a day's life: a day is signed in (or made up
// later), then possibly rewarded.
type Mark uint8

const (
	// Unmarked is a day the user has not signed in (yet).
	Unmarked Mark = iota
	// SignedIn is a day the user signed in on.
	SignedIn
	// MadeUp is a missed day the user signed afterwards (MakeUp): it
	// keeps a streak going, and a campaign may price it differently.
	MadeUp
	// Rewarded is a signed-in or made-up day whose reward was given:
	// Reward moves a day here once, so a reward cannot be claimed twice.
	Rewarded
)

// String names the mark, as in "signed in".
func (m Mark) String() string {
	switch m {
	case Unmarked:
		return "unmarked"
	case SignedIn:
		return "signed in"
	case MadeUp:
		return "made up"
	case Rewarded:
		return "rewarded"
	}
	return "Mark(" + strconv.Itoa(int(m)) + ")"
}

// marks is a set of marks for the mark script: bit m stands for Mark m.
type marks uint8

// MonthView is a user's calendar for one month.
type MonthView struct {
	// Year is the month's year.
	Year int
	// Month is the month shown.
	Month time.Month
	// Days holds each day's mark: Days[0] is the 1st, and there are as
	// many as the month has days.
	Days []Mark
	// Total is how many days have any mark: signed in, made up or
	// rewarded.
	Total int
}

// SignIn marks day signed in and reports whether it did: false if the day
// already had a mark, so a second sign-in on one day (a retry, a double
// tap) changes nothing and can be told apart from the first.
//
// A call that go-redis sends again after its reply was lost
// (Options.MaxRetries) is still one call: if its first run made the
// change, it reports true, unless another change of the user's month
// landed between the two runs (then false, although the change was this
// call's). The same holds for MakeUp and Reward.
//
// Any day may be signed in, a future one included: the caller decides
// which day is the user's today. A day whose calendar would already have
// expired (CalendarRetentionDays after its month, by the Client's clock
// or by Redis's) is ErrInvalid.
func (c *Client) SignIn(ctx context.Context, user string, day time.Time) (bool, error) {
	return c.mark(ctx, "sign in", user, day, SignedIn, marks(1<<Unmarked))
}

// MakeUp marks a missed day made up and reports whether it did: false if
// the day already had a mark. Only past days may be made up: a day on or
// after today, where today is the Client's clock in day's Location, is
// ErrInvalid, since a user who may still sign in that day should sign in.
func (c *Client) MakeUp(ctx context.Context, user string, day time.Time) (bool, error) {
	if !civil(day).Before(civil(c.now().In(day.Location()))) {
		return false, fmt.Errorf("%w: calendar %q: %s is not a past day; only a missed day can be made up",
			ErrInvalid, user, day.Format(time.DateOnly))
	}
	return c.mark(ctx, "make up", user, day, MadeUp, marks(1<<Unmarked))
}

// Reward marks a signed-in or made-up day rewarded and reports whether it
// did: false if the day was already rewarded, or never signed. Give the
// reward only on true: the check and the change are one atomic step, so
// concurrent claims of one day's reward succeed once. A call sent again
// after a lost reply still reports true (see SignIn).
func (c *Client) Reward(ctx context.Context, user string, day time.Time) (bool, error) {
	return c.mark(ctx, "reward", user, day, Rewarded, marks(1<<SignedIn|1<<MadeUp))
}

// mark sets day's mark to to if its mark is in from.
func (c *Client) mark(ctx context.Context, op, user string, day time.Time, to Mark, from marks) (bool, error) {
	y, m, d := day.Date()
	k, exp, err := c.calendarKey(user, y, m)
	if err != nil {
		return false, err
	}
	if !exp.After(c.now()) {
		return false, fmt.Errorf("%w: calendar %q: %s is older than the calendar keeps (%d days after its month)",
			ErrInvalid, user, day.Format(time.DateOnly), CalendarRetentionDays)
	}
	tok := newToken()
	args := calendarMarkScript.Args(1, 6)
	args = append(args, k, d-1, int(to), int(from), exp.UnixMilli(), string(tok[:]))
	res, err := calendarMarkScript.Ints(ctx, c.rdb, args)
	if err != nil {
		return false, fmt.Errorf("counter: %s %q on %s: %w", op, user, day.Format(time.DateOnly), asWrongType(err))
	}
	if len(res) != 2 {
		return false, fmt.Errorf("counter: %s %q: %d integers in reply, want 2", op, user, len(res))
	}
	if res[0] < 0 {
		return false, fmt.Errorf("%w: calendar %q: %s is older than the calendar keeps (%d days after its month, by Redis's clock)",
			ErrInvalid, user, day.Format(time.DateOnly), CalendarRetentionDays)
	}
	return res[1] == 1, nil
}

// Month returns the user's calendar for one month, in one read. A month
// with no marks, or one past its retention, has every day Unmarked.
func (c *Client) Month(ctx context.Context, user string, year int, month time.Month) (MonthView, error) {
	if month < time.January || month > time.December {
		return MonthView{}, fmt.Errorf("%w: calendar %q: month %d is not 1 to 12", ErrInvalid, user, month)
	}
	k, _, err := c.calendarKey(user, year, month)
	if err != nil {
		return MonthView{}, err
	}
	cmd := redis.NewStringCmd(ctx, "get", k)
	if err := c.rdb.Process(ctx, cmd); err != nil && !errors.Is(err, redis.Nil) {
		return MonthView{}, fmt.Errorf("counter: calendar %q %04d-%02d: %w", user, year, int(month), asWrongType(err))
	}
	v := MonthView{Year: year, Month: month, Days: make([]Mark, daysIn(year, month))}
	bits := cmd.Val()
	for i := range v.Days {
		v.Days[i] = markAt(bits, i)
		if v.Days[i] != Unmarked {
			v.Total++
		}
	}
	return v, nil
}

// Streak returns how many consecutive days up to today are marked (signed
// in, made up or rewarded), today being the civil date of today in its
// Location. If today is not marked yet, the streak is the one up to
// yesterday: a user who has not signed in yet today keeps the streak
// until the day is over.
//
// It reads this month and the last in one round trip, which holds most
// streaks, and only for a longer one every month back to the retention in
// one more. A streak is at most CalendarRetentionDays long: older days may
// be gone.
func (c *Client) Streak(ctx context.Context, user string, today time.Time) (int, error) {
	day := civil(today)
	if _, _, err := c.calendarKey(user, day.Year(), day.Month()); err != nil {
		return 0, err
	}
	r := calendarReader{c: c, user: user, oldest: day.AddDate(0, 0, -CalendarRetentionDays), months: map[time.Time]string{}}
	mk, err := r.at(ctx, day)
	if err != nil {
		return 0, err
	}
	if mk == Unmarked {
		day = day.AddDate(0, 0, -1)
	}
	n := 0
	for n < CalendarRetentionDays {
		mk, err := r.at(ctx, day)
		if err != nil {
			return 0, err
		}
		if mk == Unmarked {
			break
		}
		n++
		day = day.AddDate(0, 0, -1)
	}
	return n, nil
}

// calendarReader reads a user's months backwards from a day, no further
// back than oldest, keeping what it read.
type calendarReader struct {
	c      *Client
	user   string
	oldest time.Time            // a civil date (UTC midnight)
	months map[time.Time]string // the first of a month (UTC) -> its calendar
	reads  int
}

// at returns the mark of day, a civil date not before r.oldest.
func (r *calendarReader) at(ctx context.Context, day time.Time) (Mark, error) {
	first := time.Date(day.Year(), day.Month(), 1, 0, 0, 0, 0, time.UTC)
	bits, ok := r.months[first]
	if !ok {
		if err := r.read(ctx, first); err != nil {
			return Unmarked, err
		}
		bits = r.months[first]
	}
	return markAt(bits, day.Day()-1), nil
}

// read fetches the month starting first and earlier ones in one script
// call, calendar_read.lua (a user's months share the user's hash tag, so
// one slot). The first read takes two months; a second takes every month
// back to r.oldest.
func (r *calendarReader) read(ctx context.Context, first time.Time) error {
	last := time.Date(r.oldest.Year(), r.oldest.Month(), 1, 0, 0, 0, 0, time.UTC)
	var months []time.Time
	var keys []any
	// Months before year 1 have no key (calendarKey refuses them): like
	// those before the retention, there is nothing to read.
	for mo := first; !mo.Before(last) && mo.Year() >= 1 && (r.reads > 0 || len(months) < 2); mo = mo.AddDate(0, -1, 0) {
		k, _, err := r.c.calendarKey(r.user, mo.Year(), mo.Month())
		if err != nil {
			return err
		}
		months = append(months, mo)
		keys = append(keys, k)
	}
	if len(months) == 0 { // before the retention: nothing to read
		r.months[first] = ""
		return nil
	}
	r.reads++
	// Read-only: a client that reads replicas may send it to one, as it
	// may any report (see the package doc).
	res, err := calendarReadScript.Values(ctx, r.c.rdb, append(calendarReadScript.ArgsRO(len(keys), len(keys)), keys...))
	if err != nil {
		return fmt.Errorf("counter: streak %q: %w", r.user, asWrongType(err))
	}
	if len(res) == 1 && len(months) > 1 {
		if _, ok := res[0].(int64); ok {
			return fmt.Errorf("%w: counter: streak %q: a month of the calendar is not a calendar", ErrWrongType, r.user)
		}
	}
	if len(res) != len(months) {
		return fmt.Errorf("counter: streak %q: %d values in reply to %d months", r.user, len(res), len(months))
	}
	for i, v := range res {
		switch v := v.(type) {
		case nil:
			r.months[months[i]] = ""
		case string:
			r.months[months[i]] = v
		case int64:
			return fmt.Errorf("%w: counter: streak %q: a month of the calendar is not a calendar", ErrWrongType, r.user)
		default:
			return fmt.Errorf("counter: streak %q: unexpected %T in reply", r.user, v)
		}
	}
	return nil
}

// calendarKey returns the key of user's calendar for a month and when it
// expires: CalendarRetentionDays after the month ends, plus the jitter of
// expiry, so that the calendars of millions of users do not all expire in
// the same second. The month ends by UTC, as the key is the same whatever
// the user's zone, and two days more cover every zone (UTC-12 to UTC+14):
// a streak of CalendarRetentionDays read in the evening in Honolulu still
// finds its first day.
func (c *Client) calendarKey(user string, year int, month time.Month) (string, time.Time, error) {
	if year < 1 || year > 9999 {
		return "", time.Time{}, fmt.Errorf("%w: calendar %q: year %d is not 1 to 9999", ErrInvalid, user, year)
	}
	k, err := c.key(user, ":cal:"+fmt.Sprintf("%04d-%02d", year, int(month)))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("calendar: %w", err)
	}
	end := time.Date(year, month+1, 1, 0, 0, 0, 0, time.UTC)
	return k, expiry(period{start: end, end: end.AddDate(0, 0, CalendarRetentionDays+2)}, k), nil
}

// markAt decodes the mark of field i (day i+1) of a calendar string.
func markAt(bits string, i int) Mark {
	if i < 0 || i/4 >= len(bits) {
		return Unmarked
	}
	return Mark(bits[i/4]>>(6-2*(i%4))) & 3
}

// civil returns t's date in its own Location, as midnight UTC: a date
// that AddDate steps through a day at a time whatever the zone's rules.
func civil(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// daysIn returns the number of days of a month.
func daysIn(year int, month time.Month) int {
	return time.Date(year, month+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
