//go:build race

package clitest

// raceEnabled: the test binary has the race detector, and so does Binary's.
const raceEnabled = true
