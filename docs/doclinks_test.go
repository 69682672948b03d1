// Package docs holds the project's documentation (README.md at the root and
// the *.md files here). Its test checks that every reference in them
// resolves: `make lint` runs it, and so does `go test ./...`.
package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks_Resolve checks README.md, every docs/**/*.md of the
// repository and the Makefile: relative links and their #sections,
// file:line references, repository paths, file names in code spans,
// sections named in words (CLUSTER.md, "Figures"), and the names of tests
// and benchmarks (a make target that runs a renamed test would run
// nothing); and in every .go file, the docs/ paths and sections its comments
// name. It fails naming each broken reference with its file and line.
func TestDocLinks_Resolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := scanRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{"README.md", "Makefile"}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 6 {
		t.Fatalf("found %d markdown files (%v): the walk is wrong", len(docs), docs)
	}
	broken, checked := repo.check(append(docs, repo.goFiles...))
	for _, b := range broken {
		t.Errorf("%s", b)
	}
	// A check that finds nothing to check cannot fail: make sure it read the
	// docs.
	if checked < 200 {
		t.Errorf("checked only %d references in %d docs", checked, len(docs))
	}
	t.Logf("%d references in %d docs and %d Go files, %d broken", checked, len(docs), len(repo.goFiles), len(broken))
}

// TestDocLinks_FindsBroken runs the checker on testdata/repo, a small tree
// whose README.md holds one good and one broken reference of each kind.
func TestDocLinks_FindsBroken(t *testing.T) {
	root := filepath.Join("testdata", "repo")
	repo, err := scanRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	broken, checked := repo.check(append([]string{"README.md", "docs/GUIDE.md"}, repo.goFiles...))
	var got []string
	for _, b := range broken {
		got = append(got, b.String())
	}
	want := []string{
		"README.md:7: link docs/MISSING.md: no such file",
		"README.md:8: link docs/GUIDE.md#no-such-section: no heading with that anchor in docs/GUIDE.md",
		"README.md:9: link #nowhere: no heading with that anchor in README.md",
		"README.md:10: link engine/a.go#L99: engine/a.go has 5 lines",
		"README.md:12: reference engine/a.go:6: engine/a.go has 5 lines",
		"README.md:13: reference engine/gone.go:1: no such file",
		"README.md:13: path engine/gone.go: no such file or directory",
		"README.md:15: path engine/gone.go: no such file or directory",
		"README.md:17: file name missing_test.go: no such file in the repository",
		"README.md:19: test TestGone_Away: no such func in any _test.go file",
		"README.md:20: test TestGone*: no such func in any _test.go file",
		"README.md:24: link ../outside.md: outside the repository",
		"README.md:26: link docs/GUIDE.md#the-guide-1: no heading with that anchor in docs/GUIDE.md",
		`README.md:31: section docs/GUIDE.md "Nothing here": no heading or bold label so named in docs/GUIDE.md`,
		"docs/GUIDE.md:5: link ../engine/none.go: no such file",
		"engine/b.go:3: path docs/GONE.md: no such file or directory",
		`engine/b.go:4: section docs/GUIDE.md "No such part": no heading or bold label so named in docs/GUIDE.md`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken references:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The fixture's good references: every kind was checked, not skipped.
	if checked < 2*len(want) {
		t.Errorf("checked %d references, want at least %d", checked, 2*len(want))
	}
}

func TestDocLinks_Anchor(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"The demo", "the-demo"},
		{"Its actor's phase (`actors/job.go`)", "its-actors-phase-actorsjobgo"},
		{"protoactor-go at the version in go.mod (`3c0e61ca19c9`): behaviour", "protoactor-go-at-the-version-in-gomod-3c0e61ca19c9-behaviour"},
		{"A [link](x.md) and **bold** and under_score", "a-link-and-bold-and-under_score"},
		{"Ratios ≤ 2× — and é", "ratios--2--and-é"},
	} {
		if got := anchor(c.heading); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// synthetic are benchmark names the docs quote that no Go func defines:
// make bench/rss writes these lines itself, for benchstat.
var synthetic = map[string]bool{"BenchmarkProcess_PeakRSS": true}

// repoIndex is what the references resolve against.
type repoIndex struct {
	root    string
	files   map[string]bool // every file and directory, slash-separated, relative to root
	bases   map[string]bool // every file's base name
	tests   []string        // every Test, Benchmark and Fuzz func of a _test.go file, sorted
	goFiles []string        // every .go file, in walk order
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)

// scanRepo indexes root's files and its test funcs.
func scanRepo(root string) (*repoIndex, error) {
	r := &repoIndex{root: root, files: map[string]bool{}, bases: map[string]bool{}}
	tests := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		// .git, the checker's own fixture, and what make leaves behind
		// (bench.out/, stress.out/, a serve's data): none is documented.
		if d.IsDir() && (d.Name() == ".git" || rel == "docs/testdata" || strings.HasSuffix(d.Name(), ".out") || d.Name() == "siftbatch-data") {
			return filepath.SkipDir
		}
		r.files[rel] = true
		if d.IsDir() {
			return nil
		}
		r.bases[d.Name()] = true
		// The checker's own file quotes broken references on purpose.
		if strings.HasSuffix(rel, ".go") && rel != "docs/doclinks_test.go" {
			r.goFiles = append(r.goFiles, rel)
		}
		if strings.HasSuffix(rel, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", root, err)
	}
	for name := range tests {
		r.tests = append(r.tests, name)
	}
	sort.Strings(r.tests)
	return r, nil
}

// brokenRef is one reference that does not resolve.
type brokenRef struct {
	file string
	line int
	kind string // link, reference, path, file name, test
	ref  string
	why  string
}

func (b brokenRef) String() string {
	return fmt.Sprintf("%s:%d: %s %s: %s", b.file, b.line, b.kind, b.ref, b.why)
}

var (
	fence       = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan    = regexp.MustCompile("`[^`]*`")
	linkTarget  = regexp.MustCompile(`(\]\()[^)]*\)`)
	mdLink      = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef      = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	scheme      = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	fileLine    = regexp.MustCompile(`(?:^|[\s(\x60"'\[])((?:[\w.-]+/)*[\w.-]+\.(?:go|md|proto|ya?ml|sh|supp|txt)):(\d+)\b`)
	repoPath    = regexp.MustCompile(`(?:^|[^\w/.-])(?:\./)?((?:engine|actors|persistence|cmd|examples|docs|\.ci)/[\w./-]*[\w-])`)
	bareFile    = regexp.MustCompile(`^[\w.-]+\.(?:go|proto|md|ya?ml|supp)$`)
	testName    = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z]\w*)([*(]?)`)
	lineAnchor  = regexp.MustCompile(`^L(\d+)(?:-L\d+)?$`)
	heading     = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	placeholder = regexp.MustCompile(`^[A-Z][A-Z_]+$`)
	sectionRef  = regexp.MustCompile(`((?:[\w.-]+/)*[A-Z][\w-]*\.md),? \(?"([^"]+)"`)
	boldLabel   = regexp.MustCompile(`^\s*(?:[-*]\s+|\d+\.\s+)?\*\*([^*]+)\*\*`)
)

