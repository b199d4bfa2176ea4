package bloom

import (
	"testing"

	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
