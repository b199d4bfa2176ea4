package counter

import (
	"testing"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// resent makes call with every run of s sent twice, the caller seeing the
// second reply, as go-redis does when a reply is lost (Options.MaxRetries).
// Every run, not only the first: on a server that has not cached s yet,
// EVALSHA meets NOSCRIPT, and it is the EVAL after it that must run twice.
func resent(t *testing.T, f *redistest.Faults, s *script.Script, call func()) {
	t.Helper()
	rule := f.On(redistest.Script(s.Hash())).Resend()
	call()
	rule.Off()
	if rule.Hits() == 0 {
		t.Fatal("the call never ran the script")
	}
}
