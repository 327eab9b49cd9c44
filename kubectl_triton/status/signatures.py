"""Container-log signatures (kept as data in data/log_signatures.yaml) matched against log text.

Each log line gets a level (glog's I/W/E/F, TensorRT(-LLM)'s [ERROR]/[W], Python logging's ERROR; "?" when none)
and a component; a signature only counts on lines of the levels and components it names, and never on a line
one of its `negative` patterns matches (advice that merely mentions a failure). Rows of Triton's model status
table are joined into one `model 'NAME' version N is UNAVAILABLE: ...` line first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kubectl_triton.formats import yamlio
from kubectl_triton.status.model import SEV_FAILED, Reason

SIGNATURES_FILE = Path(__file__).resolve().parent.parent / "data" / "log_signatures.yaml"
MAX_QUOTE = 240
DEFAULT_LEVELS = ("F", "E", "?")
UNKNOWN_LEVEL = "?"
ANY = "any"


@dataclass(frozen=True)
class Signature:
    code: str
    patterns: tuple[re.Pattern, ...]
    message: str
    fix: str
    terminal: bool
    fallback: bool
    components: tuple[str, ...] = (ANY,)
    levels: tuple[str, ...] = DEFAULT_LEVELS
    negative: tuple[re.Pattern, ...] = ()
    sources: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    origin: tuple[str, ...] = ()  # repository files that print a pattern's wording themselves

    def accepts(self, line: Line) -> bool:
        """Whether a hit on `line` counts: its level and component are the signature's, no negative matches."""
        if line.level not in self.levels:
            return False
        if ANY not in self.components and line.component is not None and line.component not in self.components:
            return False
        return not any(n.search(line.text) for n in self.negative)


@dataclass(frozen=True)
class Line:
    text: str
    level: str
    component: str | None


@dataclass(frozen=True)
class Table:
    """The signature file: line classifiers and signatures."""

    levels: tuple[tuple[str, re.Pattern], ...]
    components: tuple[tuple[str, re.Pattern], ...]
    signatures: tuple[Signature, ...]
    prefixes: tuple[tuple[str, re.Pattern], ...] = ()  # (launcher, pattern) removed from each line first

    def strip(self, text: str) -> str:
        """A line without its launcher prefix (mpirun --tag-output's `[1,3]<stderr>:`)."""
        for _, rx in self.prefixes:
            text = rx.sub("", text, count=1)
        return text


@lru_cache(maxsize=4)
def load_table(path: Path = SIGNATURES_FILE) -> Table:
    """The signature file, compiled."""
    doc = yamlio.load_all(path)[0]
    sigs = tuple(Signature(
        code=s["code"], patterns=tuple(re.compile(p, re.IGNORECASE) for p in s["patterns"]),
        message=s["message"], fix=" ".join(s["fix"].split()), terminal=bool(s.get("terminal", True)),
        fallback=bool(s.get("fallback", False)), components=tuple(s.get("components") or (ANY,)),
        levels=tuple(str(v) for v in s.get("levels") or DEFAULT_LEVELS),
        negative=tuple(re.compile(p, re.IGNORECASE) for p in s.get("negative") or ()),
        sources=tuple(s.get("sources") or ()), examples=tuple(s.get("examples") or ()),
        origin=tuple(s.get("origin") or ()))
        for s in doc["signatures"])
    return Table(levels=tuple((str(e["level"]), re.compile(e["pattern"])) for e in doc.get("levels") or ()),
                 components=tuple((str(e["component"]), re.compile(e["pattern"]))
                                  for e in doc.get("components") or ()),
                 signatures=sigs,
                 prefixes=tuple((str(e["launcher"]), re.compile(e["pattern"])) for e in doc.get("prefixes") or ()))


def load(path: Path = SIGNATURES_FILE) -> tuple[Signature, ...]:
    """The signatures, compiled."""
    return load_table(path).signatures


def classify(text: str, table: Table | None = None) -> Line:
    """A log line with its level and component."""
    table = table or load_table()
    level = next((lvl for lvl, rx in table.levels if rx.search(text)), UNKNOWN_LEVEL)
    component = next((c for c, rx in table.components if rx.search(text)), None)
    return Line(text, level, component)


_TABLE_ROW = re.compile(r"^\s*\|\s*(?P<model>[^|]*?)\s*\|\s*(?P<version>[^|]*?)\s*\|\s*(?P<status>.*?)\s*\|?\s*$")


def model_state_lines(lines: list[str]) -> list[str]:
    """Triton's model table (`| Model | Version | Status |`, long statuses wrapped over rows) as one line per
    model that is not READY: `model 'NAME' version N is UNAVAILABLE: ...`."""
    out: list[tuple[str, str, str]] = []
    for ln in lines:
        m = _TABLE_ROW.match(ln)
        if not m or set(ln.strip()) <= set("+-|"):
            continue
        model, version, status = m.group("model"), m.group("version"), m.group("status")
        if model and version:
            out.append((model, version, status))
        elif not model and not version and out and status:  # Triton wraps a long status at a fixed width
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + status)
    return [f"model '{m}' version {v} is {s}" for m, v, s in out
            if s.upper().startswith("UNAVAILABLE") and m.lower() != "model"]


