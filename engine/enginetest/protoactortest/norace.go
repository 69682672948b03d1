//go:build !race

package protoactortest

const raceEnabled = false
