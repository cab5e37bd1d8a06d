"""Attention focus, quantified (issue 16): how much the drawing statements attend to the prompt's spatial
words, per attempt, into `RUN/attention.jsonl`; the per-model distribution into `RUN/attention_table.json`.

The statistic is `interp.attention`'s (see its docstring and `docs/attention.md`): per valid attempt
(rendered `ok`; the paper's canvas only, whose prompts the capture also uses), the prompt is rebuilt
under the attempt's protocol, the answer is teacher-forced after it, and for the tokens of every
top-level drawing statement the runtime's `attention_mass` gives, per layer, the attention (mean over
heads) on the request's spatial-word tokens and on the whole prompt; the focus ratio divides their
ratio by the share uniform attention would give. An attempt whose request has no spatial word, or
whose program has no top-level drawing statement, gets a `skipped` row with the reason (counted in
the table, never silently dropped).

Work units are attempts in generation order: resumable (a row whose `input` hash, of the prompt text,
the answer, the word list, the layers and the model's weights, matches is kept; a stale one is redone)
and shardable (`shard=(i, n)` runs the attempts whose index is i mod n). Rows are appended a few at a
time under the run's lock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from bench.intervene.splice import statements
from experiments.rundir import DEFAULT_MEDIUM, AttemptKey, RunDir, answer_text, content_hash, reading, writing
from experiments.stages.probe import json_number
from experiments.stages.render import read_renders, render_stage, row_key
from interp.attention import SPATIAL_WORDS, SPATIAL_WORDS_VERSION, focus_from_mass, spatial_spans

ATTENTION = RunDir.ATTENTION
#: why an attempt has no focus
SKIPS = ("no spatial word in the request", "no top-level drawing statement", "no statement token after the prompt")


@dataclass(frozen=True)
class AttentionSettings:
    """Which attempts and layers the attention-focus stage reads (every valid attempt and every block by default)."""

    task: str = "layout"  #: the task whose attempts are read (the paper's maps are of layout generations)
    words: tuple[str, ...] = SPATIAL_WORDS  #: the spatial words (default: interp/data/spatial_words.json)
    layers: tuple[int, ...] | None = None  #: blocks whose attention pattern is read (None: every block)
    samples: tuple[int, ...] | None = None  #: which samples are read (None: greedy and sampled)
    limit: int | None = None  #: only the first N valid attempts per model (None: all)
    chunk: int = 8  #: attempts per append (a resumable unit of writing)
    n_boot: int = 2000  #: prompt-clustered bootstrap resamples of the mean's CI (the table)
    seed: int = 0  #: seed of those resamples

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sources(run: Any, model: str, s: AttentionSettings) -> list[dict[str, Any]]:
    """The valid attempts of `model` on the task, on the paper's canvas, in generation order."""
    rd = reading(run)
    renders = read_renders(rd)
    wanted = None if s.samples is None else set(s.samples)
    out = []
    for r in rd.rows(RunDir.GENERATIONS):
        key = AttemptKey.of(r)
        if (key.model != model or key.task != s.task or key.medium != DEFAULT_MEDIUM
                or (wanted is not None and key.sample not in wanted)):
            continue
        x = renders.get(row_key(r))
        if x is not None and x["outcome"] == "ok":
            out.append(r)
            if s.limit and len(out) >= s.limit:
                break
    return out


def attention_stage(rt: Any, run: Any, model: str | None = None, s: AttentionSettings = AttentionSettings(),
                    progress: Callable[[int], None] | None = None, shard: tuple[int, int] | None = None) -> dict[str, Any]:
    """Focus rows for every source attempt of `model` into RUN/attention.jsonl; returns counts.

    A model error (no TransformerBridge adapter for the architecture, out of memory on one attempt) is
    counted in `errors` with its sentence in `error`; the attempts it hit get no row, so a rerun retries them."""
    with writing(run) as rd:
        return _attention(rt, rd, model or rt.info.name, s, progress, shard)


