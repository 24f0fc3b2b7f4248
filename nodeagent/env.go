package nodeagent

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/store"
)

// containerEnv resolves c's environment as the kubelet's makeEnvironmentVariables
// does: envFrom sources first (ConfigMaps and Secrets, with prefix), then
// env in order, each value $(VAR)-expanded against the variables defined
// before it and then the Service variables (serviceenv.go); later
// definitions replace earlier ones in place; last, the Service variables
// the container does not define itself. Missing
// non-optional ConfigMaps, Secrets or keys are errors (the container then
// waits with CreateContainerConfigError).
//
// Expansion is bounded, as a pod of a few hundred bytes whose V_i is
// "$(V_{i-1})$(V_{i-1})" would otherwise need memory exponential in the
// number of variables: an expanded value may reach maxExpandedValue
// (128 KiB, Linux's MAX_ARG_STRLEN) and the environment, counted as
// "NAME=value" strings, maxEnvBytes (1 MiB; ARG_MAX is 2 MiB). Expansion
// stops before a value outgrows its limit; either limit exceeded is an
// error naming the variable and the limit.
func (w *podWorker) containerEnv(ctx context.Context, c *corev1.Container) ([]string, error) {
	var order []string
	vals := map[string]string{}
	svcEnv := w.podServiceEnv()
	scope := make(map[string]string, len(svcEnv)) // what $(VAR) sees: vals over the Service variables
	for _, e := range svcEnv {
		scope[e.Name] = e.Value
	}
	total := 0 // bytes of the "NAME=value" strings in vals
	set := func(k, v string) error {
		if old, ok := vals[k]; ok {
			total -= len(k) + 1 + len(old)
		} else {
			order = append(order, k)
		}
		total += len(k) + 1 + len(v)
		if total > maxEnvBytes {
			return fmt.Errorf("env %s of container %s: environment exceeds %d bytes", k, c.Name, maxEnvBytes)
		}
		vals[k], scope[k] = v, v
		return nil
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := w.configMap(ctx, from.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, err
			}
			for k, v := range cm.Data {
				if err := set(from.Prefix+k, v); err != nil {
					return nil, err
				}
			}
		case from.SecretRef != nil:
			sec, err := w.secret(ctx, from.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && optional(from.SecretRef.Optional) {
					continue
				}
				return nil, err
			}
			for k, v := range sec.Data {
				if err := set(from.Prefix+k, string(v)); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			v, ok := expand(e.Value, scope, maxExpandedValue)
			if !ok {
				return nil, fmt.Errorf("env %s of container %s: expanded value exceeds %d bytes", e.Name, c.Name, maxExpandedValue)
			}
			if err := set(e.Name, v); err != nil {
				return nil, err
			}
			continue
		}
		v, ok, err := w.envValueFrom(ctx, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s of container %s: %w", e.Name, c.Name, err)
		}
		if ok {
			if err := set(e.Name, v); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range svcEnv {
		if _, ok := vals[e.Name]; !ok {
			if err := set(e.Name, e.Value); err != nil {
				return nil, err
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

func optional(b *bool) bool { return b != nil && *b }

func (w *podWorker) configMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	obj, err := w.a.api.Get(ctx, store.ConfigMaps, w.ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ConfigMap), nil
}

func (w *podWorker) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	obj, err := w.a.api.Get(ctx, store.Secrets, w.ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional
// reference that is missing (the variable is then not set).
func (w *podWorker) envValueFrom(ctx context.Context, c *corev1.Container, from *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := w.fieldRef(from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		return resourceFieldRef(c, from.ResourceFieldRef)
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := w.configMap(ctx, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, err
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, w.ns, ref.Name)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		sec, err := w.secret(ctx, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, err
		}
		v, ok := sec.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, w.ns, ref.Name)
		}
		return string(v), true, nil
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

// fieldRef resolves the downward API fields the kubelet supports for env.
func (w *podWorker) fieldRef(path string) (string, error) {
	p := w.pod
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return w.a.cfg.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return w.a.cfg.NodeIP, nil
	case "status.podIP", "status.podIPs":
		return w.statusPodIP(), nil // set before the first container starts
	}
	for _, m := range []struct {
		prefix string
		vals   map[string]string
	}{{"metadata.labels", p.Labels}, {"metadata.annotations", p.Annotations}} {
		if path == m.prefix {
			var lines []string
			for k, v := range m.vals {
				lines = append(lines, fmt.Sprintf("%s=%q", k, v))
			}
			return strings.Join(lines, "\n"), nil
		}
		if strings.HasPrefix(path, m.prefix+"['") && strings.HasSuffix(path, "']") {
			return m.vals[path[len(m.prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// resourceFieldRef resolves limits.cpu / limits.memory / requests.* with
// the divisor, rounding up as the kubelet's ExtractContainerResourceValue.
func resourceFieldRef(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, bool, error) {
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var q resource.Quantity
	switch ref.Resource {
	case "limits.cpu":
		q = c.Resources.Limits[corev1.ResourceCPU]
	case "limits.memory":
		q = c.Resources.Limits[corev1.ResourceMemory]
	case "requests.cpu":
		q = c.Resources.Requests[corev1.ResourceCPU]
	case "requests.memory":
		q = c.Resources.Requests[corev1.ResourceMemory]
	default:
		return "", false, fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
	}
	if ref.Resource == "limits.cpu" || ref.Resource == "requests.cpu" {
		m := q.MilliValue()
		d := divisor.MilliValue()
		return fmt.Sprint((m + d - 1) / d), true, nil
	}
	v, d := q.Value(), divisor.Value()
	return fmt.Sprint((v + d - 1) / d), true, nil
}

// expandAll expands each element of in (a container's command or args)
// against vals, with the limits of containerEnv: an element may reach
// maxExpandedValue bytes, all of them together maxEnvBytes less used (the
// bytes already taken by an earlier list). It returns the bytes used; the
// error names the element and the limit.
func expandAll(what string, in []string, vals map[string]string, used int) ([]string, int, error) {
	if in == nil {
		return nil, used, nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		v, ok := expand(s, vals, min(maxExpandedValue, maxEnvBytes-used))
		if !ok {
			if maxEnvBytes-used < maxExpandedValue {
				return nil, used, fmt.Errorf("%s[%d]: command and args exceed %d bytes", what, i, maxEnvBytes)
			}
			return nil, used, fmt.Errorf("%s[%d]: expanded value exceeds %d bytes", what, i, maxExpandedValue)
		}
		out[i] = v
		used += len(v)
	}
	return out, used, nil
}

// expand replaces $(VAR) references in s with vals[VAR], as Kubernetes'
// third_party/forked/golang/expansion: "$$" escapes to "$", a reference to
// an undefined variable (or an unterminated one) is kept as written. ok is
// false, and nothing longer than limit bytes is built, when the result
// would exceed limit bytes.
func expand(s string, vals map[string]string, limit int) (_ string, ok bool) {
	var b strings.Builder
	write := func(p string) bool {
		if b.Len()+len(p) > limit {
			return false
		}
		b.WriteString(p)
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			if !write(s[i : i+1]) {
				return "", false
			}
			continue
		}
		var p string
		switch s[i+1] {
		case '$':
			p = "$"
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				p, i = s[i:], len(s)
				break
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				p = v
			} else {
				p = s[i : i+3+end] // "$(" + name + ")", as written
			}
			i += 2 + end
		default:
			p = "$"
		}
		if !write(p) {
			return "", false
		}
	}
	return b.String(), true
}
