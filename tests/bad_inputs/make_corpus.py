"""Writes the bad-input corpus (run once; the files are committed). `python tests/bad_inputs/make_corpus.py`.

One folder per format the plugin reads; tests/test_bad_inputs.py knows how each is fed to the plugin."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
GOOD_PBTXT = ('name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
              'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
              'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
ENGINE = json.loads((HERE.parent / "fixtures/engines/llama3-8b-bf16-tp1-h100/config.json").read_text())
BUILD = json.loads((HERE.parent / "fixtures/engines/llama3-8b-bf16-tp1-h100/build-info.json").read_text())


def deep(n: int, open_: str, close: str) -> str:
    return open_ * n + close * n


PBTXT: dict[str, str | bytes] = {
    "unclosed-brace": GOOD_PBTXT.replace("dims: [ 4 ] } ]\noutput", "dims: [ 4 ]\noutput"),
    "unknown-field": GOOD_PBTXT + "frobnicate: true\n",
    "string-for-int": GOOD_PBTXT.replace("max_batch_size: 8", 'max_batch_size: "eight"'),
    "int-overflow": GOOD_PBTXT.replace("max_batch_size: 8", "max_batch_size: 99999999999999999999999"),
    "bad-enum": GOOD_PBTXT.replace("TYPE_FP32 dims: [ 4 ] } ]\noutput", "TYPE_FP99 dims: [ 4 ] } ]\noutput"),
    "duplicate-scalar": GOOD_PBTXT + 'name: "other"\n',
    "binary-garbage": bytes(range(256)) * 4,
    "invalid-utf8": GOOD_PBTXT.encode() + b'# \xff\xfe\xfa\n',
    "nul-bytes": GOOD_PBTXT.replace("\n", "\x00\n", 2),
    "unterminated-string": 'name: "m\nbackend: "onnxruntime"\n',
    "name-mismatch": GOOD_PBTXT.replace('name: "m"', 'name: "other"'),
    "negative-dims": GOOD_PBTXT.replace("dims: [ 4 ] } ]\noutput", "dims: [ -7 ] } ]\noutput"),
    "zero-dims": GOOD_PBTXT.replace("dims: [ 4 ] } ]\noutput", "dims: [ 0 ] } ]\noutput"),
    "no-dims": GOOD_PBTXT.replace(" dims: [ 4 ] } ]\noutput", " } ]\noutput"),
    "bad-instance-kind": GOOD_PBTXT + "instance_group [ { kind: KIND_QUANTUM } ]\n",
    "negative-gpu-id": GOOD_PBTXT + "instance_group [ { count: 1 kind: KIND_GPU gpus: [ -3 ] } ]\n",
    "preferred-over-max": GOOD_PBTXT + "dynamic_batching { preferred_batch_size: [ 64 ] }\n",
    "negative-batch": GOOD_PBTXT.replace("max_batch_size: 8", "max_batch_size: -1"),
    "ensemble-missing-step": ('name: "m"\nplatform: "ensemble"\nmax_batch_size: 1\n'
                              'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                              'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                              'ensemble_scheduling { step [ { model_name: "ghost" model_version: -1 '
                              'input_map { key: "a" value: "x" } output_map { key: "b" value: "y" } } ] }\n'),
    "ensemble-no-steps": ('name: "m"\nplatform: "ensemble"\nmax_batch_size: 1\n'
                          'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                          'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'),
    "unknown-platform": GOOD_PBTXT.replace('backend: "onnxruntime"', 'platform: "quantum_rt"'),
    "deep-nesting": "parameters " + deep(3000, "{ key: \"a\" value ", "}") + "\n",
    "bom-prefix": "\ufeff" + GOOD_PBTXT + "frobnicate: 1\n",
    "tensorrtllm-no-params": ('name: "m"\nbackend: "tensorrtllm"\nmax_batch_size: 0\n'
                              'input [ { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
                              'output [ { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]\n'),
    "sequence-bad-control": GOOD_PBTXT + "sequence_batching { control_input [ { name: \"s\" control [ "
                            "{ kind: CONTROL_SEQUENCE_START } ] } ] }\n",
    "reshape-mismatch": GOOD_PBTXT.replace("dims: [ 4 ] } ]\noutput",
                                           "dims: [ 4 ] reshape: { shape: [ 3 ] } } ]\noutput"),
    "float-for-int": GOOD_PBTXT.replace("max_batch_size: 8", "max_batch_size: 8.5"),
}

KUSTOMIZATION: dict[str, str | bytes] = {
    "tab-indent": "resources:\n\t- ok.yaml\n",
    "unclosed-flow": "resources: [ok.yaml\n",
    "top-level-list": "- resources\n- ok.yaml\n",
    "top-level-scalar": "just a string\n",
    "resources-not-list": "resources: ok.yaml\n",
    "resources-mapping": "resources:\n  a: ok.yaml\n",
    "missing-resource": "resources:\n  - ghost.yaml\n",
    "absolute-resource": "resources:\n  - /etc/passwd\n",
    "escape-resource": "resources:\n  - ../../../../../../../../etc/hostname\n",
    "unknown-field": "resources:\n  - ok.yaml\nfrobnicate: true\n",
    "missing-patch": "resources:\n  - ok.yaml\npatches:\n  - path: ghost-patch.yaml\n",
    "missing-component": "resources:\n  - ok.yaml\ncomponents:\n  - ../ghost\n",
    "generator-missing-file": "configMapGenerator:\n  - name: c\n    files:\n      - ghost.txt\n",
    "generator-bad-literal": "configMapGenerator:\n  - name: c\n    literals:\n      - novalue\n",
    "binary-garbage": bytes(range(256)) * 2,
    "invalid-utf8": b"resources:\n  - ok.yaml\n# \xff\xfe\n",
    "wrong-api-version": "apiVersion: kustomize.config.k8s.io/v9\nkind: Kustomization\nresources:\n  - ok.yaml\n",
    "wrong-kind": "apiVersion: v1\nkind: ConfigMap\nresources:\n  - ok.yaml\n",
    "alias-bomb": "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                  "resources:\n  - ok.yaml\n",
    "patch-bad-target": "resources:\n  - ok.yaml\npatches:\n  - patch: |-\n      - op: replace\n"
                        "        path: /nothing/here\n        value: 1\n    target:\n      kind: ConfigMap\n",
    "images-not-list": "resources:\n  - ok.yaml\nimages: nvcr.io/nvidia/tritonserver\n",
    "self-reference": "resources:\n  - .\n",
    "nul-bytes": "resources:\n  - ok.yaml\x00\n",
    "unclosed-quote": "resources:\n  - \"ok.yaml\n",
}

DEP = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: triton
  labels: {app.kubernetes.io/name: triton-inference-server}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: triton-inference-server}}
  template:
    metadata: {labels: {app.kubernetes.io/name: triton-inference-server}}
    spec:
      containers:
        - name: tritonserver
          image: nvcr.io/nvidia/tritonserver:24.12-py3
"""
MANIFEST: dict[str, str | bytes] = {
    "invalid-yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x\n",
    "no-api-version": "kind: ConfigMap\nmetadata:\n  name: c\n",
    "no-kind": "apiVersion: v1\nmetadata:\n  name: c\n",
    "no-name": "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
    "replicas-string": DEP.replace("spec:\n  selector", "spec:\n  replicas: two\n  selector"),
    "spec-is-list": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec: [1, 2]\n",
    "template-is-string": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n"
                          "  selector: {matchLabels: {a: b}}\n  template: oops\n",
    "containers-strings": DEP.replace("        - name: tritonserver\n          image: nvcr.io/nvidia/tritonserver:"
                                      "24.12-py3\n", "        - tritonserver\n"),
    "containers-mapping": DEP.replace("        - name: tritonserver\n          image:",
                                      "        name: tritonserver\n        image:"),
    "security-context-list": DEP + "          securityContext: [privileged]\n",
    "env-mapping": DEP + "          env: {A: b}\n",
    "ports-strings": DEP + "          ports: [\"8000\"]\n",
    "resources-string": DEP + "          resources: lots\n",
    "limits-gpu-word": DEP + "          resources:\n            limits: {nvidia.com/gpu: one}\n",
    "probe-string-port": DEP + "          startupProbe: {httpGet: {path: /v2/health/ready, port: http},"
                               " periodSeconds: ten}\n",
    "privileged": DEP + "          securityContext: {privileged: true}\n",
    "host-path": DEP + "      volumes:\n        - name: root\n          hostPath: {path: /}\n",
    "literal-aws-key": DEP + "          env:\n            - name: AWS_SECRET_ACCESS_KEY\n"
                             "              value: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
    "plain-secret": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: model-store-credentials\n"
                    "stringData:\n  AWS_ACCESS_KEY_ID: AKIAIOSFODNN7EXAMPLE\n",
    "networkpolicy-open": "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: n\nspec:\n"
                          "  podSelector: {}\n  ingress: [{}]\n" + "---\n" + DEP,
    "hpa-bad-metrics": "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: h\nspec:\n"
                       "  maxReplicas: many\n  metrics: [cpu]\n  scaleTargetRef: {kind: Deployment, name: d}\n",
    "scalar-document": "just a string\n",
    "exempt-without-reason": DEP.replace("  labels: {app", "  annotations: {triton.kubectl.io/security-exempt: "
                                         "Privileged}\n  labels: {app")
                             + "          securityContext: {privileged: true}\n",
    "volumes-mapping": DEP + "      volumes: {a: b}\n",
    "init-containers-null-entry": DEP + "      initContainers: [null]\n",
}

