package engine

// A is a fixture.
func A() {
}
