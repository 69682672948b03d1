package main

import "github.com/sift/batch/cmd/siftbatch/internal/remote"

// runGet is the get command: [remote.Get].
var runGet = remote.Get
