package main

import "github.com/sift/batch/cmd/siftbatch/internal/remote"

// runSubmit is the submit command: [remote.Submit].
var runSubmit = remote.Submit
