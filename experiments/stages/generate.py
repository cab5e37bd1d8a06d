"""The generate stage: 1 greedy + N sampled attempts per prompt into `RUN/generations.jsonl` (resumable, seeded).

Per prompt, one greedy attempt (sample 0) and N sampled ones (samples 1..N). An attempt's seed is
derived from the run seed and its key (`AttemptKey`: model, task, protocol, medium, prompt id, sample)
by sha256, recorded in its row, and is all `regenerate` needs to reproduce that attempt alone.

Work units are fixed batches over the full ordered list of attempts, so a resumed or sharded run
batches exactly like an uninterrupted one (`shard=(i, n)` runs the batches whose index is i mod n).
Each batch is appended with one write. A row carries `input`, a hash of what produced it (the prompt
text as the model saw it, the protocol, medium, temperature, seed, token budget and the model's
weights digest): an attempt resumes only when key and input both match; a stale row (the prompt file
changed under the same id, say) is dropped and generated again, and the stage says how many. A row
without an input hash (prepared by hand, e.g. a model stand-in in a test) is taken as it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from bench.canvas.extract import extract_code
from bench.sandbox.boundary import clean_text
from experiments.rundir import AttemptKey, RunDir, RunError, content_hash, derive_seed, writing
from interp.prompts import BuiltPrompt, PromptError, PromptItem, Protocol, build

ENTROPY_DECIMALS = 5


@dataclass(frozen=True)
class GenerateSettings:
    """How attempts are generated (paper: 1 greedy + 10 sampled layout attempts, 1 + 11 translation)."""

    samples: int = 10  #: sampled attempts per prompt, besides the greedy one
    temperature: float = 0.7  #: temperature of the sampled attempts (sample 0 is greedy)
    seed: int = 0  #: run seed; each attempt's seed is derived from it and the attempt key
    max_new_tokens: int = 384  #: token budget of one attempt
    batch_size: int = 8  #: attempts per forward batch (and per resumable work unit)
    protocol: str = "auto"  #: auto, zero-shot, few-shot or completion (interp.prompts)
    shots: int = 2  #: worked examples for few-shot and completion
    output: str = "canvas"  #: canvas code or raw SVG (the medium ablation, Exp. 2)
    #: the canvas medium the program is written for (`bench.canvas.medium.get_medium`): v1 (the paper's
    #: 24x24), v1-48 (48 cells) or outline (outline primitives); v1 for SVG
    medium: str = "v1"

    def prompt_protocol(self) -> Protocol:
        """The prompt protocol these settings ask for (a medium name that does not exist is one sentence)."""
        from bench.canvas.medium import get_medium

        try:
            medium = get_medium(self.medium)
        except ValueError as e:
            raise RunError(str(e)) from None
        return Protocol(self.protocol, self.shots, medium=medium, output=self.output)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def attempt_seed(run_seed: int, key: AttemptKey) -> int:
    """An attempt's seed: the run seed and the whole attempt key."""
    return derive_seed(run_seed, *key)


@dataclass(frozen=True)
class Attempt:
    item: PromptItem
    prompt: BuiltPrompt
    sample: int
    seed: int
    temperature: float
    input: str  #: hash of what produces this attempt (see the module docstring)

    def key(self, model: str) -> AttemptKey:
        return AttemptKey(model, self.item.task, self.prompt.protocol, self.prompt.medium, self.item.id, self.sample)


def plan_attempts(runtime: Any, items: Sequence[PromptItem], s: GenerateSettings, model: str) -> list[Attempt]:
    protocol = s.prompt_protocol()
    out = []
    for item in items:
        built = build(item, protocol, runtime.tokenizer, chat=runtime.info.chat)
        for k in range(s.samples + 1):
            temp = 0.0 if k == 0 else s.temperature
            key = AttemptKey(model, item.task, built.protocol, built.medium, item.id, k)
            seed = attempt_seed(s.seed, key)
            inp = content_hash(built.text, built.protocol, built.medium, temp, seed, s.max_new_tokens,
                               runtime.info.weights_digest)
            out.append(Attempt(item, built, k, seed, temp, inp))
    return out


def _row(model: str, a: Attempt, g: Any) -> dict[str, Any]:
    prefix = a.prompt.opener
    text = clean_text(g.text)  # the model's text enters the run here: made safe for JSON and HDF5
    ent = [round(x, ENTROPY_DECIMALS) for x in g.entropy]
    return {
        "task": a.item.task, "prompt_id": a.item.id, "model": model, "protocol": a.prompt.protocol,
        "medium": a.prompt.medium, "sample": a.sample, "seed": a.seed, "temperature": a.temperature, "prefix": prefix,
        "text": text, "code": extract_code(prefix + text) if a.prompt.medium != "svg" else None,
        "n_tokens": len(g.tokens), "stop": g.stop, "entropy": ent, "input": a.input,
        "mean_entropy": round(sum(g.entropy) / len(g.entropy), ENTROPY_DECIMALS) if g.entropy else None,
    }


