"""Every label and annotation the repository's manifests carry and the plugin reads, in one place."""

from __future__ import annotations

GROUP = "triton.kubectl.io"

# Kubernetes' recommended labels, as the Triton base sets them.
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the model (folder) name
TRITON_NAME = "triton-inference-server"
TRITON_SELECTOR = f"{NAME_LABEL}={TRITON_NAME}"

# GPU Feature Discovery's product label (a GPU Component's node affinity).
PRODUCT_LABEL = "nvidia.com/gpu.product"

# The plugin's own.
LABEL_MODEL = f"{GROUP}/model"
LABEL_TRACK = f"{GROUP}/track"  # stable | canary
LABEL_VERSION = f"{GROUP}/model-version"
CLIENT_LABEL = f"{GROUP}/client"  # namespaces whose pods may call inference ports
TRITON_MODELS_ANNOTATION = f"{GROUP}/triton-models"  # the Triton models a Deployment serves (status probes them)
ANN_TRITON_MODEL = f"{GROUP}/triton-model"  # the Triton model a canary versions
ANN_STABLE_VERSION = f"{GROUP}/stable-version"
ANN_CANARY_VERSION = f"{GROUP}/canary-version"
EXEMPT_ANNOTATION = f"{GROUP}/security-exempt"
