package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The handler, natively: ?ms=N is checked and answered.
func TestHandler(t *testing.T) {
	t.Setenv("HOSTNAME", "burn-1")
	for _, tc := range []struct {
		query string
		code  int
		body  string
	}{
		{"", 200, "burned 0 ms on burn-1\n"},
		{"?ms=3", 200, "burned 3 ms on burn-1\n"},
		{"?ms=x", 400, "ms must be"},
		{"?ms=-1", 400, "ms must be"},
		{"?ms=60001", 400, "ms must be"},
	} {
		rec := httptest.NewRecorder()
		handler(rec, httptest.NewRequest(http.MethodGet, "/"+tc.query, nil))
		if rec.Code != tc.code || !strings.HasPrefix(rec.Body.String(), tc.body) {
			t.Errorf("GET /%s = %d %q, want %d %q", tc.query, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
}
