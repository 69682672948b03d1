package httpapi

// AnswerBytesHeld is what caller's answers hold of its budget now
// (Options.MaxAnswerBytes), and how many callers hold anything.
func AnswerBytesHeld(h *Handler, caller string) (held int64, callers int) {
	h.answers.mu.Lock()
	defer h.answers.mu.Unlock()
	if e := h.answers.held[caller]; e != nil {
		held = e.n
	}
	return held, len(h.answers.held)
}

// AnswerWaiting reports whether an answer of caller waits for room in its
// budget (a ?results=1 answer whose status is out).
func AnswerWaiting(h *Handler, caller string) bool {
	h.answers.mu.Lock()
	defer h.answers.mu.Unlock()
	e := h.answers.held[caller]
	return e != nil && e.freed != nil
}
