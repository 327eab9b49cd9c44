"""Measuring a served model: closed-loop load (`loadgen`), inputs from its config (`inputs`), the
server's own time split (`target`), the batching search (`search`) and the config.pbtxt edit (`configedit`).

Pure functions where possible; `target` is the only module that talks to Triton."""

from __future__ import annotations

from kubectl_triton.errors import EXIT_FINDINGS, TritonCtlError


class PerfError(TritonCtlError):
    """The model failed while being measured (an inference or a load was refused)."""

    exit_code = EXIT_FINDINGS
