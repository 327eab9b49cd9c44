"""Security findings over what the repository deploys (picked up by `validate` through REPO_CHECKS).

- Triton's pods against Pod Security Standards "restricted", plus a read-only root filesystem (codes in the check
  registry): every workload of the folders kubectl-triton manages (the layout's overlays and bases) and, anywhere
  else, the workloads whose pods run tritonserver. The repository's other workloads (a user's CronJob among their
  own apps) follow the user's policy (their Pod Security admission, Kyverno, ...), not this tool's.
- NetworkPolicy shape: every Triton Deployment is selected by a policy that admits the inference ports only
  from labelled client namespaces and the metrics port only from the monitoring namespace.
- Literal credentials: Secret objects (not SOPS-encrypted ones), credential-named env values and ConfigMap keys,
  well-known token patterns in any string of a rendered object, and the same in models/*/model.yaml; in every
  folder (a credential in git is one wherever it is). References and placeholders (`$(VAR)`, `${VAR}`, `%s`,
  `{token}`, `{{ .token }}`, `ENC[...]`) are not credentials.

Opt-out, per object: the annotation `triton.kubectl.io/security-exempt: "<Code>[,<Code>...]: <reason>"`
(the reason is required). A malformed exemption is itself an error and
exempts nothing. In model.yaml the same key goes under a top-level `annotations:` mapping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from kubectl_triton.checks.findings import ERROR, WARNING, Finding
from kubectl_triton.checks.registry import Severity, register
from kubectl_triton.errors import TritonCtlError
from kubectl_triton.formats.schemas import object_id, sops_encrypted
from kubectl_triton.formats.yamlio import load_all_shared
from kubectl_triton.gitops import workloads
from kubectl_triton.gitops.labels import EXEMPT_ANNOTATION, INSTANCE_LABEL
from kubectl_triton.gitops.model import Repository

MIN_REASON_CHARS = 10
MONITORING_NAMESPACE = "monitoring"
TRITON_CONTAINER = "tritonserver"
INFERENCE_PORTS = {"http": 8000, "grpc": 8001}
METRICS_PORTS = {"metrics": 8002}
# Pod Security Standards "restricted": the only volume types allowed (k8s.io/pod-security-admission 0.35,
# policy/check_restrictedVolumes.go: `image` among them).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                      "projected", "secret"}
# The "baseline" controls below, from the same package's policy/check_*.go (the newest version of each):
# check_appArmorProfile.go, check_seLinuxOptions.go (1.31), check_sysctls.go (1.32), check_procMount_restricted.go,
# check_windowsHostProcess.go, check_hostProbesAndhostLifecycle.go (1.34).
APPARMOR_TYPES = {"RuntimeDefault", "Localhost"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}

CODES = {
    "RunAsNonRoot": "pods must run as a non-root user",
    "PrivilegeEscalation": "containers must set allowPrivilegeEscalation: false",
    "Privileged": "no privileged containers",
    "Capabilities": "drop ALL capabilities; add none but NET_BIND_SERVICE",
    "Seccomp": "seccompProfile RuntimeDefault or Localhost",
    "ReadOnlyRootFilesystem": "read-only root filesystem, writable emptyDirs where needed",
    "HostNamespaces": "no hostNetwork, hostPID, hostIPC",
    "HostPort": "no hostPort",
    "VolumeType": "only the volume types 'restricted' allows",
    "AppArmor": "AppArmor profile RuntimeDefault or Localhost (never Unconfined)",
    "SELinux": "no custom SELinux user or role; only the container SELinux types",
    "Sysctls": "only the sysctls Pod Security calls safe",
    "ProcMount": "the default /proc mask (procMount Default)",
    "HostProcess": "no Windows HostProcess containers",
    "ProbeHost": "probes and lifecycle hooks without a host (they would reach another machine than the pod)",
    "ServiceAccountToken": "no API token mounted into pods that do not call the API",
    "NetworkPolicyMissing": "every Triton Deployment is selected by an ingress NetworkPolicy",
    "NetworkPolicyOpen": "inference ports only from labelled client namespaces",
    "MetricsExposed": "the metrics port only from the monitoring namespace (the layout file's monitoring.namespace)",
    "LiteralCredential": "no credentials in git",
    "SecretInGit": "no Secret values in git (SOPS or an external secrets operator)",
}
_FIXES = {
    "RunAsNonRoot": "set runAsNonRoot: true (and a non-zero runAsUser) in the pod securityContext",
    "PrivilegeEscalation": "set allowPrivilegeEscalation: false on every container",
    "Privileged": "remove privileged: true",
    "Capabilities": "capabilities: {drop: [ALL]}",
    "Seccomp": "seccompProfile: {type: RuntimeDefault}",
    "ReadOnlyRootFilesystem": "readOnlyRootFilesystem: true, with emptyDir volumes where the container writes",
    "HostNamespaces": "remove hostNetwork/hostPID/hostIPC",
    "HostPort": "remove hostPort; expose the port through a Service",
    "VolumeType": "use configMap, secret, emptyDir, PVC, projected, csi, downwardAPI, ephemeral or image volumes",
    "AppArmor": "appArmorProfile: {type: RuntimeDefault} (or remove it)",
    "SELinux": "remove seLinuxOptions.user/role; type empty, container_t, container_init_t, container_kvm_t or "
               "container_engine_t",
    "Sysctls": "remove the sysctl, or set it on the nodes (it is not namespaced to the pod)",
    "ProcMount": "remove procMount (or set Default)",
    "HostProcess": "remove windowsOptions.hostProcess",
    "ProbeHost": "remove the host field: probes reach the pod's own IP",
    "ServiceAccountToken": "automountServiceAccountToken: false",
    "NetworkPolicyMissing": "include base/triton's NetworkPolicy (or your own) selecting the Triton pods",
    "NetworkPolicyOpen": "admit 8000/8001 only from namespaces labelled triton.kubectl.io/client",
    "MetricsExposed": "admit 8002 only from the namespace Prometheus runs in",
    "LiteralCredential": "reference a Secret (secretKeyRef / envFrom) kept out of git",
    "SecretInGit": "encrypt it with SOPS or deliver it with an external secrets operator",
    "ExemptionInvalid": "write the annotation as 'Code[,Code]: reason of at least 10 characters'",
}
_RULES = {**CODES, "ExemptionInvalid": "a malformed security-exempt annotation (it exempts nothing)"}
_WARN = {"ServiceAccountToken"}
CHECKS = {code: register(code, "warning" if code in _WARN else "error", "overlay", rule, _FIXES[code])
          for code, rule in _RULES.items()}

# Environment variable, ConfigMap key or model.yaml key names that hold a credential.
_CRED_NAME = re.compile(
    r"(pass(word|wd)?|secret(_?access)?_?key|access_?key(_?id)?|api_?key|(auth|access|bearer|api|hf|hugging_?face|"
    r"github|ngc)_?token|^token$|private_?key|credentials?$|client_?secret|session_?token)", re.IGNORECASE)
# Values that are credentials whatever key holds them.
_CRED_VALUE = [
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), "a GitHub token"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "a Hugging Face token"),
    (re.compile(r"\bnvapi-[A-Za-z0-9_-]{30,}\b"), "an NGC API key"),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}\b"), "a Slack token"),
    (_URL_WITH_PASSWORD := re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@([^/\s:?#]*)"),
     "a URL with a password"),
]
# Values that are references or placeholders, not credentials: $(VAR) and ${VAR} (also $${VAR}, as postBuild
# escapes it), $VAR (upper case, as environment variables are named), printf/Go/Python format directives (%s, %v,
# %(name)s), {name} and {{ template }} fields, <placeholder>, SOPS' ENC[...], and the usual dummies.
_PLACEHOLDER = re.compile(r"^(\$+\(.*\)|\$+\{.*\}|(?-i:\$+[A-Z_][A-Z0-9_]*)|%[-#+ 0-9.*]*[a-zA-Z]|%\([^)]*\)[a-zA-Z]|"
                          r"\{[^{}]*\}|\{\{.*\}\}|<.*>|ENC\[.*\]|changeme|redacted|\*+|x+|)$", re.IGNORECASE)


# -- entry point ---------------------------------------------------------------------------------------------

def check(root: Path, targets: list[Any]) -> list[Finding]:
    """Every security finding for the rendered `targets` and the model metadata under `root`. The metrics port may
    open to the namespace of the layout file's existing Prometheus (`monitoring.namespace`), else `monitoring`."""
    out: list[Finding] = []
    layout = Repository.at(root, tolerant=True).layout
    managed = [top.strip("/") for top in (layout.overlays, layout.bases)]
    for target in targets:
        mine = any(target.rel == top or target.rel.startswith(f"{top}/") for top in managed)
        out += check_objects(target.rel, target.objects, layout.prometheus.namespace, managed=mine)
    out += check_model_metadata(root)
    return out


