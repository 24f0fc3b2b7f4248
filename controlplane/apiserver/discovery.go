package apiserver

import (
	"net"
	"net/http"
	"runtime"
	"slices"
	"sort"

	"github.com/labstack/echo/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
)

// GitVersion is what /version reports: the Kubernetes API level orca
// speaks, suffixed with -orca.
const GitVersion = "v1.32.0-orca"

// orcaGroup is orca's own API group (WASM modules).
const orcaGroup = "orca.dev"

func (s *Server) version(c echo.Context) error {
	return c.JSON(http.StatusOK, version.Info{Major: "1", Minor: "32", GitVersion: GitVersion, Platform: runtime.GOOS + "/" + runtime.GOARCH, GoVersion: runtime.Version(), Compiler: runtime.Compiler})
}

func serverAddresses(c echo.Context) []metav1.ServerAddressByClientCIDR {
	host := c.Request().Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "80")
	}
	return []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: host}}
}

func (s *Server) apiVersions(c echo.Context) error {
	return c.JSON(http.StatusOK, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}, ServerAddressByClientCIDRs: serverAddresses(c)})
}

// groups returns the non-core API groups, sorted, with orca.dev last;
// each lists every version the registry serves, the first registered
// being the preferred one.
func (s *Server) groups() []metav1.APIGroup {
	index := map[string]int{}
	var out []metav1.APIGroup
	for _, r := range s.reg.All() {
		if r.Group == "" {
			continue
		}
		gv := metav1.GroupVersionForDiscovery{GroupVersion: r.APIVersion(), Version: r.Version}
		i, ok := index[r.Group]
		if !ok {
			index[r.Group] = len(out)
			out = append(out, metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: r.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv})
			continue
		}
		if !slices.Contains(out[i].Versions, gv) {
			out[i].Versions = append(out[i].Versions, gv)
		}
	}
	out = append(out, authorizationGroupDiscovery(), metricsGroupDiscovery())
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	gv := metav1.GroupVersionForDiscovery{GroupVersion: orcaGroup + "/v1", Version: "v1"}
	out = append(out, metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: orcaGroup, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv})
	return out
}

func (s *Server) apiGroups(c echo.Context) error {
	return c.JSON(http.StatusOK, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: s.groups()})
}

// discovery answers /api/v1, /apis/<group> and /apis/<group>/<version>.
func (s *Server) discovery(c echo.Context, gv schema.GroupVersion, segs []string) error {
	if segs[0] == "apis" && len(segs) == 2 {
		for _, g := range s.groups() {
			if g.Name == segs[1] {
				return c.JSON(http.StatusOK, g)
			}
		}
		return notFoundPath(c.Request().URL.Path)
	}
	list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	if gv.Group == orcaGroup && gv.Version == "v1" {
		list.APIResources = []metav1.APIResource{{Name: "wasmmodules", SingularName: "wasmmodule", Kind: "WasmModule", Verbs: metav1.Verbs{"get", "list", "update"}},
			{Name: "images", SingularName: "image", Kind: "ContainerImage", Verbs: metav1.Verbs{"get", "list", "update"}},
			{Name: natsauth.Resource, SingularName: "natscredentialrequest", Kind: natsauth.Kind, Verbs: metav1.Verbs{"create"}}}
		return c.JSON(http.StatusOK, list)
	}
	found := false
	for _, k := range s.reg.All() {
		if k.GroupVersion() != gv {
			continue
		}
		found = true
		list.APIResources = append(list.APIResources, k.APIResources()...)
	}
	if !found {
		return notFoundPath(c.Request().URL.Path)
	}
	return c.JSON(http.StatusOK, list)
}
