package actors

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated diagrams in docs/ARCHITECTURE.md")

// architecture is the document that draws the machines.
const architecture = "../docs/ARCHITECTURE.md"

// TestDiagrams checks that the state diagrams in docs/ARCHITECTURE.md are
// the ones the tables in life.go give; with -update (or `go generate
// ./actors`) it rewrites them instead.
func TestDiagrams(t *testing.T) {
	doc, err := os.ReadFile(architecture)
	require.NoError(t, err)
	got := string(doc)
	want := got
	for _, d := range []struct{ name, body string }{
		{statusMachine.name, diagram(t, &statusMachine)},
		{phaseMachine.name, diagram(t, &phaseMachine)},
	} {
		want = replaceGenerated(t, want, d.name, d.body)
	}
	if *update {
		if want != got {
			require.NoError(t, os.WriteFile(architecture, []byte(want), 0o644))
		}
		return
	}
	require.Equal(t, want, got, "docs/ARCHITECTURE.md's diagrams differ from the tables in actors/life.go: run go generate ./actors")
}

// diagram draws m as a mermaid state diagram, its transitions in the
// table's order.
func diagram[S comparable](t *testing.T, m *machine[S]) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("```mermaid\nstateDiagram-v2\n")
	line := func(from, to, why string) {
		require.NotContains(t, why, ";", "a cause in a diagram: no semicolon (mermaid ends a statement there)")
		fmt.Fprintf(&b, "    %s --> %s: %s\n", from, to, why)
	}
	line("[*]", fmt.Sprint(m.start), m.startWhy)
	for _, e := range m.edges {
		line(fmt.Sprint(e.from), fmt.Sprint(e.to), e.why)
	}
	for _, e := range m.ends {
		line(fmt.Sprint(e.from), "[*]", e.why)
	}
	b.WriteString("```\n")
	return b.String()
}

// replaceGenerated replaces what doc has between the markers of name with
// body; the markers must be there, once each.
func replaceGenerated(t *testing.T, doc, name, body string) string {
	t.Helper()
	begin := regexp.MustCompile(`<!-- BEGIN GENERATED: ` + regexp.QuoteMeta(name) + `( [^\n]*)? -->\n`)
	end := "<!-- END GENERATED: " + name + " -->"
	b := begin.FindAllStringIndex(doc, -1)
	require.Len(t, b, 1, "docs/ARCHITECTURE.md has the begin marker of %s once", name)
	require.Equal(t, 1, strings.Count(doc, end), "docs/ARCHITECTURE.md has the end marker of %s once", name)
	e := strings.Index(doc, end)
	require.GreaterOrEqual(t, e, b[0][1], "the end marker of %s follows its begin marker", name)
	return doc[:b[0][1]] + body + doc[e:]
}