FLUX_KS = """apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: app
  namespace: flux-system
spec:
  interval: 10m
  path: ./overlays/ok
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
"""
FLUX: dict[str, str | bytes] = {
    "invalid-yaml": FLUX_KS + "  timeout: [15m\n",
    "path-escapes": FLUX_KS.replace("./overlays/ok", "../../../etc"),
    "path-missing": FLUX_KS.replace("./overlays/ok", "./overlays/ghost"),
    "path-number": FLUX_KS.replace("./overlays/ok", "42"),
    "depends-on-unknown": FLUX_KS + "  dependsOn:\n    - name: ghost\n",
    "depends-on-string": FLUX_KS + "  dependsOn: platform\n",
    "depends-on-strings": FLUX_KS + "  dependsOn: [platform]\n",
    "spec-list": "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: a\nspec: [1]\n",
    "metadata-string": FLUX_KS.replace("metadata:\n  name: app\n  namespace: flux-system\n", "metadata: app\n"),
    "timeout-garbage": FLUX_KS + "  timeout: forever\n",
    "interval-number": FLUX_KS.replace("interval: 10m", "interval: 600"),
    "missing-source": FLUX_KS.replace("  sourceRef: {kind: GitRepository, name: flux-system}\n", ""),
    "gitrepository-bad": "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: g\n"
                         "  namespace: flux-system\nspec:\n  interval: often\n  url: 42\n",
    "helmrelease-no-chart": "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: h\n"
                            "  namespace: flux-system\nspec:\n  interval: 10m\n  chart: nginx\n",
    "binary": b"\x89PNG\r\n\x1a\n" + bytes(200),
    "duplicate-names": FLUX_KS + "---\n" + FLUX_KS.replace("./overlays/ok", "./overlays/ok2"),
    "substitute-from-number": FLUX_KS + "  postBuild:\n    substituteFrom: 5\n",
    "substitute-from-mapping": FLUX_KS + "  postBuild:\n    substituteFrom: {kind: ConfigMap, name: vars}\n",
}

