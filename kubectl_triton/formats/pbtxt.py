"""config.pbtxt through Triton's own protobuf schema (tritonclient's model_config_pb2)."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from kubectl_triton.errors import InputError


@cache
def schema() -> ModuleType:
    """`tritonclient.grpc.model_config_pb2`, loaded without importing grpc (keeps start-up fast)."""
    name = "tritonclient.grpc.model_config_pb2"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("tritonclient is not installed", hint="pip install 'tritonclient[grpc]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    assert mod_spec and mod_spec.loader
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


class PbtxtError(InputError):
    """A config.pbtxt that Triton's parser refuses; carries file, line and column."""

    def __init__(self, source: str, line: int | None, column: int | None, problem: str) -> None:
        where = f":{line}" + (f":{column}" if column else "") if line else ""
        super().__init__(f"{source}{where}: {problem}")
        self.source, self.line, self.column, self.problem = source, line, column, problem


def parse(text: str, source: str = "config.pbtxt") -> Any:
    """Parse pbtxt text into a ModelConfig message; syntax and unknown fields raise PbtxtError."""
    from google.protobuf import text_format

    message = schema().ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as err:
        line, column = err.GetLine(), err.GetColumn()
        problem = str(err)
        prefix = f"{line}:{column} : "
        if problem.startswith(prefix):
            problem = problem[len(prefix):]
        raise PbtxtError(source, line, column, problem) from None
    return message


def load(path: Path) -> Any:
    """Read and parse a config.pbtxt file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    return parse(text, str(path))


def dumps(message: Any) -> str:
    """ModelConfig as pbtxt text in Triton's usual layout."""
    from google.protobuf import text_format

    return text_format.MessageToString(message, as_utf8=True)


def to_dict(message: Any) -> dict[str, Any]:
    """ModelConfig as a dict with Triton's JSON field names (what /v2/models/M/config returns)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def write_atomic(path: Path, text: str) -> None:
    """Write text to path through a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
