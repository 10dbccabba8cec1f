"""The operator's own settings: environment variables read once, at start-up.

One pydantic-settings model (the node reads its MSGSTORE_* settings the same way); the
Helm chart sets these variables on the operator's Deployment. Names and defaults are listed
in docs/CONFIG.md. A bad value stops the operator at start-up with a message naming the
variable; an empty (or blank) one counts as unset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pydantic
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .spec import SecurityDefaults

PREFIX = "MSGSTORE_OPERATOR_"


class SettingsError(ValueError):
    """An operator setting that cannot be used; the message names the variable."""


class OperatorSettings(BaseSettings):
    """Every operator setting, with its default; see docs/CONFIG.md."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_ignore_empty=True, extra="ignore", frozen=True
    )

    interval_s: float = pydantic.Field(default=10.0, gt=0)  # seconds between status refreshes
    cluster_domain: str = "cluster.local"
    # Images used when a spec names none (None: the operator's built-in defaults).
    node_image: str | None = pydantic.Field(default=None, validation_alias="MSGSTORE_NODE_IMAGE")
    spark_image: str | None = pydantic.Field(default=None, validation_alias="MSGSTORE_SPARK_IMAGE")
    # Security defaults for what a spec leaves unset.
    tls: bool = True
    network_policy: bool = True
    restricted_pods: bool = True
    scrape_annotations: bool = False  # prometheus.io/* annotations on node pods
    cert_validity_days: int = pydantic.Field(default=90, ge=1, le=3650)
    namespace: str | None = None  # the operator's namespace, let through the NetworkPolicy
    claim_grace_s: float = pydantic.Field(default=120.0, ge=0)  # Pending claim before Degraded
    # seconds a replicated log's leader may not answer before the controller fails it over
    failover_timeout_s: float = pydantic.Field(default=5.0, gt=0, le=600)

    @property
    def default_images(self) -> tuple[str | None, str | None]:
        return self.node_image, self.spark_image

    @property
    def security(self) -> SecurityDefaults:
        return SecurityDefaults(
            tls=self.tls,
            network_policy=self.network_policy,
            restricted_pods=self.restricted_pods,
            scrape_annotations=self.scrape_annotations,
            certificate_validity_days=self.cert_validity_days,
        )


def env_name(field: str) -> str:
    """The environment variable of a settings field."""
    alias = OperatorSettings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else PREFIX + field.upper()


class _Given(EnvSettingsSource):
    """The environment source reading a given mapping instead of the process environment."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in self._given.items() if value.strip()}


def read_settings(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """The settings from ``env`` (the process environment by default); SettingsError names
    the first variable with a bad value."""
    given = os.environ if env is None else env

    class FromEnv(OperatorSettings):
        @classmethod
        def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], *_: Any, **__: Any
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (_Given(settings_cls, given),)

    try:
        return FromEnv()
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = env_name(str(err["loc"][0]))
        raise SettingsError(f"{name}={err.get('input')!r}: {err['msg']}") from None