def check_objects(source: str, objects: Iterable[Any], metrics_namespace: str = MONITORING_NAMESPACE, *,
                  managed: bool = True) -> list[Finding]:
    """Findings for one rendered kustomization (`source` names it in the findings); the metrics port may open to
    `metrics_namespace` only (where Prometheus runs). `managed`: a folder kubectl-triton manages (an overlay or
    base), whose every workload's pods are checked; elsewhere only those of workloads running tritonserver."""
    objects = [o for o in objects if isinstance(o, dict)]
    out: list[Finding] = []
    for obj in objects:
        exempt, problems = exemptions(_meta(obj).get("annotations"))
        out += [CHECKS["ExemptionInvalid"].finding(p, path=source, object=_oid(obj)) for p in problems]
        found: list[Finding] = []
        if managed or runs_triton(obj):
            found += check_pod(source, obj)
        found += check_credentials(source, obj)
        out += [f for f in found if f.code.removeprefix("security.") not in exempt]
    out += check_network_policies(source, objects, metrics_namespace)
    return out


# -- the opt-out annotation ----------------------------------------------------------------------------------

def exemptions(annotations: Any) -> tuple[set[str], list[str]]:
    """The codes an object's annotation exempts, and what is wrong with the annotation (then nothing is)."""
    if not isinstance(annotations, dict) or EXEMPT_ANNOTATION not in annotations:
        return set(), []
    text = str(annotations.get(EXEMPT_ANNOTATION) or "")
    codes_text, sep, reason = text.partition(":")
    codes = {c.strip().removeprefix("security.") for c in codes_text.split(",") if c.strip()}
    form = f'write "{EXEMPT_ANNOTATION}: <Code>[,<Code>]: <reason>"'
    if not sep or not codes:
        return set(), [f"{EXEMPT_ANNOTATION} {text!r}: no codes; {form}"]
    unknown = sorted(codes - set(CODES))
    if unknown:
        return set(), [f"{EXEMPT_ANNOTATION}: unknown code(s) {', '.join(unknown)}; known: {', '.join(CODES)}"]
    if len(reason.strip()) < MIN_REASON_CHARS:
        return set(), [f"{EXEMPT_ANNOTATION} for {', '.join(sorted(codes))}: the reason is missing or too short "
                       f"(at least {MIN_REASON_CHARS} characters); {form}"]
    return codes, []


