package client

import (
	"context"
	"time"
)

// SetSleep replaces c's wait before a retry, for tests that count the
// waits or act during one.
func SetSleep(c *Client, f func(ctx context.Context, d time.Duration) error) { c.sleep = f }
