"""The runtime: one object owns a model, and generation, capture, patching and steering are calls on it.

The package's rooms, each call of which is a method here: `load.py` (a name or folder becomes a model, its
tokenizer, hook points and `ModelInfo`), `generation.py` (the decode loop: `generate`, `continue_batch`, stop
rules), `kv.py` (KV-cache surgery and prefix sharing), `capture.py` (residual capture at positions; plain
prompts with positions named by substring or index), `forward.py` (logits with any hooks, a cache of any hook
names at chosen positions), `patching.py` (batched activation-patching scans, attribution patching),
`steering.py` (dose-response tables and plots). This facade holds the `Runtime` object: what it owns, which
of the two hook mechanisms a call runs, one forward step, padding, and the methods.

`Runtime.load(name)` loads a Hugging Face causal LM (an embedded model from `interp.models`, a local
folder, or a hub name already in the local cache) straight onto its device (`device_map`, so a 34B
checkpoint never sits in host RAM first), with the fastest attention kernel the architecture has
(`sdpa`, else `eager`, recorded in `ModelInfo`).

**Hooks.** Every hook function is TransformerLens-style (`fn(tensor, hook=point)`, names such as
`blocks.{L}.hook_resid_pre`). Two mechanisms serve them, and one call always runs one of them end to
end (prefill and every decode step), so one call never mixes attention kernels:
- residual-stream names (`blocks.{L}.hook_resid_pre/post`, aliases `hook_in/out`, `ln_final.hook_out`),
  which are all the stages use, run as PyTorch forward hooks on the model's own decoder blocks
  (`interp.residual`). A hooked call is the unhooked call plus the hooks: an identity patch or a zero
  steering vector is an exact no-op in every dtype, and one steering hook costs ~nothing
  (perf/bench_generation.py, SmolLM2, b=1: 1.01x of Hugging Face with one steering hook this way vs
  0.64x through the bridge, side by side on a loaded machine; the issue measured 0.69x/0.58x at
  b=1/8 through the bridge on an idle one).
  It works on any architecture whose blocks form one `ModuleList`, remote-code ones included.
- any other hook name goes through a TransformerLens `TransformerBridge`, booted on first use around
  a second module tree that shares every weight tensor (no copy) and runs eager attention (the
  bridge forces it). The two mechanisms give the same tensors (tested per architecture: bit-identical
  when the model itself runs eager). `compat=True` boots the bridge at load in TransformerLens
  compatibility mode, which processes the weights, so then every call goes through it.

Generation (`generate`) is a hand-written decode loop: left padding with an attention mask and
explicit position ids, a full KV cache (`DynamicCache`), finished rows dropped from the batch (and
from the cache). Each row has its own seed: greedy rows take the argmax; sampled rows draw one
uniform number per step from their own `torch.Generator` and invert the CDF of the temperature-scaled
distribution, so a row's tokens do not depend on what else is in its batch (up to float rounding of
the logits, which a test bounds: batched greedy equals one-at-a-time greedy token for token). The
entropy of the model's next-token distribution (temperature 1, nats) is logged at every step.

`continue_batch` computes a shared prefix once and continues several suffixes from it. Its rows are
laid out with all padding on the left (never between prefix and suffix): a sliding-window layer
counts cache slots, so padding in the middle would shrink a padded row's window (issue 15: logits off
by up to 2.9 on tiny Gemma 3 / Mistral). Row i, whose suffix is p_i tokens shorter than the longest,
takes the prefix cache shifted right by p_i slots and recomputes the last p_i prefix tokens with its
suffix, which keeps every row's real tokens contiguous: exact for every attention pattern.
"""


from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from interp.models import ModelError
from interp.residual import FINAL_NORM_SITE, ResidualSites
from interp.runtime import capture as _capture
from interp.runtime import forward as _fw
from interp.runtime import generation as _gen
from interp.runtime import kv
from interp.runtime import patching as _patching
from interp.runtime.capture import PlainPrompt, plain_prompt
from interp.runtime.generation import END_TOKENS, FENCE, FREE_TEXT, Generation, Sampling, StopRule
from interp.runtime.load import QUANTIZE, ModelInfo, _default_device, _dtype, _is_oom, locate, open_folder, remote_code, weights_digest

