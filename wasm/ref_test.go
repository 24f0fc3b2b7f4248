package wasm

import (
	"encoding/binary"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// TestRefFormsMatchTheirRegexps checks the byte-class matchers of names,
// tags and digests against the regexps the reference forms are
// documented as, on every byte at every position class and on the
// length bounds.
func TestRefFormsMatchTheirRegexps(t *testing.T) {
	for _, m := range []struct {
		name string
		got  interface{ MatchString(string) bool }
		want *regexp.Regexp
		max  int
	}{
		{"name", nameRE, regexp.MustCompile(`^[a-z0-9._/-]{1,255}$`), 255},
		{"tag", tagRE, regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`), 128},
		{"digest", digestRE, regexp.MustCompile(`^sha256:[a-f0-9]{64}$`), 71},
	} {
		ins := []string{"", "sha256:", "sha256:" + strings.Repeat("a", 63), "sha256:" + strings.Repeat("f0", 32), "sha256:" + strings.Repeat("0", 65),
			"sha257:" + strings.Repeat("a", 64), strings.Repeat("a", m.max), strings.Repeat("a", m.max+1), strings.Repeat("Z", m.max)}
		for c := 0; c < 256; c++ {
			b := string(rune(c))
			if c >= 0x80 {
				b = string([]byte{byte(c)})
			}
			ins = append(ins, b, "a"+b, b+"a", "sha256:"+strings.Repeat("a", 63)+b, "sha256:"+b+strings.Repeat("a", 63))
		}
		for _, in := range ins {
			if got, want := m.got.MatchString(in), m.want.MatchString(in); got != want {
				t.Errorf("%s matches %q = %v, the regexp %v", m.name, in, got, want)
			}
		}
	}
}

func TestParseRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in      string
		want    Ref
		wantErr bool
	}{
		{in: "hello-wasm:v1", want: Ref{Name: "hello-wasm", Tag: "v1"}},
		{in: "hello-wasm", want: Ref{Name: "hello-wasm", Tag: "latest"}},
		{in: "team/app.x_y:V1.2-rc_3", want: Ref{Name: "team/app.x_y", Tag: "V1.2-rc_3"}},
		{in: "hello@" + d, want: Ref{Name: "hello", Digest: d}},
		{in: d, want: Ref{Digest: d}},
		{in: "Hello:v1", wantErr: true},
		{in: "hello:", wantErr: true},
		{in: "hello:" + strings.Repeat("a", 129), wantErr: true},
		{in: "hello:v 1", wantErr: true},
		{in: "hello@sha256:abc", wantErr: true},
		{in: "sha256:" + strings.Repeat("AB", 32), wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := ParseRef(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseRef(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && got != tc.want {
			t.Errorf("ParseRef(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestCheckBinary(t *testing.T) {
	if err := CheckBinary(guestData.job); err != nil {
		t.Errorf("job guest: %v", err)
	}
	for _, b := range [][]byte{nil, []byte("\x00asm"), []byte("\x00asm\x02\x00\x00\x00"), []byte("#!/bin/sh\necho hi\n")} {
		if err := CheckBinary(b); err == nil {
			t.Errorf("CheckBinary(%q) = nil, want error", b)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := Validate(guestData.job); err != nil {
		t.Errorf("job guest: %v", err)
	}
	for name, b := range map[string][]byte{
		"not wasm":        []byte("#!/bin/sh\necho hi\n"),
		"truncated":       guestData.job[:1000],
		"unknown section": append(append([]byte{}, wasmMagic...), 0x2a, 0x01, 0x00),
		"no code bodies":  append(append([]byte{}, wasmMagic...), 0x03, 0x02, 0x01, 0x00), // one function, no code section
		"cut before code": guestData.job[:sectionStart(t, guestData.job, 10)],
		"bad size":        append(append([]byte{}, wasmMagic...), 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	} {
		if err := Validate(b); !errors.Is(err, ErrInvalidModule) {
			t.Errorf("Validate(%s) = %v, want ErrInvalidModule", name, err)
		}
	}
}

// sectionStart returns the offset of the module's section with id.
func sectionStart(t *testing.T, data []byte, id byte) int {
	for pos := len(wasmMagic); pos < len(data); {
		if data[pos] == id {
			return pos
		}
		size, n := binary.Uvarint(data[pos+1:])
		pos += 1 + n + int(size)
	}
	t.Fatalf("no section %d", id)
	return 0
}
