package nodeagent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/runtimes"
)

// pullPolicy is the container's imagePullPolicy, defaulted as the
// apiserver does (Kubernetes' SetDefaults_Container) for a pod written
// without it: Always for an image without a tag or tagged :latest,
// IfNotPresent otherwise (digest references included).
func pullPolicy(c *corev1.Container) string {
	if c.ImagePullPolicy != "" {
		return string(c.ImagePullPolicy)
	}
	image := c.Image
	if strings.Contains(image, "@") {
		return string(corev1.PullIfNotPresent)
	}
	last := image[strings.LastIndex(image, "/")+1:]
	if i := strings.LastIndex(last, ":"); i < 0 || last[i+1:] == "latest" {
		return string(corev1.PullAlways)
	}
	return string(corev1.PullIfNotPresent)
}

// registryAuth returns the credentials of the pod's imagePullSecrets, in
// their order (within one secret, by registry key). As the kubelet does,
// a secret that is missing or unreadable is not an error: the pod gets a
// Warning event FailedToRetrieveImagePullSecret and the pull goes on
// without it. A secret that holds neither .dockerconfigjson
// (kubernetes.io/dockerconfigjson) nor .dockercfg (the legacy
// kubernetes.io/dockercfg), or malformed JSON, is skipped the same way.
func (w *podWorker) registryAuth(ctx context.Context) []runtimes.RegistryAuth {
	if w.pod == nil || len(w.pod.Spec.ImagePullSecrets) == 0 {
		return nil
	}
	var out []runtimes.RegistryAuth
	var failed []string
	for _, ref := range w.pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		obj, err := w.a.api.Get(ctx, store.Secrets, w.ns, ref.Name)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s/%s", w.ns, ref.Name))
			continue
		}
		auth, err := secretAuth(obj.(*corev1.Secret))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s/%s (%v)", w.ns, ref.Name, err))
			continue
		}
		out = append(out, auth...)
	}
	if len(failed) > 0 && w.pod != nil {
		w.a.recorder.Event(w.pod, "", corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret",
			truncateMessage(fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(failed, ", "))))
	}
	return out
}

// dockerConfigEntry is one registry's entry of a .dockerconfigjson's
// "auths" or of a .dockercfg.
type dockerConfigEntry struct {
	Username      string `json:"username"`
	Password      string `json:"password"`
	Auth          string `json:"auth"` // base64 of "username:password"
	IdentityToken string `json:"identitytoken"`
}

// secretAuth reads the registry credentials of an image pull secret:
// data[".dockerconfigjson"] ({"auths": {server: entry}}) or data
// [".dockercfg"] ({server: entry}), as the kubelet's MakeDockerKeyring.
// The "auth" field, when set, gives the username and password.
func secretAuth(s *corev1.Secret) ([]runtimes.RegistryAuth, error) {
	var entries map[string]dockerConfigEntry
	if b, ok := s.Data[corev1.DockerConfigJsonKey]; ok {
		var cfg struct {
			Auths map[string]dockerConfigEntry `json:"auths"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %v", corev1.DockerConfigJsonKey, err)
		}
		entries = cfg.Auths
	} else if b, ok := s.Data[corev1.DockerConfigKey]; ok {
		if err := json.Unmarshal(b, &entries); err != nil {
			return nil, fmt.Errorf("%s: %v", corev1.DockerConfigKey, err)
		}
	} else {
		return nil, errors.New("holds neither .dockerconfigjson nor .dockercfg")
	}
	servers := make([]string, 0, len(entries))
	for k := range entries {
		servers = append(servers, k)
	}
	sort.Strings(servers)
	var out []runtimes.RegistryAuth
	for _, server := range servers {
		e := entries[server]
		a := runtimes.RegistryAuth{Server: server, Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
		if e.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("registry %s: auth is not base64: %v", server, err)
			}
			u, p, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("registry %s: auth is not base64 of username:password", server)
			}
			a.Username, a.Password = u, p
		}
		out = append(out, a)
	}
	return out, nil
}
