//go:build !unix

package proxy

func nofile() (uint64, bool) { return 0, false }
