package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// scenario runs a smaller flood with a fixed seed against addr (empty: an
// embedded miniredis) and checks what the program claims.
func scenario(t *testing.T, addr string) {
	t.Helper()
	cfg := defaults()
	cfg.users = 1000
	cfg.lookups = 2000
	cfg.storeDelay = time.Millisecond
	cfg.seed = 1
	res, err := floodBoth(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res.print(&out)
	t.Log("\n" + out.String())

	plain, filtered := res.plain, res.filtered
	if plain.absentLookups == 0 || plain.absentLookups != filtered.absentLookups {
		t.Fatalf("absent lookups: %d without the filter, %d with it; want the same flood, with some", plain.absentLookups, filtered.absentLookups)
	}
	// Without the filter nothing stops an absent id: every one reaches
	// the store. That is the incident.
	if plain.storeAbsent != int64(plain.absentLookups) {
		t.Errorf("without the filter %d absent ids reached the store, want all %d", plain.storeAbsent, plain.absentLookups)
	}
	// With it, about the target rate get through (1% here); 3% leaves
	// room for chance and still catches a filter that stops nothing.
	if limit := 0.03 * float64(filtered.absentLookups); float64(filtered.storeAbsent) > limit {
		t.Errorf("with the filter %d of %d absent ids reached the store (%.2f%%), want at most %.0f (3%%; theory %.2f%%)",
			filtered.storeAbsent, filtered.absentLookups, 100*filtered.observedRate(), limit, 100*res.expected)
	}
	// The filter turns away absent ids only: each absent id was either
	// turned away or reached the store, and no known user was turned away.
	if got := int64(filtered.rejected) + filtered.storeAbsent; got != int64(filtered.absentLookups) {
		t.Errorf("with the filter %d turned away + %d at the store = %d, want the %d absent lookups",
			filtered.rejected, filtered.storeAbsent, got, filtered.absentLookups)
	}
	if len(filtered.falseNegatives) > 0 {
		t.Errorf("the filter said absent for %d known users: %v", len(filtered.falseNegatives), filtered.falseNegatives)
	}
	for _, r := range []run{plain, filtered} {
		if r.realNotFound > 0 {
			t.Errorf("%s: %d lookups of real users answered \"no such user\"", r.name, r.realNotFound)
		}
	}
}

func TestFilterStopsTheFloodWithoutFalseNegatives(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the run leaves no goroutine behind
	scenario(t, "")
}

func TestFilterStopsTheFloodOnARealServer(t *testing.T) {
	scenario(t, redistest.SingleAddr(t))
}
