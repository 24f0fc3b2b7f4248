package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/platforms"
	"github.com/containerd/containerd/remotes"
	"github.com/containerd/containerd/remotes/docker"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/runtimes"
)

// Pull policies of TaskSpec.PullPolicy (the container's imagePullPolicy).
const (
	PullAlways       = "Always"
	PullIfNotPresent = "IfNotPresent"
	PullNever        = "Never"
)

// ImageSource is a cluster's own store of OCI image archives (the NATS
// Object Store bucket of `orca image push`, runtimes/imagestore), which a
// node imports images from with no registry.
type ImageSource interface {
	// Resolve returns the digest ("sha256:<hex>") of the image the
	// normalized reference ref names in the source ("docker.io/library/
	// hello:v1", or a digest reference "...@sha256:<hex>"); ok is false
	// when the source does not hold it.
	Resolve(ctx context.Context, ref string) (dgst string, ok bool, err error)
	// Open reads the OCI image layout archive stored under dgst; its
	// index.json holds one manifest (or index) whose digest is dgst.
	Open(ctx context.Context, dgst string) (io.ReadCloser, error)
}

// image returns the image spec.Image names, unpacked for the
// snapshotter, honouring spec.PullPolicy as the kubelet's image manager
// does: Never uses the image store only (a missing image is
// runtimes.ErrImageNeverPull); IfNotPresent (and "") fetches an image the
// store lacks; Always fetches it every time (a fetch of content already
// there transfers only the manifest). Fetching takes the image from
// Config.ImageSource when that holds the reference, else pulls it from its
// registry. Every error wraps runtimes.ErrImage.
func (r *Runtime) image(ctx context.Context, spec runtimes.TaskSpec) (ctrd.Image, error) {
	name, err := NormalizeImage(spec.Image)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, runtimes.ErrInvalidImageName)
	}
	policy := spec.PullPolicy
	if policy == "" {
		policy = PullIfNotPresent
	}
	var img ctrd.Image
	switch policy {
	case PullNever, PullIfNotPresent:
		img, err = r.client.GetImage(ctx, name)
		switch {
		case errdefs.IsNotFound(err) && policy == PullNever:
			return nil, fmt.Errorf("image %s: %w", name, runtimes.ErrImageNeverPull)
		case errdefs.IsNotFound(err):
			img, err = r.fetchOnce(ctx, name, spec.RegistryAuth)
		case err != nil:
			return nil, fmt.Errorf("look up image %s: %v: %w", name, err, runtimes.ErrImage)
		}
	case PullAlways:
		img, err = r.fetchOnce(ctx, name, spec.RegistryAuth)
	default:
		return nil, fmt.Errorf("image pull policy %q: want Always, IfNotPresent or Never: %w", spec.PullPolicy, runtimes.ErrImage)
	}
	if err != nil {
		return nil, err
	}
	if err := r.unpack(ctx, img); err != nil {
		return nil, err
	}
	return img, nil
}

