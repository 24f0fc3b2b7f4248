package internaldeps

import (
	_ "github.com/google/uuid"
	_ "github.com/labstack/echo/v4"
	_ "github.com/labstack/echo/v4/middleware"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/tetratelabs/wazero"
	_ "github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	_ "gopkg.in/evanphx/json-patch.v4"
	_ "k8s.io/apimachinery/pkg/api/validation"
	_ "k8s.io/apimachinery/pkg/fields"
	_ "k8s.io/apimachinery/pkg/util/intstr"
	_ "k8s.io/apimachinery/pkg/util/managedfields"
	_ "k8s.io/apimachinery/pkg/util/strategicpatch"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "k8s.io/client-go/util/workqueue"
	_ "sigs.k8s.io/yaml"
)