MODEL_YAML: dict[str, str | bytes] = {
    "invalid-yaml": "name: m\nbackend: [tensorrtllm\n",
    "top-level-list": "- name: m\n- backend: tensorrtllm\n",
    "engine-string": "name: m\nbackend: tensorrtllm\ngpus: [h100-80gb]\nengine: yes please\n",
    "engine-list": "name: m\nbackend: tensorrtllm\ngpus: [h100-80gb]\nengine: [tp, 2]\n",
    "tp-word": "name: m\nbackend: tensorrtllm\ngpus: [h100-80gb]\nengine: {tp: two, pp: 1}\n",
    "gpus-string": "name: m\nbackend: tensorrtllm\ngpus: h100-80gb\n",
    "image-number": "name: m\nbackend: tensorrtllm\ngpus: [h100-80gb]\nimage: 24.12\n",
    "name-list": "name: [m]\nbackend: tensorrtllm\n",
    "literal-access-key": "name: m\nbackend: pytorch\nartifacts:\n  source: s3\n  uri: s3://b/m\n"
                          "  access_key_id: AKIAIOSFODNN7EXAMPLE\n",
    "literal-secret-key": "name: m\nbackend: pytorch\nartifacts:\n  source: s3\n  uri: s3://b/m\n"
                          "  secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
    "uri-with-password": "name: m\nbackend: pytorch\nartifacts:\n  source: s3\n"
                         "  uri: https://admin:hunter2@minio.local/models\n",
    "hf-token": "name: m\nbackend: tensorrtllm\nengine:\n  hf_token: hf_abcdefghijklmnopqrstuvwxyz0123456789\n",
    "binary": bytes(range(256)),
    "invalid-utf8": b"name: m\nbackend: pytorch\n# \xff\n",
    "exempt-no-reason": "name: m\nbackend: pytorch\nannotations:\n  triton.kubectl.io/security-exempt: "
                        "LiteralCredential\npassword: hunter2hunter2\n",
    "max-batch-huge": "name: m\nbackend: tensorrtllm\ngpus: [h100-80gb]\nengine: {max_batch_size: 1e400}\n",
}

