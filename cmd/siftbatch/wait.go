package main

import "github.com/sift/batch/cmd/siftbatch/internal/remote"

// runWait is the wait command: [remote.Wait].
var runWait = remote.Wait
