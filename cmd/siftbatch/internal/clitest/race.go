//go:build race

package clitest

// raceEnabled: the test binary has the race detector, and so has
// RaceBinary's build.
const raceEnabled = true