ENGINE_CONFIG: dict[str, str | bytes] = {
    "not-json": "{ this is not json",
    "list": "[1, 2, 3]",
    "string": '"config"',
    "null": "null",
    "empty-object": "{}",
    "pretrained-string": json.dumps({**ENGINE, "pretrained_config": "llama"}),
    "build-config-list": json.dumps({**ENGINE, "build_config": [1]}),
    "mapping-string": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"],
                                                                   "mapping": "tp1"}}),
    "tp-word": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"],
                                                            "mapping": {"tp_size": "two", "pp_size": 1}}}),
    "tp-zero": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"],
                                                            "mapping": {"tp_size": 0, "pp_size": 0}}}),
    "tp-negative": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"],
                                                                "mapping": {"tp_size": -4, "pp_size": 1}}}),
    "dtype-number": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"], "dtype": 16}}),
    "batch-negative": json.dumps({**ENGINE, "build_config": {**ENGINE["build_config"], "max_batch_size": -64}}),
    "batch-huge": json.dumps({**ENGINE, "build_config": {**ENGINE["build_config"],
                                                          "max_batch_size": 10**40}}),
    "nan": json.dumps({**ENGINE, "build_config": {**ENGINE["build_config"], "max_seq_len": float("nan")}}),
    "invalid-utf8": b'{"version": "\xff"}',
    "deep-nesting": deep(20_000, "[", "]"),
    "version-object": json.dumps({**ENGINE, "version": {"major": 0}}),
    "quantization-list": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"],
                                                                      "quantization": ["fp8"]}}),
    "heads-zero": json.dumps({**ENGINE, "pretrained_config": {**ENGINE["pretrained_config"],
                                                               "num_attention_heads": 0, "head_size": None}}),
}

BUILD_INFO: dict[str, str | bytes] = {
    "not-json": "gpu_name=H100",
    "list": "[]",
    "empty-object": "{}",
    "gpu-name-number": json.dumps({**BUILD, "gpu_name": 100}),
    "cc-word": json.dumps({**BUILD, "compute_capability": "hopper"}),
    "cc-number": json.dumps({**BUILD, "compute_capability": 9}),
    "memory-word": json.dumps({**BUILD, "gpu_memory_mib": "lots"}),
    "memory-negative": json.dumps({**BUILD, "gpu_memory_mib": -1}),
    "image-list": json.dumps({**BUILD, "image": ["a"]}),
    "versions-objects": json.dumps({**BUILD, "tensorrt_llm_version": {"v": 1}}),
    "deep-nesting": deep(5_000, "{\"a\":", "}"),
    "truncated": json.dumps(BUILD)[:40],
}

