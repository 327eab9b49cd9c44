"""The KV-cache estimate against real startup logs: tests/fixtures/kv_capacity_cases.yaml, case by case.

`compare` estimates one case with kubectl_triton.compat.capacity (from the catalog's memory and the backend's
documented reserve: nothing is taken from the log) and sets it beside what the log states; `markdown` writes the
table that docs/capacity.md carries between its `capacity-cases` markers. tests/test_capacity.py asserts both.

    python tools/capacity_cases.py            # print the table
    python tools/capacity_cases.py --write    # put it into docs/capacity.md
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubectl_triton.compat import capacity  # noqa: E402
from kubectl_triton.compat.catalog import gpus  # noqa: E402
from kubectl_triton.compat.hfconfig import architecture  # noqa: E402
from kubectl_triton.formats import yamlio  # noqa: E402

CASES = ROOT / "tests" / "fixtures" / "kv_capacity_cases.yaml"
DOC = ROOT / "docs" / "capacity.md"
BEGIN, END = "<!-- capacity-cases:begin -->", "<!-- capacity-cases:end -->"


@dataclass(frozen=True)
class Comparison:
    """One case: the estimate, what the log states and how far apart they are."""

    case: dict[str, Any]
    plan: capacity.CapacityPlan
    measure: str  # "tokens" or "KV GiB": what the log lets us compare
    logged: float
    estimated: float
    per_token_tokens: int | None  # the logged KV memory divided by our bytes per token (None: not checkable)

    @property
    def error(self) -> float:
        return self.estimated / self.logged - 1

    @property
    def end_to_end(self) -> bool:
        return self.case.get("end_to_end", True) is not False


def load_cases() -> list[dict[str, Any]]:
    return list(yamlio.loads_all(CASES.read_text(encoding="utf-8"), str(CASES))[0]["cases"])


def gpu_memory(case: dict[str, Any]) -> tuple[str, int]:
    """(GPU label, memory.total MiB): the catalog's for `gpu:`, else the case's own figure."""
    if case.get("gpu"):
        gpu = gpus()[case["gpu"]]
        return gpu.key, gpu.memory_mib
    if case.get("gpu_memory_mib"):
        return str(case.get("gpu_name") or "?"), int(case["gpu_memory_mib"])
    return "unknown", 81559  # no GPU named: only the per-token check runs (end_to_end: false)


def logged_kv_bytes(logged: dict[str, Any]) -> float | None:
    if "kv_cache_bytes" in logged:
        return float(logged["kv_cache_bytes"])
    if "kv_cache_gib" in logged:
        return float(logged["kv_cache_gib"]) * capacity.GIB
    return None


def compare(case: dict[str, Any], reserve_mib: int | None = None) -> Comparison:
    """One case estimated with the backend's documented reserve (or `reserve_mib`)."""
    label, memory = gpu_memory(case)
    plan = capacity.estimate(
        architecture(case["config"], case["id"]), gpu=label, gpu_memory_mib=memory, backend=case["backend"],
        tp=case.get("tp", 1), pp=case.get("pp", 1), dtype=case.get("dtype", "bfloat16"), weights=case.get("weights"),
        kv_cache_dtype=case.get("kv_cache_dtype"), memory_fraction=case.get("memory_fraction"),
        sequence_len=case.get("sequence_len"), block_tokens=case.get("block_tokens"), model=case.get("model", ""),
        reserve_mib=reserve_mib)
    logged = case["logged"]
    kv_bytes = logged_kv_bytes(logged)
    per_token = None
    if kv_bytes is not None and "kv_tokens" in logged and case.get("per_token_check", True) is not False:
        per_token = capacity.tokens_from_kv_memory(kv_bytes, plan.kv_bytes_per_token, plan.block_tokens)
    if "kv_tokens" in logged:
        return Comparison(case, plan, "tokens", float(logged["kv_tokens"]), float(plan.kv_tokens), per_token)
    assert kv_bytes is not None, f"{case['id']}: logged states neither kv_tokens nor the KV cache memory"
    return Comparison(case, plan, "KV GiB", kv_bytes / capacity.GIB, plan.kv_cache_bytes / capacity.GIB, per_token)


def _figure(value: float, measure: str) -> str:
    return f"{value:,.0f}" if measure == "tokens" else f"{value:.2f} GiB"


def markdown(rows: list[Comparison]) -> str:
    """The docs table: one row per case, the error of the end-to-end estimate and why where it misses 10%."""
    lines = ["| case | model | GPU | backend | tp×pp | fraction | logged | estimate | error | within ±10% |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for row in rows:
        case, plan = row.case, row.plan
        if row.end_to_end:
            error = f"{row.error:+.1%}"
            within = "yes" if abs(row.error) <= 0.10 else "no (note)"
        else:
            error, within = "—", "not checkable (note)"
        lines.append(
            f"| [{case['id']}]({case['source']}) | {case.get('model', '')} | {plan.gpu} | {plan.backend} | "
            f"{plan.tp}×{plan.pp} | {plan.memory_fraction:g} | {_figure(row.logged, row.measure)} | "
            f"{_figure(row.estimated, row.measure) if row.end_to_end else '—'} | {error} | {within} |")
        if case.get("why"):
            notes.append(f"- **{case['id']}**: {' '.join(str(case['why']).split())}")
    return "\n".join([*lines, "", *notes]) + "\n"


def summary(rows: list[Comparison]) -> str:
    checked = [r for r in rows if r.end_to_end]
    within = [r for r in checked if abs(r.error) <= 0.10]
    per_token = [r for r in rows if r.per_token_tokens is not None]
    exact = [r for r in per_token if abs(r.per_token_tokens / r.logged - 1) <= 0.02]  # type: ignore[operator]
    return (f"{len(rows)} cases; end to end within ±10%: {len(within)}/{len(checked)}; bytes per token "
            f"(logged KV memory / estimate's bytes per token vs logged tokens, ±2%): {len(exact)}/{len(per_token)}")


def replace_table(doc: str, table: str) -> str:
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC}: the {BEGIN} ... {END} markers are missing")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the table into docs/capacity.md")
    args = parser.parse_args()
    rows = [compare(c) for c in load_cases()]
    table = markdown(rows)
    if args.write:
        DOC.write_text(replace_table(DOC.read_text(encoding="utf-8"), table), encoding="utf-8")
    else:
        sys.stdout.write(table)
    print(summary(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