# -- pods ----------------------------------------------------------------------------------------------------

def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _oid(obj: dict) -> str:
    try:
        return object_id(obj)
    except Exception:  # noqa: BLE001 - a malformed object still gets a name
        return f"{obj.get('kind')}/{_meta(obj).get('name')}"


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _containers(pod: dict) -> Iterator[dict]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _list(pod.get(key)):
            if isinstance(c, dict):
                yield c


def _triton_container(container: dict) -> bool:
    """A container running Triton: named tritonserver, or of an image whose repository is tritonserver
    (nvcr.io/nvidia/tritonserver:<tag>)."""
    image = str(container.get("image") or "").split("@", 1)[0]
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0]
    return container.get("name") == TRITON_CONTAINER or repository == TRITON_CONTAINER


def runs_triton(obj: dict) -> bool:
    """Whether a workload's pods (any of its templates) run a Triton container."""
    return any(_triton_container(c) for t in workloads.templates(obj) for c in _containers(t.spec))


def check_pod(source: str, obj: dict) -> list[Finding]:
    """Pod Security Standards "restricted" and a read-only root filesystem for every pod template of one workload
    (both of a LeaderWorkerSet group's, each finding naming the leader or the workers)."""
    out: list[Finding] = []
    for template in workloads.templates(obj):
        out += _check_pod_spec(source, obj, template.spec, f"{template.role}: " if template.role else "")
    return out


