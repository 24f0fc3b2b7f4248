package wasm_test

import (
	"fmt"

	"github.com/orca-edge/orca/wasm"
)

func ExampleParseRef() {
	for _, s := range []string{"hello-wasm:v1", "hello-wasm", "hello-wasm@sha256:" + fmt.Sprintf("%064x", 1)} {
		ref, err := wasm.ParseRef(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("name=%q tag=%q digest=%q\n", ref.Name, ref.Tag, ref.Digest)
	}
	_, err := wasm.ParseRef("Hello:v1")
	fmt.Println(err)
	// Output:
	// name="hello-wasm" tag="v1" digest=""
	// name="hello-wasm" tag="latest" digest=""
	// name="hello-wasm" tag="" digest="sha256:0000000000000000000000000000000000000000000000000000000000000001"
	// module reference "Hello:v1": invalid name "Hello" (want lowercase [a-z0-9._/-]{1,255})
}
