//go:build !unix

package persistence

import "errors"

// statfsFree is not measured here: the watch logs its error once.
func statfsFree(string) (int64, error) {
	return 0, errors.New("free disk space not measured on this system")
}

// statfsSize is not measured here: no reserve is refused.
func statfsSize(string) (int64, error) {
	return 0, errors.New("file system size not measured on this system")
}

// dirUsage is not measured here.
func dirUsage(string) (int64, error) { return 0, nil }
