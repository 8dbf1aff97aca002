"""``mode=benchmark``'s figures as people read them: each timing a median with its repeat count and spread,
the sections as tables, and the figures whose repeats disagree (a busy machine)."""

from __future__ import annotations

import statistics
from typing import Any

from uavgnn.infrastructure.console import count, echo
from uavgnn.reporting.tables import format_table

NOISY = 0.2  # repeats whose (max - min) / median exceeds this disagree: the machine was busy


def measure(samples: list[float], what: str) -> dict[str, Any]:
    """Repeated measurements of one figure: median, count, range and spread ((max - min) / median);
    the report warns about those over ``NOISY``."""
    mid = statistics.median(samples)
    spread = (max(samples) - min(samples)) / mid if mid else 0.0
    return {
        "figure": what,
        "median": mid,
        "repeats": len(samples),
        "min": min(samples),
        "max": max(samples),
        "spread": spread,
    }


def noisy_figures(node: Any) -> list[str]:
    """Every figure of the report (``measure``'s records) whose repeats disagreed by more than ``NOISY``."""
    if isinstance(node, dict):
        if "figure" in node:
            noisy = node["spread"] > NOISY
            return [f"{node['figure']}: {node['spread']:.0%} over {node['repeats']} repeats"] if noisy else []
        return [hit for value in node.values() for hit in noisy_figures(value)]
    if isinstance(node, list):
        return [hit for value in node for hit in noisy_figures(value)]
    return []


def spread_text(figure: Any) -> str:
    """``x5 ±12%``: how many repeats a figure is the median of and how far they spread."""
    if not isinstance(figure, dict) or figure["repeats"] == 1:
        return "x1"
    return f"x{figure['repeats']} ±{figure['spread'] / 2:.0%}"


def section_rows(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each section as table rows; ``repeats`` says how many runs a timing is the median of and their spread."""
    tables: dict[str, list[dict[str, Any]]] = {}
    if "cache" in report:
        c = report["cache"]
        tables["cache"] = [
            {
                "scenes": c["scenes"],
                "n_uav": c["n_uav"],
                "cold_build_s": c["cold_build_s"],
                "warm_load_s": c["warm_load_s"],
                "cold_over_warm": c["cold_over_warm"],
                "repeats": spread_text(c["repeats"]["warm_load_s"]),
            }
        ]
    if "pipeline" in report:
        p = report["pipeline"]
        tables["pipeline"] = [
            {"pipeline": k, "graphs_per_s": v, "repeats": spread_text(p["repeats"][k])}
            for k, v in p["graphs_per_s"].items()
        ]
    if "toggles" in report:
        tables["toggles"] = [
            {
                "toggle": t["toggle"],
                "off_ms": t["off"]["step_ms"],
                "on_ms": t["on"]["step_ms"],
                "speedup": t["speedup"],
                "off_mem_mb": t["off"]["memory_mb"],
                "on_mem_mb": t["on"]["memory_mb"],
                "memory_saving": t["memory_saving"],
                "repeats": f"{spread_text(t['repeats']['off'])} / {spread_text(t['repeats']['on'])}",
            }
            for t in report["toggles"]
        ]
    if "scaling" in report:
        tables["scaling"] = [
            {**{k: v for k, v in r.items() if k != "repeats"}, "repeats": spread_text(r["repeats"])}
            for r in report["scaling"]["rows"]
        ]
    if "milp" in report:
        tables["milp"] = [
            {
                k: r[k]
                for k in (
                    "n_uav",
                    "model_reward",
                    "milp_reward",
                    "greedy_reward",
                    "lap_reward",
                    "mcf_reward",
                    "gap_vs_milp",
                    "model_s",
                    "milp_s",
                    "milp_status",
                    "milp_over_model_time",
                )
            }
            | {"repeats": f"model {spread_text(r['repeats']['model_s'])}, MILP x1"}
            for r in report["milp"]["rows"]
        ]
    return tables


def print_report(report: dict[str, Any]) -> None:
    """The sections as tables (``repeats``: runs per median, ± half their range), then the noisy figures."""
    for name, rows in section_rows(report).items():
        model = report[name].get("model", "") if isinstance(report[name], dict) else ""
        echo(f"\n{name}" + (f" (model: {model})" if model else "") + "\n" + format_table(rows))
        if model.startswith("untrained"):
            echo(
                "  an untrained model: its timings are the point; its rewards and gaps are not results (ckpt=PATH "
                "times a trained one)"
            )
    if "pipeline" in report:
        p = report["pipeline"]
        echo(
            f"optimized / naive: {p['optimized_over_naive']:.1f}x (with AMP {p['optimized_amp_over_naive']:.1f}x); "
            f"max logit difference {p['max_logit_diff']:.2e}"
        )
    if "scaling" in report:
        echo(f"log-log slope of time vs nodes: {report['scaling']['loglog_slope']:.2f}")
    if report["noisy"]:
        echo(
            f"warning: the repeats of {count(len(report['noisy']), 'figure')} disagree by more than {NOISY:.0%} "
            "(a busy machine? close other work and run again):\n" + "\n".join(f"  {n}" for n in report["noisy"])
        )
