"""How a target's prompt groups decide its folds, permutations and estimand: one decision, recorded in its rows.

Prompts that share a template or subcategory are not exchangeable (issue 28). Which procedure is valid depends on
the design, and before issue 39 the stage left it quietly:
- with fewer than 2 x outer groups it fell back to prompt-level folds and permutations (the paper's procedure) and
  the report still printed the grouped verdict (at 6 families x 25 under a family null: 98% "decodable");
- with unequal group sizes a block was exchanged only with a block of its own size, so with every size distinct no
  block ever moved: the test kept each group's targets on its own activations (a within-group null) while the rows
  said "new prompts of new groups" (power 5% against a family-level effect the intervals saw in 98%).

`design(labels, grid)` decides, and says which procedure ran:

| groups | procedure | folds | permutations | estimand |
|---|---|---|---|---|
| none declared | `none` | prompt-level | plain | new prompts like these |
| >= MIN_GROUPS, every block has a same-size partner | `groups` | grouped, outer and inner K <= the groups a fold can hold | whole blocks among blocks of their size, rows shuffled inside (`blocks`, Winkler et al. 2014) | new prompts of new groups |
| >= MIN_GROUPS, some block alone in its size | `groups` | as above | every group's targets go to a group drawn by a permutation of all groups, rows drawn to the receiving group's size (`reassign`) | new prompts of new groups |
| 2 .. MIN_GROUPS - 1 | `too-few-groups` | prompt-level | plain | new prompts of the same groups only |

`reassign` is the group-level permutation of a cluster design (the unit of exchange is the group, whatever its size:
the permutation analogue of a cluster-level test, cf. Cameron, Gelbach & Miller 2008 on inference with few and
unequal clusters): a group of 17 prompts that receives a group of 3 takes each of its targets about 6 times, a
group of 3 that receives 17 takes 3 of them. It is exact only when sizes are equal (where it is the `blocks`
scheme); its size and power are measured by `perf/bench_coverage.py` on unequal designs (docs/probes.md). With
fewer than MIN_GROUPS groups no grouped test can reject at 0.05 (3 groups have 6 orders), so the rows take the
prompts as exchangeable, say so, and answer only "new prompts of the same groups": the report's verdict then has
its own words (`VERDICT_SCOPE`), never the grouped ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from interp.intervals import group_blocks

#: the fewest groups a grouped test is run on: 4 groups have 24 orders, the fewest above the 20 a permutation p of
#: 0.05 needs, and 4 outer folds of one group each leave 3 groups for the inner folds
MIN_GROUPS = 4

PROCEDURES = ("none", "groups", "too-few-groups")
SCHEMES = {"plain": "prompts permuted freely",
           "blocks": "whole groups exchanged with groups of the same size, prompts shuffled inside each group",
           "reassign": "every group's targets moved to another group by a permutation of all groups, rows drawn to the "
                       "receiving group's size (group sizes differ)"}
ESTIMANDS = {"groups": "new prompts of new groups (layout: of subcategories the probe was not trained on)",
             "none": "new prompts like these (prompts taken as independent)",
             "too-few-groups": "new prompts of the same groups (too few groups for a grouped test: prompt-level folds "
                               "and permutations)",
             "paper": "new prompts of the same groups (prompt-level folds and permutations: the paper's procedure)"}
#: what a verdict may claim under each procedure (the report's sentences use these words, and only these)
VERDICT_SCOPE = {"groups": "for new prompts of new groups",
                 "none": "for new prompts (no prompt groups declared: prompts taken as independent)",
                 "too-few-groups": "only among prompts of these same groups (too few groups to test new ones)"}


@dataclass(frozen=True)
class Design:
    """One target's prompt groups and what they imply (see the module docstring)."""

    procedure: str  #: PROCEDURES
    groups: np.ndarray | None  #: labels the folds, permutations and intervals follow (None: prompt-level)
    grid: Any  #: the probe grid with outer and inner folds the groups can fill
    scheme: str  #: SCHEMES key of the permutations
    n_groups: int | None = None  #: groups declared (None: none)
    sizes: tuple[int, ...] = ()  #: prompts per group, in order of first appearance
    note: str | None = None  #: what changed from the plain grouped design, in one sentence

    @property
    def estimand(self) -> str:
        return ESTIMANDS[self.procedure]

    @property
    def unpaired(self) -> bool:
        """Whether Delta intervals take the conservative unpaired bound (fewer than FEW_GROUPS groups)."""
        from interp.intervals import FEW_GROUPS

        return self.groups is not None and (self.n_groups or 0) < FEW_GROUPS

    def delta_interval(self, sse_a, sse_b, sst, n: int, ratio: float, level: float = 0.95):
        """The Delta interval this design calls for (paired, or the unpaired bound with few groups)."""
        from interp.intervals import delta_interval, unpaired_delta_interval

        f = unpaired_delta_interval if self.unpaired else delta_interval
        return f(sse_a, sse_b, sst, n, ratio, level, folds=self.interval_folds)

    @property
    def interval_folds(self) -> int | None:
        """K for a grouped interval's degrees of freedom (None: the prompt-level interval)."""
        return self.grid.outer if self.groups is not None else None

    def permutations(self, n: int, n_perm: int, seed: int) -> np.ndarray:
        """[n_perm, n] target row indices of the design's permutation scheme (seeded)."""
        from interp.probes import permutations

        if self.scheme == "reassign":
            return reassignments(self.groups, n_perm, seed)
        return permutations(n, n_perm, seed, self.groups if self.scheme == "blocks" else None)

    def fields(self) -> dict[str, Any]:
        """The row fields that say which procedure ran and what it answers."""
        out: dict[str, Any] = {"grouping": self.procedure, "estimand": self.estimand, "permutation": self.scheme}
        if self.n_groups is not None:
            out.update(n_groups=self.n_groups, group_sizes=f"{min(self.sizes)}-{max(self.sizes)}"
                       if min(self.sizes) != max(self.sizes) else str(self.sizes[0]))
        if self.groups is not None:
            out["folds"] = f"{self.grid.outer}x{self.grid.inner}"
            out["delta_interval"] = "unpaired bound (few groups)" if self.unpaired else "paired"
        if self.note:
            out["grouping_note"] = self.note
        return out


