"""The MessageStore spec as typed values, with the same defaults as the CRD.

The API server applies the CRD's defaults, but the builders must also work on a spec read
from a file or written by hand in a test, so the defaults live here too; a unit test checks
that both agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    compression: str = "lz4"
    retention_hours: float | None = None


@dataclass(frozen=True)
class StorageSpec:
    size: str = "10Gi"
    storage_class_name: str | None = None
    delete_claim: bool = False


@dataclass(frozen=True)
class FlushSpec:
    mode: str = "sync"
    max_age_ms: int = 200
    max_messages: int = 100000
    max_bytes: int = 16777216


@dataclass(frozen=True)
class ExternalSpec:
    """Per-node NodePorts for clients outside the cluster (the CRD's ``external``)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    node_port_base: int | None = None
    kafka_node_port_base: int | None = None

    def node_port(self, ordinal: int) -> int | None:
        if not self.enabled or self.node_port_base is None:
            return None
        return self.node_port_base + ordinal

    def kafka_node_port(self, ordinal: int) -> int | None:
        """Node ``ordinal``'s external Kafka NodePort (None: no external Kafka listener)."""
        if not self.enabled or self.kafka_node_port_base is None:
            return None
        return self.kafka_node_port_base + ordinal


@dataclass(frozen=True)
class KafkaSpec:
    """The Kafka listener of every node (the CRD's ``kafka``)."""

    enabled: bool = True
    port: int = 9092
    external_port: int = 9094


@dataclass(frozen=True)
class TieringSpec:
    enabled: bool = False
    url: str | None = None
    endpoint: str | None = None
    credentials_secret: str | None = None
    upload_after_hours: float = 1.0


@dataclass(frozen=True)
class SparkSpec:
    image: str = "msgstore-spark:0.1.0"
    executors: int = 2
    driver_cores: int = 1
    driver_memory: str = "1g"
    executor_cores: int = 1
    executor_memory: str = "2g"
    driver_request_cores: str | None = None
    executor_request_cores: str | None = None


@dataclass(frozen=True)
class CompactionSpec:
    mode: str = "node"
    schedule: str | None = None
    spark: SparkSpec = field(default_factory=SparkSpec)


@dataclass(frozen=True)
class AuthSpec:
    enabled: bool = True
    token_secret: str | None = None
    token_key: str = "token"


@dataclass(frozen=True)
class IssuerRef:
    """A cert-manager Issuer or ClusterIssuer that signs the node certificates."""

    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"


@dataclass(frozen=True)
class TlsSpec:
    """HTTPS on the node API: certificates from the operator's own CA, or cert-manager."""

    enabled: bool = True
    issuer_ref: IssuerRef | None = None
    certificate_validity_days: int = 90


@dataclass(frozen=True)
class NetworkPolicySpec:
    """Who may connect to the nodes besides the client-labelled pods and the nodes."""

    enabled: bool = True
    ingress_from: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class SecurityDefaults:
    """Operator-wide defaults for what a spec leaves unset (the chart's values set them)."""

    tls: bool = True
    network_policy: bool = True
    restricted_pods: bool = True
    certificate_validity_days: int = 90
    # node pods carry the prometheus.io/* scrape annotations (the chart's monitoring values)
    scrape_annotations: bool = False


@dataclass(frozen=True)
class ConsoleSpec:
    """The store's web console (``msgstore console``), off unless asked for: every pod
    that serves pages is one more thing to secure (docs/CONSOLE.md)."""

    enabled: bool = False
    admin: bool = False  # offer group offset resets (the user's token still decides)
    node_port: int | None = None  # a NodePort Service instead of ClusterIP
    resources: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PodTemplateSpec:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None


@dataclass(frozen=True)
class StoreSpec:
    replicas: int = 3
    # copies of every node's commit log (docs/REPLICATION.md); min_in_sync None: the
    # default (2 with factor 3, else the factor)
    replication_factor: int = 1
    min_in_sync: int | None = None
    image: str = "msgstore:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    port: int = 8080
    termination_grace_period_seconds: int = 60
    storage: StorageSpec = field(default_factory=StorageSpec)
    resources: Mapping[str, Any] = field(default_factory=dict)
    flush: FlushSpec = field(default_factory=FlushSpec)
    segment_bytes: int = 1073741824
    index_slots: int = 5000000
    index_items: int = 20000000
    retention_hours: float = 168.0
    topics: tuple[TopicSpec, ...] = ()
    tiering: TieringSpec = field(default_factory=TieringSpec)
    external: ExternalSpec = field(default_factory=ExternalSpec)
    kafka: KafkaSpec = field(default_factory=KafkaSpec)
    compaction: CompactionSpec = field(default_factory=CompactionSpec)
    auth: AuthSpec = field(default_factory=AuthSpec)
    pod_template: PodTemplateSpec = field(default_factory=PodTemplateSpec)
    tls: TlsSpec = field(default_factory=TlsSpec)
    network_policy: NetworkPolicySpec = field(default_factory=NetworkPolicySpec)
    console: ConsoleSpec = field(default_factory=ConsoleSpec)
    # Pods comply with Pod Security "restricted" (off only for development images).
    restricted_pods: bool = True
    # Node pods carry prometheus.io/scrape, port, path and scheme annotations.
    scrape_annotations: bool = False

    @property
    def scheme(self) -> str:
        return "https" if self.tls.enabled else "http"

    def kafka_node_port(self, ordinal: int) -> int | None:
        """Node ``ordinal``'s external Kafka NodePort, when both listeners are on."""
        return self.external.kafka_node_port(ordinal) if self.kafka.enabled else None

    def topic_retention_hours(self, topic: TopicSpec) -> float:
        return float(
            topic.retention_hours if topic.retention_hours is not None else self.retention_hours
        )


def _get(raw: Mapping[str, Any] | None, key: str, default: Any) -> Any:
    if not raw:
        return default
    value = raw.get(key)
    return default if value is None else value


DEFAULT_IMAGE = StoreSpec.image
DEFAULT_SPARK_IMAGE = SparkSpec.image


def parse_spec(
    raw: Mapping[str, Any] | None,
    default_image: str | None = None,
    default_spark_image: str | None = None,
    defaults: SecurityDefaults | None = None,
) -> StoreSpec:
    """Typed spec from the resource's ``spec`` (missing fields get the CRD's defaults).

    The images have no CRD default: an unset image means the operator's own default (the
    Helm chart sets it to the images it was released with).
    """
    raw = raw or {}
    d = StoreSpec(image=default_image or DEFAULT_IMAGE)
    storage = raw.get("storage") or {}
    flush = raw.get("flush") or {}
    index = raw.get("index") or {}
    tiering = raw.get("tiering") or {}
    external = raw.get("external") or {}
    kafka = raw.get("kafka") or {}
    compaction = raw.get("compaction") or {}
    spark = compaction.get("spark") or {}
    auth = raw.get("auth") or {}
    pod = raw.get("podTemplate") or {}
    tls = raw.get("tls") or {}
    netpol = raw.get("networkPolicy") or {}
    console = raw.get("console") or {}
    issuer = tls.get("issuerRef") or None
    sec = defaults or SecurityDefaults()
    ds, dsp = d.storage, SparkSpec(image=default_spark_image or DEFAULT_SPARK_IMAGE)
    return StoreSpec(
        replicas=int(_get(raw, "replicas", d.replicas)),
        replication_factor=int(_get(raw, "replicationFactor", d.replication_factor)),
        min_in_sync=int(raw["minInSync"]) if raw.get("minInSync") is not None else None,
        image=str(_get(raw, "image", d.image)),
        image_pull_policy=str(_get(raw, "imagePullPolicy", d.image_pull_policy)),
        image_pull_secrets=tuple(s["name"] for s in raw.get("imagePullSecrets") or ()),
        port=int(_get(raw, "port", d.port)),
        termination_grace_period_seconds=int(
            _get(raw, "terminationGracePeriodSeconds", d.termination_grace_period_seconds)
        ),
        storage=StorageSpec(
            size=str(_get(storage, "size", ds.size)),
            storage_class_name=storage.get("storageClassName"),
            delete_claim=bool(_get(storage, "deleteClaim", ds.delete_claim)),
        ),
        resources=dict(raw.get("resources") or {}),
        flush=FlushSpec(
            mode=str(_get(flush, "mode", d.flush.mode)),
            max_age_ms=int(_get(flush, "maxAgeMs", d.flush.max_age_ms)),
            max_messages=int(_get(flush, "maxMessages", d.flush.max_messages)),
            max_bytes=int(_get(flush, "maxBytes", d.flush.max_bytes)),
        ),
        segment_bytes=int(_get(raw, "segmentBytes", d.segment_bytes)),
        index_slots=int(_get(index, "slots", d.index_slots)),
        index_items=int(_get(index, "items", d.index_items)),
        retention_hours=float(_get(raw, "retentionHours", d.retention_hours)),
        topics=tuple(
            TopicSpec(
                name=str(t["name"]),
                partitions=int(_get(t, "partitions", 1)),
                compression=str(_get(t, "compression", "lz4")),
                retention_hours=(
                    float(t["retentionHours"]) if t.get("retentionHours") is not None else None
                ),
            )
            for t in raw.get("topics") or ()
        ),
        tiering=TieringSpec(
            enabled=bool(_get(tiering, "enabled", False)),
            url=tiering.get("url"),
            endpoint=tiering.get("endpoint"),
            credentials_secret=tiering.get("credentialsSecret"),
            upload_after_hours=float(_get(tiering, "uploadAfterHours", 1.0)),
        ),
        external=ExternalSpec(
            enabled=bool(_get(external, "enabled", False)),
            host=str(_get(external, "host", "127.0.0.1")),
            node_port_base=(
                int(external["nodePortBase"]) if external.get("nodePortBase") is not None else None
            ),
            kafka_node_port_base=(
                int(external["kafkaNodePortBase"])
                if external.get("kafkaNodePortBase") is not None
                else None
            ),
        ),
        kafka=KafkaSpec(
            enabled=bool(_get(kafka, "enabled", d.kafka.enabled)),
            port=int(_get(kafka, "port", d.kafka.port)),
            external_port=int(_get(kafka, "externalPort", d.kafka.external_port)),
        ),
        compaction=CompactionSpec(
            mode=str(_get(compaction, "mode", "node")),
            schedule=compaction.get("schedule"),
            spark=SparkSpec(
                image=str(_get(spark, "image", dsp.image)),
                executors=int(_get(spark, "executors", dsp.executors)),
                driver_cores=int(_get(spark, "driverCores", dsp.driver_cores)),
                driver_memory=str(_get(spark, "driverMemory", dsp.driver_memory)),
                executor_cores=int(_get(spark, "executorCores", dsp.executor_cores)),
                executor_memory=str(_get(spark, "executorMemory", dsp.executor_memory)),
                driver_request_cores=spark.get("driverRequestCores"),
                executor_request_cores=spark.get("executorRequestCores"),
            ),
        ),
        auth=AuthSpec(
            enabled=bool(_get(auth, "enabled", True)),
            token_secret=auth.get("tokenSecret"),
            token_key=str(_get(auth, "tokenKey", "token")),
        ),
        pod_template=PodTemplateSpec(
            labels=dict(pod.get("labels") or {}),
            annotations=dict(pod.get("annotations") or {}),
            node_selector=dict(pod.get("nodeSelector") or {}),
            tolerations=tuple(pod.get("tolerations") or ()),
            affinity=pod.get("affinity"),
            priority_class_name=pod.get("priorityClassName"),
        ),
        tls=TlsSpec(
            enabled=bool(_get(tls, "enabled", sec.tls)),
            issuer_ref=(
                IssuerRef(
                    name=str(issuer["name"]),
                    kind=str(_get(issuer, "kind", "Issuer")),
                    group=str(_get(issuer, "group", "cert-manager.io")),
                )
                if issuer
                else None
            ),
            certificate_validity_days=int(
                _get(tls, "certificateValidityDays", sec.certificate_validity_days)
            ),
        ),
        network_policy=NetworkPolicySpec(
            enabled=bool(_get(netpol, "enabled", sec.network_policy)),
            ingress_from=tuple(netpol.get("ingressFrom") or ()),
        ),
        console=ConsoleSpec(
            enabled=bool(_get(console, "enabled", False)),
            admin=bool(_get(console, "admin", False)),
            node_port=int(console["nodePort"]) if console.get("nodePort") is not None else None,
            resources=dict(console.get("resources") or {}),
        ),
        restricted_pods=sec.restricted_pods,
        scrape_annotations=sec.scrape_annotations,
    )


def replication_problem(spec: StoreSpec) -> str | None:
    """Why the spec's replication settings cannot work (None when they can)."""
    factor, min_in_sync = spec.replication_factor, spec.min_in_sync
    if not 1 <= factor <= 3:
        return f"replicationFactor must be 1, 2 or 3, not {factor}"
    if factor > spec.replicas:
        return f"replicationFactor {factor} needs at least {factor} replicas, not {spec.replicas}"
    if min_in_sync is not None and not 1 <= min_in_sync <= factor:
        return f"minInSync must be from 1 to replicationFactor ({factor}), not {min_in_sync}"
    return None