MARK_B, MARK_C, MARK_F = "KUBECTL_TRITON_BUILD_INFO ", "KUBECTL_TRITON_ENGINE_CONFIG ", "KUBECTL_TRITON_ENGINE_FILES "
GOOD_B, GOOD_C = MARK_B + json.dumps(BUILD), MARK_C + json.dumps(ENGINE)
BUILD_LOG: dict[str, str | bytes] = {
    "no-markers": "building...\ndone\n",
    "build-info-only": GOOD_B + "\n",
    "config-only": GOOD_C + "\n",
    "malformed-build-info": MARK_B + "{\"gpu_name\": \n" + GOOD_C + "\n",
    "malformed-config": GOOD_B + "\n" + MARK_C + "{nope}\n",
    "build-info-list": MARK_B + "[]\n" + GOOD_C + "\n",
    "config-list": GOOD_B + "\n" + MARK_C + "[1]\n",
    "files-list": GOOD_B + "\n" + GOOD_C + "\n" + MARK_F + "[1, 2]\n",
    "files-words": GOOD_B + "\n" + GOOD_C + "\n" + MARK_F + '{"rank0.engine": "big"}\n',
    "files-null-size": GOOD_B + "\n" + GOOD_C + "\n" + MARK_F + '{"rank0.engine": null}\n',
    "binary": bytes(range(256)) * 3,
    "deep-nesting": MARK_B + deep(5_000, "[", "]") + "\n" + GOOD_C + "\n",
}

SERVER = "https://127.0.0.1:1"  # nothing listens: connection refused
SECRET = "SECRET-TOKEN-DO-NOT-PRINT"


def kubeconfig(server: str = SERVER, **over: object) -> dict:
    doc: dict = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                 "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                 "users": [{"name": "u", "user": {"token": SECRET}}],
                 "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "triton"}}]}
    doc.update(over)
    return doc


def kc(**over: object) -> str:
    return json.dumps(kubeconfig(**over), indent=1)


KUBECONFIG: dict[str, str | bytes] = {
    "not-yaml": "clusters: [\n",
    "scalar": "hello\n",
    "list": "- a\n- b\n",
    "no-contexts": kc(contexts=[]),
    "current-context-unknown": kc(**{"current-context": "ghost"}),
    "no-current-context": kc(**{"current-context": ""}),
    "cluster-unknown": kc(contexts=[{"name": "c", "context": {"cluster": "ghost", "user": "u"}}]),
    "user-unknown": kc(contexts=[{"name": "c", "context": {"cluster": "k", "user": "ghost"}}]),
    "no-server": kc(clusters=[{"name": "k", "cluster": {}}]),
    "server-not-url": kc(clusters=[{"name": "k", "cluster": {"server": "not a url at all"}}]),
    "server-refused": kc(),
    "clusters-mapping": kc(clusters={"k": {"server": SERVER}}),
    "contexts-strings": kc(contexts=["c"]),
    "token-list": kc(users=[{"name": "u", "user": {"token": [SECRET]}}]),
    "bad-ca-data": kc(clusters=[{"name": "k", "cluster": {"server": SERVER,
                                                          "certificate-authority-data": "%%%not-base64%%%"}}]),
    "ca-not-pem": kc(clusters=[{"name": "k", "cluster": {"server": SERVER,
                                                         "certificate-authority-data": "aGVsbG8gd29ybGQ="}}]),
    "missing-ca-file": kc(clusters=[{"name": "k", "cluster": {"server": SERVER,
                                                              "certificate-authority": "/nonexistent/ca.crt"}}]),
    "bad-client-key": kc(users=[{"name": "u", "user": {"client-certificate-data": "aGVsbG8=",
                                                       "client-key-data": "d29ybGQ="}}]),
    "missing-token-file": kc(users=[{"name": "u", "user": {"tokenFile": "/nonexistent/token"}}]),
    "exec-missing-binary": kc(users=[{"name": "u", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent/credential-helper",
        "args": [SECRET]}}}]),
    "auth-provider-unknown": kc(users=[{"name": "u", "user": {"auth-provider": {"name": "quantum",
                                                                                "config": {"secret": SECRET}}}}]),
    "password-basic-auth": kc(users=[{"name": "u", "user": {"username": "alice", "password": SECRET}}]),
    "binary": bytes(range(256)),
}

