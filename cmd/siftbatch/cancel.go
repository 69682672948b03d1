package main

import "github.com/sift/batch/cmd/siftbatch/internal/remote"

// runCancel is the cancel command: [remote.Cancel].
var runCancel = remote.Cancel
