// Command v2gen wrote persistence/testdata/v2store, run with the code of
// main at commit 6ff7a91, format version 2 (results inline in the outcome
// rows): go run ./v2gen DIR from a checkout of that commit; then DIR's
// DISCARD file (1 MiB of zeros that Badger makes again) was left out.
// Under testdata, the go tool never builds it.
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/sift/batch/persistence"
)

func id(n int) string { return fmt.Sprintf("%032x", n) }

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func main() {
	s, err := persistence.Open(os.Args[1])
	must(err)
	ts := []persistence.TargetRecord{{Idx: 0, URL: "http://a/0", Options: []byte(`{"mode":"m"}`)}, {Idx: 1, URL: "http://a/1"}, {Idx: 2, URL: "http://a/2"}}
	// Job 1: settled, partial: a small result, a 100,000-byte one, a failure.
	j := persistence.JobRecord{ID: id(1), Caller: "alice", Status: persistence.StatusQueued, TargetsTotal: 3, Created: 1000, Lease: 1000}
	j.Key[0] = 1
	must(s.CreateJob(&j, ts))
	small := []byte(`{"content":"small"}`)
	big := append(append([]byte(`{"content":"`), bytes.Repeat([]byte("b"), 100_000)...), '"', '}')
	must(s.SaveOutcome(j.ID, &persistence.TargetRecord{Idx: 0, Status: persistence.TargetDone, Result: small, Stored: 1001}))
	must(s.SaveOutcome(j.ID, &persistence.TargetRecord{Idx: 1, Status: persistence.TargetDone, Result: big, Stored: 1002}))
	j.Status, j.Settled, j.TargetsDone, j.TargetsFailed, j.Lease = persistence.StatusPartial, true, 3, 1, 1003
	j.ResultBytes = int64(len(small) + len(big))
	must(s.SaveTarget(&j, &persistence.TargetRecord{Idx: 2, Status: persistence.TargetFailed, Error: "e", Hint: "h", Stored: 1003}))
	// Job 2: unsettled (running), one target stored with a 2,000-byte result.
	k := persistence.JobRecord{ID: id(2), Caller: "bob", Status: persistence.StatusRunning, TargetsTotal: 3, Created: 2000, Lease: 2000}
	k.Key[0] = 2
	must(s.CreateJob(&k, ts))
	mid := append(append([]byte(`{"content":"`), bytes.Repeat([]byte("m"), 2000)...), '"', '}')
	must(s.SaveOutcome(k.ID, &persistence.TargetRecord{Idx: 0, Status: persistence.TargetDone, Result: mid, Stored: 2001}))
	must(s.Close())
}
