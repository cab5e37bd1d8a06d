"""The study's code path checked on a GPU in one run: what perf/gpu_check.sh runs (docs/runtime.md, "Checked on a GPU").

    bash perf/gpu_check.sh                          # on the device machine (carry .gpu/load-N: perf/gpu_pack.sh)
    GPU_CHECK_DEVICE=cpu bash perf/gpu_check.sh     # the dry run: the same checks on the CPU, smaller sizes

Every check compares real outputs of the runtime with a reference computed in the same run and adds rows
(check, model, dtype, result, tolerance, status) to `$OUT/gpu_check.json` and `$OUT/gpu_check.md`, written
again after each row, so a run cut short still leaves what it measured. The process exits 0 only if no
row failed. The checks, on SmolLM2 135M, Gemma 3 270M and two organisms (xor-planner, tracker):
- greedy generation (float32 and bf16 on the device) equals Hugging Face `generate` on the same model at
  every batch size in SIZES, and each batch equals its rows generated one at a time;
- capture (bf16 on the device) against float32 on the CPU, on the same prompts and the study's three
  positions: the largest relative L2 error of one residual vector, per layer;
- an identity patch (the patch stage's `replace_last` writing the activation's own values back, and an
  identity function on two rows) and zero steering change no token and no entropy bit (bf16, device);
  a large steering vector must change the tokens, or the hooks did not act and the row fails;
- `continue_batch` on a sliding-window model (Gemma 3) with a prefix longer than its window equals
  generating each row alone;
- tokens/s of the runtime, plain and with one patching hook, against `generate` at b = 1, 8, 64, side by
  side (perf/bench_generation.py's contenders, rounds alternating), the goal being >= 0.9x; and the
  generate stage at the paper preset's batch size with the GPU's utilisation (nvidia-smi) beside it;
- the tests marked `gpu` (tests/interp/test_cuda.py), in a subprocess;
- `ambench run --preset organisms --device cuda` against the same command on the device machine's CPU,
  both started in the background (on separate cores) while the rest runs: the same verdicts.

Token equality is exact, with one allowance stated in TOLERANCES: a row may first differ from its
reference at a step where the reference's two best tokens are within the dtype's rounding of each other
(a near tie: bf16 logits carry 8 significant bits, and two batch sizes run different GEMM kernels), and
the row says so. A first difference anywhere else fails.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EMBEDDED_MODELS = ("smollm2-135m-instruct", "gemma3-270m")
ORGANISM_MODELS = ("organism:xor-planner", "organism:tracker")
REDUCED_PROMPTS = 24  #: held-out translator prompts of the dry run's organisms study (organisms_reduced)


@dataclass(frozen=True)
class Sizes:
    """How much each check runs: the device's sizes, and the dry run's (2 CPU cores, about 2 minutes)."""

    batches: tuple[int, ...]  #: batch sizes of the generation checks
    new_tokens: int  #: greedy tokens per row in the generation and no-op checks
    short_prompts: bool  #: the request alone (through the chat template, or as plain text for a base model)
    #: instead of the study's prompt of 500-940 tokens (system prompt, palette, examples). Not a cut of the study's
    #: prompt: without its first token Gemma 3 is another model (bf16 capture error 0.095 against 0.017), and a
    #: spliced SmolLM2 prompt had one vector at 0.17 (both measured); the organisms' prompts are short already
    bench_batches: tuple[int, ...]  #: batch sizes of the throughput rows
    bench_tokens: int  #: new tokens per throughput run
    bench_repeats: int  #: timed rounds per contender (median reported)
    capture_prompts: int  #: prompts of the capture check
    continue_tokens: int  #: tokens per row of the continuation check
    continue_suffixes: int  #: suffixes (of different lengths) of the continuation check
    continue_dtypes: tuple[str, ...]  #: dtypes of the continuation check
    continue_beyond: int | None  #: cut the continuation prompt to window + N tokens (None: the whole 937-token prompt)
    stage_model: str  #: the model of the generate-stage speed row
    stage_prompts: int  #: layout prompts of the generate-stage speed row
    stage_tokens: int  #: token budget per attempt there
    organisms: str  #: full (`ambench run --preset organisms`) or reduced (part translator on REDUCED_PROMPTS prompts, see organisms_reduced)
    pytest_select: str | None  #: `-k` expression for the gpu tests (None: all)
    deadline_s: float  #: seconds after which checks not yet started are recorded as not run


SIZES = {
    "cuda": Sizes(batches=(1, 8, 64), new_tokens=32, short_prompts=False, bench_batches=(1, 8, 64), bench_tokens=64,
                  bench_repeats=3, capture_prompts=16, continue_tokens=8, continue_suffixes=3,
                  continue_dtypes=("float32", "bfloat16"), continue_beyond=None, stage_model="smollm2-135m-instruct",
                  stage_prompts=32, stage_tokens=128, organisms="full",
                  pytest_select=None, deadline_s=400),
    "cpu": Sizes(batches=(1, 3), new_tokens=3, short_prompts=True, bench_batches=(1,), bench_tokens=3, bench_repeats=1,
                 capture_prompts=2, continue_tokens=2, continue_suffixes=2, continue_dtypes=("float32",), continue_beyond=12,
                 stage_model="organism:xor-planner", stage_prompts=16, stage_tokens=64, organisms="reduced",
                 pytest_select="llama or default", deadline_s=900),
}


@dataclass(frozen=True)
class Tolerances:
    """What each check allows, and why."""

    #: a first difference between two greedy rows counts as a near tie when, in a batch-1 pass of the same
    #: model over the reference's tokens so far, both tokens' logits lie within this share of the best logit's
    #: magnitude (at least 1) of the best: bf16 keeps 8 significant bits, so 2^-6 is 2-4 units in the last
    #: place (exact ties are common there: logits of ~20 are spaced 0.125 apart); float32 2^-16
    tie_rel: dict[str, float] = field(default_factory=lambda: {"float32": 2.0 ** -16, "bfloat16": 2.0 ** -6,
                                                               "float16": 2.0 ** -8})
    #: capture in bf16 on the device against float32 on the CPU, per layer: ||A - B|| / ||B|| over all the
    #: layer's captured vectors together (the layer's error), at most `capture_rel` at every layer; and the
    #: largest of one vector's own ||a - b|| / ||b||, at most `capture_vector_rel`. Measured on the CPU (bf16
    #: against float32, the study's prompts and positions): one vector's error up to 0.021 on SmolLM2 (rising
    #: with depth from 0.0015), 0.017 on Gemma 3, 0.0085 on xor-planner; on the dry run's short spliced prompts
    #: one SmolLM2 vector reached 0.17 (a small vector left after cancellation). A bug that reads the wrong
    #: row, position or layer gives errors of order 1 in both.
    capture_rel: float = 0.05
    capture_vector_rel: float = 0.25
    #: continuation vs generating alone: largest difference of one step's entropy (nats); float32 as the
    #: CPU test (test_real_models), bf16 from its logits' rounding (a first reading, to be confirmed on a GPU)
    entropy_abs: dict[str, float] = field(default_factory=lambda: {"float32": 1e-4, "bfloat16": 5e-2, "float16": 2e-2})
    speed_goal: float = 0.9  #: runtime tokens/s over Hugging Face generate's, at every batch size (the issue's goal)


TOLERANCES = Tolerances()


# --------------------------------------------------------------------------- rows and the report


@dataclass
class Row:
    check: str
    model: str
    dtype: str
    result: str
    tolerance: str
    status: str  #: pass | fail | info (a measurement with no pass/fail: timings on a CPU, utilisation)
    seconds: float = 0.0
    values: dict[str, Any] = field(default_factory=dict)


class Report:
    """The rows so far, written to OUT as JSON and Markdown after every row."""

    def __init__(self, out: Path, meta: dict[str, Any], deadline_s: float) -> None:
        self.out = out
        self.meta = meta
        self.rows: list[Row] = []
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + deadline_s
        out.mkdir(parents=True, exist_ok=True)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"[gpu_check] {row.status.upper():4} {row.check} | {row.model} | {row.dtype} | {row.result}", flush=True)
        self.write()

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.status != "fail" for r in self.rows)

    def late(self) -> bool:
        return time.perf_counter() > self.deadline

    def write(self) -> None:
        self.meta["seconds"] = round(time.perf_counter() - self.t0, 1)
        data = {"ok": self.ok, "meta": self.meta, "rows": [asdict(r) for r in self.rows]}
        _atomic(self.out / "gpu_check.json", json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
        _atomic(self.out / "gpu_check.md", markdown(self.meta, self.rows, self.ok))


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def markdown(meta: dict[str, Any], rows: Sequence[Row], ok: bool) -> str:
    def cell(s: Any) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    head = [f"# GPU check: {'every row passes' if ok else 'FAILED'}", "",
            f"device {meta.get('device_name')}, torch {meta.get('torch')}, transformers {meta.get('transformers')}, "
            f"python {meta.get('python')}; {meta.get('seconds')} s; sizes: {meta.get('sizes_name')}", ""]
    if meta.get("not_checked"):
        head += ["not checked: " + "; ".join(f"{k} ({v})" for k, v in meta["not_checked"].items()), ""]
    table = ["| check | model | dtype | result | tolerance | status | s |", "| --- | --- | --- | --- | --- | --- | --- |"]
    table += [f"| {cell(r.check)} | {cell(r.model)} | {cell(r.dtype)} | {cell(r.result)} | {cell(r.tolerance)} | "
              f"{r.status} | {r.seconds:.1f} |" for r in rows]
    return "\n".join(head + table) + "\n"


def guarded(rep: Report, check: str, model: str, dtype: str, fn: Callable[[], list[Row]]) -> None:
    """Run one check; an exception or a passed deadline is a failed row with one sentence, never the end of the run."""
    if rep.late():
        rep.add(Row(check, model, dtype, f"not run: the deadline of {rep.deadline - rep.t0:.0f} s had passed", "-", "fail"))
        return
    t = time.perf_counter()
    try:
        rows = fn()
    except Exception as e:  # noqa: BLE001 - every failure becomes a row
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0][:300]
        rows = [Row(check, model, dtype, f"error: {type(e).__name__}: {first}", "-", "fail")]
    took = time.perf_counter() - t
    for r in rows:
        r.seconds = r.seconds or round(took / len(rows), 1)
        rep.add(r)


# --------------------------------------------------------------------------- judging (pure: tested on perturbed inputs)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts at the shorter length), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def judge_tokens(got: Sequence[Sequence[int]], want: Sequence[Sequence[int]],
                 margin_of: Callable[[int, int, int, int], float], tie_rel: float) -> tuple[bool, str, dict[str, Any]]:
    """Rows equal their references, or first differ at a near tie: margin_of(row, step, got, want) is how far
    below the best logit the lower of the two tokens lies, relative to the best logit (Tolerances.tie_rel)."""
    if len(got) != len(want):
        return False, f"{len(got)} rows against {len(want)} references", {}
    exact, ties, bad = 0, [], []
    for i, (g, w) in enumerate(zip(got, want)):
        d = first_divergence(g, w)
        if d is None:
            exact += 1
            continue
        if d >= min(len(g), len(w)):
            bad.append({"row": i, "step": d, "note": f"lengths {len(g)} and {len(w)}"})
            continue
        rel = margin_of(i, d, g[d], w[d])
        entry = {"row": i, "step": d, "got": g[d], "want": w[d], "gap_rel": rel}
        (ties if rel <= tie_rel else bad).append(entry)
    text = f"{exact}/{len(got)} identical"
    if ties:
        text += f", {len(ties)} first differ at a near tie (largest gap {max(t['gap_rel'] for t in ties):.1e})"
    if bad:
        b = bad[0]
        why = b.get("note") or f"token {b['got']} vs {b['want']}, {b['gap_rel']:.1e} below the best logit"
        text += f", {len(bad)} differ (row {b['row']} at step {b['step']}: {why})"
    return not bad, text, {"identical": exact, "near_ties": ties, "differ": bad}


def judge_capture(layer_rel: Sequence[float], vector_rel: Sequence[float], tol: float, vector_tol: float) -> tuple[bool, str]:
    """Per layer: the layer's relative error (all its vectors together) and its worst single vector's."""
    worst = max(range(len(layer_rel)), key=lambda i: layer_rel[i])
    worst_v = max(range(len(vector_rel)), key=lambda i: vector_rel[i])
    # NaN compares false: a layer with NaN fails
    ok = all(0 <= x <= tol for x in layer_rel) and all(0 <= x <= vector_tol for x in vector_rel)
    return ok, (f"layer error max {layer_rel[worst]:.2e} at layer {worst} of {len(layer_rel) - 1} (layer 0: "
                f"{layer_rel[0]:.1e}, last: {layer_rel[-1]:.1e}); one vector's max {vector_rel[worst_v]:.2e} at layer {worst_v}")


def judge_speed(ratios: dict[str, float], goal: float, gated: bool) -> str:
    if not gated:
        return "info"
    return "pass" if all(r >= goal for r in ratios.values()) else "fail"


def judge_verdicts(device_rows: Sequence[dict[str, Any]], reference_rows: Sequence[dict[str, Any]]) -> tuple[bool, str, dict[str, Any]]:
    """The same (organism, method) rows with the same `recovered` verdict; an empty table never passes."""
    dev = {(r["organism"], r["method"]): r.get("recovered") for r in device_rows}
    ref = {(r["organism"], r["method"]): r.get("recovered") for r in reference_rows}
    if not ref:
        return False, "the reference run produced no verdicts", {}
    differ = sorted(k for k in set(dev) | set(ref) if dev.get(k, "absent") != ref.get(k, "absent"))
    recovered = sum(1 for v in ref.values() if v is True)
    text = f"{len(ref) - len(differ)}/{len(ref)} verdicts the same ({recovered} recovered on the reference)"
    if differ:
        k = differ[0]
        text += f"; {len(differ)} differ, e.g. {k[0]} / {k[1]}: {dev.get(k, 'absent')} vs reference {ref.get(k, 'absent')}"
    table = {f"{k[0]} / {k[1]}": {"device": dev.get(k, "absent"), "reference": ref.get(k, "absent")} for k in sorted(set(dev) | set(ref))}
    return not differ, text, {"verdicts": table}


# --------------------------------------------------------------------------- the model side


def available(name: str) -> str | None:
    """None when `name` can be loaded here, else why not (one sentence)."""
    from interp.models import EMBEDDED, ModelError, gguf_path

    if name.startswith("organism:"):
        from interp.organisms import committed, parse

        return None if committed(parse(name)[0]) is not None else "its committed weights are missing or stale"
    try:
        gguf_path(EMBEDDED[name])
    except ModelError as e:
        return f"{e} (on the device: pack it with perf/gpu_pack.sh --models ...)"
    return None


_LOADED: dict[tuple[str, str, str], Any] = {}


def load(name: str, device: str, dtype: str) -> Any:
    """The runtime of `name` on `device` in `dtype`, loaded once (drop(name) frees it)."""
    from interp.runtime import Runtime

    key = (name, device, dtype)
    if key not in _LOADED:
        _LOADED[key] = Runtime.load(name, device=device, dtype=dtype)
    return _LOADED[key]


def drop(name: str) -> None:
    for key in [k for k in _LOADED if k[0] == name]:
        del _LOADED[key]


def prompts_for(rt: Any, name: str, n: int, short: bool) -> tuple[list[list[int]], list[list[int]]]:
    """n prompts the study would build for this model (auto protocol) and their capture positions (Sizes.short_prompts)."""
    from interp.prompts import POSITIONS, Protocol, build, layout_items, load_prompts, translation_items

    if name.startswith("organism:"):
        from interp.organisms import WEIGHTS

        items = load_prompts(WEIGHTS / name.split(":", 1)[1] / "prompts.jsonl")
    else:  # the short form takes the layout requests (one sentence each); the study's prompts, translation first
        items = layout_items() + translation_items() if short else translation_items() + layout_items()
    if len(items) < n:
        raise ValueError(f"{name} has {len(items)} prompts, fewer than the {n} the check needs")
    toks, pos = [], []
    for it in items[:n]:
        if short and not name.startswith("organism:"):
            if rt.info.chat:
                t = list(rt.tokenizer.apply_chat_template([{"role": "user", "content": it.text}], add_generation_prompt=True,
                                                          tokenize=True, return_dict=True)["input_ids"])
            else:
                t = list(rt.tokenizer(it.text)["input_ids"])
            pos.append([len(t) // 3, 2 * len(t) // 3, len(t) - 1])
        else:
            b = build(it, Protocol("auto"), rt.tokenizer, chat=rt.info.chat)
            t = list(b.tokens)
            pos.append([b.positions[k] for k in POSITIONS])
        toks.append(t)
    return toks, pos


def stop_ids(rt: Any) -> set[int]:
    """Every id that ends an answer for the runtime or for `generate` (which stops at the config's EOS even when
    its generation config has none: seen on Gemma 3 with transformers 5.23)."""
    ids = set(rt.stop_ids)
    for src in (rt.model.generation_config, rt.model.config):
        e = getattr(src, "eos_token_id", None)
        ids |= set(e) if isinstance(e, (list, tuple)) else ({e} if e is not None else set())
    return ids


def until_stop(rows: Sequence[Sequence[int]], stops: set[int]) -> list[list[int]]:
    """Each row up to and including its first stop token (what follows is padding in `generate`'s output)."""
    out = []
    for r in rows:
        cut = next((i + 1 for i, t in enumerate(r) if t in stops), len(r))
        out.append(list(r[:cut]))
    return out


def hf_greedy(rt: Any, prompts: Sequence[Sequence[int]], tokens: int) -> list[list[int]]:
    """Hugging Face `generate` on the runtime's own model: greedy, at most `tokens` new tokens, left padded."""
    import torch

    ids, mask, _ = rt.pad(prompts)
    gc = copy.deepcopy(rt.model.generation_config)
    gc.eos_token_id, gc.max_new_tokens, gc.min_new_tokens, gc.do_sample, gc.pad_token_id = None, tokens, None, False, rt.pad_id
    gc.temperature = gc.top_p = gc.top_k = None
    with torch.inference_mode():
        out = rt.model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    return out[:, ids.shape[1]:].tolist()


def margin_fn(rt: Any, prompts: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> Callable[[int, int, int, int], float]:
    """margin_of for judge_tokens: one batch-1 pass over prompt + the reference's first `step` tokens."""

    import inspect

    extra = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(rt.model.forward).parameters else {}

    def margin_of(row: int, step: int, a: int, b: int) -> float:
        import torch

        ids = torch.tensor([list(prompts[row]) + list(reference[row][:step])], dtype=torch.long, device=rt.device)
        with torch.inference_mode():
            logits = rt.model(input_ids=ids, **extra).logits[0, -1].float()
        best = float(logits.max())
        return (best - min(float(logits[a]), float(logits[b]))) / max(1.0, abs(best))

    return margin_of


def greedy_rule(tokens: int) -> Any:
    from interp.runtime import StopRule

    return StopRule(max_new_tokens=tokens, eos=False, fence=False)


def check_generation(rt: Any, name: str, prompts: list[list[int]], sz: Sizes) -> list[Row]:
    from interp.runtime import Sampling

    dtype, tie = rt.info.dtype, TOLERANCES.tie_rel[rt.info.dtype]
    rule = greedy_rule(sz.new_tokens)
    n = max(sz.batches)
    alone = [rt.generate([p], [Sampling()], rule)[0].tokens for p in prompts[:n]]
    stops = stop_ids(rt)
    by_hf, by_alone = [], []
    for b in sz.batches:
        got = [g.tokens for g in rt.generate(prompts[:b], [Sampling()] * b, rule)]
        hf = until_stop(hf_greedy(rt, prompts[:b], sz.new_tokens), stops)
        by_hf.append((b, *judge_tokens(until_stop(got, stops), hf, margin_fn(rt, prompts, hf), tie)))
        by_alone.append((b, *judge_tokens(got, alone[:b], margin_fn(rt, prompts, alone), tie)))
    tol = f"token for token, up to the first stop token against HF (near ties <= {tie:.1e} of the top logit allowed)"
    rows = []
    for check, res in (("greedy = HF generate", by_hf), ("batched = one at a time", by_alone)):
        rows.append(Row(check, name, dtype, "; ".join(f"b={b}: {text}" for b, _, text, _ in res), tol,
                        "pass" if all(ok for _, ok, _, _ in res) else "fail",
                        values={f"b{b}": v for b, _, _, v in res} | {"new_tokens": sz.new_tokens}))
    return rows


def check_capture(dev: Any, ref: Any, name: str, prompts: list[list[int]], positions: list[list[int]]) -> list[Row]:
    a = dev.capture(prompts, positions)  # [prompt, site, position, d_model], float32 on the CPU
    r = ref.capture(prompts, positions)
    diff = (a - r).transpose(0, 1).reshape(a.shape[1], -1)
    layer_rel = (diff.norm(dim=-1) / r.transpose(0, 1).reshape(a.shape[1], -1).norm(dim=-1).clamp_min(1e-30)).tolist()
    vector_rel = ((a - r).norm(dim=-1) / r.norm(dim=-1).clamp_min(1e-30)).amax(dim=(0, 2)).tolist()
    tol, vtol = TOLERANCES.capture_rel, TOLERANCES.capture_vector_rel
    ok, text = judge_capture(layer_rel, vector_rel, tol, vtol)
    return [Row(f"capture {dev.info.device} {dev.info.dtype} vs cpu float32", name, dev.info.dtype,
                f"{text}; {len(prompts)} prompts x 3 positions", f"layer <= {tol}, one vector <= {vtol} (relative L2)",
                "pass" if ok else "fail",
                values={"layer_rel": [round(x, 6) for x in layer_rel], "vector_rel": [round(x, 6) for x in vector_rel]})]


def check_noops(rt: Any, name: str, prompts: list[list[int]], sz: Sizes) -> list[Row]:
    import numpy as np

    from hooks.patch import replace_last
    from hooks.steer import add_direction
    from interp.runtime import Sampling

    n, d = rt.info.n_layers, rt.info.d_model
    rule = greedy_rule(sz.new_tokens)
    toks = prompts[0]
    prefix, suffix = toks[:-4], toks[-4:]
    smp = [Sampling(), Sampling(1.0, 5)]  # a greedy row and a sampled one: both paths through _decode

    def same(a: Any, b: Any) -> bool:
        return [g.tokens for g in a] == [g.tokens for g in b] and [g.entropy for g in a] == [g.entropy for g in b]

    def own(act: Any, hook: Any = None) -> Any:  # the patch stage's hook, writing the activation's own values
        return replace_last(act[0, -len(suffix):, :].clone())(act, hook)

    layers = sorted({0, n // 2, n - 1})
    base2 = rt.continue_batch(prefix, [suffix, suffix[:2]], smp, rule)
    base1 = rt.continue_batch(prefix, [suffix], smp[:1], rule)
    patch_bad = []
    for layer in layers:
        site = f"blocks.{layer}.hook_resid_pre"
        if not same(base2, rt.continue_batch(prefix, [suffix, suffix[:2]], smp, rule, prefill_hooks=[(site, lambda a, hook: a)])):
            patch_bad.append(f"identity at layer {layer}")
        if not same(base1, rt.continue_batch(prefix, [suffix], smp[:1], rule, prefill_hooks=[(site, own)])):
            patch_bad.append(f"own values at layer {layer}")
    plain = rt.generate(prompts[:2], smp, rule)
    sites = [f"blocks.{layer}.hook_resid_pre" for layer in layers] + [f"blocks.{n - 1}.hook_resid_post"]
    steer_bad = [s for s in sites if not same(plain, rt.generate(prompts[:2], smp, rule, hooks=[(s, add_direction(np.zeros(d)))]))]
    # the control: a vector 10x the residual's norm at the middle block must change the tokens
    scale = float(rt.capture([toks], [[len(toks) - 1]], layers=[n // 2])[0, 0, 0].norm())
    push = np.random.default_rng(0).standard_normal(d)
    push *= 10 * max(scale, 1.0) / np.linalg.norm(push)
    pushed = rt.generate(prompts[:2], smp, rule, hooks=[(sites[len(layers) // 2], add_direction(push))])
    control = [g.tokens for g in pushed] != [g.tokens for g in plain]
    return [
        Row("identity patch = no patch", name, rt.info.dtype,
            f"{2 * len(layers) - len(patch_bad)}/{2 * len(layers)} cases bit for bit (layers {layers}; identity on 2 rows, "
            "replace_last with its own values on 1)" + (f"; differ: {', '.join(patch_bad)}" if patch_bad else ""),
            "tokens and entropies bit for bit", "fail" if patch_bad else "pass", values={"differ": patch_bad}),
        Row("zero steering = no steering", name, rt.info.dtype,
            f"{len(sites) - len(steer_bad)}/{len(sites)} sites bit for bit; control (10x-norm vector) changed the tokens: "
            f"{'yes' if control else 'NO'}" + (f"; differ: {', '.join(steer_bad)}" if steer_bad else ""),
            "tokens and entropies bit for bit; the control must change tokens", "pass" if not steer_bad and control else "fail",
            values={"differ": steer_bad, "control_changed": control}),
    ]


def window_of(rt: Any) -> int | None:
    cfg = rt.model.config
    types = getattr(cfg, "layer_types", None) or []
    w = getattr(cfg, "sliding_window", None)
    return int(w) if w and (not types or "sliding_attention" in types) else None


def check_continuation(rt: Any, name: str, sz: Sizes) -> list[Row]:
    """Suffixes of different lengths after a prefix longer than the window, against each row alone."""
    import numpy as np

    from interp.prompts import Protocol, build, translation_items
    from interp.runtime import Sampling

    window = window_of(rt)
    toks = list(build(translation_items(["s000"])[0], Protocol("completion", 2), rt.tokenizer, chat=False).tokens)
    if sz.continue_beyond is not None:
        toks = toks[: window + sz.continue_beyond]
    if len(toks) - 6 <= window:
        raise ValueError(f"the prompt ({len(toks)} tokens) is not longer than the window ({window})")
    prefix = toks[:-6]
    suffixes = [toks[-6:-5], toks[-6:-3], toks[-6:]][: sz.continue_suffixes]
    rule = greedy_rule(sz.continue_tokens)
    shared = rt.continue_batch(prefix, suffixes, [Sampling()] * len(suffixes), rule)
    alone = [rt.generate([prefix + s], [Sampling()], rule)[0] for s in suffixes]
    full = [prefix + s for s in suffixes]
    ok, text, vals = judge_tokens([g.tokens for g in shared], [g.tokens for g in alone],
                                  margin_fn(rt, full, [g.tokens for g in alone]), TOLERANCES.tie_rel[rt.info.dtype])
    steps = [(i, j) for i in range(len(suffixes)) for j in range(min(len(shared[i].entropy), len(alone[i].entropy)))]
    ent = max((abs(shared[i].entropy[j] - alone[i].entropy[j]) for i, j in steps), default=float("nan"))
    tol = TOLERANCES.entropy_abs[rt.info.dtype]
    ent_ok = bool(np.isfinite(ent)) and ent <= tol
    return [Row(f"continuation = alone (window {window})", name, rt.info.dtype,
                f"prefix {len(prefix)} tokens, suffixes {[len(s) for s in suffixes]}: {text}; entropy max diff {ent:.1e}",
                f"tokens as generation; entropy <= {tol:g} nats", "pass" if ok and ent_ok else "fail",
                values=vals | {"entropy_max_abs": ent})]


def check_throughput(rt: Any, name: str, prompts: list[list[int]], sz: Sizes, gated: bool) -> list[Row]:
    import torch

    if str(ROOT / "perf") not in sys.path:
        sys.path.insert(0, str(ROOT / "perf"))
    from bench_generation import contenders, measure

    sync = torch.cuda.synchronize if str(rt.device).startswith("cuda") else (lambda: None)
    rows = []
    for b in sz.bench_batches:
        fns = contenders(rt, rt.model, prompts[:b], sz.bench_tokens, names=("hf", "runtime", "runtime+patch"))
        for fn in fns.values():  # warm-up: kernels chosen, caches allocated, outside the timings
            fn()
        times = measure(fns, sz.bench_repeats, sync)
        tps = {k: b * sz.bench_tokens / statistics.median(v) for k, v in times.items()}
        ratios = {k: tps[k] / tps["hf"] for k in ("runtime", "runtime+patch")}
        rows.append(Row(f"tokens/s b={b} ({sz.bench_tokens} new, median of {sz.bench_repeats})", name, rt.info.dtype,
                        f"HF generate {tps['hf']:.3g}; runtime {tps['runtime']:.3g} ({ratios['runtime']:.2f}x); "
                        f"+ patching hook {tps['runtime+patch']:.3g} ({ratios['runtime+patch']:.2f}x)",
                        f">= {TOLERANCES.speed_goal}x" + ("" if gated else " (goal on a GPU; timings not gated on a CPU)"),
                        judge_speed(ratios, TOLERANCES.speed_goal, gated),
                        values={"tokens_per_s": tps, "ratios": ratios, "seconds": times}))
    return rows


class GpuUse:
    """nvidia-smi sampled every 100 ms in the background (utilisation %, memory MiB)."""

    def __enter__(self) -> "GpuUse":
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
        return self

    def __exit__(self, *exc: Any) -> None:
        self.samples: list[tuple[float, float]] = []
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        for line in out.splitlines():
            try:
                u, m = (float(x) for x in line.split(",")[:2])
                self.samples.append((u, m))
            except ValueError:
                continue

    def summary(self) -> str:
        if self.proc is None:
            return "nvidia-smi not found (no GPU utilisation)"
        if not self.samples:
            return "nvidia-smi gave no samples"
        u = [s[0] for s in self.samples]
        return (f"GPU utilisation mean {statistics.mean(u):.0f}% max {max(u):.0f}% over {len(u)} samples, "
                f"memory used up to {max(s[1] for s in self.samples):.0f} MiB")


def check_stage_speed(rt: Any, name: str, sz: Sizes, work: Path) -> list[Row]:
    from experiments.stages.generate import GenerateSettings, generate_stage
    from experiments.study import PRESETS
    from interp.prompts import layout_items

    bs = int(PRESETS["paper"]["batch_size"])
    items = layout_items()[: sz.stage_prompts]
    s = GenerateSettings(samples=0, temperature=0.7, seed=0, max_new_tokens=sz.stage_tokens, batch_size=bs, protocol="auto")
    count = [0]
    t = time.perf_counter()
    with GpuUse() as use:
        generate_stage(rt, items, work / "stage-speed", s, model=name, on_token=lambda k: count.__setitem__(0, count[0] + k))
    dt = time.perf_counter() - t
    line = f"{count[0]} tokens in {dt:.1f} s = {count[0] / dt:.0f} tok/s ({len(items)} layout prompts, batch {bs}); {use.summary()}"
    print(f"[gpu_check] generate stage: {line}", flush=True)
    return [Row(f"generate stage, paper batch size {bs}", name, rt.info.dtype, line, "printed (no goal)", "info",
                values={"tokens": count[0], "seconds": dt, "gpu_samples": use.samples})]


def check_gpu_tests(device: str, sz: Sizes, work: Path, seconds: float) -> list[Row]:
    import xml.etree.ElementTree as ET

    junit = work / "gpu-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/interp/test_cuda.py", "-p", "no:cacheprovider",
           f"--junitxml={junit}"] + (["-k", sz.pytest_select] if sz.pytest_select else [])
    try:
        done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "AMBENCH_TEST_DEVICE": device}, capture_output=True, text=True,
                              timeout=max(30.0, seconds))
    except subprocess.TimeoutExpired:
        return [Row("tests marked gpu (tests/interp/test_cuda.py)", "tiny models", "float32, bfloat16",
                    f"did not finish in {max(30.0, seconds):.0f} s (the deadline)", "all pass, none skipped", "fail")]
    print(done.stdout[-3000:], done.stderr[-2000:], flush=True)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if junit.is_file():
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {k: int(suite.get(k, 0)) for k in counts}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    ok = done.returncode == 0 and passed > 0 and counts["skipped"] == 0
    tail = (done.stdout.strip().splitlines() or ["no output"])[-1]
    which = f"tiny models, -k '{sz.pytest_select}'" if sz.pytest_select else "tiny models: every paper architecture, every windowed one"
    return [Row("tests marked gpu (tests/interp/test_cuda.py)", which, "float32, bfloat16",
                f"{passed} passed, {counts['failures'] + counts['errors']} failed, {counts['skipped']} skipped on {device} ({tail})",
                "all pass, none skipped", "pass" if ok else "fail", values=counts)]


# --------------------------------------------------------------------------- the organisms


def organisms_command(device: str, dtype: str | None, out: Path, mode: str) -> list[str]:
    if mode == "full":  # the issue's command, unchanged
        cmd = [sys.executable, "-m", "experiments.cli", "run", "--preset", "organisms", "--device", device, "--out", str(out)]
        return cmd + (["--dtype", dtype] if dtype else [])
    return [sys.executable, str(Path(__file__)), "organisms-reduced", "--device", device, "--dtype", dtype or "float32",
            "--out", str(out)]


def organisms_reduced(device: str, dtype: str, out: Path) -> None:
    """The dry run's organisms: part `translator` of the preset, unchanged but for REDUCED_PROMPTS of its prompts and fewer
    draws (2 cores cannot run the whole preset twice in two minutes); its verdicts are real and can differ."""
    from experiments.organisms import known_answers, part_config
    from experiments.study import run_study
    from interp.organisms import WEIGHTS
    from interp.prompts import load_prompts, write_prompts

    out.mkdir(parents=True, exist_ok=True)
    subset = out / "translator-prompts.jsonl"
    write_prompts(load_prompts(WEIGHTS / "translator" / "prompts.jsonl")[:REDUCED_PROMPTS], subset)
    c = part_config("organisms", "translator", dict(
        device=device, dtype=dtype, prompt_files=[str(subset)], samples=0, translation_samples=0, n_perm=19,
        n_perm_layers=0, n_boot=50, intervene_cuts=1, continuations=1, intervene_tokens=8, patch_cuts=1,
        patch_continuations=1))
    t0 = time.perf_counter()
    run_study(c, out / "translator", None, say=lambda m: print(f"{time.perf_counter() - t0:6.1f}s {m}", file=sys.stderr, flush=True))
    known_answers(out)


class Organisms:
    """The device run and the CPU reference of the organisms study, in the background, each on its own cores."""

    def __init__(self, device: str, dtype: str | None, work: Path, mode: str) -> None:
        self.device, self.dtype, self.work, self.mode = device, dtype, work, mode
        self.procs: dict[str, tuple[subprocess.Popen, float, Path]] = {}
        self.ended: dict[str, float] = {}
        n = os.cpu_count() or 1
        # 16 cores there: the checks keep 0-3, the device run 4-7, the CPU reference 8-15; 2 cores here: shared
        self.cores = {"device": set(range(4, 8)), "reference": set(range(8, n))} if n >= 12 else {"device": None, "reference": None}

    def start(self, which: str) -> None:
        device, dtype = (self.device, self.dtype) if which == "device" else ("cpu", "float32")
        out = self.work / f"organisms-{which}"
        cores = self.cores[which]
        threads = str(len(cores) if cores else 1)
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
        log = open(self.work / f"organisms-{which}.log", "w")
        proc = subprocess.Popen(organisms_command(device, dtype, out, self.mode), cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
        self.procs[which] = (proc, time.perf_counter(), out)
        # the time it ends, seen when it ends (finish() is called only after the other checks)
        threading.Thread(target=lambda: (proc.wait(), self.ended.__setitem__(which, time.perf_counter())), daemon=True).start()
        print(f"[gpu_check] organisms ({which}, {device}, {self.mode}) started, pid {proc.pid}", flush=True)

    def finish(self, rep: Report) -> list[Row]:
        rows_of: dict[str, list[dict[str, Any]]] = {}
        took: dict[str, float] = {}
        for which, (proc, t0, out) in self.procs.items():
            try:
                proc.wait(timeout=max(1.0, rep.deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return [Row("organisms: same verdicts on the device and the CPU", "organisms", str(self.dtype or "default"),
                            f"the {which} run did not finish within the deadline ({time.perf_counter() - t0:.0f} s; "
                            f"log {out.name}.log); rerun with GPU_CHECK_ORGANISMS=reduced or a longer GPU_CHECK_DEADLINE",
                            "-", "fail")]
            took[which] = self.ended.get(which, time.perf_counter()) - t0
            if proc.returncode != 0:
                log = (self.work / f"organisms-{which}.log").read_text(errors="replace").strip().splitlines()
                return [Row("organisms: same verdicts on the device and the CPU", "organisms", str(self.dtype or "default"),
                            f"the {which} run exited {proc.returncode}: {(log or [''])[-1][:300]}", "-", "fail")]
            rows_of[which] = json.loads((out / "known_answers.json").read_text())
        ok, text, vals = judge_verdicts(rows_of["device"], rows_of["reference"])
        what = "ambench run --preset organisms" if self.mode == "full" else f"preset organisms, part translator on {REDUCED_PROMPTS} prompts"
        return [Row(f"organisms: same verdicts, {self.device} vs cpu float32 ({what})", "organisms", str(self.dtype or "default"),
                    f"{text}; {self.device} run {took['device']:.0f} s, cpu reference {took['reference']:.0f} s",
                    "every verdict the same", "pass" if ok else "fail", values=vals)]


# --------------------------------------------------------------------------- the run


def meta_of(device: str, sz_name: str) -> dict[str, Any]:
    import torch
    import transformers

    name = torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else platform.processor() or "cpu"
    return {"device": device, "device_name": name, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpus": os.cpu_count(), "sizes_name": sz_name,
            "sizes": asdict(SIZES[sz_name]), "tolerances": asdict(TOLERANCES),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def main() -> int:
    ap = argparse.ArgumentParser(description="The study's code path checked on a GPU (perf/gpu_check.sh).")
    ap.add_argument("--device", default=os.environ.get("GPU_CHECK_DEVICE", "cuda"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "runs" / "gpu_check"))
    args = ap.parse_args()
    import torch

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here; run the dry run with GPU_CHECK_DEVICE=cpu", file=sys.stderr)
        return 2
    sz_name = "cpu" if device == "cpu" else "cuda"
    sz = SIZES[sz_name]
    deadline = float(os.environ.get("GPU_CHECK_DEADLINE", sz.deadline_s))
    mode = os.environ.get("GPU_CHECK_ORGANISMS", sz.organisms)
    torch.manual_seed(0)
    if device == "cpu":
        # one thread: a second one on a shared 2-core machine spins waiting (docs/organisms.md measured 5.5x slower)
        torch.set_num_threads(1)
    wanted = [m for m in os.environ.get("GPU_CHECK_MODELS", ",".join(EMBEDDED_MODELS + ORGANISM_MODELS)).split(",") if m]
    rep = Report(args.out, meta_of(device, sz_name), deadline)
    excluded = [m for m in EMBEDDED_MODELS + ORGANISM_MODELS if m not in wanted]
    rep.meta["not_checked"] = {m: "excluded by GPU_CHECK_MODELS" for m in excluded}
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    rep.meta["work"] = str(work)
    default_dtype = "bfloat16" if device.startswith("cuda") else "float32"
    dev_dtype = "bfloat16"  # the study's dtype on a GPU; the dry run runs bf16 on the CPU for the same rows

    models = []
    for m in wanted:
        why = available(m)
        if why:
            rep.add(Row("model available", m, "-", f"not available: {why}", "-", "fail"))
        else:
            models.append(m)

    org = Organisms(device, None if device.startswith("cuda") else "bfloat16", work, mode) if mode != "off" else None
    if org:
        org.start("reference")  # the CPU reference needs no GPU: it starts first and runs longest

    # speed first, on a quiet GPU: the runtime against generate, then the generate stage at the paper's batch size
    for m in [m for m in models if m in EMBEDDED_MODELS]:
        def bench(m: str = m) -> list[Row]:
            rt = load(m, device, default_dtype)
            prompts, _ = prompts_for(rt, m, max(sz.bench_batches), sz.short_prompts)
            return check_throughput(rt, m, prompts, sz, gated=device.startswith("cuda"))

        guarded(rep, "tokens/s", m, default_dtype, bench)
    if sz.stage_model in models:
        guarded(rep, "generate stage speed", sz.stage_model, default_dtype,
                lambda: check_stage_speed(load(sz.stage_model, device, default_dtype), sz.stage_model, sz, work))
    if org:
        org.start("device")
    guarded(rep, "tests marked gpu", "-", "-", lambda: check_gpu_tests(device, sz, work, rep.deadline - time.perf_counter()))

    # the quick models first: what the deadline cuts is the slowest
    for m in sorted(models, key=lambda m: not m.startswith("organism:")):  # stable: SmolLM2 before Gemma
        short = sz.short_prompts
        for dtype in ("float32", dev_dtype):
            def gen(dtype: str = dtype, m: str = m) -> list[Row]:
                rt = load(m, device, dtype)
                prompts, _ = prompts_for(rt, m, max(sz.batches), short)
                return check_generation(rt, m, prompts, sz)

            guarded(rep, "greedy generation", m, dtype, gen)

        def cap(m: str = m) -> list[Row]:
            dev = load(m, device, dev_dtype)
            ref = load(m, "cpu", "float32")
            prompts, positions = prompts_for(dev, m, sz.capture_prompts, short)
            return check_capture(dev, ref, m, prompts, positions)

        guarded(rep, "capture", m, dev_dtype, cap)

        def noops(m: str = m) -> list[Row]:
            rt = load(m, device, dev_dtype)
            prompts, _ = prompts_for(rt, m, 2, short)
            return check_noops(rt, m, prompts, sz)

        guarded(rep, "identity patch and zero steering", m, dev_dtype, noops)
        if (m, device, "float32") in _LOADED and window_of(_LOADED[(m, device, "float32")]):
            for dtype in sz.continue_dtypes:
                guarded(rep, "continuation", m, dtype, lambda dtype=dtype, m=m: check_continuation(load(m, device, dtype), m, sz))
        drop(m)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()

    if org:
        for r in org.finish(rep):
            rep.add(r)
    rep.write()
    print((args.out / "gpu_check.md").read_text())
    print(f"[gpu_check] {'every row passes' if rep.ok else 'some rows FAILED'}; {args.out}/gpu_check.json and .md "
          f"({rep.meta['seconds']} s)", flush=True)
    return 0 if rep.ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["organisms-reduced"]:
        p = argparse.ArgumentParser()
        p.add_argument("cmd")
        p.add_argument("--device", required=True)
        p.add_argument("--dtype", required=True)
        p.add_argument("--out", type=Path, required=True)
        a = p.parse_args()
        organisms_reduced(a.device, a.dtype, a.out)
        sys.exit(0)
    sys.exit(main())
