"""What a history found, in words: for a person reading a failing seed."""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.world import Finding, World


def finding_text(f: Finding, *, verdict: bool = True) -> str:
    what = "FALSE FAILED" if f.judgement.route == "false-failed" else f"FALSE COMPLETE ({f.judgement.kind})"
    lines = [
        f"{what} at step {f.step}, watch {f.watch} ({f.kind}"
        + (", followed a stored verdict" if f.followed else "")
        + f"): {f.judgement.why}",
        f"  route: {f.route}",
        f"  context: {json.dumps(f.context, default=str)}",
    ]
    if verdict:
        lines.append("  verdict: " + json.dumps(_slim(f.verdict), default=str))
    return "\n".join(lines)


def _slim(verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict JSON without the bulkiest evidence (command lines)."""
    out = dict(verdict)
    signals = {}
    for name, reading in (verdict.get("signals") or {}).items():
        reading = dict(reading)
        ev = dict(reading.get("evidence") or {})
        ev.pop("cmdline", None)
        ev.pop("processes", None)
        reading["evidence"] = ev
        signals[name] = reading
    out["signals"] = signals
    return out


def print_world(world: World) -> None:
    s = world.summary()
    print(
        f"seed {s['seed']}: {s['steps']} steps, {s['checks']} checks, {s['completes']} true completes,"
        f" {s['hard']} false completes, {s['soft']} soft, {s['false_failed']} false failed"
    )
    for f in world.findings + world.soft + world.false_failed:
        print(finding_text(f))
    for o in s["obligations"]:
        print(obligation_text(o))
    for e in s["exit_code_errors"]:
        print(f"EXIT CODE / ADVANCE MISMATCH: {e}")
    for e in s["errors"]:
        print(f"ERROR: {e}")


def obligation_text(o: dict[str, Any]) -> str:
    """One (watch, run) the truth allowed to complete: must or either, and what the watch did."""
    head = f"{o['class'].upper()} complete: watch {o['watch']} ({o['kind']}), run {o['run']}: {o['outcome']}"
    if o["class"] == "must":
        head += (
            f" (complete at its check {o['hit']} after settling)"
            if o["hit"]
            else f" ({o['checks']} checks after settling)"
        )
        if o.get("last"):
            head += "\n  it said: " + " | ".join(o["last"])
    elif o.get("why"):
        head += f" ({o['why']})"
    return head
