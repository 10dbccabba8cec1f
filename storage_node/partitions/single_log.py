"""A node without replicated logs: one log of factor 1, always led here."""

from __future__ import annotations

from storage_node.store import Store


class SingleLog:
    """The ``LogSet`` of an unreplicated node: its one store serves every partition."""

    offsets_in_log = False

    def __init__(self, store: Store) -> None:
        self.store = store

    def own_store(self) -> Store | None:
        return self.store

    def leader_store(self, log_id: str | None) -> Store:
        return self.store

    def hosted_store(self, log_id: str | None) -> Store | None:
        return self.store

    def led_stores(self) -> list[Store]:
        return [self.store]

    def led_logs(self) -> dict[str, Store]:
        return {"": self.store}

    def hosted_logs(self) -> dict[str, tuple[Store, bool]]:
        return {"": (self.store, True)}

    def hosted_stores(self) -> list[Store]:
        return [self.store]

    async def copies(self, log_id: str | None, store: Store) -> int | None:
        return None

    def close(self) -> None:
        self.store.close()
