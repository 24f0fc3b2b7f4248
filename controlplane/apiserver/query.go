package apiserver

import (
	"fmt"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// listOptions decodes the query of a list, watch or deletecollection as
// the Kubernetes apiserver does: metainternalversionscheme.ParameterCodec
// into ListOptions (a value that does not parse, such as timeoutSeconds=x
// or a bad selector, is a 400 BadRequest; so is a boolean parameter that
// strconv.ParseBool refuses, such as watch=maybe, which Kubernetes would
// read as true), then
// ValidateListOptions (an impossible combination, such as
// sendInitialEvents without resourceVersionMatch=NotOlderThan, is a 422)
// and the field selector against the kind's selectable fields (400
// "field label not supported"). watch is true for the legacy /watch/
// paths. The resourceVersion must be a decimal revision (400).
func listOptions(k *registry.Kind, q url.Values, watch bool) (metainternalversion.ListOptions, selector, error) {
	var opts metainternalversion.ListOptions
	// The parameter codec reads any value but "false" and "0" as true;
	// a value that is no boolean at all is a client's mistake.
	for _, name := range []string{"watch", "allowWatchBookmarks", "sendInitialEvents"} {
		if v := q.Get(name); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				return opts, selector{}, apierrors.NewBadRequest(fmt.Sprintf("%s=%q is not a boolean (true or false)", name, v))
			}
		}
	}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, &opts); err != nil {
		return opts, selector{}, apierrors.NewBadRequest(err.Error())
	}
	opts.Watch = opts.Watch || watch
	if errs := metainternalversionvalidation.ValidateListOptions(&opts, true); len(errs) > 0 {
		return opts, selector{}, apierrors.NewInvalid(metainternalversion.SchemeGroupVersion.WithKind("ListOptions").GroupKind(), "", errs)
	}
	if _, err := store.ParseResourceVersion(opts.ResourceVersion); err != nil {
		return opts, selector{}, err
	}
	sel := selector{label: opts.LabelSelector, field: opts.FieldSelector, fields: k.FieldSet}
	if sel.label == nil {
		sel.label = labels.Everything()
	}
	if sel.field == nil {
		sel.field = fields.Everything()
	}
	if err := checkFieldSelector(k, sel.field); err != nil {
		return opts, selector{}, err
	}
	return opts, sel, nil
}

// getOptions decodes the query of a GET of one object (GetOptions, as the
// Kubernetes apiserver) and returns the revision it must not be older
// than (0: the latest). A resourceVersion that is not a decimal revision
// is a 400.
func getOptions(q url.Values) (uint64, error) {
	var opts metav1.GetOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, &opts); err != nil {
		return 0, apierrors.NewBadRequest(err.Error())
	}
	return store.ParseResourceVersion(opts.ResourceVersion)
}
