"""The simulator's prefix cache: a radix tree of prompt token ids with a token budget and LRU eviction.

Like SGLang's RadixAttention cache, in the model's terms: a prompt's longest cached prefix is
found at admission (those tokens need no prefill), and the whole prompt is inserted when its
prefill completes. When the tree holds more than ``capacity_tokens`` tokens, the least recently
used leaves go first (a shared system prompt stays while its questions come and go). Edges hold
token tuples, so a 1,000-token prompt is matched in a few tuple comparisons.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


class _Node:
    __slots__ = ("children", "key", "last_use", "parent")

    def __init__(self, key: tuple[int, ...], parent: _Node | None, last_use: int) -> None:
        self.key = key
        self.children: dict[int, _Node] = {}
        self.parent = parent
        self.last_use = last_use


def _common(a: tuple[int, ...], b: Sequence[int], start: int) -> int:
    """Length of the common prefix of ``a`` and ``b[start:]``."""
    n = min(len(a), len(b) - start)
    if tuple(b[start : start + n]) == a[:n]:
        return n
    i = 0
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


class PrefixCache:
    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be >= 1, got {capacity_tokens}")
        self.capacity_tokens = capacity_tokens
        self.size_tokens = 0
        self._tick = 0
        self._root = _Node((), None, 0)

    def clear(self) -> None:
        self._root = _Node((), None, 0)
        self.size_tokens = 0

    def match(self, ids: Sequence[int]) -> int:
        """Tokens of the longest cached prefix of ``ids``; the nodes on its path count as used now."""
        self._tick += 1
        node, pos = self._root, 0
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                break
            n = _common(child.key, ids, pos)
            child.last_use = self._tick
            pos += n
            if n < len(child.key):
                break
            node = child
        return pos

    def insert(self, ids: Sequence[int]) -> None:
        """Cache all of ``ids`` (splitting an edge where it diverges), then evict down to the budget."""
        self._tick += 1
        node, pos = self._root, 0
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                leaf = _Node(tuple(ids[pos:]), node, self._tick)
                node.children[ids[pos]] = leaf
                self.size_tokens += len(leaf.key)
                break
            n = _common(child.key, ids, pos)
            if n < len(child.key):
                # Split the edge: the shared part becomes a node of its own.
                mid = _Node(child.key[:n], node, self._tick)
                node.children[ids[pos]] = mid
                child.key = child.key[n:]
                child.parent = mid
                mid.children[child.key[0]] = child
                child = mid
            child.last_use = self._tick
            node = child
            pos += n
        if self.size_tokens > self.capacity_tokens:
            self._evict()

    def _evict(self) -> None:
        leaves = [(n.last_use, id(n), n) for n in self._leaves()]
        heapq.heapify(leaves)
        while self.size_tokens > self.capacity_tokens and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            self.size_tokens -= len(leaf.key)
            if parent is not self._root and not parent.children:
                heapq.heappush(leaves, (parent.last_use, id(parent), parent))

    def _leaves(self) -> list[_Node]:
        out, stack = [], list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                out.append(node)
        return out