def run_attempts(runtime: Any, attempts: Sequence[Attempt], s: GenerateSettings, model: str,
                 on_token: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    from interp.runtime import Sampling, StopRule

    open_fence = {a.prompt.open_fence for a in attempts}
    rows = []
    # rows of one batch share a stop rule; prompts with and without an open fence never mix in practice
    for flag in sorted(open_fence):
        part = [a for a in attempts if a.prompt.open_fence == flag]
        gens = runtime.generate([a.prompt.tokens for a in part], [Sampling(a.temperature, a.seed) for a in part],
                                StopRule(max_new_tokens=s.max_new_tokens, open_fence=flag), on_token=on_token)
        rows += [(a, _row(model, a, g)) for a, g in zip(part, gens)]
    order = {id(a): i for i, a in enumerate(attempts)}
    return [r for _, r in sorted(rows, key=lambda ar: order[id(ar[0])])]


def _check_study_arm(rd: RunDir, runtime: Any, model: str, tasks: list[str], s: GenerateSettings, section: str) -> None:
    """In a study's directory only the study's own arms are generated (`ambench run` records them): attempts of
    another arm would be mixed into its tables, probes and intervention cuts."""
    study = rd.config().get("stages", {}).get("study")
    if not study or "arms" not in study:
        return
    if model in study["config"]["models"] and all({"task": t, "settings": s.as_dict()} in study["arms"] for t in tasks):
        return
    chat = runtime.info.chat

    def label(task: str, g: dict[str, Any]) -> str:
        medium = "svg" if g["output"] == "svg" else g["medium"]
        try:
            proto = Protocol(g["protocol"], g["shots"]).resolve(chat).label
        except PromptError:
            proto = g["protocol"]
        return f"{task} {proto if medium == 'v1' else f'{medium}/{proto}'} ({g['samples']} samples)"

    arms = ", ".join(label(a["task"], a["settings"]) for a in study["arms"])
    mine = section.split("/", 2)[-1]
    raise RunError(f"{rd.path} holds a study (`ambench run`) of {', '.join(study['config']['models'])} with the arms {arms}; "
                   f"this would add {model} {mine} ({s.samples} samples), which the study would mix in: use another --out")


def generate_stage(runtime: Any, items: Sequence[PromptItem], run: Any, s: GenerateSettings, model: str | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   on_token: Callable[[int], None] | None = None,
                   shard: tuple[int, int] | None = None, say: Callable[[str], None] | None = None) -> dict[str, int]:
    """Generate every missing (or stale) attempt into RUN/generations.jsonl; returns counts."""
    model = model or runtime.info.name
    if s.samples < 0 or s.batch_size < 1 or s.max_new_tokens < 1:
        raise RunError("samples must be >= 0, batch size and max new tokens >= 1")
    attempts = plan_attempts(runtime, items, s, model)
    tasks = sorted({i.task for i in items})
    first = attempts[0].prompt if attempts else None
    section = f"generate/{model}/{'+'.join(tasks)}/{first.medium if first else s.output}/{first.protocol if first else s.protocol}"
    with writing(run) as rd:
        _check_study_arm(rd, runtime, model, tasks, s, section)
        rd.record_config(section, {"settings": s.as_dict(), "model": runtime.info.as_dict(), "prompts": [i.id for i in items]})
        rd.record_prompts(items)
        rows = rd.rows(RunDir.GENERATIONS)
        wanted = {a.key(model): a.input for a in attempts}

        def fresh(r: dict[str, Any]) -> bool:
            # a row without an input hash (prepared by hand, e.g. a model stand-in) is taken as it is
            return "input" not in r or wanted.get(AttemptKey.of(r), r["input"]) == r["input"]

        stale = [r for r in rows if not fresh(r)]
        if stale:  # an attempt whose inputs changed under the same key: drop its row, generate it again
            keep = [r for r in rows if fresh(r)]
            rd.write_rows(RunDir.GENERATIONS, keep)
            if say:
                say(f"{len(stale)} attempts of {model} were made from other inputs (prompt text or settings): generating them again")
            rows = keep
        done = {AttemptKey.of(r) for r in rows}
        batches = [attempts[i: i + s.batch_size] for i in range(0, len(attempts), s.batch_size)]
        written = skipped = 0
        for bi, batch in enumerate(batches):
            if shard is not None and bi % shard[1] != shard[0]:
                continue
            missing = [a for a in batch if a.key(model) not in done]
            if not missing:
                skipped += len(batch)
                if progress:
                    progress(len(batch), 0)
                continue
            got = run_attempts(runtime, batch, s, model, on_token)  # the whole batch: same batching as an unbroken run
            new = [r for a, r in zip(batch, got) if a.key(model) not in done]
            rd.append(RunDir.GENERATIONS, new)
            done |= {a.key(model) for a in missing}
            written += len(new)
            if progress:
                progress(len(batch), sum(r["n_tokens"] for r in new))
    return {"attempts": len(attempts), "written": written, "skipped": skipped, "stale": len(stale)}


def regenerate(runtime: Any, item: PromptItem, row: dict[str, Any], s: GenerateSettings) -> dict[str, Any]:
    """Redo one recorded attempt alone, from its row (seed, temperature, protocol)."""
    protocol = s.prompt_protocol()
    built = build(item, protocol, runtime.tokenizer, chat=runtime.info.chat)
    if (built.protocol, built.medium) != (row["protocol"], row.get("medium", "v1")):
        raise RunError(f"the row was made with protocol {row['protocol']} ({row.get('medium', 'v1')}), "
                       f"these settings give {built.protocol} ({built.medium})")
    inp = content_hash(built.text, built.protocol, built.medium, float(row["temperature"]), int(row["seed"]),
                       s.max_new_tokens, runtime.info.weights_digest)
    a = Attempt(item, built, int(row["sample"]), int(row["seed"]), float(row["temperature"]), inp)
    return run_attempts(runtime, [a], s, row["model"])[0]
