package readsched

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestMain checks that no test leaves a goroutine behind: a read that
// waits is a goroutine of its caller's, never the scheduler's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// queue starts a read of caller's that waits for a place (one is held, so
// it must), and returns once it waits: on its grant, it sends name on
// order and releases its place. Its error, if Acquire fails, goes to errs.
func queue(t *testing.T, s *Scheduler, wg *sync.WaitGroup, ctx context.Context, caller, name string, must bool, order chan<- string, errs chan<- error) {
	t.Helper()
	before := s.Waiting(caller)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Acquire(ctx, caller, must); err != nil {
			errs <- err
			return
		}
		order <- name
		s.Release()
	}()
	testkit.WaitFor(t, name+" queued", func() bool { return s.Waiting(caller) == before+1 })
}

func TestScheduler_RoundRobinAcrossCallers(t *testing.T) {
	s := New(1, 8)
	if err := s.Acquire(context.Background(), "holder", false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	order, errs := make(chan string, 16), make(chan error, 16)
	ctx := context.Background()
	// alice floods first, then bob and carol come with one read each.
	for i := 1; i <= 4; i++ {
		queue(t, s, &wg, ctx, "alice", fmt.Sprintf("a%d", i), false, order, errs)
	}
	queue(t, s, &wg, ctx, "bob", "b1", false, order, errs)
	queue(t, s, &wg, ctx, "carol", "c1", false, order, errs)
	queue(t, s, &wg, ctx, "bob", "b2", false, order, errs)
	s.Release()
	wg.Wait()
	close(order)
	var got []string
	for n := range order {
		got = append(got, n)
	}
	// One read per caller in turn, each caller's in the order they came:
	// bob's first read waits for one of alice's, not for her four.
	want := []string{"a1", "b1", "c1", "a2", "b2", "a3", "a4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grants %v, want %v", got, want)
	}
	if len(errs) != 0 {
		t.Fatalf("errors: %v", <-errs)
	}
	if s.busy != 0 || len(s.queues) != 0 || s.ring.Len() != 0 {
		t.Fatalf("after every release: busy %d, queues %d, ring %d", s.busy, len(s.queues), s.ring.Len())
	}
}

func TestScheduler_FreePlaceTakenAtOnce(t *testing.T) {
	s := New(2, 1)
	for range 2 {
		if err := s.Acquire(context.Background(), "alice", false); err != nil {
			t.Fatalf("a free place: %v", err)
		}
	}
	if s.Waiting("alice") != 0 {
		t.Fatal("a read that took a free place is counted as waiting")
	}
	s.Release()
	s.Release()
	if s.busy != 0 {
		t.Fatalf("busy %d after both released", s.busy)
	}
	s.Release() // one too many: no place goes below zero
	if s.busy != 0 {
		t.Fatalf("busy %d after an extra release", s.busy)
	}
}

func TestScheduler_TryAcquireOnlyWhenFree(t *testing.T) {
	s := New(1, 4)
	if !s.TryAcquire() {
		t.Fatal("TryAcquire with a place free")
	}
	if s.TryAcquire() {
		t.Fatal("TryAcquire with no place free")
	}
	s.Release()
	if !s.TryAcquire() {
		t.Fatal("TryAcquire once the place is free again")
	}
	s.Release()
	if s.busy != 0 {
		t.Fatalf("busy %d", s.busy)
	}
}

