// Package natsauth makes orca its own NATS operator: it keeps the
// operator's, the orca account's and the system account's nkeys, configures
// the embedded nats-server in JWT mode with a memory account resolver, and
// signs user JWTs whose permissions depend on the user's role (see
// permissions.go): the control plane may do anything in the orca account,
// a node reads only its own key space and what every node needs, a viewer
// reads every bucket but secrets and writes nothing.
//
// The keys live under a directory (orca-server: <data-dir>/tls/nats),
// created on first start and reused after, each a seed file of mode 0600:
//
//	operator.nk  the operator; signs the two account JWTs
//	account.nk   the "orca" account, which holds every bucket; signs user JWTs
//	system.nk    the system account ($SYS, the server's own monitoring)
//
// Whoever holds account.nk can mint any user: it is as secret as the
// cluster CA's key.
package natsauth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Account names as the JWTs carry them (the accounts are known to NATS by
// their public keys).
const (
	AccountName       = "orca"
	SystemAccountName = "SYS"
	OperatorName      = "orca"
)

// Key file names under the authority's directory.
const (
	operatorFile = "operator.nk"
	accountFile  = "account.nk"
	systemFile   = "system.nk"
)

// Authority holds orca's NATS operator and account keys. It is safe for
// concurrent use (it is read-only once loaded).
type Authority struct {
	operator, account, system nkeys.KeyPair
	operatorClaims            *jwt.OperatorClaims
	accountJWT, systemJWT     string
}

// LoadOrCreate loads the keys under dir, creating dir (mode 0700) and any
// missing key on first start. A key file that exists but does not hold a
// seed of the right kind is an error, never silently replaced: every user
// JWT signed with the old key would stop working.
func LoadOrCreate(dir string) (*Authority, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("nats keys: %w", err)
	}
	a := &Authority{}
	var err error
	if a.operator, err = loadOrCreateKey(filepath.Join(dir, operatorFile), nkeys.PrefixByteOperator); err != nil {
		return nil, err
	}
	if a.account, err = loadOrCreateKey(filepath.Join(dir, accountFile), nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if a.system, err = loadOrCreateKey(filepath.Join(dir, systemFile), nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if err := a.sign(); err != nil {
		return nil, err
	}
	return a, nil
}

// NewEphemeral returns an authority whose keys exist only in memory (tests,
// and servers that keep no state).
func NewEphemeral() (*Authority, error) {
	a := &Authority{}
	var err error
	if a.operator, err = nkeys.CreateOperator(); err != nil {
		return nil, err
	}
	if a.account, err = nkeys.CreateAccount(); err != nil {
		return nil, err
	}
	if a.system, err = nkeys.CreateAccount(); err != nil {
		return nil, err
	}
	return a, a.sign()
}

func loadOrCreateKey(path string, kind nkeys.PrefixByte) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		kp, err := nkeys.CreatePair(kind)
		if err != nil {
			return nil, fmt.Errorf("nats keys: create %s: %w", path, err)
		}
		seed, _ := kp.Seed()
		// O_EXCL: two processes starting at once must not each write a key.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("nats keys: %w", err)
		}
		if _, err := f.Write(append(seed, '\n')); err != nil {
			f.Close()
			return nil, fmt.Errorf("nats keys: write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("nats keys: write %s: %w", path, err)
		}
		return kp, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nats keys: %w", err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
	if err != nil {
		return nil, fmt.Errorf("nats keys: %s does not hold an nkey seed: %w", path, err)
	}
	if pub, _ := kp.PublicKey(); nkeys.Prefix(pub) != kind {
		return nil, fmt.Errorf("nats keys: %s holds a key of the wrong kind (want %s)", path, kind)
	}
	return kp, nil
}

// sign builds the operator claims and the two account JWTs.
func (a *Authority) sign() error {
	opPub, _ := a.operator.PublicKey()
	accPub, _ := a.account.PublicKey()
	sysPub, _ := a.system.PublicKey()

	op := jwt.NewOperatorClaims(opPub)
	op.Name = OperatorName
	op.SystemAccount = sysPub
	opJWT, err := op.Encode(a.operator)
	if err != nil {
		return fmt.Errorf("nats keys: operator JWT: %w", err)
	}
	if a.operatorClaims, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		return fmt.Errorf("nats keys: operator JWT: %w", err)
	}

	acc := jwt.NewAccountClaims(accPub)
	acc.Name = AccountName
	// JetStream without limits of its own: the server's (disk, memory)
	// bound it.
	acc.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxAckPending: jwt.NoLimit}
	if a.accountJWT, err = acc.Encode(a.operator); err != nil {
		return fmt.Errorf("nats keys: account JWT: %w", err)
	}
	sys := jwt.NewAccountClaims(sysPub)
	sys.Name = SystemAccountName
	if a.systemJWT, err = sys.Encode(a.operator); err != nil {
		return fmt.Errorf("nats keys: system account JWT: %w", err)
	}
	return nil
}