def _check_pod_spec(source: str, obj: dict, pod: dict, who: str) -> list[Finding]:
    psc = _dict(pod.get("securityContext"))
    out: list[Finding] = []

    def add(code: str, message: str, severity: Severity = "error") -> None:
        out.append(CHECKS[code].finding(who + message, path=source, object=_oid(obj), severity=severity))

    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key) is True:
            add("HostNamespaces", f"{key}: true shares the node's namespace with the pod")
    for vol in _list(pod.get("volumes")):
        kinds = [k for k in _dict(vol) if k != "name"]
        bad = [k for k in kinds if k not in RESTRICTED_VOLUMES]
        if bad:
            add("VolumeType", f"volume {_dict(vol).get('name')}: {', '.join(bad)} is not allowed by the "
                "'restricted' Pod Security Standard (hostPath exposes the node)" + (
                    "; to keep model files on the node's disk, use a local PersistentVolume (the node-cache "
                    "Component, docs/node-cache.md)" if "hostPath" in bad else ""))
    if pod.get("automountServiceAccountToken") is not False:
        add("ServiceAccountToken", "automountServiceAccountToken is not false: every container gets an API "
            "token it never uses", WARNING)
    _baseline(pod, psc, add)
    pod_seccomp = _dict(psc.get("seccompProfile")).get("type")
    if psc.get("runAsUser") == 0:
        add("RunAsNonRoot", "pod securityContext runAsUser: 0 runs as root")
    for c in _containers(pod):
        name = c.get("name")
        sc = _dict(c.get("securityContext"))
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        if uid == 0 or sc.get("runAsUser") == 0:
            add("RunAsNonRoot", f"container {name}: runAsUser 0 runs as root")
        elif non_root is not True:
            add("RunAsNonRoot", f"container {name}: runAsNonRoot is not true (pod or container securityContext)"
                + ("; the Triton image's unprivileged user is uid 1000" if _triton_container(c) else ""))
        if sc.get("privileged") is True:
            add("Privileged", f"container {name}: privileged: true")
        if sc.get("allowPrivilegeEscalation") is not False:
            add("PrivilegeEscalation", f"container {name}: set securityContext.allowPrivilegeEscalation: false")
        caps = _dict(sc.get("capabilities"))
        if "ALL" not in [str(x) for x in _list(caps.get("drop"))]:
            add("Capabilities", f"container {name}: capabilities.drop must include ALL")
        added = [str(x) for x in _list(caps.get("add")) if str(x) != "NET_BIND_SERVICE"]
        if added:
            add("Capabilities", f"container {name}: adds capabilities {', '.join(added)}")
        seccomp = _dict(sc.get("seccompProfile")).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            add("Seccomp", f"container {name}: seccompProfile is {seccomp or 'unset'}; use RuntimeDefault "
                "(pod securityContext)")
        if sc.get("readOnlyRootFilesystem") is not True:
            add("ReadOnlyRootFilesystem", f"container {name}: set readOnlyRootFilesystem: true and mount "
                "emptyDirs where it writes (/tmp, /dev/shm, the model repository)")
        for port in _list(c.get("ports")):
            if _dict(port).get("hostPort"):
                add("HostPort", f"container {name}: hostPort {port['hostPort']} binds the node's port")
    return out