def quote_line(line: str) -> str:
    """A log line as quoted in a message: Triton's glog prefix and escaped tracebacks removed, trimmed."""
    line = line.strip()
    line = re.sub(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ", "", line)  # glog prefix
    line = line.strip('"').split("\\n")[0].strip()
    return line if len(line) <= MAX_QUOTE else line[:MAX_QUOTE - 1] + "…"


def match(text: str, *, container: str = "", pod: str = "",
          table: tuple[Signature, ...] | None = None) -> list[Reason]:
    """Reasons for every signature found in `text` (last matching line quoted); fallback signatures
    only when nothing more specific matched."""
    full = load_table()
    table = full.signatures if table is None else table
    raw = [full.strip(ln) for ln in text.splitlines()]
    lines = [classify(ln, full) for ln in raw + model_state_lines(raw)]
    hits: list[Reason] = []
    for fallback in (False, True):
        if fallback and hits:
            break
        for sig in table:
            if sig.fallback != fallback:
                continue
            # patterns in order of preference; for each, the last line it matches
            line = next((ln for p in sig.patterns for ln in reversed(lines)
                         if p.search(ln.text) and sig.accepts(ln)), None)
            if line is None:
                continue
            hits.append(Reason(sig.code, sig.message.format(line=quote_line(line.text), container=container,
                                                            pod=pod), sig.fix, SEV_FAILED, sig.terminal))
    return hits


_ERRORISH = re.compile(r"\b(error|fatal|failed|failure|exception|traceback|abort(ed)?|panic|"
                       r"segmentation fault|terminate called)\b", re.IGNORECASE)


def error_lines(text: str, limit: int = 2) -> list[str]:
    """The last lines of a log that read as errors (level E/F, or wording like `error`, `failed`), quoted:
    what a crash without a known signature is quoted with."""
    full = load_table()
    picked = [ln for ln in (classify(full.strip(t), full) for t in text.splitlines() if t.strip())
              if ln.level in ("E", "F") or (ln.level == UNKNOWN_LEVEL and _ERRORISH.search(ln.text))]
    return [quote_line(ln.text) for ln in picked[-limit:]]


def render_markdown(path: Path = SIGNATURES_FILE) -> str:
    """docs/status-signatures.md: what `status` recognises in container logs, generated from the data."""
    t = load_table(path)
    out = ["<!-- Generated from kubectl_triton/data/log_signatures.yaml by "
           "`python -m kubectl_triton.status.signatures > docs/status-signatures.md`; do not edit. -->",
           "# What `kubectl triton status` recognises in container logs", "",
           "`status` reads the last lines of each failing Triton container's log (the previous instance's after a "
           "crash) and matches them against these signatures. A line counts only at the listed log levels "
           "(`?`: a line without a level, such as raw stderr or a row of Triton's model table) and from the "
           "listed components; lines matching a *never on* pattern are advice, not failures. A crash no "
           "signature explains is reported as `CrashLoopBackOff` with the log's last error lines quoted.", "",
           "| Code | Levels | Components | Terminal |", "| --- | --- | --- | --- |"]
    for s in t.signatures:
        out.append(f"| `{s.code}`{' (fallback)' if s.fallback else ''} | {', '.join(s.levels)} | "
                   f"{', '.join(s.components)} | {'yes' if s.terminal else 'no'} |")
    for s in t.signatures:
        out += ["", f"## `{s.code}`", "", s.message.replace("{line}", "LINE").replace('\\"', '"'), "",
                f"**Fix:** {s.fix}", "", "Matches (case-insensitive regular expressions):", ""]
        out += [f"- `{p.pattern}`" for p in s.patterns]
        if s.negative:
            out += ["", "Never on:", ""] + [f"- `{p.pattern}`" for p in s.negative]
        out += ["", "Seen in:", ""] + [f"- {u}" for u in s.sources]
        if s.origin:
            out += ["", "Also printed by this repository's " + ", ".join(f"`{o}`" for o in s.origin) + "."]
        if s.examples:
            out += ["", "Examples:", ""] + [f"    {e}" for e in s.examples]
    out += ["", "## Line levels and components", "", "| Level | Pattern |", "| --- | --- |"]
    out += [f"| {lvl} | `{rx.pattern.replace('|', '&#124;')}` |" for lvl, rx in t.levels]
    out += ["", "| Component | Pattern |", "| --- | --- |"]
    out += [f"| {c} | `{rx.pattern.replace('|', '&#124;')}` |" for c, rx in t.components]
    if t.prefixes:
        out += ["", "Removed from each line first (launcher prefixes):", "", "| Launcher | Pattern |", "| --- | --- |"]
        out += [f"| {name} | `{rx.pattern.replace('|', '&#124;')}` |" for name, rx in t.prefixes]
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover - the generator of docs/status-signatures.md
    print(render_markdown(), end="")
