"""The cuts both intervention stages work on (`intervene`, `patch`): which attempts are sources, where each is
cut, the arms of a cut, and the model input of an arm; with the prompt helpers the model-running analyses
share (the protocol of an attempt's label, the prompt text of a (task, id)).

A cut is an (attempt, statement) with its arms (`bench.intervene.splice.cut_arms`). Model input for an
arm: the prompt's tokens, then the answer text up to the cut with the arm's statement, tokenised in two
pieces (the code before the cut statement, then the statement line) so that every arm shares the first
piece (`cut_tokens`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from bench.intervene.splice import MOVES, cut_arms, statements, strip_digits
from experiments.rundir import DEFAULT_MEDIUM, AttemptKey, RunDir, answer_text, reading
from experiments.stages.render import read_renders, render_stage, row_key
from interp.prompts import PromptItem, Protocol, build, items_by_id

#: why a source attempt gives no cut, or a cut lacks an arm
EXCLUSIONS = ("no spliceable statement", *(f"no {m.name} displacement" for m in MOVES), "splice error")


def protocol_from_label(label: str, medium: str = "v1") -> Protocol:
    if medium == "svg":
        raise ValueError("SVG attempts have no canvas statements to splice")
    if label == "zero-shot":
        return Protocol("zero-shot", 0)
    name, _, k = label.rpartition("-")
    return Protocol(name, int(k))


def plan_cuts(run: Any, model: str, task: str = "layout", samples: Iterable[int] | None = None, cut: str = "last",
              limit: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cuts, records) for the valid canvas attempts of `model` on `task`.

    A cut is an (attempt, statement) with its arms. `records` has one row per source attempt and cut or
    exclusion (written to RUN/intervention_cuts.jsonl): the attempt key, the cut, the statement, whether
    it carries a comment, whether the program had more code after it, which arms exist, the splice
    identity check of each moved arm, or the reason it was excluded (`EXCLUSIONS`). A splice that fails
    is an exclusion, never an error of the stage."""
    rd = reading(run)
    if rd.writable:
        render_stage(rd)
    renders = read_renders(rd)
    wanted = None if samples is None else set(samples)
    cuts: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for r in rd.rows(RunDir.GENERATIONS):
        key = AttemptKey.of(r)
        # only the paper's canvas: splicing, the painted mask and the prompt rebuild assume its 24x24 grid
        # (issue 16: other media are layout arms for the tables and judges, never intervention sources)
        if (key.model != model or key.task != task or key.medium != DEFAULT_MEDIUM
                or (wanted is not None and key.sample not in wanted)):
            continue
        rend = renders.get(row_key(r))
        if rend is None or rend["outcome"] != "ok":
            continue
        if limit and len(cuts) >= limit:
            break
        base = {**key.fields()}
        answer = answer_text(r)
        try:
            every = statements(answer)
        except Exception as e:  # noqa: BLE001 - model text is hostile; one bad attempt is one exclusion
            records.append({**base, "status": "excluded", "reason": "splice error", "detail": f"{type(e).__name__}"})
            continue
        stmts = [s for s in every if s.spliceable]
        if not stmts:
            records.append({**base, "status": "excluded", "reason": "no spliceable statement"})
            continue
        painted = np.any(rend["pixels"] != rend["background"], axis=-1)
        for s in (stmts[-1:] if cut == "last" else stmts):
            idx = every.index(s)
            rec = {**base, "cut": idx, "statement": s.name, "comment": s.comment, "code_after": s.code_after}
            try:
                arms = cut_arms(answer, s, painted)
            except Exception as e:  # noqa: BLE001
                records.append({**rec, "status": "excluded", "reason": "splice error", "detail": f"{type(e).__name__}: {e}"[:200]})
                continue
            asis = next(a.prefix for a in arms if a.arm == "null-asis")
            names = [a.arm for a in arms]
            checks = {a.arm: strip_digits(a.prefix) == strip_digits(asis) and a.prefix != asis
                      for a in arms if a.arm.startswith("moved")}
            missing = [f"no {m.name} displacement" for m in MOVES if m.name not in names]
            records.append({**rec, "status": "cut", "arms": names, "splice_identical": checks, "missing": missing})
            cuts.append({"row": r, "key": key, "answer": answer, "stmt": s, "cut": idx, "arms": arms})
            if limit and len(cuts) >= limit:
                break
    return cuts, records


def prompt_items(run: Any) -> Callable[[str, str], PromptItem]:
    recorded = reading(run).prompts()
    builtin = items_by_id()

    def get(task: str, pid: str) -> PromptItem:
        if (task, pid) in recorded:
            return recorded[(task, pid)]
        if pid in builtin and builtin[pid].task == task:
            return builtin[pid]
        raise ValueError(f"no prompt text for {task} prompt {pid!r} in {run} (prompts.jsonl) or built in")

    return get


def cut_tokens(rt: Any, cut: dict[str, Any], item: PromptItem) -> tuple[list[int], dict[str, list[int]]]:
    r, key = cut["row"], cut["key"]
    built = build(item, protocol_from_label(key.protocol, key.medium), rt.tokenizer, chat=rt.info.chat)
    plen = len(r.get("prefix", ""))  # the prompt already holds an open fence: drop it from the answer
    arms = {a.arm: a.prefix[plen:] for a in cut["arms"]}
    shared_text = arms["null-empty"]
    full = list(built.tokens) + (rt.tokenizer(shared_text, add_special_tokens=False)["input_ids"] if shared_text else [])
    shared, last = full[:-1], full[-1]
    suffixes = {}
    for name, text in arms.items():
        rest = text[len(shared_text):]
        suffixes[name] = [last] + (rt.tokenizer(rest, add_special_tokens=False)["input_ids"] if rest else [])
    return shared, suffixes



__all__ = ["EXCLUSIONS", "cut_tokens", "plan_cuts", "prompt_items", "protocol_from_label"]