def design(labels: np.ndarray | None, grid: Any) -> Design:
    """The design for one target's prompts with these group labels (None: no groups declared) and the requested grid."""
    if labels is None:
        return Design("none", None, grid, "plain")
    labels = np.asarray(labels)
    sizes = tuple(len(b) for b in group_blocks(labels))
    count = len(sizes)
    if count < MIN_GROUPS:
        return Design("too-few-groups", None, grid, "plain", count, sizes,
                      f"only {count} prompt groups (a grouped test needs {MIN_GROUPS}): folds and permutations take the "
                      "prompts as exchangeable, and the rows answer only for new prompts of these same groups")
    outer = min(grid.outer, count)
    largest = int(np.ceil(count / outer))  # groups in the fullest test fold of KFold over the groups
    inner = min(grid.inner, count - largest)
    g = replace(grid, outer=outer, inner=inner)
    notes = []
    if (outer, inner) != (grid.outer, grid.inner):
        notes.append(f"{count} groups: {outer}x{inner}-fold grouped nested CV (asked {grid.outer}x{grid.inner})")
    from interp.intervals import FEW_GROUPS

    if count < FEW_GROUPS:
        notes.append(f"fewer than {FEW_GROUPS} groups: Delta intervals take the unpaired bound (wider)")
    partner = {s: sizes.count(s) > 1 for s in sizes}
    scheme = "blocks" if all(partner.values()) else "reassign"
    if scheme == "reassign":
        alone = sum(1 for s in sizes if not partner[s])
        notes.append(f"{alone} of {count} groups have no group of their size: permutations reassign whole groups "
                     "among all groups, rows drawn to each group's size")
    return Design("groups", labels, g, scheme, count, sizes, "; ".join(notes) or None)


def reassignments(groups: np.ndarray, n_perm: int, seed: int) -> np.ndarray:
    """[n_perm, n] target row indices: per draw a permutation of all groups, each group receiving the rows of the
    group it is sent, in a shuffled order, as many as it holds (a smaller source's rows each used equally often, up to
    one; a larger source's first rows of the shuffle). With equal sizes every draw is a permutation of the rows."""
    rng = np.random.default_rng(seed)
    blocks = group_blocks(groups)
    n = sum(len(b) for b in blocks)
    out = np.empty((n_perm, n), dtype=np.int64)
    for i in range(n_perm):
        order = rng.permutation(len(blocks))
        for b, src in enumerate(order):
            rows, need = blocks[src], len(blocks[b])
            reps = -(-need // len(rows))
            out[i, blocks[b]] = np.concatenate([rng.permutation(rows) for _ in range(reps)])[:need]
    return out


def moved_share(groups: np.ndarray | None, perms: np.ndarray) -> float | None:
    """The share of rows whose target comes from another group, over the permutations (None without groups): 0 means
    the test only shuffles inside groups (a within-group null), whatever the rows' estimand says."""
    if groups is None or not len(perms):
        return None
    g = np.asarray(groups)
    return float(np.mean(g[perms] != g[None, :]))


__all__ = ["Design", "ESTIMANDS", "MIN_GROUPS", "PROCEDURES", "SCHEMES", "VERDICT_SCOPE", "design", "moved_share",
           "reassignments"]
