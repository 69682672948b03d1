package main

import "github.com/sift/batch/cmd/siftbatch/internal/remote"

// runLs is the ls command: [remote.List].
var runLs = remote.List
