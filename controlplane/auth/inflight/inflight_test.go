package inflight

import (
	"sync"
	"testing"
)

func TestPerUserBound(t *testing.T) {
	p := NewPerUser(2)
	r1, ok1 := p.Acquire("jane")
	r2, ok2 := p.Acquire("jane")
	if !ok1 || !ok2 {
		t.Fatal("jane's first two requests refused")
	}
	if _, ok := p.Acquire("jane"); ok {
		t.Fatal("jane's third request in flight accepted")
	}
	rb, ok := p.Acquire("bob")
	if !ok {
		t.Fatal("bob refused while jane is at her bound")
	}
	r1()
	r1() // a second release does nothing
	if got := p.InFlight("jane"); got != 1 {
		t.Fatalf("jane in flight %d, want 1", got)
	}
	r3, ok := p.Acquire("jane")
	if !ok {
		t.Fatal("jane refused after a release")
	}
	if _, ok := p.Acquire("jane"); ok {
		t.Fatal("double release freed two slots")
	}
	r2()
	r3()
	rb()
	if p.Users() != 0 {
		t.Fatalf("%d users kept after every release", p.Users())
	}
}

func TestPerUserUnlimitedAndConcurrent(t *testing.T) {
	p := NewPerUser(0)
	for i := 0; i < 1000; i++ {
		if _, ok := p.Acquire("jane"); !ok {
			t.Fatal("max 0 must not limit")
		}
	}
	p = NewPerUser(5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if rel, ok := p.Acquire("jane"); ok {
					mu.Lock()
					if n := p.InFlight("jane"); n > peak {
						peak = n
					}
					mu.Unlock()
					rel()
				}
			}
		}()
	}
	wg.Wait()
	if peak > 5 || p.InFlight("jane") != 0 {
		t.Fatalf("peak %d (bound 5), left %d", peak, p.InFlight("jane"))
	}
}