def _attention(rt: Any, rd: RunDir, model: str, s: AttentionSettings, progress: Callable[[int], None] | None,
               shard: tuple[int, int] | None) -> dict[str, Any]:
    from interp.models import ModelError

    layers = list(range(rt.info.n_layers)) if s.layers is None else list(s.layers)
    # rows resume only under the same settings: another command's would drop the study's rows as stale (with no
    # row of this model and task yet, there is nothing to drop: new settings are recorded)
    fresh = not any(r.get("model") == model and r.get("task") == s.task for r in rd.rows(ATTENTION))
    rd.record_config(f"attention/{model}/{s.task}", {**s.as_dict(), "layers": layers}, fresh=fresh)
    render_stage(rd)
    todo = sources(rd, model, s)
    if todo:
        try:
            rt.bridge  # noqa: B018 -- boots it once: without an adapter, one sentence rather than one per attempt
        except ModelError as e:
            return {"attempts": len(todo), "written": 0, "skipped_done": 0, "stale": 0, "errors": len(todo), "error": str(e)}
    rows = rd.rows(ATTENTION)
    inputs: dict[AttemptKey, str] = {}
    built: dict[AttemptKey, Any] = {}
    for r in todo:
        key = AttemptKey.of(r)
        b = _prompt(rt, rd, key)
        built[key] = b
        inputs[key] = content_hash(b.text, answer_text(r), sorted(s.words), layers, rt.info.weights_digest)
    stale = [x for x in rows if AttemptKey.of(x) in inputs and inputs[AttemptKey.of(x)] != x.get("input")]
    if stale:
        drop = {AttemptKey.of(x) for x in stale}
        rd.write_rows(ATTENTION, [x for x in rows if AttemptKey.of(x) not in drop])
        rows = rd.rows(ATTENTION)
    done = {AttemptKey.of(x) for x in rows}
    counts: dict[str, Any] = {"attempts": len(todo), "written": 0, "skipped_done": 0, "stale": len(stale), "errors": 0}
    pending: list[dict[str, Any]] = []
    for i, r in enumerate(todo):
        key = AttemptKey.of(r)
        if (shard is not None and i % shard[1] != shard[0]) or key in done:
            counts["skipped_done"] += key in done
            if progress:
                progress(1)
            continue
        try:
            focus = attempt_focus(rt, built[key], r, s.words, layers)
        except ModelError as e:
            # one attempt (out of memory on a long one) never stops the stage; no row, so a rerun retries it
            counts["errors"] += 1
            counts["error"] = str(e)
            if progress:
                progress(1)
            continue
        pending.append({**key.fields(), **focus, "layers": layers, "words_version": SPATIAL_WORDS_VERSION, "input": inputs[key]})
        if len(pending) >= s.chunk:
            rd.append(ATTENTION, pending)
            counts["written"] += len(pending)
            pending = []
        if progress:
            progress(1)
    rd.append(ATTENTION, pending)
    counts["written"] += len(pending)
    return counts


def _prompt(rt: Any, rd: RunDir, key: AttemptKey) -> Any:
    from experiments.cuts import protocol_from_label
    from interp.prompts import build

    return build(rd.prompt_item(key.task, key.prompt_id), protocol_from_label(key.protocol, key.medium), rt.tokenizer,
                 chat=rt.info.chat)


def attempt_focus(rt: Any, built: Any, row: dict[str, Any], words: tuple[str, ...], layers: list[int],
                  spatial: list[int] | None = None) -> dict[str, Any]:
    """The row fields of one attempt: its focus per layer and overall, or the reason it has none.

    `spatial` overrides the spatial-word token positions (tests use it to show that a misplaced word is
    caught); by default they are the prompt tokens overlapping the request's spatial words."""
    start, end = built.request
    found = spatial_spans(built.text[start:end], words)
    spans = [(start + a, start + b) for a, b, _ in found]
    words_found = [w for _, _, w in found]
    positions = built.tokens_in(spans) if spatial is None else list(spatial)
    base = {"n_prompt_tokens": len(built.tokens), "spatial_words": words_found, "n_spatial_tokens": len(positions)}
    if not positions:
        return {**base, "status": "skipped", "reason": SKIPS[0]}
    n = len(built.tokens)
    ids, per_stmt = statement_queries(rt.tokenizer, row, n)
    if not per_stmt:
        return {**base, "status": "skipped", "reason": SKIPS[1]}
    queries = sorted({q for qs in per_stmt for q in qs})
    if not queries:
        return {**base, "status": "skipped", "reason": SKIPS[2], "n_statements": len(per_stmt)}
    at = {q: i for i, q in enumerate(queries)}
    mass = rt.attention_mass(list(built.tokens) + ids, queries, [positions, list(range(n))], layers).numpy()
    f = focus_from_mass(mass, [[at[q] for q in qs] for qs in per_stmt])
    return {**base, "status": "ok", "n_statements": len(per_stmt), "n_query_tokens": f.n_queries,
            "focus": json_number(f.focus), "focus_by_layer": [json_number(v) for v in f.by_layer],
            "share_by_layer": [json_number(v) for v in f.share_by_layer]}


