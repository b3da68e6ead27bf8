package netlab_test

import (
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }
