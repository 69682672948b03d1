// Package enginetest is the project's test kit for the tests of package
// engine and of every package built on it (the HTTP API, the dashboard,
// the cluster, the CLI): a runner on a real Badger store with a fake
// clock, captured logs and recorded hooks ([Setup]), fake fetchers, and
// the TestMain helpers ([Main], [ClusterMain]).
//
// Its leaf half, package github.com/sift/batch/engine/enginetest/testkit
// (clock, log buffer, waits, signals, gates, tiers), imports nothing of the
// project, for the internal tests of packages persistence and actors.
//
// A typical test:
//
//	func TestRunner_Something(t *testing.T) {
//		t.Parallel()
//		b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
//		id := b.Submit(t, "alice", enginetest.Targets("a", 3))
//		j := b.WaitSettled(t, id)
//		…
//	}
package enginetest
