package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestServe_DiskReserveBeyondDisk: --disk-reserve larger than the whole file
// system of the store can never be met: serve would start and answer 507
// to every submit for ever. It must refuse to start instead, with an
// error naming the flag and the file system's size (bad input gets a
// clear error).
func TestServe_DiskReserveBeyondDisk(t *testing.T) {
	testkit.Long(t)
	mnt := testkit.MountTmpfs(t, 128<<20)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(clitest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(mnt, "store"),
		"--keys", keys, "--disk-reserve", "1000000000000") // 1 TB on a 128 MiB disk
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if strings.Contains(l, "listening on") {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			t.Fatalf("serve started with a reserve of 1 TB on a 128 MiB file system (every submit will answer 507 for ever); its log:\n%s", tailLines(logs.String(), 5))
		}
		<-exited
	case <-exited:
	}
	if !strings.Contains(logs.String(), "disk-reserve") {
		t.Errorf("serve exited without naming --disk-reserve: %s", logs.String())
	}
}
