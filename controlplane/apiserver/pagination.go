package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/store"
)

// continueToken is the decoded form of a list's continue parameter, the
// shape of k8s.io/apiserver/pkg/storage's continueToken: base64 (URL
// alphabet, unpadded as Kubernetes') of {"v":"meta.k8s.io/v1","rv":<the
// revision every page reflects>,"start":"<first KV key of the next
// page>"}. Clients treat it as opaque.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

// continueVersion is the token's only accepted version, as Kubernetes'.
const continueVersion = "meta.k8s.io/v1"

// encodeContinue returns the token that continues a list read at rev
// (-1: at the latest revision, after a 410) from the key after lastKey.
func encodeContinue(lastKey string, rev int64) string {
	b, _ := json.Marshal(continueToken{APIVersion: continueVersion, ResourceVersion: rev, StartKey: lastKey + "\x00"})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeContinue parses a continue parameter into the revision to read at
// (0 for a token of -1: the latest) and the first key. A token that does
// not decode, has another version, a revision of 0 or below -1, or an
// empty or over-long key is a 400 BadRequest "invalid continue token", as
// the Kubernetes apiserver.
func decodeContinue(token string) (rev uint64, start string, err error) {
	bad := func(why string) error {
		return apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %s", why))
	}
	// Kubernetes writes the unpadded URL alphabet; accept padding too.
	data, derr := base64.RawURLEncoding.DecodeString(strings.TrimRight(token, "="))
	if derr != nil {
		return 0, "", bad("continue key is not valid: " + derr.Error())
	}
	var t continueToken
	if jerr := json.Unmarshal(data, &t); jerr != nil {
		return 0, "", bad("continue key is not valid: " + jerr.Error())
	}
	switch {
	case t.APIVersion != continueVersion:
		return 0, "", bad(fmt.Sprintf("continue key is not valid: incorrect encoded start resourceVersion (version %s)", t.APIVersion))
	case t.ResourceVersion == 0 || t.ResourceVersion < -1:
		return 0, "", bad("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	case t.StartKey == "" || len(t.StartKey) > store.MaxKeyBytes+1:
		return 0, "", bad("continue key is empty or too long")
	}
	if t.ResourceVersion > 0 {
		rev = uint64(t.ResourceVersion)
	}
	return rev, t.StartKey, nil
}

// inconsistentContinue is the Kubernetes apiserver's message for a
// continue token whose revision can no longer be served
// (k8s.io/apiserver/pkg/storage/etcd3's inconsistentContinue).
const inconsistentContinue = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."

// expiredContinue is the 410 Gone (reason Expired) for a list continued at
// a revision the store no longer holds, as Kubernetes' etcd3 store after a
// compaction: its metadata.continue carries a token that continues from
// the same key at the latest revision (rv -1).
func expiredContinue(start string) error {
	err := apierrors.NewResourceExpired(inconsistentContinue)
	b, _ := json.Marshal(continueToken{APIVersion: continueVersion, ResourceVersion: -1, StartKey: start})
	err.ErrStatus.ListMeta.Continue = base64.RawURLEncoding.EncodeToString(b)
	return err
}
