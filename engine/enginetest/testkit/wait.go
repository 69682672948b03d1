package testkit

import (
	"testing"
	"time"
)

// Deadline is how long every wait of the kit waits before it fails the
// test: generous, for a loaded machine with the race detector on. It is a
// deadline for a test that has hung, never an assertion of speed.
const Deadline = 30 * time.Second

// deadline is the deadline the waits use: [Deadline], shortened only by
// the kit's own tests of a wait that fails.
var deadline = Deadline

// pollMin and pollMax bound WaitFor's pause between two checks: it starts
// short, for a condition that holds soon, and grows, so that a long wait
// does not keep a core busy.
const (
	pollMin = time.Millisecond
	pollMax = 20 * time.Millisecond
)

// WaitFor checks cond until it holds, pausing between checks (1 ms at
// first, growing to 20 ms); it fails the test with "timed out waiting for
// what" if cond does not hold within [Deadline]. cond runs on the caller's
// goroutine. Prefer waiting on a [Signal] the code sends where there is one.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.NewTimer(deadline)
	defer end.Stop()
	pause := pollMin
	next := time.NewTimer(pause)
	defer next.Stop()
	for !cond() {
		select {
		case <-end.C:
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
			return
		case <-next.C:
		}
		pause = min(2*pause, pollMax)
		next.Reset(pause)
	}
}

// Recv receives one value from ch, failing the test if none comes within
// [Deadline]. A closed channel yields its zero value, as a receive does:
// use [RequireClosed] to require that ch is closed.
func Recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for a value on a channel", deadline)
		var zero T
		return zero
	}
}

// RequireClosed waits until ch is closed, discarding any value received
// before, and fails the test if it is not closed within [Deadline].
func RequireClosed[T any](t testing.TB, ch <-chan T) {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for a channel to close", deadline)
			return
		}
	}
}