// fetchOnce fetches name, sharing one fetch among the Starts that want
// the same image at the same time (the first one's credentials serve
// them all).
func (r *Runtime) fetchOnce(ctx context.Context, name string, auth []runtimes.RegistryAuth) (ctrd.Image, error) {
	ch := r.pulls.DoChan(name, func() (any, error) {
		// Not under the first caller's ctx alone: the others wait too.
		fctx, cancel := context.WithTimeout(withNamespace(context.WithoutCancel(ctx), r.cfg.Namespace), r.cfg.PullTimeout)
		defer cancel()
		return r.fetch(fctx, name, auth)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(ctrd.Image), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("pull image %s: %w: %w", name, ctx.Err(), runtimes.ErrImage)
	}
}

// fetch takes name from the cluster's image source when it holds it, else
// from its registry.
func (r *Runtime) fetch(ctx context.Context, name string, auth []runtimes.RegistryAuth) (ctrd.Image, error) {
	if r.cfg.ImageSource != nil {
		dgst, ok, err := r.cfg.ImageSource.Resolve(ctx, name)
		switch {
		case err != nil:
			r.log.Warn("cluster image store unavailable; pulling from the registry", "image", name, "err", err)
		case ok:
			return r.importFromSource(ctx, name, dgst)
		}
	}
	return r.pull(ctx, name, auth)
}

// importFromSource makes name point at image dgst of the cluster's image
// source, importing its archive unless containerd has that image already.
func (r *Runtime) importFromSource(ctx context.Context, name, dgst string) (ctrd.Image, error) {
	if img, err := r.client.GetImage(ctx, name); err == nil && img.Target().Digest.String() == dgst {
		return img, nil
	}
	want, err := digest.Parse(dgst)
	if err != nil {
		return nil, fmt.Errorf("cluster image store: image %s has digest %q: %v: %w", name, dgst, err, runtimes.ErrImage)
	}
	// The node has the image under another name: name it, no transfer.
	if same, err := r.client.ImageService().List(ctx, fmt.Sprintf("target.digest==%s", dgst)); err == nil && len(same) > 0 {
		is := r.client.ImageService()
		m := images.Image{Name: name, Target: same[0].Target}
		out, err := is.Update(ctx, m, "target")
		if errdefs.IsNotFound(err) {
			out, err = is.Create(ctx, m)
		}
		if err == nil {
			return ctrd.NewImage(r.client, out), nil
		}
	}
	begin := time.Now()
	rc, err := r.cfg.ImageSource.Open(ctx, dgst)
	if err != nil {
		return nil, fmt.Errorf("cluster image store: open image %s (%s): %v: %w", name, dgst, err, runtimes.ErrImage)
	}
	defer rc.Close()
	m, err := r.importImage(ctx, rc, want, name)
	if err != nil {
		return nil, fmt.Errorf("cluster image store: import image %s (%s): %v: %w", name, dgst, err, runtimes.ErrImage)
	}
	img := ctrd.NewImage(r.client, m)
	r.log.Info("image imported from the cluster image store", "image", name, "digest", dgst, "took", time.Since(begin))
	return img, nil
}

// importImage reads the OCI image layout archive rc into the content
// store and names its image want (an entry of its index.json) name, as
// Client.Import does but without naming anything else: the archive's own
// names (its annotations) may differ from the reference it was pushed as,
// and must not move the node's other images.
func (r *Runtime) importImage(ctx context.Context, rc io.Reader, want digest.Digest, name string) (images.Image, error) {
	ctx, done, err := r.client.WithLease(ctx)
	if err != nil {
		return images.Image{}, err
	}
	defer done(ctx)
	cs := r.client.ContentStore()
	index, err := archive.ImportIndex(ctx, cs, rc)
	if err != nil {
		return images.Image{}, err
	}
	b, err := content.ReadBlob(ctx, cs, index)
	if err != nil {
		return images.Image{}, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return images.Image{}, fmt.Errorf("index.json: %w", err)
	}
	var target *ocispec.Descriptor
	for i := range idx.Manifests {
		if idx.Manifests[i].Digest == want {
			target = &idx.Manifests[i]
		}
	}
	if target == nil {
		return images.Image{}, fmt.Errorf("its index.json does not list image %s", want)
	}
	// Label each blob with its children (for containerd's garbage
	// collector), this node's platform only.
	handler := images.SetChildrenLabels(cs, images.FilterPlatforms(images.ChildrenHandler(cs), platforms.Default()))
	if err := images.WalkNotEmpty(ctx, handler, *target); err != nil {
		return images.Image{}, err
	}
	is := r.client.ImageService()
	img := images.Image{Name: name, Target: *target}
	out, err := is.Update(ctx, img, "target")
	if errdefs.IsNotFound(err) {
		out, err = is.Create(ctx, img)
	}
	return out, err
}

// pull pulls name from its registry and unpacks it for the snapshotter.
// The credentials of auth that match the registry's host are tried in
// order until one succeeds (as the kubelet tries each key of its
// keyring); with none the pull is anonymous.
func (r *Runtime) pull(ctx context.Context, name string, auth []runtimes.RegistryAuth) (ctrd.Image, error) {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %v: %w", name, err, runtimes.ErrImage)
	}
	host := reference.Domain(named)
	creds := matchAuth(host, auth)
	if len(creds) == 0 {
		creds = []runtimes.RegistryAuth{{}}
	}
	begin := time.Now()
	var errs []error
	for _, cred := range creds {
		img, err := r.client.Pull(ctx, name,
			ctrd.WithResolver(r.resolver(cred)),
			ctrd.WithPullUnpack,
			ctrd.WithPullSnapshotter(r.cfg.Snapshotter))
		if err == nil {
			r.log.Info("image pulled", "image", name, "digest", img.Target().Digest, "took", time.Since(begin))
			return img, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pull image %s: %v: %w", name, ctx.Err(), runtimes.ErrImage)
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("pull image %s from %s: %v: %w", name, host, errors.Join(errs...), runtimes.ErrImage)
}

// resolver is the docker resolver with credential cred (none when
// empty): plain HTTP for loopback registries and Config.InsecureRegistries,
// HTTPS elsewhere.
func (r *Runtime) resolver(cred runtimes.RegistryAuth) remotes.Resolver {
	var aopts []docker.AuthorizerOpt
	if cred != (runtimes.RegistryAuth{}) {
		aopts = append(aopts, docker.WithAuthCreds(func(string) (string, string, error) {
			if cred.IdentityToken != "" {
				return "", cred.IdentityToken, nil
			}
			return cred.Username, cred.Password, nil
		}))
	}
	return docker.NewResolver(docker.ResolverOptions{Hosts: docker.ConfigureDefaultRegistries(
		docker.WithAuthorizer(docker.NewDockerAuthorizer(aopts...)),
		docker.WithPlainHTTP(r.plainHTTP),
	)})
}

// plainHTTP reports whether host is reached over plain HTTP: a loopback
// address or localhost, or one of Config.InsecureRegistries.
func (r *Runtime) plainHTTP(host string) (bool, error) {
	for _, h := range r.cfg.InsecureRegistries {
		if h == host {
			return true, nil
		}
	}
	return docker.MatchLocalhost(host)
}

// dockerHub are the names of Docker Hub's registry (in image references
// and .dockerconfigjson keys).
var dockerHub = map[string]bool{"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true}

// matchAuth returns the credentials of auth for registry host, in order:
// those whose Server names host (a scheme, a path and, for Docker Hub,
// its aliases ignored; a leading "*." matches one subdomain, as the
// kubelet's credential keyring does).
func matchAuth(host string, auth []runtimes.RegistryAuth) []runtimes.RegistryAuth {
	var out []runtimes.RegistryAuth
	for _, a := range auth {
		if serverMatches(a.Server, host) {
			out = append(out, a)
		}
	}
	return out
}

func serverMatches(server, host string) bool {
	s := server
	if u, err := url.Parse(server); err == nil && u.Host != "" {
		s = u.Host
	} else if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	s, host = strings.ToLower(s), strings.ToLower(host)
	if s == host || dockerHub[s] && dockerHub[host] {
		return true
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		h, p, err := net.SplitHostPort(host)
		if err != nil {
			h, p = host, ""
		}
		rh, rp, err := net.SplitHostPort(rest)
		if err != nil {
			rh, rp = rest, ""
		}
		sub, dom, ok := strings.Cut(h, ".")
		return ok && sub != "" && dom == rh && p == rp
	}
	return false
}

// imageID is the image's ID as the kubelet reports a containerd image in
// containerStatuses[].imageID: its repository with the digest of its
// target ("docker.io/library/hello@sha256:...").
func imageID(img images.Image) string {
	named, err := reference.ParseNormalizedNamed(img.Name)
	if err != nil {
		return img.Target.Digest.String()
	}
	return reference.TrimNamed(named).String() + "@" + img.Target.Digest.String()
}
