package engine

// B is described in docs/GUIDE.md, "The guide", and in docs/GONE.md; see
// docs/GUIDE.md ("No such part").
func B() {}