if TYPE_CHECKING:
    import numpy as np
    import torch
    from jaxtyping import Float, Int
    from transformers import Cache, PreTrainedModel, PreTrainedTokenizerBase
    from transformer_lens.model_bridge import TransformerBridge

#: The last capture site: the residual stream leaving the last block (before the final norm), or the
#: final norm's output (what the unembedding reads; Hugging Face's last `hidden_states` in transformers 5).
FINAL_SITES = ("pre-norm", "post-norm")

Hooks = Sequence[tuple[str, Callable[..., Any]]]


class Runtime:
    """A loaded model: the Hugging Face model, its tokenizer, its residual hook points, and `info`."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, info: ModelInfo, sites: ResidualSites,
                 bridge: TransformerBridge | None = None,
                 bridge_factory: Callable[[], TransformerBridge] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.sites = sites
        self.device = info.device
        self._bridge = bridge
        self._bridge_factory = bridge_factory
        self._force_bridge = info.compat
        #: prefill a prompt given several times in one generate() call once (see generate); off only to compare
        self.share_prefill = True
        #: decode a continue_batch (and a generate whose rows share a prefix) with the prefix's keys and values kept
        #: once and attended once per step (`kv.share_prefix`); False: every row keeps its own copy, as before
        self.share_decode = True
        #: the KV caches of the last shared prefixes computed without hooks (`kv.prefix_cache`): a few-shot protocol's
        #: examples are the same in every batch of a stage, so each is computed once per stage, not once per batch
        self._prefixes: dict[tuple[str, tuple[int, ...]], Cache] = {}
        #: the caches of unhooked prefixes at multiples of kv.PREFIX_CHUNK tokens (`kv.prefix_cache`)
        self._chunks: dict[tuple[str, tuple[int, ...]], Cache] = {}
        params = inspect.signature(model.forward).parameters
        self._logits_to_keep = "logits_to_keep" in params
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            self.pad_id = 0
        vocab = tokenizer.get_vocab()
        stops = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        stops |= {vocab[t] for t in END_TOKENS if t in vocab}
        self.stop_ids = frozenset(stops)


    # ------------------------------------------------------------------ loading (load.py)

    @classmethod
    def load(cls, model: str, device: str | None = None, dtype: str | None = None, compat: bool = False,
             attention: str | None = None, trust_remote_code: bool = False, device_map: str | dict | None = None,
             quantize: str | None = None) -> "Runtime":
        """Boot `model` onto its device, ready for every call below.

        Args:
            model: a registry name (`smollm2-135m-instruct`, `gemma3-270m`, `organism:NAME`), a local Hugging Face folder,
                or a hub name already in the local cache (nothing is downloaded).
            device: "cpu", "cuda", "cuda:N" or "mps"; None: CUDA when present, else the CPU.
            dtype: "float32", "bfloat16" or "float16"; None: bfloat16 on a GPU, float32 on the CPU.
            compat: boot the TransformerBridge at load in TransformerLens compatibility mode (every call through it).
            attention: "sdpa" or "eager"; None: the fastest kernel the architecture has.
            trust_remote_code: let a folder's own modeling code run (never implied).
            device_map: "auto" spreads the blocks over the visible GPUs (default: all on `device`).
            quantize: "8bit" or "4bit" (bitsandbytes) weights.

        Example::

            rt = Runtime.load("organism:xor-planner", device="cpu")
            rt.info.n_layers
        """
        device = device or _default_device()
        torch_dtype = _dtype(dtype, device)  # an unknown dtype is refused before a model is converted or trained
        kind, folder = locate(model, evaluate=evaluate_organism)  # an organism trained now is scored by this runtime
        return cls.from_folder(folder, name=model, source=kind, device=device, dtype=torch_dtype, compat=compat,
                               attention=attention, trust_remote_code=trust_remote_code, device_map=device_map,
                               quantize=quantize)

    @classmethod
    def from_folder(cls, folder: Path, name: str | None = None, source: str = "folder", device: str = "cpu",
                    dtype: str | torch.dtype | None = None, compat: bool = False, attention: str | None = None,
                    trust_remote_code: bool = False, device_map: str | dict | None = None,
                    quantize: str | None = None) -> "Runtime":
        """Load a Hugging Face folder (what `load` does once it has found the folder).

        Args:
            folder: the model folder (config.json, weights, tokenizer).
            name: the name the runtime reports (default: the folder's).
            source: where the folder came from, recorded in `info` ("folder", "registry", "organism", ...).
            device, dtype, compat, attention, trust_remote_code, device_map, quantize: as in `load`.

        Example::

            from interp.organisms import folder_for
            again = Runtime.from_folder(folder_for("organism:xor-planner"), name="planner", device="cpu")
            again.info.name
        """
        got = open_folder(folder, name=name, source=source, device=device, dtype=dtype, compat=compat, attention=attention,
                          trust_remote_code=trust_remote_code, device_map=device_map, quantize=quantize)
        return cls(got.model, got.tokenizer, got.info, got.sites, bridge=got.bridge, bridge_factory=got.boot)

    @property
    def bridge(self) -> TransformerBridge:
        """The TransformerBridge over the same weights, booted on first use (ModelError when it has no adapter).

        Example::

            names = sorted(rt.bridge.hook_dict)   # every hook name a call can take
        """
        if self._bridge is None:
            if self._bridge_factory is None:
                raise ModelError(f"{self.info.name}: no TransformerBridge was booted for this runtime")
            self._bridge = self._bridge_factory()
        return self._bridge

    @contextlib.contextmanager
    def via_bridge(self) -> Iterator[None]:
        """Run every call inside the block through the TransformerBridge (eager attention): a reference to test
        against; the bridge is booted here, so an unsupported architecture fails at once.

        Example::

            with rt.via_bridge():
                reference = rt.forward(tokens)
        """
        before = self._force_bridge
        self.bridge  # noqa: B018 - boot it now, so an unsupported architecture fails here
        self._force_bridge = True
        try:
            yield
        finally:
            self._force_bridge = before

    # ------------------------------------------------------------------ hook points

    def hook_names(self, layers: Sequence[int] | None = None, final: str = "pre-norm") -> list[str]:
        """Residual-stream sites: resid_pre of block L for L < n_layers; L = n_layers is the final site.

        Args:
            layers: which sites, 0..n_layers (default: all).
            final: "pre-norm" (the last block's output) or "post-norm" (`ln_final.hook_out`) for L = n_layers.

        Example::

            rt.hook_names([0, rt.info.n_layers])   # ['blocks.0.hook_resid_pre', 'blocks.3.hook_resid_post']
        """
        if final not in FINAL_SITES:
            raise ValueError(f"final site must be one of {FINAL_SITES}, not {final!r}")
        n = self.info.n_layers
        layers = range(n + 1) if layers is None else layers
        names = []
        for layer in layers:
            if not 0 <= layer <= n:
                raise ValueError(f"layer {layer} out of range 0..{n}")
            if layer < n:
                names.append(f"blocks.{layer}.hook_resid_pre")
            elif final == "post-norm":
                if self.sites.norm is None:
                    raise ModelError(f"{self.info.name}: no final norm found next to the decoder blocks; "
                                     "only the pre-norm final site is available")
                names.append(FINAL_NORM_SITE)
            else:
                names.append(f"blocks.{n - 1}.hook_resid_post")
        return names

    def check_names(self, names: Sequence[str]) -> None:
        """One sentence (ValueError, with the nearest existing name) for a hook name this model lacks, before any
        forward; every call that takes hook names runs it.

        Args:
            names: hook names (residual names, or any name of `rt.bridge.hook_dict`).

        Example::

            rt.check_names(["blocks.0.hook_resid_pre", "blocks.1.attn.hook_z"])   # silent: both exist
        """
        if self.sites.serves(list(names)):
            return
        known = self.bridge.hook_dict
        bad = [n for n in names if not self.sites.serves([n]) and n not in known]
        if bad:
            import difflib

            near = difflib.get_close_matches(bad[0], list(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"no hook point {bad[0]!r} in {self.info.name}{hint}: blocks are 0..{self.info.n_layers - 1}; "
                             "rt.bridge.hook_dict lists every name")

    def canonical_hooks(self, names: Sequence[str]) -> dict[str, list[str]]:
        """Group hook names by the hook point they resolve to (aliases share one), keyed by canonical name.

        Args:
            names: hook names; an unknown one is a ValueError.

        Example::

            rt.canonical_hooks(["blocks.0.hook_resid_pre", "blocks.0.hook_in"])   # one point, two aliases
        """
        out: dict[str, list[str]] = {}
        if self.sites.serves(names):
            for name in names:
                out.setdefault(self.sites.canonical(name), []).append(name)
            return out
        by_point: dict[int, list[str]] = {}
        canon: dict[int, str] = {}
        hook_dict = self.bridge.hook_dict
        for name in names:
            point = hook_dict.get(name)
            if point is None:
                raise ValueError(f"no hook point {name!r} in {self.info.name}: rt.bridge.hook_dict lists every name")
            by_point.setdefault(id(point), []).append(name)
            canon.setdefault(id(point), getattr(point, "name", None) or name)
        return {canon[k]: v for k, v in by_point.items()}

    def _path(self, hooks: Hooks) -> str:
        """'hf' (forward hooks on the model's own blocks) or 'bridge': one per call, prefill and decode alike."""
        if self._force_bridge or not self.sites.serves([name for name, _ in hooks]):
            return "bridge"
        return "hf"

    def _attached(self, hooks: Hooks, path: str) -> contextlib.AbstractContextManager[object]:
        if not hooks:
            return contextlib.nullcontext()
        if path == "bridge":
            return self.bridge.hooks(fwd_hooks=list(hooks))
        return self.sites.attached(hooks)

    # ------------------------------------------------------------------ forward passes

    def _forward(self, ids: Int[torch.Tensor, "batch seq"], mask: Int[torch.Tensor, "batch total"], cache: Cache,
                 path: str) -> tuple[Float[torch.Tensor, "batch vocab"], Cache]:
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        if path == "bridge":
            logits, cache = self.bridge(ids, return_type="logits_and_cache", attention_mask=mask, past_key_values=cache,
                                        use_cache=True, position_ids=pos, logits_to_keep=1)
            return logits[:, -1, :], cache
        extra = {"logits_to_keep": 1} if self._logits_to_keep else {}
        out = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, position_ids=pos, **extra)
        cache = out.past_key_values
        if not hasattr(cache, "batch_select_indices"):
            raise ModelError(f"{self.info.name} returned a legacy KV cache ({type(cache).__name__}); the runtime needs a "
                             "transformers Cache (a checkpoint in a native transformers format)")
        return out.logits[:, -1, :], cache

    @staticmethod
    def _new_cache() -> Cache:
        # a full cache on every layer: sliding-window layers are masked by position instead of being
        # truncated, which continue_batch needs to shift a row's cache (see the module docstring)
        return kv.growing_cache()

    def pad(self, prompts: Sequence[Sequence[int]]) -> tuple[Int[torch.Tensor, "batch seq"], Int[torch.Tensor, "batch seq"], list[int]]:
        """Left-pad token lists for one batch: ids [b, T], mask [b, T] (1 = real token), and each row's offset (its
        pad count).

        Args:
            prompts: token-id lists, each at least one token.

        Example::

            ids, mask, offsets = rt.pad([tokens, tokens[:5]])
        """
        import torch

        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        offsets = []
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
            offsets.append(width - len(p))
        return ids.to(self.device), mask.to(self.device), offsets

    # ------------------------------------------------------------------ generation (generation.py)

    #: shared prefixes whose KV caches `kv.prefix_cache` keeps (a study's stage alternates at most between its tasks')
    PREFIXES_KEPT = 2
    #: boundary caches `kv.prefix_cache` keeps: SmolLM2's two worked examples (807 tokens) end three of them
    CHUNKS_KEPT = 4

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sequence[Sampling], stop: StopRule = StopRule(),
                 hooks: Hooks = (), on_token: Callable[[int], None] | None = None) -> list[Generation]:
        """Generate one continuation per prompt row; `sampling[i]` decides row i's tokens; `hooks` run at every step.

        Args:
            prompts: token-id lists (tokenise texts first: `rt.tokenizer(text)["input_ids"]` or `plain_prompt`).
            sampling: one `Sampling(temperature, seed)` per prompt (temperature 0 = greedy, each row its own generator).
            stop: a `StopRule` (the token cap, EOS, the code fence, stop strings); `StopRule.free_text(n)` for prose.
            hooks: (hook name, fn(tensor, hook)) pairs attached to the prefill and every decode step (e.g. steering).
            on_token: called with the number of tokens produced at each step (progress bars).

        Example::

            gens = rt.generate([tokens], [Sampling(temperature=0.0, seed=0)], StopRule.free_text(8))
            gens[0].text, gens[0].stop, gens[0].entropy
        """
        return _gen.generate(self, prompts, sampling, stop, hooks, on_token)

    def continue_batch(self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], sampling: Sequence[Sampling],
                       stop: StopRule = StopRule(), hooks: Hooks = (), prefill_hooks: Hooks = (),
                       on_token: Callable[[int], None] | None = None) -> list[Generation]:
        """Continue `prefix + suffixes[i]` for every row, computing the shared prefix once.

        Row i generates exactly what `generate([prefix + suffixes[i]])` would (tested on every architecture, sliding
        windows included).

        Args:
            prefix: the shared token ids.
            suffixes: one token-id list per row, each at least one token.
            sampling: one `Sampling` per suffix.
            stop: a `StopRule`, as in `generate`.
            hooks: run at every step (steering), on the prefix too.
            prefill_hooks: run while the suffixes are processed (activation patching at the cut); their tensor is
                [rows, S, d_model] with row i's suffix in its last len(suffixes[i]) positions, and what a prefill hook
                writes anywhere else is discarded.
            on_token: called with the number of tokens produced at each step.

        Example::

            gens = rt.continue_batch(tokens[:6], [tokens[6:], tokens[6:9]], [Sampling(), Sampling()], StopRule.free_text(4))
        """
        return _gen.continue_batch(self, prefix, suffixes, sampling, stop, hooks, prefill_hooks, on_token)

    # ------------------------------------------------------------------ capture (capture.py)

    def input_embeddings(self, tokens: Sequence[int]) -> Float[np.ndarray, "tokens d_model"]:
        """The model's own input embeddings of these tokens (its embedding module, scaling included where the
        module scales), float32 on the CPU; a lexical baseline of the probe stage reads their mean.

        Args:
            tokens: token ids of the model's vocabulary.

        Example::

            rt.input_embeddings(tokens).shape   # (len(tokens), d_model)
        """
        import torch

        tokens = _fw.token_rows(self, [tokens], "tokens")[0]
        emb = self.model.get_input_embeddings()
        with torch.inference_mode():
            ids = torch.tensor([list(tokens)], dtype=torch.long, device=emb.weight.device)
            return emb(ids)[0].float().cpu().numpy()


    def capture(self, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                layers: Sequence[int] | None = None, final: str = "pre-norm") -> Float[torch.Tensor, "batch site pos d_model"]:
        """Residual stream at `positions` (per prompt, indices into its own tokens) at every site of `hook_names`.

        Returns float32 [batch, n_sites, n_positions, d_model]. Hooks slice the positions out as the forward pass runs, so
        only [batch, positions, d_model] per site is ever kept. Rows that share a long prefix (a few-shot protocol's
        examples) compute it once (`kv.prefix_groups`): the same activations up to float rounding; `share_prefill = False`
        runs one whole pass per prompt.

        Args:
            prompts: token-id lists.
            positions: one list of token indices per prompt (the same count for every prompt).
            layers: sites 0..n_layers (default all): resid_pre of each block, n_layers the final site.
            final: "pre-norm" (the last block's output) or "post-norm" (the final norm's output) for layer n_layers.

        Example::

            acts = rt.capture([tokens, tokens[:7]], [[-1 + len(tokens)], [6]], layers=[0, 2])
            acts.shape   # [2, 2, 1, d_model]
        """
        return _capture.capture(self, prompts, positions, layers, final)

    # ------------------------------------------------------------------ forward, cache, patching (forward.py, patching.py)

    def forward(self, inputs: Any, hooks: Hooks = (), grad: bool = False) -> Float[torch.Tensor, "batch seq vocab"]:
        """Logits [batch, seq, vocab] of one teacher-forced pass with `hooks` attached.

        Args:
            inputs: a text, a list of texts, token ids or a list of token-id lists (rows of different lengths are
                left-padded, with a mask and position ids: row i's token j is column `offset_i + j`).
            hooks: (hook name, fn(tensor, hook)) pairs; fn returns the replacement or None. Residual-stream names run
                on the model's own blocks, any other name through the bridge (interp/runtime/forward.py).
            grad: True keeps the autograd graph (attribution patching); otherwise inference mode.

        Example::

            logits = rt.forward(text)
            zeroed = rt.forward(text, hooks=[("blocks.2.attn.hook_z", lambda z, hook: z * 0)])
        """
        return _fw.forward(self, inputs, hooks, grad)

    def run_with_cache(self, inputs: Any, names: Sequence[str] | str | None = None,
                       positions: Sequence[int] | Sequence[Sequence[int]] | None = None, hooks: Hooks = (),
                       device: str | None = "cpu") -> tuple[Float[torch.Tensor, "batch seq vocab"], dict[str, torch.Tensor]]:
        """(logits, cache): `cache[name]` is the activation of each hook name.

        Args:
            inputs: as in `forward`.
            names: hook names (default: every residual site of `hook_names()`).
            positions: indices into each row's tokens, one list for all rows or one per row, negative from the end
                (the query axis of an attention pattern); None keeps every position.
            hooks: run first, so a patched run caches its patched values.
            device: where the cache is kept, float32 ("cpu"; None: where the model runs).

        Example::

            logits, cache = rt.run_with_cache(text, names=["blocks.2.hook_resid_post", "blocks.2.attn.hook_z"], positions=[-1])
            cache["blocks.2.attn.hook_z"].shape   # [1, 1, n_heads, d_head]
        """
        return _fw.run_with_cache(self, inputs, names, positions, hooks, device)

    def patch_scan(self, corrupt: Any, clean: Any, metric: Any, names: str | Sequence[str],
                   positions: Any = None, heads: Sequence[int] | str | None = None,
                   layers: Sequence[int] | None = None, batch_size: int = 64, groups: Sequence[Any] | None = None,
                   progress: bool = False, reads: Sequence[int] | None = None) -> Any:
        """Exact activation patching of `clean` into `corrupt` at every (name, position[, head]), `batch_size` patched
        runs per forward (interp/runtime/patching.py explains the batching and the KV-cache reuse).

        Args:
            corrupt: the prompt patched into (text or token ids), or a list of N (many pairs: a `PairScan`).
            clean: the prompt the activations come from, of the same length as its corrupt one; or a cache from
                `run_with_cache(clean, names=...)` (every position); or a list of N of either.
            metric: logits [rows, seq, vocab] -> one value per row; with N pairs one for all or a list of N.
            names: a template with `{L}` (expanded over `layers`) or a list of hook names.
            positions: None = every position (pairs of one length); token indices (negative from each prompt's end);
                or one list per pair.
            heads: None patches whole positions; "all" or head indices patch one head at a time (e.g. `hook_z`).
            layers: the layers a `{L}` template covers (default all).
            batch_size: patched runs per forward: faster until memory runs out.
            groups: N pairs' group labels (templates): intervals and sign flips follow them.
            progress: a progress bar over pairs.
            reads: the token indices whose logits the metric reads (e.g. [-1]): logits there only; the metric then
                gets [rows, len(reads), vocab] in increasing position order (much faster on a large vocabulary).

        Example::

            scan = rt.patch_scan(corrupt, clean, logit_diff, "blocks.{L}.attn.hook_z", heads="all")
            scan.normalized().shape   # [layer, position, head]: 0 = corrupt, 1 = clean
            many = rt.patch_scan(corrupts, cleans, metrics, "blocks.{L}.hook_resid_pre", positions=[-1], groups=templates,
                                 reads=[-1])
            many.to_frame()[["layer", "mean_effect", "lo", "hi", "p", "q"]]
        """
        return _patching.patch_scan(self, corrupt, clean, metric, names, positions, heads, layers, batch_size, groups,
                                    progress, reads)

    def attribution_scan(self, corrupt: Any, clean: Any, metric: Any, names: str | Sequence[str],
                         positions: Any = None, heads: Sequence[int] | str | None = None,
                         layers: Sequence[int] | None = None, groups: Sequence[Any] | None = None,
                         progress: bool = False) -> Any:
        """Attribution patching (one forward, one backward per pair): every site's effect estimated as
        grad . (clean - corrupt); the same `Scan` / `PairScan` as `patch_scan`, exact where the metric is linear in the site.

        Args:
            corrupt, clean, metric, positions, groups, progress: as in `patch_scan` (the metric must be computed from the
                logits with torch operations: its gradient is taken).
            names: a template with `{L}` or a list of hook names.
            heads: None, "all" or head indices, as in `patch_scan`.
            layers: the layers a `{L}` template covers.

        Example::

            est = rt.attribution_scan(corrupt, clean, logit_diff, "blocks.{L}.hook_resid_pre", positions=[-1])
            est.effect        # [layer, position]
        """
        return _patching.attribution_scan(self, corrupt, clean, metric, names, positions, heads, layers, groups, progress)

    def path_scan(self, corrupt: Any, clean: Any, metric: Any, sender: tuple[int, int], receivers: str = "q",
                  batch_size: int = 64, groups: Sequence[Any] | None = None, progress: bool = False,
                  reads: Sequence[int] | None = None) -> Any:
        """Path patching: the sender head's clean-minus-corrupt output added to one receiver at a time, everything
        else corrupt (interp/runtime/paths.py); equal to TransformerLens's `get_act_patch_direct_path`, batched.

        Args:
            corrupt, clean: one prompt each (of one length), or N of each (a `PairScan`).
            metric: logits -> one value per row; with N pairs one for all or a list of N.
            sender: the (layer, head) whose output is sent.
            receivers: "q", "k" or "v" (every head of every later layer; K and V refused on grouped-query models) or
                "resid" (every later layer's residual stream and the unembedding's input).
            batch_size: receivers per forward.
            groups: N pairs' group labels.
            progress: a progress bar over pairs.
            reads: the token indices the metric reads, as in `patch_scan`.

        Example::

            edge = rt.path_scan(corrupt, clean, logit_diff, sender=(1, 3), receivers="v", reads=[-1])
            edge.values.shape     # [later layer, 1, head]
        """
        from interp.runtime.paths import path_scan

        return path_scan(self, corrupt, clean, metric, sender, receivers, batch_size, groups, progress, reads)

    def dose_response(self, inputs: Any, name: str, direction: Any, alphas: Sequence[float], metric: Callable[..., Any],
                      positions: Any = None, level: float = 0.95) -> Any:
        """A pandas table (alpha, metric, low, high, n, level, note) of `metric(logits)` (one value per prompt)
        with `alpha * direction` added at hook `name` at `positions` (hooks.steer.add_direction); plot it with
        `interp.runtime.steering.plot_dose_response`.

        Args:
            inputs: prompts as in `forward` (one teacher-forced pass of all of them per strength).
            name: one hook name.
            direction: a vector of d_model finite numbers.
            alphas: the strengths, finite numbers.
            metric: logits -> one value per prompt.
            positions: None (every position), "prompt", a slice or token indices (negative from each prompt's end:
                first-column indices on prompts of different lengths are refused, they would steer padding).
            level: the intervals' level, in (0, 1).

        Example::

            table = rt.dose_response([tokens, tokens[:9]], "blocks.2.hook_resid_pre", v, [0, 1, 2], logit_diff, positions=[-1])
        """
        from interp.runtime.steering import logit_dose_response

        return logit_dose_response(self, inputs, name, direction, alphas, metric, positions, level)

    # ------------------------------------------------------------------ attention

    def attention_mass(self, tokens: Sequence[int], queries: Sequence[int], groups: Sequence[Sequence[int]],
                       layers: Sequence[int] | None = None) -> Float[torch.Tensor, "layer query group 2"]:
        """Attention from `queries` onto groups of key positions, per layer, in one teacher-forced pass.

        Returns float32 [layers, queries, groups, 2]: [..., 0] the attention weight summed over the group's keys,
        averaged over heads; [..., 1] how many of the group's keys the query sees (a non-zero weight in some head). Reads
        `blocks.{L}.attn.hook_pattern` through the TransformerBridge (eager attention).

        Args:
            tokens: one prompt's token ids.
            queries: the query positions.
            groups: lists of key positions.
            layers: which layers (default all).

        Example::

            mass = rt.attention_mass(tokens, [len(tokens) - 1], [[0, 1], [2, 3, 4]])
            mass.shape      # [n_layers, 1, 2, 2]
        """
        import torch

        from hooks.attention import KeyGroupMass

        n = self.info.n_layers
        tokens = _fw.token_rows(self, [tokens], "tokens")[0]
        layers = list(range(n)) if layers is None else list(layers)
        if any(not 0 <= layer < n for layer in layers):
            raise ValueError(f"layers must be in 0..{n - 1}")
        size = len(tokens)
        if not size or any(not 0 <= q < size for q in queries) or any(not 0 <= k < size for g in groups for k in g):
            raise ValueError(f"query and key positions must lie in 0..{size - 1}")
        member = torch.zeros((len(groups), size), dtype=torch.float32)
        for gi, keys in enumerate(groups):
            member[gi, list(keys)] = 1.0
        cap = KeyGroupMass(torch.tensor(list(queries), dtype=torch.long), member, len(layers))
        hooks = [(f"blocks.{layer}.attn.hook_pattern", cap.hook(i)) for i, layer in enumerate(layers)]
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        try:
            with torch.inference_mode():
                self.bridge.run_with_hooks(ids, fwd_hooks=hooks, attention_mask=mask,
                                           position_ids=torch.arange(size, device=ids.device)[None], return_type=None,
                                           logits_to_keep=1)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory on the attention pattern of {size} tokens on {self.device}") from None
            raise
        return cap.result()



