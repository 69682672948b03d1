package actors

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestActorSystemLogger_Message: what protoactor appends to a message (an
// error's text, a printed value) never reaches our log; its own constant
// messages do, whole.
func TestActorSystemLogger_Message(t *testing.T) {
	apiErr := errors.New(`Get "https://10.96.0.1:443/api/v1/namespaces/ns/pods?watch=true": dial tcp 10.96.0.1:443: connect: connection refused`)
	for _, tc := range []struct{ msg, want string }{
		{"Started EndpointManager", "Started EndpointManager"},
		{"Throttled %d Request logs", "Throttled %d Request logs"},
		{fmt.Errorf("unable to watch pods: %w", apiErr).Error(), "unable to watch pods"},
		{"Could not get a response from GossipActor: request timeout", "Could not get a response from GossipActor"},
		{fmt.Sprintf("could not cast %#v[%T] into v1.Pod", struct{ URL string }{"https://example.com/x"}, 1), withheldMessage},
		{"dial https://example.com/x failed", withheldMessage},
		{"user@example.com", withheldMessage},
	} {
		var buf bytes.Buffer
		log := ActorSystemLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		log.Error(tc.msg, slog.Any("error", apiErr))
		out := buf.String()
		if !strings.Contains(out, "msg="+quoteIfNeeded(tc.want)) {
			t.Errorf("%q logged as %s, want msg %q", tc.msg, out, tc.want)
		}
		for _, leak := range []string{"10.96.0.1", "example.com", "https"} {
			if strings.Contains(out, leak) {
				t.Errorf("%q: %q reached the log: %s", tc.msg, leak, out)
			}
		}
	}
}

// quoteIfNeeded is how slog's text handler writes a message.
func quoteIfNeeded(s string) string {
	if strings.ContainsAny(s, " =\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
