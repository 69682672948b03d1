package actors

import (
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

// Messages from one sender arrive in the order sent, none lost, with
// several senders at once and the actor going idle and busy again; the
// pool dispatcher and protoactor's default one alike.
func TestMailbox_Order(t *testing.T) {
	for name, d := range map[string]actor.Dispatcher{"pool": nil, "default": nil} {
		t.Run(name, func(t *testing.T) {
			ts := newTestSystem(t)
			if name == "pool" {
				pool := newPoolDispatcher(2, 300)
				defer pool.close()
				d = pool
			}
			const senders, each = 4, 2000
			type msg struct{ from, n int }
			got := make(chan msg, senders*each)
			pid := ts.sys.Root.Spawn(props(func() actor.Actor {
				return actor.ReceiveFunc(func(ctx actor.Context) {
					if m, ok := ctx.Message().(msg); ok {
						got <- m
					}
				})
			}, d))
			var wg sync.WaitGroup
			for s := range senders {
				wg.Go(func() {
					for n := range each {
						ts.sys.Root.Send(pid, msg{s, n})
					}
				})
			}
			wg.Wait()
			last := make([]int, senders)
			for i := range last {
				last[i] = -1
			}
			for range senders * each {
				m := testkit.Recv(t, got)
				require.Equal(t, last[m.from]+1, m.n, "sender %d", m.from)
				last[m.from] = m.n
			}
			ts.stop(t, pid)
		})
	}
}

func TestFIFO(t *testing.T) {
	var q fifo[int]
	_, ok := q.pop()
	require.False(t, ok)
	next, want := 0, 0
	// Never empty for long: the slice is moved down rather than grown.
	for round := range 50 {
		for range 100 + round {
			q.push(next)
			next++
		}
		for range 90 {
			v, ok := q.pop()
			require.True(t, ok)
			require.Equal(t, want, v)
			want++
		}
		require.Less(t, cap(q.items), 4096, "the popped slots are reused")
	}
	for want < next {
		v, ok := q.peek()
		require.True(t, ok)
		require.Equal(t, want, v)
		v, _ = q.pop()
		require.Equal(t, want, v)
		want++
	}
	_, ok = q.peek()
	require.False(t, ok)
}

type urgentTestMsg int

func (urgentTestMsg) urgent() {}

// The runner's own messages go ahead of requests, each kind in its order,
// and no more than urgentStreak of them in a row while a request waits.
func TestMailbox_UrgentFirst(t *testing.T) {
	ts := newTestSystem(t)
	gate, started := make(chan struct{}), make(chan struct{})
	got := make(chan any, 64)
	pid := ts.sys.Root.Spawn(props(func() actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			switch m := ctx.Message().(type) {
			case string:
				if m == "block" {
					close(started)
					<-gate
					return
				}
				got <- m
			case urgentTestMsg:
				got <- m
			}
		})
	}, nil))
	ts.sys.Root.Send(pid, "block")
	<-started
	ts.sys.Root.Send(pid, "a")
	// In an envelope (a request, as Drain is) it is urgent all the same.
	_ = ts.sys.Root.RequestFuture(pid, urgentTestMsg(0), waitTimeout)
	ts.sys.Root.Send(pid, "b")
	for i := 1; i < urgentStreak+4; i++ {
		ts.sys.Root.Send(pid, urgentTestMsg(i))
	}
	close(gate)
	var order []any
	for range urgentStreak + 4 + 2 {
		order = append(order, testkit.Recv(t, got))
	}
	want := []any{}
	for i := range urgentStreak {
		want = append(want, urgentTestMsg(i))
	}
	want = append(want, "a")
	for i := urgentStreak; i < urgentStreak+4; i++ {
		want = append(want, urgentTestMsg(i))
	}
	want = append(want, "b")
	require.Equal(t, want, order)

	// A request never goes ahead of an urgent message posted before it,
	// however many there are.
	gate, started = make(chan struct{}), make(chan struct{})
	ts.sys.Root.Send(pid, "block")
	<-started
	for i := range 2 * urgentStreak {
		ts.sys.Root.Send(pid, urgentTestMsg(i))
	}
	ts.sys.Root.Send(pid, "c")
	ts.sys.Root.Send(pid, urgentTestMsg(-1))
	close(gate)
	order = order[:0]
	for range 2*urgentStreak + 2 {
		order = append(order, testkit.Recv(t, got))
	}
	want = want[:0]
	for i := range 2 * urgentStreak {
		want = append(want, urgentTestMsg(i))
	}
	want = append(want, urgentTestMsg(-1), "c")
	require.Equal(t, want, order)
	ts.stop(t, pid)
}
