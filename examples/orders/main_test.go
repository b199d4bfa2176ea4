package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// scenario runs the default scenario with a fixed seed against addr (empty:
// an embedded miniredis) and checks its invariants.
func scenario(t *testing.T, addr string) {
	t.Helper()
	cfg := defaults()
	cfg.seed = 1
	res, err := run(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res.print(&out)
	t.Log("\n" + out.String())

	for _, v := range res.violations() {
		t.Error(v)
	}
	tl := res.tally()
	// The scenario must show what it claims to show: crashes whose jobs
	// were delivered again, payments that left their job to run and
	// payments that cancelled it, and unpaid orders to cancel.
	if len(res.crashes) != cfg.crashes {
		t.Errorf("%d crashes, want %d: the scenario no longer crashes its workers", len(res.crashes), cfg.crashes)
	}
	if tl.redeliveries < len(res.crashes) {
		t.Errorf("%d redeliveries for %d crashes: each crashed job must be delivered again", tl.redeliveries, len(res.crashes))
	}
	if tl.outcomes["paid"] == 0 {
		t.Error("no cancel job found its order paid")
	}
	if tl.paidAndCancelled == 0 || tl.unpaid == 0 {
		t.Errorf("%d payments cancelled their job, %d orders unpaid: want some of each", tl.paidAndCancelled, tl.unpaid)
	}
	if len(res.deliveries) == 0 || tl.unpaidCancelledOnce != tl.unpaid {
		t.Errorf("%d of %d unpaid orders cancelled exactly once", tl.unpaidCancelledOnce, tl.unpaid)
	}
}

func TestEveryUnpaidOrderCancelledOnceDespiteCrashes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the run leaves no goroutine behind
	scenario(t, "")
}

func TestEveryUnpaidOrderCancelledOnceOnARealServer(t *testing.T) {
	scenario(t, redistest.SingleAddr(t))
}
