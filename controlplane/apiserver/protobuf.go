package apiserver

import (
	"encoding/json"
	"fmt"
	authenticationv1 "k8s.io/api/authentication/v1"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/orca-edge/orca/controlplane/registry"
)

// protobufMediaType is the Kubernetes protobuf envelope kubectl's typed
// clients send (kubectl create deployment/configmap/secret, ...).
const protobufMediaType = "application/vnd.kubernetes.protobuf"

// newProtobufDecoder returns a decoder for request bodies in Kubernetes'
// protobuf encoding of every kind of reg whose Go type has one (the
// k8s.io/api kinds and their lists; custom resources and orca.dev kinds
// have none), plus Binding, Scale, DeleteOptions and the
// authentication.k8s.io kinds (TokenRequest). Kinds added to reg
// later are not decoded: those are custom resources. Responses are always
// JSON, which those clients accept.
func newProtobufDecoder(reg *registry.Registry) (runtime.Decoder, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme, nodev1.AddToScheme, autoscalingv1.AddToScheme, apiextensionsv1.AddToScheme, authenticationv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	for _, k := range reg.All() {
		gvk := k.GroupVersionKind()
		if obj := k.New(); !scheme.Recognizes(gvk) && isProtobuf(obj) {
			scheme.AddKnownTypeWithName(gvk, obj)
		}
		if list, listGVK := k.NewList(), gvk.GroupVersion().WithKind(k.ListKind); !scheme.Recognizes(listGVK) && isProtobuf(list) {
			scheme.AddKnownTypeWithName(listGVK, list)
		}
	}
	return protobuf.NewSerializer(scheme, scheme), nil
}

// isProtobuf reports whether obj has Kubernetes' generated protobuf
// methods (those the protobuf serializer unmarshals with).
func isProtobuf(obj runtime.Object) bool {
	_, ok := obj.(interface {
		Reset()
		Unmarshal([]byte) error
	})
	return ok
}

// protobufToJSON decodes a protobuf body and re-encodes it as JSON, with
// its apiVersion and kind.
func (s *Server) protobufToJSON(data []byte) ([]byte, error) {
	obj, gvk, err := s.pb.Decode(data, nil, nil)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not a valid protobuf object: %v", err))
	}
	if gvk != nil {
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return b, nil
}