// check reads each doc (a path relative to the root) and returns its broken
// references, in order, and how many references it checked. Of a .go file
// it checks only the docs/ paths and the sections named in words.
func (r *repoIndex) check(docs []string) (broken []brokenRef, checked int) {
	labels := map[string][]string{}
	labelsOf := func(doc string) []string {
		if l, ok := labels[doc]; ok {
			return l
		}
		l, _ := readLabels(filepath.Join(r.root, filepath.FromSlash(doc)))
		labels[doc] = l
		return l
	}
	anchors := map[string]map[string]bool{}
	lineCounts := map[string]int{}
	anchorsOf := func(doc string) map[string]bool {
		if a, ok := anchors[doc]; ok {
			return a
		}
		a, err := readAnchors(filepath.Join(r.root, filepath.FromSlash(doc)))
		if err != nil {
			a = map[string]bool{}
		}
		anchors[doc] = a
		return a
	}
	linesOf := func(file string) int {
		if n, ok := lineCounts[file]; ok {
			return n
		}
		n, err := countLines(filepath.Join(r.root, filepath.FromSlash(file)))
		if err != nil {
			n = -1
		}
		lineCounts[file] = n
		return n
	}
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(doc)))
		if err != nil {
			broken = append(broken, brokenRef{doc, 0, "file", doc, err.Error()})
			continue
		}
		dir := path.Dir(doc)
		add := func(line int, kind, ref, why string) {
			checked++
			if why != "" {
				broken = append(broken, brokenRef{doc, line, kind, ref, why})
			}
		}
		isGo := strings.HasSuffix(doc, ".go")
		inFence := false
		for i, text := range strings.Split(string(b), "\n") {
			line := i + 1
			if isGo {
				if !strings.Contains(text, ".md") && !strings.Contains(text, "docs/") {
					continue
				}
				for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
					if p := m[1]; strings.HasPrefix(p, "docs/") && !isPlaceholder(p) {
						why := ""
						if !r.files[strings.TrimSuffix(p, "/")] {
							why = "no such file or directory"
						}
						add(line, "path", p, why)
					}
				}
				for _, m := range sectionRef.FindAllStringSubmatch(text, -1) {
					ref, why := r.checkSection(dir, m[1], m[2], labelsOf)
					add(line, "section", ref, why)
				}
				continue
			}
			if fence.MatchString(text) {
				inFence = !inFence
				continue
			}
			// Links count outside code only; the rest in code too (commands
			// name files and tests), but not in a link's target again.
			scan := text
			if !inFence {
				scan = linkTarget.ReplaceAllString(text, "$1)")
				prose := codeSpan.ReplaceAllString(text, "")
				var targets []string
				for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
					targets = append(targets, m[1])
				}
				if m := refDef.FindStringSubmatch(prose); m != nil {
					targets = append(targets, m[1])
				}
				for _, target := range targets {
					if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
						continue
					}
					add(line, "link", target, r.checkLink(doc, dir, target, anchorsOf, linesOf))
				}
				for _, span := range codeSpan.FindAllString(text, -1) {
					name := strings.Trim(span, "`")
					if bareFile.MatchString(name) {
						why := ""
						if !r.bases[name] {
							why = "no such file in the repository"
						}
						add(line, "file name", name, why)
					}
				}
			}
			for _, m := range fileLine.FindAllStringSubmatch(scan, -1) {
				n, _ := strconv.Atoi(m[2])
				add(line, "reference", m[1]+":"+m[2], r.checkFileLine(dir, m[1], n, linesOf))
			}
			for _, m := range repoPath.FindAllStringSubmatch(scan, -1) {
				p := m[1]
				if isPlaceholder(p) {
					continue
				}
				why := ""
				if !r.files[strings.TrimSuffix(p, "/")] {
					why = "no such file or directory"
				}
				add(line, "path", p, why)
			}
			if !inFence {
				for _, m := range sectionRef.FindAllStringSubmatch(scan, -1) {
					ref, why := r.checkSection(dir, m[1], m[2], labelsOf)
					add(line, "section", ref, why)
				}
			}
			for _, m := range testName.FindAllStringSubmatch(text, -1) {
				// TestX_*, TestX_ and a pattern's TestX_(A|B) name every test
				// that begins so; one must exist.
				name, prefix := m[1], m[2] != "" || strings.HasSuffix(m[1], "_")
				if synthetic[name] {
					continue
				}
				ref, why := name, ""
				if prefix {
					ref += "*"
				}
				if !r.hasTest(name, prefix) {
					why = "no such func in any _test.go file"
				}
				add(line, "test", ref, why)
			}
		}
	}
	return broken, checked
}

