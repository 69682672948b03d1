package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
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
				m := recvMsg(t, got)
				require.Equal(t, last[m.from]+1, m.n, "sender %d", m.from)
				last[m.from] = m.n
			}
			ts.stop(t, pid)
		})
	}
}

func recvMsg[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatal("timed out")
		panic("unreachable")
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
