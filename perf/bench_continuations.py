"""Intervention continuations: shared-prefix reuse vs naive per-continuation generation, side by side.

    .venv/bin/python perf/bench_continuations.py [--model smollm2-135m-instruct] [--n 9] [--tokens 32]

One cut of a few-shot layout prompt plus a 6-statement canvas answer; the four arms x `--n`
continuations (paper: 9 -> 36 rows), each `--tokens` new tokens (no early stop, so every contender
does the same work):
- `naive`: `Runtime.generate` on each continuation alone (the prompt and code prefix recomputed 36 times);
- `batched`: one `Runtime.generate` call over all 36 full inputs (batched, but no prefix reuse);
- `shared`: `Runtime.continue_batch`: the shared prefix once, its KV cache repeated, arms' statements
  as a suffix block.
The tokens of `shared` and `naive` are compared (identical up to float rounding of batched logits).
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--n", type=int, default=9)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()

    import numpy as np

    from bench.intervene.splice import cut_arms, statements
    from interp.prompts import PromptItem, Protocol, build
    from interp.runtime import Runtime, Sampling, StopRule

    rt = Runtime.load(args.model, device="cpu")
    item = PromptItem("x", "layout", "Draw a house with a red roof next to a tree.", "a house with a red roof next to a tree")
    built = build(item, Protocol("few-shot", 2), rt.tokenizer, chat=rt.info.chat)
    answer = ("```python\nfill('sky_blue')\nrect(18, 0, 6, 24, 'green')\nrect(10, 3, 8, 10, 'beige')\n"
              "poly([(10, 2), (5, 8), (10, 14)], 'red')\nrect(8, 17, 10, 2, 'brown')\ncircle(6, 18, 4, 'dark_green')\n```")
    stmt = [s for s in statements(answer) if s.spliceable][-1]
    painted = np.zeros((24, 24), bool)
    painted[5:24, 0:24] = True
    painted[0:5, 20:24] = False
    arms = cut_arms(answer, stmt, painted)
    shared_text = arms[0].prefix
    full = list(built.tokens) + rt.tokenizer(shared_text, add_special_tokens=False)["input_ids"]
    prefix, last = full[:-1], full[-1]
    suffixes, samplings = [], []
    for a in arms:
        rest = a.prefix[len(shared_text):]
        sfx = [last] + (rt.tokenizer(rest, add_special_tokens=False)["input_ids"] if rest else [])
        for k in range(args.n):
            suffixes.append(sfx)
            samplings.append(Sampling(0.7, 1000 + len(samplings)))
    rule = StopRule(max_new_tokens=args.tokens, eos=False, fence=False)
    rows = len(suffixes)
    print(f"{args.model}: prefix {len(prefix)} tokens, {len(arms)} arms x {args.n} = {rows} continuations x {args.tokens} tokens")

    t = time.perf_counter()
    shared = rt.continue_batch(prefix, suffixes, samplings, rule)
    t_shared = time.perf_counter() - t
    t = time.perf_counter()
    batched = rt.generate([prefix + s for s in suffixes], samplings, rule)
    t_batched = time.perf_counter() - t
    t = time.perf_counter()
    naive = [rt.generate([prefix + s], [smp], rule)[0] for s, smp in zip(suffixes, samplings)]
    t_naive = time.perf_counter() - t
    same = sum(a.tokens == b.tokens for a, b in zip(shared, naive))
    print(f"{'contender':<10} {'seconds':>8} {'vs naive':>9}")
    for name, secs in (("naive", t_naive), ("batched", t_batched), ("shared", t_shared)):
        print(f"{name:<10} {secs:8.1f} {t_naive / secs:8.1f}x")
    print(f"shared vs naive: {same}/{rows} continuations token-identical; batched vs naive: "
          f"{sum(a.tokens == b.tokens for a, b in zip(batched, naive))}/{rows}")


if __name__ == "__main__":
    main()
