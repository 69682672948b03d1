// Package promqlcheck checks that the alert rules and the Grafana board of
// docs/observability name only series a real serve exposes: it parses
// every expression with Prometheus's own PromQL parser
// (github.com/prometheus/prometheus/promql/parser) and compares the
// series names with testdata/exposed.txt, which TestServe_MetricsExposed
// (cmd/siftbatch) keeps equal to a real serve's GET /metrics.
//
// It is a module of its own because the Prometheus module's go.mod would
// raise siftbatch's gRPC (1.60 to 1.84), Kubernetes client (0.28 to 0.37)
// and OpenTelemetry requirements for a test's sake: here they touch
// nothing that ships. make test/rules runs it (make test does).
package promqlcheck