def _baseline(pod: dict, psc: dict, add: Callable[..., None]) -> None:
    """The Pod Security "baseline" controls beyond the host namespaces, privileged, capabilities and volumes
    (which _check_pod_spec checks with "restricted"): the API server refuses such a pod in a namespace that enforces
    either level. Each finding goes through `add`."""
    contexts = [("pod", psc)] + [(f"container {c.get('name')}", _dict(c.get("securityContext")))
                                 for c in _containers(pod)]
    for who, sc in contexts:
        profile = _dict(sc.get("appArmorProfile")).get("type")
        if profile is not None and profile not in APPARMOR_TYPES:
            add("AppArmor", f"{who}: appArmorProfile type {profile}")
        selinux = _dict(sc.get("seLinuxOptions"))
        if selinux.get("type") not in (None, *SELINUX_TYPES):
            add("SELinux", f"{who}: seLinuxOptions type {selinux['type']}")
        for key in ("user", "role"):
            if selinux.get(key):
                add("SELinux", f"{who}: seLinuxOptions {key} {selinux[key]}")
        if _dict(sc.get("windowsOptions")).get("hostProcess") is True:
            add("HostProcess", f"{who}: windowsOptions.hostProcess: true")
        if who != "pod" and sc.get("procMount") not in (None, "Default"):
            add("ProcMount", f"{who}: procMount {sc['procMount']}")
    for sysctl in _list(psc.get("sysctls")):
        name = _dict(sysctl).get("name")
        if name not in SAFE_SYSCTLS:
            add("Sysctls", f"pod securityContext sysctl {name} is not one Pod Security calls safe")
    for c in _containers(pod):
        hooks = [(k, _dict(c.get(k))) for k in ("livenessProbe", "readinessProbe", "startupProbe")]
        hooks += [(f"lifecycle.{k}", _dict(_dict(c.get("lifecycle")).get(k))) for k in ("postStart", "preStop")]
        for where, hook in hooks:
            for handler in ("httpGet", "tcpSocket"):
                host = _dict(hook.get(handler)).get("host")
                if host:
                    add("ProbeHost", f"container {c.get('name')}: {where}.{handler}.host {host}")


# -- NetworkPolicy -------------------------------------------------------------------------------------------

def _selects(selector: Any, labels: dict) -> bool:
    """Does a LabelSelector select these labels (matchLabels and the simple matchExpressions)?"""
    sel = _dict(selector)
    for k, v in _dict(sel.get("matchLabels")).items():
        if labels.get(k) != v:
            return False
    for expr in _list(sel.get("matchExpressions")):
        expr = _dict(expr)
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in _list(expr.get("values"))]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _triton_ports(pod: dict) -> dict[str, Any]:
    """name -> port number of the tritonserver container's ports (defaults when it names none)."""
    server = next((c for c in _containers(pod) if c.get("name") == TRITON_CONTAINER), None)
    if server is None:
        return {}
    ports = {str(_dict(p).get("name") or _dict(p).get("containerPort")): _dict(p).get("containerPort")
             for p in _list(server.get("ports"))}
    return ports or {**INFERENCE_PORTS, **METRICS_PORTS}


def _rule_ports(rule: dict, ports: dict[str, Any]) -> set[str]:
    """The names of the pod's ports an ingress rule opens (all of them when it lists none)."""
    listed = _list(rule.get("ports"))
    if not listed:
        return set(ports)
    opened = set()
    for p in listed:
        want = _dict(p).get("port")
        if want is None:
            return set(ports)
        for name, number in ports.items():
            if str(want) in (name, str(number)):
                opened.add(name)
    return opened