def statement_queries(tokenizer: Any, row: dict[str, Any], n_prompt: int) -> tuple[list[int], list[list[int]]]:
    """The attempt's generated text re-tokenised (its ids, to follow the prompt's `n_prompt` tokens) and, per
    top-level drawing statement, the absolute positions of the tokens that overlap its characters.

    The stored prefix (the prompt's open fence) is already the prompt's last line, so only the text after
    it is tokenised; statement offsets, which count from the start of prefix + text, are shifted by it."""
    answer = answer_text(row)
    plen = len(row.get("prefix", ""))
    stmts = statements(answer)
    enc = tokenizer(answer[plen:], add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    per_stmt = []
    for st in stmts:
        a, b = st.start - plen, st.end - plen
        per_stmt.append([n_prompt + i for i, (x, y) in enumerate(offsets) if y > x and x < b and y > a])
    return ids, per_stmt


# --------------------------------------------------------------------------- the table


def attention_table(run: Any, n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Per model and task: the distribution over attempts of the attempt focus (mean, median, quartiles,
    a prompt-clustered bootstrap CI of the mean: prompts resampled, each with all its attempts), the
    skipped attempts by reason, and the per-layer profile (mean over attempts of each layer's focus)."""
    from interp.probes import bootstrap_counts

    rows = reading(run).rows(ATTENTION)
    out = []
    for model, task in sorted({(r["model"], r["task"]) for r in rows}):
        mine = [r for r in rows if (r["model"], r["task"]) == (model, task)]
        ok = [r for r in mine if r["status"] == "ok" and r["focus"] is not None]
        skipped: dict[str, int] = {}
        for r in mine:
            if r["status"] != "ok":
                skipped[r["reason"]] = skipped.get(r["reason"], 0) + 1
        row: dict[str, Any] = {"model": model, "task": task, "attempts": len(ok), "skipped": skipped,
                               "prompts": len({r["prompt_id"] for r in ok}), "n_boot": n_boot, "seed": seed}
        if ok:
            f = np.array([r["focus"] for r in ok])
            by_prompt: dict[str, list[float]] = {}
            for r in ok:
                by_prompt.setdefault(r["prompt_id"], []).append(r["focus"])
            keys = sorted(by_prompt)
            sums = np.array([sum(by_prompt[k]) for k in keys])
            cnts = np.array([len(by_prompt[k]) for k in keys], dtype=float)
            w = bootstrap_counts(len(keys), n_boot, seed)
            means = (w @ sums) / (w @ cnts)
            lo, hi = np.quantile(means, [0.025, 0.975])
            layers = ok[0]["layers"]
            prof = np.array([[np.nan if v is None else v for v in r["focus_by_layer"]] for r in ok if r["layers"] == layers])
            with np.errstate(invalid="ignore"):
                counts = np.isfinite(prof).sum(axis=0)
                profile = np.where(counts > 0, np.nansum(prof, axis=0) / np.maximum(counts, 1), np.nan)
            row.update(mean=json_number(f.mean()), median=json_number(np.median(f)), q1=json_number(np.quantile(f, 0.25)), q3=json_number(np.quantile(f, 0.75)),
                       ci=[json_number(lo), json_number(hi)], layers=layers, profile=[json_number(v) for v in profile],
                       peak_layer=int(layers[int(np.nanargmax(profile))]) if np.isfinite(profile).any() else None)
        out.append(row)
    return out


def summarise_attention(run: Any, n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Write RUN/attention_table.json and the per-layer profile plot RUN/attention.png; returns the table."""
    with writing(run) as rd:
        table = attention_table(rd, n_boot, seed)
        if table:
            rd.write_json(RunDir.ATTENTION_TABLE, table)
            _plot(rd, table)
        return table


def _plot(rd: RunDir, table: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for t in (t for t in table if t.get("profile")):
        depth = np.asarray(t["layers"], dtype=float) / max(1, max(t["layers"]))
        ax.plot(depth, [np.nan if v is None else v for v in t["profile"]], marker="o", ms=3,
                label=f"{t['model']} ({t['task']}, {t['attempts']} attempts)")
    ax.axhline(1.0, ls="--", color="gray", label="uniform attention over the prompt")
    ax.set_xlabel("layer / last layer")
    ax.set_ylabel("focus on spatial words (mean over attempts)")
    ax.set_title("Attention focus of the drawing statements on the prompt's spatial words")
    ax.legend(fontsize=7)
    fig.tight_layout()
    rd.save_figure(fig, RunDir.ATTENTION_PLOT)
    plt.close(fig)


__all__ = ["AttentionSettings", "attempt_focus", "attention_stage", "attention_table", "sources", "statement_queries",
           "summarise_attention"]
