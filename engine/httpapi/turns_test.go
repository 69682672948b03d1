package httpapi_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/httpapi"
)

// TestAPI_TurnsHoldUpNoOne: with one request worked on at a time
// (MaxInFlight 1), a client that sends its body slowly, and a long-poll,
// hold up no other caller: a request gives its turn up while it waits on
// the network or the job.
func TestAPI_TurnsHoldUpNoOne(t *testing.T) {
	b := setupWith(t, nil, httpapi.Options{MaxInFlight: 1})
	done := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, done)
	live := b.submit(t, "bob-key", holdURL)
	b.waitRunning(t, live)

	// A POST whose body never comes.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer carol-key\r\nContent-Length: 100\r\n\r\n{")
	// A long-poll on a job that does not end.
	polled := make(chan int, 1)
	go func() { polled <- b.do(t, http.MethodGet, "/v1/batch/"+live+"?wait=60s", "bob-key", nil).code }()

	// The slow body never comes and the long-poll holds for 2 s: held
	// turns would keep these polls waiting (the server has no read
	// timeout here), so they must all answer meanwhile.
	answered := make(chan int, 20)
	go func() {
		for range 20 {
			answered <- b.do(t, http.MethodGet, "/v1/batch/"+done, "alice-key", nil).code
		}
	}()
	for range 20 {
		select {
		case code := <-answered:
			if code != http.StatusOK {
				t.Fatalf("poll: %d", code)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a poll waited behind a slow body or a long-poll")
		}
	}
	select {
	case <-polled:
		t.Fatal("the long-poll answered before its job ended or its wait was over")
	default:
	}
	b.release()
	select {
	case code := <-polled:
		if code != http.StatusOK {
			t.Fatalf("long-poll: %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll did not answer")
	}
}
