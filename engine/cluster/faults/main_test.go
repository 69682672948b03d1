package faults

import (
	"testing"

	"github.com/sift/batch/engine/enginetest"
)

func TestMain(m *testing.M) { enginetest.Main(m) }
