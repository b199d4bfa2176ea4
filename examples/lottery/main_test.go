package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// testBurst is the burst the tests fire, as the program does by default.
const testBurst = 100

func check(t *testing.T, results []result) {
	t.Helper()
	naive, surge := results[0], results[1]
	for _, r := range results {
		t.Logf("%s: draws %v, wins %d", r.name, r.days, r.wins)
	}
	if naive.overDraws() == 0 || naive.overWins() == 0 {
		t.Errorf("naive: %d extra draws, %d extra wins; want both: the scenario no longer shows the incident", naive.overDraws(), naive.overWins())
	}
	// The midnight reset: draws of the first half read the old day's count
	// before midnight and counted after it, in a new key, so the old day
	// is short of some of them (of all, unless a draw finished its prize
	// call before the last of the half had read).
	if before := naive.days[naive.order[0]]; before >= drawnBefore+testBurst/2 {
		t.Errorf("naive: %d draws counted before midnight, the whole first half: the burst did not straddle midnight", before)
	}
	if err := surge.exceeded(); err != nil {
		t.Errorf("surge: %v", err)
	}
	// Every ticket wins and the burst is far larger than the limits: surge
	// must grant exactly the limits, no more and no fewer.
	for _, d := range surge.order {
		if surge.days[d] != drawsPerDay {
			t.Errorf("surge: %d draws on %s, want exactly %d", surge.days[d], d, drawsPerDay)
		}
	}
	if surge.wins != winsInTotal {
		t.Errorf("surge: %d wins, want exactly %d", surge.wins, winsInTotal)
	}
}

func TestSurgeGrantsExactlyTheLimitsAcrossMidnight(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the run leaves no goroutine behind
	results, err := attackBoth("", testBurst, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check(t, results)
}

func TestSurgeGrantsExactlyTheLimitsOnARealServer(t *testing.T) {
	results, err := attackBoth(redistest.SingleAddr(t), testBurst, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check(t, results)
}
