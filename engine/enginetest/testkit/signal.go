package testkit

import (
	"sync/atomic"
	"testing"
	"time"
)

// signalBuffer is how many values a [Signal] holds unreceived.
const signalBuffer = 1024

// Signal is a point the code under test reports to, and a test waits on
// (River's testsignal): a hook or fake calls Signal when it gets there, the
// test calls Wait. The zero value is inert: Signal on a Signal that was
// never Init'ed does nothing, so code can hold one and signal it
// unconditionally. Signal is safe for concurrent use; Init must happen
// before any other method is called.
type Signal[T any] struct {
	ch      chan T
	dropped atomic.Int64
}

// Init readies s for t: from now on Signal buffers its values (up to 1024
// unreceived) for Wait.
func (s *Signal[T]) Init(t testing.TB) {
	t.Helper()
	s.ch = make(chan T, signalBuffer)
}

// Signal sends v to a waiting test. It never blocks: past 1024 unreceived
// values it drops v, and the next Wait or RequireEmpty fails the test
// saying so. On a Signal never Init'ed it does nothing.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.dropped.Add(1)
	}
}

// Wait returns the next value signalled, failing the test if none comes
// within [Deadline] (or if s was never Init'ed, or dropped values).
func (s *Signal[T]) Wait(t testing.TB) T {
	t.Helper()
	s.check(t)
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for a signal", deadline)
		var zero T
		return zero
	}
}

// RequireEmpty fails the test if a value was signalled and not received by
// Wait. It does not wait: call it once what could signal has finished.
func (s *Signal[T]) RequireEmpty(t testing.TB) {
	t.Helper()
	s.check(t)
	select {
	case v := <-s.ch:
		t.Fatalf("a signal was sent and not waited for: %v", v)
	default:
	}
}

// check fails the test if s cannot be waited on or lost values.
func (s *Signal[T]) check(t testing.TB) {
	t.Helper()
	if s.ch == nil {
		t.Fatalf("testkit: Signal used before Init")
	}
	if n := s.dropped.Load(); n > 0 {
		t.Fatalf("testkit: Signal dropped %d values (more than %d unreceived)", n, signalBuffer)
	}
}
