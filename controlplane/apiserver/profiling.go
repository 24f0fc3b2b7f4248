package apiserver

import (
	"net/http"
	"net/http/pprof"

	"github.com/labstack/echo/v4"
)

// ProfilingPath is where Config.Profiling serves Go's runtime profiles
// (net/http/pprof), as kube-apiserver's --profiling does.
const ProfilingPath = "/debug/pprof"

// installProfiling serves net/http/pprof under ProfilingPath, as
// kube-apiserver's routes.Profiling: /debug/pprof redirects to
// /debug/pprof/ (the index), /debug/pprof/profile (CPU, ?seconds=N,
// default 30), /debug/pprof/trace, /debug/pprof/symbol, /debug/pprof/cmdline
// and every named profile (/debug/pprof/heap, goroutine, allocs, block,
// mutex, threadcreate; ?debug=1 for text, ?gc=1 on heap to collect first).
//
// The routes sit behind the whole chain: authenticated, then authorized as
// non-resource URLs (verb get, paths /debug/pprof and /debug/pprof/*), so
// the default policy lets only system:masters and cluster-admin read them;
// they count against --max-requests-inflight and --request-timeout (a CPU
// profile of more seconds than the timeout is cut), and are audited.
func (s *Server) installProfiling(e *echo.Echo) {
	e.GET(ProfilingPath, func(c echo.Context) error {
		return c.Redirect(http.StatusFound, ProfilingPath+"/")
	})
	named := map[string]http.HandlerFunc{
		"cmdline": pprof.Cmdline,
		"profile": pprof.Profile,
		"symbol":  pprof.Symbol,
		"trace":   pprof.Trace,
	}
	e.Any(ProfilingPath+"/*", func(c echo.Context) error {
		if h, ok := named[c.Param("*")]; ok {
			h(c.Response(), c.Request())
			return nil
		}
		pprof.Index(c.Response(), c.Request()) // the index, and named profiles by path
		return nil
	})
}
