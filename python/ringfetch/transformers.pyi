"""Type stubs of ringfetch.transformers (a transformers MoE model with its experts served from its files)."""
import os
from typing import Any

from . import Pipeline

def parse_budget(budget: int | str) -> int: ...
def hint_count(precision: float, hinted: int, top_k: int, forwards: int) -> int: ...

class ExpertServer:
    model_type: str
    prefetch: bool
    budget: int
    slots: int
    slot_bytes: int
    expert_bytes: int
    blocks_per_expert: int
    top_k: int
    @property
    def closed(self) -> bool: ...
    @property
    def pipeline(self) -> Pipeline | None: ...
    def stats(self) -> dict[str, Any]: ...
    def describe(self) -> str: ...
    def close(self) -> None: ...

def from_pretrained(
    model_dir: str | os.PathLike[str],
    memory_budget: int | str,
    *,
    backend: str | None = None,
    prefetch: bool = True,
    **hf_kwargs: Any,
) -> Any: ...