def _peer_problem(peer: Any, metrics: bool, metrics_namespace: str = MONITORING_NAMESPACE,
                  own: dict | None = None) -> str | None:
    """Why one `from` peer is too wide for the inference ports (or, with `metrics`, for the metrics port). A
    podSelector that selects only the model's own pods (`own`: their labels, instance label included), as the
    rule between a LeaderWorkerSet group's pods does, admits nobody else."""
    peer = _dict(peer)
    if "ipBlock" in peer:
        return f"ipBlock {_dict(peer['ipBlock']).get('cidr')} admits addresses, not labelled namespaces"
    ns_sel = peer.get("namespaceSelector")
    if ns_sel is None:
        selector = _dict(peer.get("podSelector"))
        if own and INSTANCE_LABEL in _dict(selector.get("matchLabels")) and _selects(selector, own):
            return None
        return None if not metrics else "a podSelector alone admits pods of Triton's own namespace only"
    ns_sel = _dict(ns_sel)
    labels = _dict(ns_sel.get("matchLabels"))
    if not labels and not _list(ns_sel.get("matchExpressions")):
        return "an empty namespaceSelector admits every namespace"
    if metrics and labels.get("kubernetes.io/metadata.name") != metrics_namespace:
        return f"the metrics port must admit only namespace {metrics_namespace} " \
               f"(namespaceSelector kubernetes.io/metadata.name: {metrics_namespace})"
    return None


def check_network_policies(source: str, objects: list[dict], metrics_namespace: str = MONITORING_NAMESPACE
                           ) -> list[Finding]:
    """Each workload running tritonserver (a Deployment, StatefulSet or LeaderWorkerSet group, whose serving pod is
    its leader) needs an ingress NetworkPolicy of the documented shape."""
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    out: list[Finding] = []
    for dep in workloads.serving(objects):
        template = workloads.serving_template(dep)
        ports = _triton_ports(template.spec) if template else {}
        if template is None or not ports:
            continue
        exempt, _ = exemptions(_meta(dep).get("annotations"))
        labels = _dict(template.metadata.get("labels"))
        namespace = _meta(dep).get("namespace")
        mine = [p for p in policies if _meta(p).get("namespace") == namespace
                and _selects(_dict(p.get("spec")).get("podSelector"), labels)
                and "Ingress" in [str(t) for t in _list(_dict(p.get("spec")).get("policyTypes")) or ["Ingress"]]]
        if not mine:
            if "NetworkPolicyMissing" not in exempt:
                out.append(CHECKS["NetworkPolicyMissing"].finding("no NetworkPolicy selects this "
                                   f"{dep.get('kind')}'s pods: every pod in the cluster can call Triton",
                                   path=source, object=_oid(dep)))
            continue
        for policy in mine:
            p_exempt, _ = exemptions(_meta(policy).get("annotations"))
            for i, rule in enumerate(_list(_dict(policy.get("spec")).get("ingress"))):
                rule = _dict(rule)
                opened = _rule_ports(rule, ports)
                peers = _list(rule.get("from"))
                for code, names, metrics in (("NetworkPolicyOpen", set(INFERENCE_PORTS), False),
                                             ("MetricsExposed", set(METRICS_PORTS), True)):
                    hit = sorted(opened & names)
                    if not hit or code in p_exempt or code in exempt:
                        continue
                    why: str | None
                    if not peers:
                        why = "it has no 'from', so it admits every source"
                    else:
                        why = next((w for w in (_peer_problem(p, metrics, metrics_namespace, labels)
                                                for p in peers) if w), None)
                    if why:
                        out.append(CHECKS[code].finding(f"ingress rule {i + 1} opens "
                                           f"{', '.join(hit)}: {why}", path=source, object=_oid(policy)))
    return out


# -- credentials ---------------------------------------------------------------------------------------------

def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


_COMMENT_LINE = re.compile(r"^\s*(#|;|//)")
_DOCUMENTED_HOST = re.compile(r"^(|localhost|127\.0\.0\.1|\[::1\]|(.+\.)?example(\.(com|org|net))?|.+\.invalid)$")


def credential_pattern(text: str) -> str | None:
    """What kind of credential `text` contains, if it contains a well-known one. A URL with a password to no host,
    localhost or an example domain on a comment line of a configuration file documents a default
    (`## Default: postgres://kemal:kemal@localhost:5432/invidious`); anywhere else it is one, as tokens and keys
    are on any line."""
    for rx, what in _CRED_VALUE:
        for line in text.splitlines() or [text]:
            m = rx.search(line)
            if not m or _PLACEHOLDER.match(m.group(0).split("@")[0].rsplit(":", 1)[-1]):
                continue
            if rx is _URL_WITH_PASSWORD and _COMMENT_LINE.match(line) and _DOCUMENTED_HOST.match(m.group(1)):
                continue
            return what
    return None


