package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func check(t *testing.T, results []result) {
	t.Helper()
	naive, surge := results[0], results[1]
	for _, r := range results {
		t.Logf("%s: draws %v, wins %d", r.name, r.days, r.wins)
	}
	if naive.overDraws() == 0 || naive.overWins() == 0 {
		t.Errorf("naive: %d extra draws, %d extra wins; want both: the scenario no longer shows the incident", naive.overDraws(), naive.overWins())
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
	results, err := attackBoth("", 100, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check(t, results)
}

func TestSurgeGrantsExactlyTheLimitsOnARealServer(t *testing.T) {
	results, err := attackBoth(redistest.SingleAddr(t), 100, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	check(t, results)
}
