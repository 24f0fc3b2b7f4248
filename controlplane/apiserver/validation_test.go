package apiserver

import (
	"net/http"
	"strings"
	"testing"
)

// At the API, a bad volume is a 422 naming the field.
func TestVolumeValidationAtTheAPI(t *testing.T) {
	e := newEnv(t)
	body := `{"metadata":{"name":"v"},"spec":{"volumes":[{"name":"x","configMap":{"name":"a","items":[{"key":"k","path":"../etc/passwd"}]}}],"containers":[{"name":"c","image":"i","volumeMounts":[{"name":"x","mountPath":"/x"}]}]}}`
	code, out := e.do(http.MethodPost, "/api/v1/namespaces/default/pods", "application/json", body)
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), "spec.volumes[0].configMap.items[0].path") {
		t.Errorf("POST = %d %s", code, out)
	}
}
