"""The plugin's flat error set. Every expected failure is one of these; `cli.main` turns them into
one line on stderr and an exit code, so no command prints a traceback for bad input."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_INTERRUPTED = 130


class TritonCtlError(Exception):
    """Base class: message is one line for the user, exit_code is what the process returns."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class InputError(TritonCtlError):
    """A file, path or argument the user gave cannot be used (missing, unreadable, malformed)."""


class ToolMissing(TritonCtlError):
    """A required external program (kustomize, kubectl, tritonserver) is not installed."""


class RenderError(TritonCtlError):
    """kustomize refused to build an overlay; `detail` is kustomize's own reason."""

    exit_code = EXIT_FINDINGS

    def __init__(self, path: object, detail: str) -> None:
        super().__init__(f"{path}: kustomize build failed: {detail}")
        self.path, self.detail = path, detail


class ClusterError(TritonCtlError):
    """The Kubernetes API could not be reached or refused a request."""


class FindingsError(TritonCtlError):
    """A check found problems; the command already printed them."""

    exit_code = EXIT_FINDINGS