def literal_credential(key: str, value: Any) -> bool:
    """Is `value`, held under the name `key`, a literal credential (not a reference or placeholder)?"""
    return isinstance(value, (str, int)) and not isinstance(value, bool) and bool(_CRED_NAME.search(str(key))) \
        and not _PLACEHOLDER.match(str(value).strip())


def _sops(obj: dict) -> bool:
    """A SOPS-encrypted Secret: the `sops` metadata sops writes (Flux decrypts it when it applies it), or every
    value an ENC[...] of sops."""
    values = [*_dict(obj.get("data")).values(), *_dict(obj.get("stringData")).values()]
    return sops_encrypted(obj) or bool(values) and all(str(v).startswith("ENC[") for v in values)


def check_credentials(source: str, obj: dict) -> list[Finding]:
    """Literal credentials in one rendered object."""
    out: list[Finding] = []

    def add(code: str, message: str) -> None:
        out.append(CHECKS[code].finding(message, path=source, object=_oid(obj), severity=ERROR))

    kind = obj.get("kind")
    if kind == "Secret" and (obj.get("data") or obj.get("stringData")) and not _sops(obj):
        keys = sorted({*_dict(obj.get("data")), *_dict(obj.get("stringData"))})
        add("SecretInGit", f"Secret with literal values ({', '.join(map(str, keys))}): encrypt it with SOPS or "
            "create it with an external secrets operator")
        return out
    if kind == "ConfigMap":
        for key, value in {**_dict(obj.get("data"))}.items():
            if literal_credential(str(key), value) and "\n" not in str(value):
                add("LiteralCredential", f"ConfigMap key {key} holds a literal credential; put it in a Secret")
    for c in (c for t in workloads.templates(obj) for c in _containers(t.spec)):
        for env in _list(c.get("env")):
            env = _dict(env)
            if "value" in env and literal_credential(str(env.get("name")), env.get("value")):
                add("LiteralCredential", f"container {c.get('name')}: env {env.get('name')} is a literal "
                    "value; use valueFrom.secretKeyRef (or envFrom a Secret)")
    if kind != "Secret":
        for where, text in _strings(obj):
            what = credential_pattern(text)
            if what:
                add("LiteralCredential", f"{where} contains {what}")
    return out


def check_model_metadata(root: Path) -> list[Finding]:
    """Literal credentials in models/*/model.yaml (a Secret's name is fine; its values are not)."""
    out: list[Finding] = []
    models = root / Repository.at(root, tolerant=True).layout.models
    for path in sorted(models.glob("*/model.yaml")) if models.is_dir() else []:
        rel = path.relative_to(root).as_posix()
        try:
            docs = load_all_shared(path)
        except TritonCtlError:
            continue  # malformed metadata is reported by the checks that read it
        lines = _read_lines(path)
        for doc in docs:
            if not isinstance(doc, dict):
                continue
            exempt, problems = exemptions(_dict(doc.get("annotations")))
            out += [CHECKS["ExemptionInvalid"].finding(p, path=rel) for p in problems]
            if "LiteralCredential" in exempt:
                continue
            for where, value in _leaves(doc):
                key = where.rsplit(".", 1)[-1]
                what = credential_pattern(str(value)) if isinstance(value, str) else None
                if what is None and key != "secret" and literal_credential(key, value):
                    what = "a literal credential"
                if what:
                    out.append(CHECKS["LiteralCredential"].finding(f"{where} holds {what}; reference a "
                                       "Secret by name (artifacts.secret) and keep its values out of git",
                                       path=rel, line=_line_of(lines, key)))
    return out


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            if path == "" and k == "annotations":
                continue
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _line_of(lines: list[str], key: str) -> int | None:
    key = re.sub(r"\[\d+\]$", "", key)
    for i, line in enumerate(lines, 1):
        if re.match(rf"\s*(- )?{re.escape(key)}\s*:", line):
            return i
    return None
