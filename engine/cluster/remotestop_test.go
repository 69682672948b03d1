package cluster_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestRemote_EndpointEventAfterStopIsIgnored: an endpoint writer whose
// peer went away publishes an endpoint-terminated event from its own
// goroutine; the event stream calls its subscribers from a copy of their
// list, so the remote's endpoint manager can get the event after the
// remote has stopped. Upstream protoactor-go then read a connection map
// its stop had set to nil and the process died (a CI run of this package);
// actors/internal/protoactor's patch (PATCH.md) ignores the late event.
// The test holds the event in a subscriber ahead of the manager's until
// the remote has stopped, then lets it go on.
func TestRemote_EndpointEventAfterStopIsIgnored(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	newSystem := func() *actor.ActorSystem {
		return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	}
	a, b := newSystem(), newSystem()
	defer a.Shutdown()
	defer b.Shutdown()

	held, release, after := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holdOnce, afterOnce sync.Once
	// Ahead of the endpoint manager's subscription (made by Start).
	first := a.EventStream.Subscribe(func(evt any) {
		if _, ok := evt.(*remote.EndpointTerminatedEvent); ok {
			holdOnce.Do(func() {
				close(held)
				<-release
			})
		}
	})
	defer a.EventStream.Unsubscribe(first)

	ra := remote.NewRemote(a, remote.Configure("127.0.0.1", 0))
	ra.Start()
	rb := remote.NewRemote(b, remote.Configure("127.0.0.1", 0))
	rb.Start()
	last := a.EventStream.Subscribe(func(evt any) {
		if _, ok := evt.(*remote.EndpointTerminatedEvent); ok {
			afterOnce.Do(func() { close(after) })
		}
	})
	defer a.EventStream.Unsubscribe(last)

	echo, err := b.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(*wrapperspb.StringValue); ok {
			c.Respond(s)
		}
	}), "echo")
	if err != nil {
		t.Fatal(err)
	}
	// A connects to B: an endpoint writer from a to b.
	if _, err := a.Root.RequestFuture(echo, wrapperspb.String("ping"), time.Minute).Result(); err != nil {
		t.Fatalf("a to b: %v", err)
	}
	rb.Shutdown(true) // a's writer loses b: the event, held by the first subscriber
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("no endpoint-terminated event on a after b stopped")
	}
	ra.Shutdown(true)
	close(release) // the endpoint manager gets the event now, stopped
	select {
	case <-after:
	case <-time.After(time.Minute):
		t.Fatal("the event never passed the endpoint manager")
	}
}
