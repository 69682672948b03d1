package main

import "github.com/sift/batch/cmd/siftbatch/internal/servecmd"

// runServe is the serve command: [servecmd.Run].
var runServe = servecmd.Run
