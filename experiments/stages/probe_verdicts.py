"""What a probe row's test may claim: the Benjamini-Hochberg families its q-value is taken over, and the verdict in
the words its procedure allows (the one place the report and the CLI take them from)."""

from __future__ import annotations

from typing import Any

from interp.baselines import beyond_outcome
from interp.grouping import VERDICT_SCOPE
from interp.intervals import NO_SIGNAL
from interp.probes import benjamini_hochberg


def delta_verdict(r: dict[str, Any]) -> str:
    """The headline Delta row's verdict, in the words its procedure allows (interp.grouping.VERDICT_SCOPE): the one
    rule the report and the CLI print. Significant means q < 0.05 and the interval above 0."""
    if r.get("signal") == NO_SIGNAL:
        return NO_SIGNAL
    proc = r.get("grouping", "none")
    scope = VERDICT_SCOPE.get(proc, VERDICT_SCOPE["none"])
    q, lo = r.get("q_bh"), (r.get("delta_ci") or [None])[0]
    if q is None:
        return _no_test(r, "p_perm")
    sig = q < 0.05 and lo is not None and lo > 0
    if proc == "too-few-groups":
        return (f"associated with the layout above the TF-IDF baseline {scope}" if sig
                else f"not shown above the TF-IDF baseline ({scope})")
    return f"decodable above the text baseline {scope}" if sig else "not shown above the text baseline at this power"


def _no_test(r: dict[str, Any], p: str) -> str:
    """Why a row has no test: the missing p's recorded reason (a NaN in the null), else no permutations were asked."""
    why = r.get(f"{p}_missing")
    return f"no test: {why}" if why else "no test (no permutations)"


def beyond_verdict(r: dict[str, Any]) -> str:
    """The beyond-text row's verdict (`interp.baselines.beyond_outcome` decides; this says it): it names the text
    features it was compared with, never "the text"."""
    feats = ", ".join(r.get("compared_with") or [r.get("baseline") or "?"])
    if r.get("screened"):  # the ceilings also read each baseline through its most associated columns (issue 39)
        feats += (f"; the lexical ones also through their {' and '.join(str(k) for k in r['screened'])} columns most "
                  "associated with the target")
    scope = VERDICT_SCOPE.get(r.get("grouping", "none"), VERDICT_SCOPE["none"])
    outcome = beyond_outcome(r.get("q_bh", r.get("p_fl")), (r.get("delta_ci") or [None])[0], r.get("text_readable"),
                             r.get("signal") == NO_SIGNAL)
    readable = r.get("text_readable")
    share = "?" if readable is None else f"{max(0.0, readable):.0%}"
    return {"beyond": f"beyond these text features ({feats}) {scope}; they reproduce {share} of what the probe decodes",
            "reads-text": f"reads these text features more exactly than the baselines learn them (they reproduce {share} "
                          f"of what the probe decodes, {r.get('text_readable_by')} best): a reading of the text, not "
                          "evidence of a plan",
            "share-missing": f"the test rejects against these text features ({feats}), but how much of what the probe "
                             "decodes they reproduce could not be measured: neither a plan nor a reading of the text "
                             "is claimed",
            "not-shown": f"not shown beyond these text features ({feats})",
            "no-signal": NO_SIGNAL,
            "no-test": _no_test(r, "p_fl")}[outcome]


def _adjust(rows: list[dict[str, Any]]) -> None:
    """BH q-values: per-layer permuted-target rows over the whole run; and one family per question (issue 39): every
    headline Delta test of a task and target (each model and position: the report's verdict on the target draws on
    any of them) and, apart, every beyond-text test of a task and target. Before, a family was one (task, target,
    position) with one test per model, so under a global null with 3 positions some position showed q <= .05 far more
    often than 5%. Targets stay apart: own is the headline question, shared and specific the paper's decomposition."""
    layer_rows = [r for r in rows if r.get("features") == "resid" and "p_perm" in r]
    for r, q in zip(layer_rows, benjamini_hochberg([r["p_perm"] for r in layer_rows])):
        r["q_bh"] = round(q, 6)
    for features, p, what in (("delta", "p_perm", "Delta test"), ("beyond_text", "p_fl", "beyond-text test")):
        families: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:
            if r.get("features") == features and r.get(p) is not None:
                families.setdefault((r["task"], r["target"]), []).append(r)
        for (task, target), fam in families.items():
            models = len({r["model"] for r in fam})
            positions = sorted({r["position"] for r in fam})
            for r, q in zip(fam, benjamini_hochberg([r[p] for r in fam])):
                r["q_bh"] = round(q, 6)
                r["bh_family"] = (f"every {what} of task {task}, target {target}: {len(fam)} tests ({models} model(s) x "
                                  f"positions {', '.join(positions)})")