func TestScheduler_QueueBoundPerCaller(t *testing.T) {
	s := New(1, 2)
	if err := s.Acquire(context.Background(), "holder", false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	order, errs := make(chan string, 16), make(chan error, 16)
	ctx := context.Background()
	queue(t, s, &wg, ctx, "alice", "a1", false, order, errs)
	queue(t, s, &wg, ctx, "alice", "a2", false, order, errs)
	if err := s.Acquire(ctx, "alice", false); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("alice's third read past her bound of 2: %v, want ErrQueueFull", err)
	}
	// Another caller's bound is its own.
	queue(t, s, &wg, ctx, "bob", "b1", false, order, errs)
	queue(t, s, &wg, ctx, "bob", "b2", false, order, errs)
	// A read already admitted that takes its place again waits whatever
	// the bound.
	queue(t, s, &wg, ctx, "alice", "a3-again", true, order, errs)
	if n := s.Waiting("alice"); n != 3 {
		t.Fatalf("alice waiting %d, want 3", n)
	}
	s.Release()
	wg.Wait()
	close(order)
	var got []string
	for n := range order {
		got = append(got, n)
	}
	if want := []string{"a1", "b1", "a2", "b2", "a3-again"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grants %v, want %v", got, want)
	}
	if len(errs) != 0 {
		t.Fatalf("errors: %v", <-errs)
	}
	// Once its queue has drained, alice is admitted again.
	if err := s.Do(ctx, "alice", func() {}); err != nil {
		t.Fatalf("alice after her queue drained: %v", err)
	}
}

func TestScheduler_CancelledReadLeavesTheQueue(t *testing.T) {
	s := New(1, 4)
	if err := s.Acquire(context.Background(), "holder", false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	order, errs := make(chan string, 16), make(chan error, 16)
	gone, leave := context.WithCancel(context.Background())
	queue(t, s, &wg, gone, "alice", "a-gone", false, order, errs)
	queue(t, s, &wg, context.Background(), "bob", "b1", false, order, errs)
	leave() // alice's client goes away while her read waits
	if err := testkit.Recv(t, errs); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled read: %v, want context.Canceled", err)
	}
	if n := s.Waiting("alice"); n != 0 {
		t.Fatalf("alice waiting %d after her read was cancelled", n)
	}
	s.Release()
	if got := testkit.Recv(t, order); got != "b1" {
		t.Fatalf("the place went to %q, want b1: a cancelled read takes none", got)
	}
	wg.Wait()
	if s.busy != 0 || len(s.queues) != 0 {
		t.Fatalf("busy %d, queues %d after all", s.busy, len(s.queues))
	}
}

// TestScheduler_ManyCallersNeverOverPlaces: readers of many callers, some
// cancelled while they wait or as they are granted, never hold more than
// the places at once, and leave nothing behind.
func TestScheduler_ManyCallersNeverOverPlaces(t *testing.T) {
	const places = 3
	s := New(places, 4)
	var in, most atomic.Int64
	var wg sync.WaitGroup
	var served, refused, cancelled atomic.Int64
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%5 == 0 {
				go cancel() // races the grant
			}
			err := s.Acquire(ctx, fmt.Sprintf("c%d", rand.IntN(6)), i%7 == 0)
			switch {
			case errors.Is(err, ErrQueueFull):
				refused.Add(1)
				return
			case err != nil:
				cancelled.Add(1)
				return
			}
			n := in.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			in.Add(-1)
			served.Add(1)
			s.Release()
		}()
	}
	wg.Wait()
	if m := most.Load(); m > places {
		t.Fatalf("%d reads at once, over the %d places", m, places)
	}
	if s.busy != 0 || len(s.queues) != 0 || s.ring.Len() != 0 {
		t.Fatalf("after all: busy %d, queues %d, ring %d", s.busy, len(s.queues), s.ring.Len())
	}
	if served.Load() == 0 {
		t.Fatal("no read served")
	}
	t.Logf("served %d, refused %d, cancelled %d", served.Load(), refused.Load(), cancelled.Load())
}

// BenchmarkScheduler_Uncontended is the scheduler's own cost on a read
// that finds a place free: Acquire and Release, one caller at a time.
func BenchmarkScheduler_Uncontended(b *testing.B) {
	s := New(1, 32)
	ctx := context.Background()
	for b.Loop() {
		if err := s.Acquire(ctx, "alice", false); err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}