# One command line per file; {repo} is a scratch repository copy, {engine} a good engine directory,
# {tmp} an empty scratch folder.
ARGS: dict[str, str] = {
    "add-model-dotdot-name": "add-model ../evil --backend onnxruntime --gpu l4 --repo {repo}",
    "add-model-slash-name": "add-model a/b --backend onnxruntime --gpu l4 --repo {repo}",
    "add-model-space-name": "add-model 'Bad Name' --backend onnxruntime --gpu l4 --repo {repo}",
    "add-model-empty-name": "add-model '' --backend onnxruntime --gpu l4 --repo {repo}",
    "add-model-long-name": "add-model " + "a" * 300 + " --backend onnxruntime --gpu l4 --repo {repo}",
    "add-model-unknown-backend": "add-model m --backend tensorflow9 --gpu l4 --repo {repo}",
    "add-model-unknown-gpu": "add-model m --backend onnxruntime --gpu voodoo --repo {repo}",
    "add-model-bad-input": "add-model m --backend onnxruntime --gpu l4 --input x:FP99:3 --repo {repo}",
    "add-model-input-no-type": "add-model m --backend onnxruntime --gpu l4 --input x --repo {repo}",
    "add-model-input-bad-dims": "add-model m --backend onnxruntime --gpu l4 --input x:FP32:a,b --repo {repo}",
    "add-model-negative-batch": "add-model m --backend onnxruntime --gpu l4 --max-batch-size -5 --repo {repo}",
    "add-model-batch-word": "add-model m --backend onnxruntime --gpu l4 --max-batch-size many --repo {repo}",
    "add-model-tp-zero": "add-model m --backend tensorrtllm --gpu h100-80gb --tp 0 --repo {repo}",
    "add-model-bad-dtype": "add-model m --backend tensorrtllm --gpu h100-80gb --dtype float3 --repo {repo}",
    "add-model-bad-artifact": "add-model m --backend onnxruntime --gpu l4 --artifact s3:// --repo {repo}",
    "add-model-artifact-escape": "add-model m --backend onnxruntime --gpu l4 --artifact ../../etc --repo {repo}",
    "add-model-existing": "add-model image-classifier --backend onnxruntime --gpu l4 --repo {repo}",
    "add-model-ensemble-ghost-step": "add-model m --backend ensemble --gpu l4 --step ghost --repo {repo}",
    "add-model-step-garbage": "add-model m --backend ensemble --gpu l4 --step '->->' --repo {repo}",
    "add-model-no-repo": "add-model m --backend onnxruntime --gpu l4 --repo {tmp}/nowhere",
    "add-model-unknown-cluster": "add-model m --backend onnxruntime --gpu l4 --cluster ghost --repo {repo}",
    "add-model-fraction": "add-model m --backend tensorrtllm --gpu h100-80gb --kv-cache-free-gpu-mem-fraction 7 "
                          "--repo {repo}",
    "record-engine-dotdot": "record-engine ../../evil --from {engine} --repo {repo}",
    "record-engine-unknown-model": "record-engine ghost --from {engine} --repo {repo}",
    "record-engine-bad-gpu": "record-engine llama3-8b --from {engine} --gpu voodoo --repo {repo}",
    "record-engine-two-sources": "record-engine llama3-8b --from {engine} --from-log {engine}/x.log --repo {repo}",
    "record-engine-missing-dir": "record-engine llama3-8b --from {tmp}/nowhere --repo {repo}",
    "record-engine-log-missing": "record-engine llama3-8b --from-log {tmp}/nowhere.log --repo {repo}",
    "compat-missing-engine": "compat --engine-dir {tmp}/nowhere --gpu h100-80gb",
    "compat-no-gpu": "compat --engine-dir {engine}",
    "compat-negative-gpus": "compat --engine-dir {engine} --gpu h100-80gb --gpus-per-pod -1",
    "compat-missing-config": "compat --engine-dir {engine} --gpu h100-80gb --config {tmp}/nowhere.pbtxt",
    "compat-image-without-engine": "compat {repo} --image x",
    "compat-repo-missing": "compat {tmp}/nowhere",
    "validate-bad-k8s-version": "validate {repo} --kubernetes-version 0.0",
    "validate-missing-repo": "validate {tmp}/nowhere",
    "validate-bad-output": "-o wide validate {repo}",
    "render-missing-overlay": "render {tmp}/nowhere",
    "check-models-missing": "check-models {tmp}/nowhere",
    "check-models-empty": "check-models {tmp}",
    "status-bad-timeout": "status --kubeconfig {tmp}/nowhere --timeout forever",
    "status-missing-kubeconfig": "status --kubeconfig {tmp}/nowhere",
    "gpus-missing-kubeconfig": "gpus --kubeconfig {tmp}/nowhere",
    "unknown-command": "frobnicate",
    "unknown-output": "-o xml version",
    "unknown-option": "validate --frobnicate",
    "bench-url-port-out-of-range": "bench m --url http://127.0.0.1:99999",
    "bench-url-port-not-a-number": "bench m --url http://127.0.0.1:abc",
    "tune-stability-nan": "tune m --url http://127.0.0.1:9 --stability nan",
    "add-model-batch-beyond-int32": "add-model m --backend onnxruntime --gpu l4 --max-batch-size 3000000000 "
                                    "--repo {repo}",
    "add-model-instances-beyond-int32": "add-model m --backend onnxruntime --gpu l4 --instances 3000000000 "
                                        "--repo {repo}",
    "add-model-dim-beyond-int64": "add-model m --backend onnxruntime --gpu l4 --input x:FP32:99999999999999999999 "
                                  "--output y:FP32:2 --repo {repo}",
    "plan-memory-fraction-inf": "plan --hf-config {tmp}/none.json --memory-fraction inf",
}


