package mcpserver

// CallsRunning is the tool calls of caller's running now in h.
func CallsRunning(h *Handler, caller string) int { return h.limits.running(caller) }
