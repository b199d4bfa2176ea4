package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestSurgeReleasesEveryStudentOnTime(t *testing.T) {
	defer goleak.VerifyNone(t) // run leaves no goroutine behind
	cfg := defaults()
	cfg.students = 60
	res, err := run("", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.runs() {
		t.Logf("%-19s %d requests, %d failed, %d keys, %d without a TTL, busy: %d in the burst, %d when their window or ban ended, %d later: %s",
			r.name, r.requests, r.failed, r.keys, r.noTTL, r.busyBurst, r.busyAtEnd, r.busyLater, r.note)
	}
	// The faults are seeded and the clock simulated: the naive run
	// blacklists the same students every time.
	if res.naive.noTTL == 0 || res.naive.busyLater != res.naive.noTTL {
		t.Errorf("naive: %d keys without a TTL, %d students busy much later; want some, and the same number: the scenario no longer shows the incident",
			res.naive.noTTL, res.naive.busyLater)
	}
	for _, r := range res.runs() {
		if r.busyBurst != cfg.students {
			t.Errorf("%s: %d of %d students got the busy page in the burst; want all", r.name, r.busyBurst, cfg.students)
		}
	}
	for _, r := range res.surge() {
		if r.noTTL != 0 || r.busyAtEnd != 0 || r.busyLater != 0 || r.overlong != 0 {
			t.Errorf("%s: %d keys without a TTL, %d students busy when their window or ban ended, %d later, %d bans reported longer than %v; want none",
				r.name, r.noTTL, r.busyAtEnd, r.busyLater, r.overlong, res.cfg.ban)
		}
		if r.keys != cfg.students {
			t.Errorf("%s: %d keys after the burst; want one per student (%d)", r.name, r.keys, cfg.students)
		}
	}
}
