// Package inflight bounds the requests one user has in flight at once, so
// that a single client (a runaway script, a stolen credential, a node
// agent gone wrong) cannot take every slot of the apiserver's overall
// bounds (--max-requests-inflight, --max-mutating-requests-inflight) and
// starve everybody else.
//
// Kubernetes shares the apiserver between users with API Priority and
// Fairness (flow schemas, priority levels, shuffle-sharded queues); orca
// uses the simplest fair rule instead: a fixed number of slots per user
// name, refused at once (429 TooManyRequests with Retry-After, as the
// kube-apiserver's max-in-flight filter), never queued.
package inflight

import "sync"

// PerUser counts the requests in flight per user name. The zero value is
// not usable; create it with NewPerUser. It is safe for concurrent use,
// and holds memory only for users with a request in flight.
type PerUser struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewPerUser returns a limiter allowing max requests in flight per user.
// max <= 0 means no limit (Acquire always succeeds).
func NewPerUser(max int) *PerUser {
	return &PerUser{max: max, n: make(map[string]int)}
}

// Max is the per-user bound (<= 0: none).
func (p *PerUser) Max() int { return p.max }

// Acquire takes a slot for user. It returns ok=false when user already
// has Max requests in flight; otherwise release must be called exactly
// once when the request ends (calling it again does nothing).
func (p *PerUser) Acquire(user string) (release func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.max > 0 && p.n[user] >= p.max {
		return nil, false
	}
	p.n[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.n[user]--; p.n[user] <= 0 {
				delete(p.n, user)
			}
		})
	}, true
}

// InFlight is the number of requests user has in flight.
func (p *PerUser) InFlight(user string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[user]
}

// Users is the number of users with a request in flight.
func (p *PerUser) Users() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.n)
}
