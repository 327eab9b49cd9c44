"""Diagnosis of Triton rollouts: a Snapshot (API objects, logs, probes) in, ModelStatus out. Pure.

`status.diagnose` holds the rules, `status.signatures` the log signatures (data/log_signatures.yaml),
`status.reasons` the catalog of fixes, `status.collect` reads the cluster into a Snapshot (the one part that does
I/O); `kubectl_triton.output.status` prints the verdicts.
"""

from kubectl_triton.status.model import (
           FAILED,
           HEALTHY,
           PROGRESSING,
           UNKNOWN,
           LogRequest,
           ModelProbe,
           ModelStatus,
           Probe,
           Reason,
           Snapshot,
)

__all__ = ["FAILED", "HEALTHY", "PROGRESSING", "UNKNOWN", "LogRequest", "ModelProbe", "ModelStatus", "Probe",
           "Reason", "Snapshot"]
