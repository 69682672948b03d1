// Package testkit is the leaf half of the project's test kit: a fake clock,
// a log buffer, waits that fail after a generous deadline, signals a test
// waits on (River's testsignal), a gate for fake fetches, and the test
// tiers. It imports nothing of the project but engine/enginetest/loopback (which
// imports nothing), so that the internal tests of packages persistence and
// actors, which package engine imports, can use it too; package
// github.com/sift/batch/engine/enginetest builds the runner and store
// setups on it.
//
// Every wait here fails the test after [Deadline]: a deadline for a test
// that has hung, never an assertion of speed. Tests wait on a signal the
// code under test sends or poll a condition; they never sleep to wait and
// never assert a wall-clock upper bound.
package testkit
