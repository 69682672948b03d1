//go:build race

package kubernetes

const raceEnabled = true