// isPlaceholder tells a path with a segment in capitals (examples/NAME,
// DIR/…) from a real one.
func isPlaceholder(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if placeholder.MatchString(seg) {
			return true
		}
	}
	return false
}

func (r *repoIndex) hasTest(name string, prefix bool) bool {
	i := sort.SearchStrings(r.tests, name)
	if i == len(r.tests) {
		return false
	}
	if prefix {
		return strings.HasPrefix(r.tests[i], name)
	}
	return r.tests[i] == name
}

// checkLink resolves a relative link of doc (in dir) and its #fragment; it
// returns why it is broken, or "".
func (r *repoIndex) checkLink(doc, dir, target string, anchorsOf func(string) map[string]bool, linesOf func(string) int) string {
	file, frag, _ := strings.Cut(target, "#")
	if file == "" {
		file = doc
	} else {
		file = path.Clean(path.Join(dir, file))
		if file == ".." || strings.HasPrefix(file, "../") {
			return "outside the repository"
		}
		if !r.files[strings.TrimSuffix(file, "/")] {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	if strings.HasSuffix(file, ".md") {
		if !anchorsOf(file)[frag] {
			return "no heading with that anchor in " + file
		}
		return ""
	}
	if m := lineAnchor.FindStringSubmatch(frag); m != nil {
		n, _ := strconv.Atoi(m[1])
		if have := linesOf(file); have < n {
			return fmt.Sprintf("%s has %d lines", file, have)
		}
	}
	return ""
}

// checkSection resolves a section named in words (file, "Name"): the file
// relative to the doc's dir or the root, or a doc of that base name; one of
// its headings or bold labels (**Name.** text) must begin with the name. It
// returns the reference as resolved and why it is broken, or "".
func (r *repoIndex) checkSection(dir, file, name string, labelsOf func(string) []string) (ref, why string) {
	var found string
	for _, p := range []string{path.Clean(path.Join(dir, file)), path.Clean(file)} {
		if r.files[p] {
			found = p
			break
		}
	}
	if found == "" && !strings.Contains(file, "/") {
		var docs []string
		for p := range r.files {
			if path.Base(p) == file {
				docs = append(docs, p)
			}
		}
		sort.Strings(docs)
		if len(docs) > 0 {
			found = docs[0]
		}
	}
	if found == "" {
		return fmt.Sprintf("%s %q", file, name), "no such file"
	}
	ref = fmt.Sprintf("%s %q", found, name)
	want := label(name)
	for _, l := range labelsOf(found) {
		if strings.HasPrefix(l, want) {
			return ref, ""
		}
	}
	return ref, "no heading or bold label so named in " + found
}

// readLabels returns the headings and the bold labels of a markdown file,
// outside code, each as label gives it.
func readLabels(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var labels []string
	inFence := false
	for _, text := range strings.Split(string(b), "\n") {
		if fence.MatchString(text) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := heading.FindStringSubmatch(text); m != nil {
			labels = append(labels, label(m[2]))
		} else if m := boldLabel.FindStringSubmatch(text); m != nil {
			labels = append(labels, label(m[1]))
		}
	}
	return labels, nil
}

// label is a heading or a name compared loosely: lower case, without
// backticks, stars or the punctuation that ends a label.
func label(s string) string {
	s = strings.NewReplacer("`", "", "*", "").Replace(strings.ToLower(s))
	return strings.TrimRight(strings.TrimSpace(s), ".:,;")
}

// checkFileLine resolves a file:line reference: the file relative to the
// root or to the doc's dir, or a bare name anywhere in the repository; one
// of them must have n lines.
func (r *repoIndex) checkFileLine(dir, file string, n int, linesOf func(string) int) string {
	var candidates []string
	for _, p := range []string{path.Clean(file), path.Clean(path.Join(dir, file))} {
		if r.files[p] {
			candidates = append(candidates, p)
		}
	}
	if !strings.Contains(file, "/") {
		for p := range r.files {
			if path.Base(p) == file {
				candidates = append(candidates, p)
			}
		}
	}
	if len(candidates) == 0 {
		return "no such file"
	}
	sort.Strings(candidates)
	most := 0
	for _, p := range candidates {
		if have := linesOf(p); have >= n {
			return ""
		} else if have > most {
			most = have
		}
	}
	return fmt.Sprintf("%s has %d lines", candidates[0], most)
}

// readAnchors returns the anchors of a markdown file's headings (GitHub's:
// anchor, with -1, -2… for repeats) and of its <a name|id> tags.
func readAnchors(file string) (map[string]bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		text := sc.Text()
		if fence.MatchString(text) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
			anchors[m[1]] = true
		}
		m := heading.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		a := anchor(m[2])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, sc.Err()
}

var linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// anchor is GitHub's anchor of a heading: lower case, links reduced to their
// text, every character but letters, marks, digits, '_', '-' and spaces
// dropped, spaces made '-'.
func anchor(heading string) string {
	heading = linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, c := range strings.ToLower(heading) {
		switch {
		case c == ' ':
			b.WriteByte('-')
		case c == '-' || c == '_' || unicode.IsLetter(c) || unicode.IsMark(c) || unicode.IsDigit(c):
			b.WriteRune(c)
		}
	}
	return b.String()
}

func countLines(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n := strings.Count(string(b), "\n")
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n, nil
}
