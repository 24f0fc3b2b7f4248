// Command toolbox is a multi-call binary for test images that have no
// shell: it runs as the command its name (argv[0]'s base, or its first
// argument when that name is "toolbox") says, with just what orca's tests
// of exec, cp and probes need:
//
//	sh -c SCRIPT | sh      run SCRIPT (or each line of stdin): words split on
//	                       blanks ('...' and "..." quote), ";" separates commands,
//	                       "exit N" ends with N; other words run as commands
//	cat [FILE...]          copy the files (or stdin) to stdout
//	ls [PATH...]           list the directories (or name the files), one per line
//	echo [-n] WORD...      print the words
//	env | pwd | id -u      print the environment, working directory, uid
//	test -d|-f|-e PATH     exit 0 when PATH is a directory, file, exists
//	true | false           exit 0 | 1
//	sleep SECONDS          sleep
//	touch FILE...          create the files (empty) or update their times
//	ttysize                print "ROWS COLS" of the terminal on stdin
//	tar c|x [flags] ...    GNU tar's subset kubectl cp runs: "tar cf - PATH..."
//	                       and "tar [--no-same-permissions] [--no-same-owner]
//	                       -xmf - [-C DIR]" (regular files, directories, symlinks)
package main

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	args := os.Args
	if filepath.Base(args[0]) == "toolbox" && len(args) > 1 {
		args = args[1:]
	}
	os.Exit(run(filepath.Base(args[0]), args[1:]))
}

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	return 1
}

func run(name string, args []string) int {
	switch name {
	case "sh":
		if len(args) >= 2 && args[0] == "-c" {
			return script(args[1])
		}
		code := 0
		// On a terminal (kubectl exec -it ... -- sh) it prompts, as a shell.
		_, err := unix.IoctlGetTermios(0, unix.TCGETS)
		prompt := func() {
			if err == nil {
				fmt.Print("# ")
			}
		}
		prompt()
		sc := bufio.NewScanner(os.Stdin)
		for ; sc.Scan(); prompt() {
			code = script(sc.Text())
			if exited {
				return code
			}
		}
		return code
	case "cat":
		if len(args) == 0 {
			args = []string{"-"}
		}
		for _, a := range args {
			var r io.Reader = os.Stdin
			if a != "-" {
				f, err := os.Open(a)
				if err != nil {
					return fail("cat: %v", err)
				}
				defer f.Close()
				r = f
			}
			if _, err := io.Copy(os.Stdout, r); err != nil {
				return fail("cat: %v", err)
			}
		}
		return 0
	case "echo":
		nl := "\n"
		if len(args) > 0 && args[0] == "-n" {
			nl, args = "", args[1:]
		}
		fmt.Print(strings.Join(args, " ") + nl)
		return 0
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
		return 0
	case "pwd":
		wd, _ := os.Getwd()
		fmt.Println(wd)
		return 0
	case "id":
		fmt.Println(os.Getuid())
		return 0
	case "true":
		return 0
	case "false":
		return 1
	case "test", "[":
		if len(args) != 2 {
			return 2
		}
		st, err := os.Stat(args[1])
		switch {
		case err != nil:
			return 1
		case args[0] == "-d" && !st.IsDir(), args[0] == "-f" && !st.Mode().IsRegular():
			return 1
		}
		return 0
	case "sleep":
		if len(args) != 1 {
			return fail("usage: sleep SECONDS")
		}
		s, err := strconv.ParseFloat(args[0], 64)
		if err != nil {
			return fail("sleep: %v", err)
		}
		time.Sleep(time.Duration(s * float64(time.Second)))
		return 0
	case "touch":
		now := time.Now()
		for _, a := range args {
			f, err := os.OpenFile(a, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fail("touch: %v", err)
			}
			f.Close()
			if err := os.Chtimes(a, now, now); err != nil {
				return fail("touch: %v", err)
			}
		}
		return 0
	case "ls":
		if len(args) == 0 {
			args = []string{"."}
		}
		code := 0
		for _, a := range args {
			st, err := os.Stat(a)
			if err != nil {
				code = fail("ls: %v", err)
				continue
			}
			if !st.IsDir() {
				fmt.Println(a)
				continue
			}
			es, err := os.ReadDir(a)
			if err != nil {
				code = fail("ls: %v", err)
				continue
			}
			for _, e := range es {
				fmt.Println(e.Name())
			}
		}
		return code
	case "ttysize":
		ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
		if err != nil {
			return fail("ttysize: %v", err)
		}
		fmt.Printf("%d %d\n", ws.Row, ws.Col)
		return 0
	case "tar":
		return tarCmd(args)
	}
	return fail("%s: not a toolbox command", name)
}

var exited bool

// script runs one line of sh.
func script(line string) int {
	code := 0
	for _, cmd := range strings.Split(line, ";") {
		words := split(cmd)
		if len(words) == 0 {
			continue
		}
		if words[0] == "exit" {
			exited = true
			if len(words) > 1 {
				code, _ = strconv.Atoi(words[1])
			}
			return code
		}
		c := exec.Command(words[0], words[1:]...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		err := c.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			fmt.Fprintf(os.Stderr, "sh: %v\n", err)
			code = 127
		default:
			code = 0
		}
	}
	return code
}

func split(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

func tarCmd(args []string) int {
	var create, extract bool
	dir := "."
	var paths []string
	file := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-C" && i+1 < len(args):
			dir = args[i+1]
			i++
		case strings.HasPrefix(a, "--"): // --no-same-permissions, --no-same-owner: the defaults here
		case i == 0 || strings.HasPrefix(a, "-"):
			for _, f := range strings.TrimPrefix(a, "-") {
				switch f {
				case 'c':
					create = true
				case 'x':
					extract = true
				case 'f':
					if i+1 < len(args) {
						file = args[i+1]
						i++
					}
				}
			}
		default:
			paths = append(paths, a)
		}
	}
	if file != "-" && file != "" {
		return fail("tar: only -f - is supported")
	}
	switch {
	case create:
		return tarCreate(dir, paths)
	case extract:
		return tarExtract(dir)
	}
	return fail("tar: need c or x")
}

func tarCreate(dir string, paths []string) int {
	tw := tar.NewWriter(os.Stdout)
	for _, p := range paths {
		root := p
		if !filepath.IsAbs(p) {
			root = filepath.Join(dir, p)
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				link, _ = os.Readlink(path)
			}
			h, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(path, "/")
			if dir != "." {
				rel, _ = filepath.Rel(dir, path)
			}
			h.Name = rel
			if info.IsDir() {
				h.Name += "/"
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if info.Mode().IsRegular() {
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(tw, f)
				return err
			}
			return nil
		})
		if err != nil {
			return fail("tar: %v", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fail("tar: %v", err)
	}
	return 0
}

func tarExtract(dir string) int {
	tr := tar.NewReader(os.Stdin)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return 0
		}
		if err != nil {
			return fail("tar: %v", err)
		}
		name := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(name), 0o755); err == nil {
				var f *os.File
				if f, err = os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, fs.FileMode(h.Mode)&0o777); err == nil {
					_, err = io.Copy(f, tr)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, name)
		}
		if err != nil {
			return fail("tar: %v", err)
		}
	}
}