// Account returns the orca account's public key (the name NATS knows it
// by, and the directory JetStream keeps its streams in).
func (a *Authority) Account() string { pub, _ := a.account.PublicKey(); return pub }

// Operator returns the operator's public key.
func (a *Authority) Operator() string { pub, _ := a.operator.PublicKey(); return pub }

// OperatorJWT returns the operator's JWT (for a NATS cluster's operator:
// setting).
func (a *Authority) OperatorJWT() string {
	s, _ := a.operatorClaims.Encode(a.operator)
	return s
}

// Configure puts the server options in JWT mode: the operator is trusted,
// the accounts are served by a memory resolver, and every client must
// present a user JWT signed by the orca account. It also moves the
// JetStream data an orca of before accounts (the global account, "$G")
// left under opts.StoreDir to the orca account, once, so an upgraded
// server keeps its buckets.
func (a *Authority) Configure(opts *server.Options) error {
	opts.TrustedOperators = []*jwt.OperatorClaims{a.operatorClaims}
	opts.TrustedKeys = nil
	sysPub, _ := a.system.PublicKey()
	opts.SystemAccount = sysPub
	r := &server.MemAccResolver{}
	_ = r.Store(a.Account(), a.accountJWT)
	_ = r.Store(sysPub, a.systemJWT)
	opts.AccountResolver = r
	if opts.StoreDir != "" {
		return migrateGlobalAccount(opts.StoreDir, a.Account())
	}
	return nil
}

// migrateGlobalAccount renames <storeDir>/jetstream/$G to the account's
// directory when the latter does not exist yet.
func migrateGlobalAccount(storeDir, account string) error {
	old := filepath.Join(storeDir, server.JetStreamStoreDir, "$G")
	dst := filepath.Join(storeDir, server.JetStreamStoreDir, account)
	if _, err := os.Stat(old); err != nil {
		return nil // nothing to move
	}
	if _, err := os.Stat(dst); err == nil {
		return nil // already moved (or both exist: keep both, use the account's)
	}
	if err := os.Rename(old, dst); err != nil {
		return fmt.Errorf("nats: move the JetStream data of the global account to account %s: %w", account, err)
	}
	return nil
}

// Sign returns a user JWT for the user nkey publicKey ("U..."), signed by
// the orca account, with u's name, permissions and expiry. The caller keeps
// the seed; it never passes through here.
func (a *Authority) Sign(publicKey string, u User) (string, error) {
	if !nkeys.IsValidPublicUserKey(publicKey) {
		return "", fmt.Errorf("nats user %q: public key %q is not an nkey user public key (U...)", u.Name, publicKey)
	}
	uc := jwt.NewUserClaims(publicKey)
	uc.Name = u.Name
	uc.IssuerAccount = "" // signed by the account's own key
	uc.Permissions = u.Permissions
	if u.TTL > 0 {
		uc.Expires = time.Now().Add(u.TTL).Unix()
	}
	s, err := uc.Encode(a.account)
	if err != nil {
		return "", fmt.Errorf("nats user %q: sign: %w", u.Name, err)
	}
	return s, nil
}

// NewCreds returns a fresh user nkey and its JWT for u as a NATS .creds
// file (the format `nats --creds` and nats.UserCredentials read).
func (a *Authority) NewCreds(u User) ([]byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	tok, err := a.Sign(pub, u)
	if err != nil {
		return nil, err
	}
	seed, _ := kp.Seed()
	return jwt.FormatUserConfig(tok, seed)
}

// ConnectOption returns the nats.go option that authenticates as u with a
// key made for this call and kept only in memory (the control plane's
// own connection), and the inbox prefix u may subscribe to.
func (a *Authority) ConnectOption(u User) ([]nats.Option, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	tok, err := a.Sign(pub, u)
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.UserJWT(func() (string, error) { return tok, nil }, kp.Sign)}
	if u.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(u.InboxPrefix))
	}
	return opts, nil
}

// ServerConfig returns the nats-server configuration lines that trust the
// operator and serve the orca and system accounts from a memory resolver
// (for an external NATS cluster; append JetStream, cluster and TLS
// settings of its own).
func (a *Authority) ServerConfig() string {
	sysPub, _ := a.system.PublicKey()
	return fmt.Sprintf(`# orca's NATS operator and accounts (orca-server nats-config)
operator: %s
system_account: %s
resolver: MEMORY
resolver_preload: {
  %s: %s
  %s: %s
}
`, a.OperatorJWT(), sysPub, a.Account(), a.accountJWT, sysPub, a.systemJWT)
}
