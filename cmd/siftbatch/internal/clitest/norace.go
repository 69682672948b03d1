//go:build !race

package clitest

// raceEnabled: the test binary has no race detector, and neither has
// Binary's.
const raceEnabled = false
