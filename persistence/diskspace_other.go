//go:build !unix

package persistence

import "errors"

// statfsFree is not measured here: the watch logs its error once.
func statfsFree(string) (int64, error) {
	return 0, errors.New("free disk space not measured on this system")
}
