//go:build !race

package clitest

// raceEnabled: the test binary has no race detector, and neither has
// RaceBinary's build.
const raceEnabled = false
