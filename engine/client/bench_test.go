package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/httpapi"
)

// BenchmarkClient_Results reads a job of 8 results of 256 KiB (a 2 MiB
// answer) two ways: "stream" through Results, one target at a time, and
// "readall", the answer read whole and decoded at once, as a client
// without streaming would. held-B is the most of the answer each holds at
// once: for stream, the target handed over and what was read past it; for
// readall, the whole answer.
func BenchmarkClient_Results(b *testing.B) {
	const n, size = 8, 256 << 10
	bd := setup(b, engine.Config{}, httpapi.Options{})
	ct := &countingTransport{}
	hc := &http.Client{Transport: ct}
	c := bd.client(b, "alice-key", client.WithHTTPClient(hc))
	id := bigJob(b, bd, c, n, size)
	get := func() []byte {
		req, _ := http.NewRequest("GET", bd.url+"/v1/batch/"+id+"?results=1", nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		whole, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Fatal(err)
		}
		return whole
	}
	whole := get()
	starts := make([]int64, n)
	for i := range starts {
		starts[i] = int64(bytes.Index(whole, []byte(`{"idx":`+strconv.Itoa(i)+`,`)))
	}

	b.Run("stream", func(b *testing.B) {
		held := int64(0)
		for b.Loop() {
			ct.read.Store(0)
			for r, err := range c.Results(context.Background(), id) {
				if err != nil || r.Result == nil {
					b.Fatal(err)
				}
				held = max(held, ct.read.Load()-starts[r.Idx])
			}
		}
		b.ReportMetric(float64(held), "held-B")
	})
	b.Run("readall", func(b *testing.B) {
		for b.Loop() {
			var j client.Job
			if err := json.Unmarshal(get(), &j); err != nil || len(j.Targets) != n {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(whole)), "held-B")
	})
}
