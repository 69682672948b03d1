package client

import (
	"net/http"
	"testing"
	"time"
)

// TestParseRetryAfter reads whole seconds and HTTP dates; anything else,
// or a date past, is 0.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":     0,
		"0":    0,
		"5":    5 * time.Second,
		"120":  2 * time.Minute,
		"-1":   0,
		"1.5":  0,
		"soon": 0,
		// More seconds than 31 bits, than a Duration, than 64 bits: longer
		// than any bound, never "none".
		"4294967296":              4294967296 * time.Second,
		"9223372037":              maxRetryAfter,
		"99999999999999999999999": maxRetryAfter,
		"9223372036":              9223372036 * time.Second,
		now.Add(30 * time.Second).Format(http.TimeFormat): 30 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("Retry-After %q: %v; want %v", in, got, want)
		}
	}
}

// TestBackoff: a Retry-After is waited plus at most a quarter of jitter,
// never past the bound, and refused past it; without one the wait starts
// at 500 ms and doubles, up to the bound.
func TestBackoff(t *testing.T) {
	c := &Client{maxWait: 10 * time.Second}
	for _, tc := range []struct {
		ra       time.Duration
		attempt  int
		min, max time.Duration
		ok       bool
	}{
		{2 * time.Second, 1, 2 * time.Second, 2500 * time.Millisecond, true},
		{9 * time.Second, 3, 9 * time.Second, 10 * time.Second, true},
		{10 * time.Second, 1, 10 * time.Second, 10 * time.Second, true},
		{11 * time.Second, 1, 0, 0, false},
		{0, 1, 500 * time.Millisecond, 625 * time.Millisecond, true},
		{0, 2, time.Second, 1250 * time.Millisecond, true},
		{0, 3, 2 * time.Second, 2500 * time.Millisecond, true},
		{0, 8, 10 * time.Second, 10 * time.Second, true},
		{0, 100, 10 * time.Second, 10 * time.Second, true},
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d, ok := c.backoff(tc.ra, tc.attempt)
			if ok != tc.ok || ok && (d < tc.min || d > tc.max) {
				t.Fatalf("backoff(%v, %d) = %v, %v; want %v in [%v, %v]", tc.ra, tc.attempt, d, ok, tc.ok, tc.min, tc.max)
			}
			seen[d] = true
		}
		if tc.ok && tc.min < tc.max && len(seen) < 2 {
			t.Errorf("backoff(%v, %d): always %v: no jitter", tc.ra, tc.attempt, seen)
		}
	}
}
