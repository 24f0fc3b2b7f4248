package apiserver

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
)

// prepareForUpdate applies the update strategy of Kubernetes' registries:
//   - the main resource of a kind with a status subresource keeps the
//     stored status (status changes in a PUT/PATCH are ignored);
//   - the status subresource changes only status and metadata (labels,
//     annotations, finalizers): spec and owner references stay as stored;
//   - namespaces/finalize changes only spec.finalizers;
//   - server-owned metadata (uid, creationTimestamp, deletionTimestamp,
//     deletionGracePeriodSeconds, namespace) always stays as stored;
//   - a secret's stringData is merged into its data (mergeStringData), and
//     a secret sent without a type keeps the stored one, as Kubernetes'
//     secret strategy.
func prepareForUpdate(r store.Resource, sub string, obj, old store.Object) (store.Object, error) {
	keepSystemMeta(obj, old)
	if s, ok := obj.(*corev1.Secret); ok {
		mergeStringData(s)
		if s.Type == "" {
			s.Type = old.(*corev1.Secret).Type
		}
	}
	if sub == "" && !statusSubresource[r.Kind] {
		return obj, nil
	}
	nm, err := toMap(obj)
	if err != nil {
		return nil, err
	}
	om, err := toMap(old)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	switch sub {
	case "":
		out = nm
		if st, ok := om["status"]; ok {
			out["status"] = st
		} else {
			delete(out, "status")
		}
	case "status":
		out = om
		out["metadata"] = nm["metadata"]
		if md, ok := out["metadata"].(map[string]any); ok {
			omd, _ := om["metadata"].(map[string]any)
			if refs, ok := omd["ownerReferences"]; ok {
				md["ownerReferences"] = refs
			} else {
				delete(md, "ownerReferences")
			}
		}
		if st, ok := nm["status"]; ok {
			out["status"] = st
		} else {
			delete(out, "status")
		}
	case "finalize":
		out = om
		omd, _ := om["metadata"].(map[string]any)
		nmd, _ := nm["metadata"].(map[string]any)
		omd["resourceVersion"] = nmd["resourceVersion"]
		ospec, _ := om["spec"].(map[string]any)
		if ospec == nil {
			ospec = map[string]any{}
			om["spec"] = ospec
		}
		nspec, _ := nm["spec"].(map[string]any)
		if f, ok := nspec["finalizers"]; ok {
			ospec["finalizers"] = f
		} else {
			delete(ospec, "finalizers")
		}
	}
	return fromMap(r, out)
}