HF_BASE = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
           "intermediate_size": 128, "max_position_embeddings": 512}


def _hf(**extra: object) -> str:
    return json.dumps({**HF_BASE, **extra}) + "\n"  # json.dumps writes Infinity and NaN, as Python's json reads


HF_CONFIG: dict[str, str | bytes] = {
    "rope-factor-infinity": _hf(rope_scaling={"type": "linear", "factor": float("inf")}),
    "rope-factor-nan": _hf(rope_scaling={"type": "dynamic", "factor": float("nan")}),
    "rope-factor-negative": _hf(rope_scaling={"type": "yarn", "factor": -4}),
    "layers-absurd": _hf(num_hidden_layers=1_000_000_000),
    "truncated": '{"num_hidden_layers": 2, "hidden_size": 64\n',
    "not-an-object": "[1, 2]\n",
}


def write(folder: str, cases: dict[str, str | bytes], suffix: str) -> int:
    out = HERE / folder
    out.mkdir(exist_ok=True)
    for name, content in cases.items():
        path = out / f"{name}{suffix}"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))
    return len(cases)


def main() -> None:
    total = sum([
        write("pbtxt", PBTXT, ".pbtxt"), write("kustomization", KUSTOMIZATION, ".yaml"),
        write("manifest", MANIFEST, ".yaml"), write("flux", FLUX, ".yaml"), write("model_yaml", MODEL_YAML, ".yaml"),
        write("engine_config", ENGINE_CONFIG, ".json"), write("build_info", BUILD_INFO, ".json"),
        write("build_log", BUILD_LOG, ".log"), write("kubeconfig", KUBECONFIG, ".yaml"),
        write("hf_config", HF_CONFIG, ".json"),
        write("args", {k: v + "\n" for k, v in ARGS.items()}, ".args"),
    ])
    print(f"{total} bad inputs written under {HERE}")


if __name__ == "__main__":
    main()
