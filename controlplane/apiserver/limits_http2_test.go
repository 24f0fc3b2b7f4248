package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// A refused request with an unread body closes an HTTP/1 connection but
// not an HTTP/2 one (net/http would answer "Connection: close" over HTTP/2
// with GOAWAY, cutting the connection's other requests).
func TestCloseUnreadBodyOnlyOverHTTP1(t *testing.T) {
	for _, tc := range []struct {
		major   int
		body    string
		wantHdr string
	}{{1, "{}", "close"}, {1, "", ""}, {2, "{}", ""}} {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/pods", strings.NewReader(tc.body))
		req.ProtoMajor = tc.major
		rec := httptest.NewRecorder()
		c := echo.New().NewContext(req, rec)
		closeUnreadBody(c)
		if got := rec.Header().Get("Connection"); got != tc.wantHdr {
			t.Errorf("HTTP/%d, body %q: Connection %q, want %q", tc.major, tc.body, got, tc.wantHdr)
		}
	}
}
