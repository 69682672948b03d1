package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/persistence"
)

// holdStoreEnv, set in a child process of the test binary, makes it hold
// the store directory it names until its standard input closes: a store in
// use by another process.
const holdStoreEnv = "SIFTBATCH_TEST_HOLD_STORE"

func TestMain(m *testing.M) {
	fetcher.RunFilterChild() // the filter processes of the fetchers the tests make
	if os.Getenv(runMainEnv) != "" {
		main() // the command itself (TestServe_Cluster's nodes); it exits
	}
	if dir := os.Getenv(holdStoreEnv); dir != "" {
		os.Exit(holdStore(dir))
	}
	if cfg := os.Getenv(pollLoadEnv); cfg != "" {
		os.Exit(pollLoad(cfg))
	}
	// Nothing may leak: every runner, store, server, client and child
	// process a test starts is stopped by the end of the test. No
	// goroutine is allowed to outlive the tests.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		clitest.Cleanup()
		removeTestCerts()
		os.Exit(code)
	}))
}

// holdStore opens dir, says "held" on stdout, and keeps the store open until
// stdin is closed.
func holdStore(dir string) int {
	s, err := persistence.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold store:", err)
		return 1
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = s.Close()
	return 0
}

// holdStoreInChild holds the store in dir from another process until the
// test ends.
func holdStoreInChild(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdStoreEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("store holder: %v", err)
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	if l := testkit.Recv(t, line); l != "held\n" {
		t.Fatalf("store holder said %q", l)
	}
}
