package apiserver

import (
	"context"
	"sync"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	k8saudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	psaapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/api"

	"github.com/orca-edge/orca/controlplane/auth/podsecurity"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// PodSecurityConfiguration is the Pod Security admission's configuration
// (pod-security.admission.config.k8s.io, internal form; load one with
// podsecurity.LoadConfigFile).
type PodSecurityConfiguration = psaapi.PodSecurityConfiguration

// installPodSecurity puts the PodSecurity admission plugin
// (controlplane/auth/podsecurity) on the registry, so it sees writes from
// the API and from the controllers that share the registry (a
// ReplicaSet's pods in an enforced namespace are refused, as in
// Kubernetes).
func (s *Server) installPodSecurity() error {
	psa, err := podsecurity.New(podsecurity.Config{
		Configuration: s.cfg.PodSecurity,
		Namespace: func(ctx context.Context, name string) (*corev1.Namespace, error) {
			o, err := s.st.GetCached(ctx, store.Namespaces, "", name) // as PodSecurity's namespace lister
			if err != nil {
				return nil, err
			}
			return o.(*corev1.Namespace), nil
		},
		Pods: func(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
			objs, _, err := s.st.List(ctx, store.Pods, namespace)
			if err != nil {
				return nil, err
			}
			pods := make([]*corev1.Pod, len(objs))
			for i, o := range objs {
				pods[i] = o.(*corev1.Pod) // read-only
			}
			return pods, nil
		},
		RuntimeClassHandler: func(ctx context.Context, name string) (string, bool) {
			o, err := s.st.GetCached(ctx, store.RuntimeClasses, "", name)
			if err != nil {
				return "", false
			}
			return o.(*nodev1.RuntimeClass).Handler, true
		},
	})
	if err != nil {
		return err
	}
	s.reg.SetValidatingAdmission(podsecurity.PluginName, func(ctx context.Context, a registry.AdmissionAttributes) error {
		gr := a.Resource.GroupResource()
		if !podsecurity.Handles(gr) {
			return nil
		}
		attrs := &api.AttributesRecord{
			Name: a.Object.GetName(), Namespace: a.Object.GetNamespace(),
			Kind:     a.Resource.GroupVersion().WithKind(a.Resource.Kind),
			Resource: a.Resource.GroupVersion().WithResource(a.Resource.Plural), Subresource: a.Subresource,
			Operation: a.Operation, Object: a.Object,
		}
		if a.OldObject != nil {
			attrs.OldObject = a.OldObject
		}
		if gr == store.Namespaces.GroupResource() {
			attrs.Namespace = a.Object.GetName() // as kube-apiserver's request info for namespaces
		}
		if u, ok := request.UserFrom(ctx); ok {
			attrs.Username = u.GetName()
		}
		res := psa.Validate(ctx, attrs)
		for _, w := range res.Warnings {
			warning.AddWarning(ctx, "", w)
		}
		for k, v := range res.AuditAnnotations { // no-op when the request is not audited
			k8saudit.AddAuditAnnotation(ctx, podsecurity.AnnotationPrefix+k, v)
		}
		return res.Err
	})
	return nil
}

// recordWarnings gives each request a warning recorder
// (k8s.io/apiserver/pkg/warning) that writes Warning headers
// (`299 - "text"`), as kube-apiserver's WithWarningRecorder: a text is
// sent once, each cut to 256 characters, at most 4 KiB of them; warnings
// added after the response started are dropped.
func (s *Server) recordWarnings(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		rec := &warningRecorder{c: c}
		req := c.Request()
		c.SetRequest(req.WithContext(warning.WithWarningRecorder(req.Context(), rec)))
		return next(c)
	}
}

type warningRecorder struct {
	c       echo.Context
	mu      sync.Mutex
	seen    map[string]bool
	written int // runes of text sent
}

func (r *warningRecorder) AddWarning(agent, text string) {
	if text == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.Response().Committed || r.seen[text] {
		return
	}
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[text] = true
	if utf8.RuneCountInString(text) > 256 {
		text = string([]rune(text)[:253]) + "..."
	}
	n := utf8.RuneCountInString(text)
	if r.written+n > 4096 {
		return
	}
	r.written += n
	if h, err := utilnet.NewWarningHeader(299, agent, text); err == nil {
		r.c.Response().Header().Add("Warning", h)
	}
}
