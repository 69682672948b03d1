package engine

import "github.com/sift/batch/engine/batchtype"

// The defaults a zero [Config] field takes (defined in package batchtype).
const (
	DefaultTTL           = batchtype.DefaultTTL
	DefaultTargetsPerJob = batchtype.DefaultTargetsPerJob
	MaxTargetsPerJob     = batchtype.MaxTargetsPerJob
	DefaultJobsPerCaller = batchtype.DefaultJobsPerCaller
	DefaultJobsTotal     = batchtype.DefaultJobsTotal
	DefaultWorkers       = batchtype.DefaultWorkers
	MaxWorkers           = batchtype.MaxWorkers
	DefaultMaxBytes      = batchtype.DefaultMaxBytes
	DefaultRetryWait     = batchtype.DefaultRetryWait
	DefaultRetryFor      = batchtype.DefaultRetryFor
	NodeTagLen           = batchtype.NodeTagLen
)

// Config tunes a [Runner]: see [batchtype.Config], where it is defined once
// (the actors take it as it is). The zero value is ready to use: each zero
// field takes the default its comment gives; a negative field makes [New]
// fail.
type Config = batchtype.Config