def evaluate_organism(folder: Path, data: Any, batch: int = 50) -> dict[str, Any]:
    """A freshly trained organism's held-out accuracy (its training record's "eval"): greedy answers to every held-out
    prompt of `data` (an `interp.organisms.data.Dataset`) through the runtime (zero-shot protocol), checked per
    prompt. Generation stops 16 tokens past the longest right answer: a longer one cannot be right. Handed to
    `interp.organisms.folder_for`/`build_folder` by their callers: the organisms package never imports the runtime."""
    from interp.prompts import Protocol, build

    rt = Runtime.from_folder(folder, name=folder.name)
    known = [e for e in data.heldout if e.program] or data.training_examples(64, 0)
    longest = max(len(rt.tokenizer(e.answer, add_special_tokens=False)["input_ids"]) for e in known)
    max_new_tokens = longest + 16
    proto = Protocol("zero-shot", 0)
    results = []
    for i in range(0, len(data.heldout), batch):
        chunk = data.heldout[i : i + batch]
        built = [build(ex.item, proto, rt.tokenizer) for ex in chunk]
        gens = rt.generate([b.tokens for b in built], [Sampling(0.0, 0)] * len(chunk), StopRule(max_new_tokens=max_new_tokens))
        for ex, g in zip(chunk, gens):
            results.append({"id": ex.item.id, "correct": g.stop == "fence" and data.check(ex, g.text), "text": g.text})
    correct = sum(r["correct"] for r in results)
    return {"heldout_prompts": len(results), "heldout_correct": correct,
            "heldout_accuracy": round(correct / max(1, len(results)), 6),
            "wrong": [{"id": r["id"], "text": r["text"]} for r in results if not r["correct"]][:10]}




def describe(rt: Runtime) -> str:
    i = rt.info
    extra = "".join([f", {i.attention}", ", compat" if i.compat else "",
                     f", {i.quantization}" if i.quantization != "none" else "",
                     ", split over " + ",".join(sorted(set(i.device_map.values()))) if len(set(i.device_map.values())) > 1 else ""])
    return f"{i.name} ({i.architecture}, {i.n_layers} layers, d_model {i.d_model}, {i.dtype} on {i.device}{extra})"



__all__ = ["END_TOKENS", "FENCE", "FINAL_SITES", "FREE_TEXT", "Generation", "ModelInfo", "PlainPrompt", "QUANTIZE",
           "Runtime", "Sampling", "StopRule", "describe", "evaluate_organism", "plain_prompt", "remote_code",
           "weights_digest"]
