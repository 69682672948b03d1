package actors

import (
	"testing"

	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// Each machine's table: every state is reachable from the first, a last
// state has no way out, no state lists itself, each pair is listed once
// (with its cause), and a state that is not live never leads to a live one.
func TestLife_Machines(t *testing.T) {
	t.Run("phase", func(t *testing.T) {
		checkMachine(t, &phaseMachine, []phase{phaseIdle, phaseFetching, phaseStoring, phaseWaiting, phaseUnsaved, phaseSettled})
		require.True(t, phaseMachine.reaches(phaseIdle, phaseSettled))
		require.False(t, phaseMachine.reaches(phaseUnsaved, phaseIdle), "an unsaved job only settles")
	})
	t.Run("status", func(t *testing.T) {
		all := []string{persistence.StatusQueued, persistence.StatusRunning, persistence.StatusDone, persistence.StatusPartial,
			persistence.StatusFailed, persistence.StatusCancelled}
		checkMachine(t, &statusMachine, all)
		for _, from := range all {
			for _, to := range all {
				if !persistence.IsLive(from) && persistence.IsLive(to) {
					require.False(t, statusMachine.reaches(from, to), "%s → %s: an ended job is never live again", from, to)
				}
			}
		}
		require.True(t, statusReaches[[2]string{persistence.StatusQueued, persistence.StatusDone}], "in two steps")
		require.False(t, statusMachine.allows(persistence.StatusQueued, persistence.StatusDone), "not in one")
	})
}

func checkMachine[S comparable](t *testing.T, m *machine[S], states []S) {
	t.Helper()
	last := map[S]bool{}
	for _, e := range m.ends {
		last[e.from] = true
		require.NotEmpty(t, e.why)
	}
	pairs := map[[2]S]bool{}
	for _, e := range m.edges {
		require.NotEqual(t, e.from, e.to, "%v lists itself", e.from)
		require.False(t, last[e.from], "%v is a last state: no way out", e.from)
		require.False(t, pairs[[2]S{e.from, e.to}], "%v → %v listed twice", e.from, e.to)
		pairs[[2]S{e.from, e.to}] = true
		require.NotEmpty(t, e.why, "%v → %v: its cause", e.from, e.to)
	}
	for _, s := range states {
		require.True(t, s == m.start || m.reaches(m.start, s), "%v is reachable", s)
		if !last[s] {
			reachesEnd := false
			for l := range last {
				reachesEnd = reachesEnd || m.reaches(s, l)
			}
			require.True(t, reachesEnd, "%v leads to a last state", s)
		}
	}
}
