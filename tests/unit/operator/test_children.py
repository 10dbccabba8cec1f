"""Every child object built from a spec: names, owner references, and the fields that matter."""

import base64

from msgstore_operator import naming
from msgstore_operator.children import (
    Owner,
    build_client_service,
    build_compaction_cronjob,
    build_config_map,
    build_headless_service,
    build_pdb,
    build_routing_config_map,
    build_spark_role,
    build_spark_role_binding,
    build_spark_service_account,
    build_statefulset,
    build_token_secret,
    desired_children,
)
from msgstore_operator.settings import config_hash, node_settings
from msgstore_operator.spec import parse_spec

OWNER = Owner(name="demo", namespace="ns1", uid="uid-123")


def container(sts):
    return sts["spec"]["template"]["spec"]["containers"][0]


def env_of(sts):
    return {e["name"]: e for e in container(sts)["env"]}


def assert_owned(obj):
    ref = obj["metadata"]["ownerReferences"][0]
    assert ref == {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStore",
        "name": "demo",
        "uid": "uid-123",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert obj["metadata"]["namespace"] == "ns1"
    assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "demo"


def test_statefulset_defaults():
    spec = parse_spec({})
    sts = build_statefulset(OWNER, spec, 3, "abc", "demo-token")
    assert_owned(sts)
    s = sts["spec"]
    assert s["replicas"] == 3 and s["serviceName"] == "demo-nodes"
    assert s["selector"]["matchLabels"] == naming.selector_labels("demo")
    tpl = s["template"]
    assert tpl["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION] == "abc"
    assert naming.selector_labels("demo").items() <= tpl["metadata"]["labels"].items()
    c = container(sts)
    assert c["command"] == ["msgstore", "serve"] and c["image"] == "msgstore:0.1.0"
    https = {"port": "http", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", **https}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", **https}
    assert c["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "kafka", "containerPort": 9092, "protocol": "TCP"},
    ]
    assert c["envFrom"] == [{"configMapRef": {"name": "demo-config"}}]
    env = env_of(sts)
    assert env["MSGSTORE_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["MSGSTORE_ADVERTISE_ADDRESS"]["value"] == (
        "https://$(MSGSTORE_NODE_ID).demo-nodes.ns1.svc.cluster.local:8080"
    )
    assert env["MSGSTORE_TLS_CERT"]["value"] == "/etc/msgstore/tls/$(MSGSTORE_NODE_ID).crt"
    assert env["MSGSTORE_TLS_KEY"]["value"] == "/etc/msgstore/tls/$(MSGSTORE_NODE_ID).key"
    assert env["MSGSTORE_TLS_CA"]["value"] == "/etc/msgstore/ca/ca.crt"
    assert env["MSGSTORE_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "demo-token",
        "key": "token",
    }
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["data"]["mountPath"] == naming.DATA_DIR
    assert mounts["routing"]["mountPath"] == naming.ROUTING_DIR and mounts["routing"]["readOnly"]
    assert mounts["access"] == {
        "name": "access",
        "mountPath": "/etc/msgstore/access",
        "readOnly": True,
    }
    pod = tpl["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["volumes"] == [
        {"name": "routing", "configMap": {"name": "demo-routing"}},
        {"name": "access", "secret": {"secretName": "demo-access", "defaultMode": 0o440}},
        {"name": "tls", "secret": {"secretName": "demo-node-certs", "defaultMode": 0o440}},
        {"name": "ca", "configMap": {"name": "demo-ca"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    claim = s["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in claim["spec"]
    assert s["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }


def test_statefulset_follows_the_spec():
    spec = parse_spec(
        {
            "image": "reg/ms:2",
            "port": 9000,
            "terminationGracePeriodSeconds": 120,
            "storage": {"size": "5Gi", "storageClassName": "fast", "deleteClaim": True},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            "auth": {"enabled": False},
            "tiering": {"enabled": True, "url": "s3://b/x", "credentialsSecret": "s3-creds"},
            "podTemplate": {
                "labels": {"team": "data", "app.kubernetes.io/instance": "evil"},
                "annotations": {"a": "b"},
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "affinity": {"nodeAffinity": {"x": 1}},
                "priorityClassName": "high",
            },
        }
    )
    sts = build_statefulset(OWNER, spec, 2, "h", None)
    c, pod = container(sts), sts["spec"]["template"]["spec"]
    assert c["image"] == "reg/ms:2" and c["ports"][0]["containerPort"] == 9000
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}}
    assert "MSGSTORE_TOKEN" not in env_of(sts)
    assert {"secretRef": {"name": "s3-creds"}} in c["envFrom"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "data" and labels["app.kubernetes.io/instance"] == "demo"
    assert sts["spec"]["template"]["metadata"]["annotations"]["a"] == "b"
    assert pod["nodeSelector"] == {"disk": "ssd"} and pod["priorityClassName"] == "high"
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["affinity"] == {"nodeAffinity": {"x": 1}}
    assert pod["terminationGracePeriodSeconds"] == 120
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert (
        claim["storageClassName"] == "fast" and claim["resources"]["requests"]["storage"] == "5Gi"
    )
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


def test_settings_and_config_hash():
    spec = parse_spec({"flush": {"mode": "async", "maxAgeMs": 5}, "segmentBytes": 2097152})
    env = node_settings(spec)
    assert env["MSGSTORE_FLUSH_MODE"] == "async" and env["MSGSTORE_FLUSH_MAX_AGE_MS"] == "5"
    assert env["MSGSTORE_SEGMENT_BYTES"] == "2097152"
    assert env["MSGSTORE_ROUTING_FILE"] == naming.ROUTING_FILE
    assert env["MSGSTORE_DEFAULT_RETENTION_HOURS"] == "168"
    assert "MSGSTORE_OBJECT_STORE_URL" not in env and "MSGSTORE_COMPACT_AFTER_S" not in env
    spark = node_settings(parse_spec({"compaction": {"mode": "spark", "schedule": "@daily"}}))
    assert int(spark["MSGSTORE_COMPACT_AFTER_S"]) > 365 * 24 * 3600
    assert all(isinstance(v, str) for v in env.values())
    assert config_hash(env) == config_hash(dict(env))
    assert config_hash(env) != config_hash(node_settings(parse_spec({})))
    tiered = node_settings(
        parse_spec(
            {
                "tiering": {
                    "enabled": True,
                    "url": "s3://b/p",
                    "endpoint": "http://m:9000",
                    "uploadAfterHours": 0.5,
                }
            }
        )
    )
    assert tiered["MSGSTORE_OBJECT_STORE_URL"] == "s3://b/p"
    assert (
        tiered["MSGSTORE_UPLOAD_AFTER_S"] == "1800"
        and tiered["AWS_ENDPOINT_URL"] == "http://m:9000"
    )


def test_config_maps_and_secret():
    cm = build_config_map(OWNER, {"B": "2", "A": "1"})
    assert_owned(cm)
    assert cm["metadata"]["name"] == "demo-config" and list(cm["data"]) == ["A", "B"]
    rcm = build_routing_config_map(OWNER, "{}")
    assert rcm["metadata"]["name"] == "demo-routing" and rcm["data"] == {"routing.json": "{}"}
    secret = build_token_secret(OWNER, "s3cret", "token")
    assert_owned(secret)
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"


def test_services_and_pdb():
    spec = parse_spec({"port": 9100})
    headless, client = build_headless_service(OWNER, spec), build_client_service(OWNER, spec)
    for svc in (headless, client):
        assert_owned(svc)
        assert svc["spec"]["selector"] == naming.selector_labels("demo")
        assert svc["spec"]["ports"][0]["port"] == 9100
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
    assert headless["metadata"]["name"] == "demo-nodes" and client["metadata"]["name"] == "demo"
    pdb = build_pdb(OWNER)
    assert_owned(pdb)
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": naming.selector_labels("demo")},
    }


def test_spark_children():
    spec = parse_spec(
        {
            "compaction": {
                "mode": "spark",
                "schedule": "*/30 * * * *",
                "spark": {
                    "image": "sp:1",
                    "executors": 3,
                    "executorMemory": "4g",
                    "executorRequestCores": "300m",
                },
            }
        }
    )
    sa, role, binding = (
        build_spark_service_account(OWNER),
        build_spark_role(OWNER),
        build_spark_role_binding(OWNER),
    )
    for obj in (sa, role, binding):
        assert_owned(obj)
        assert obj["metadata"]["name"] == "demo-spark"
    assert "pods" in role["rules"][0]["resources"] and "create" in role["rules"][0]["verbs"]
    # Spark 4.3's submit server-side-applies a NetworkPolicy for the executors
    (netpol,) = [r for r in role["rules"] if r["apiGroups"] == ["networking.k8s.io"]]
    assert netpol["resources"] == ["networkpolicies"]
    assert set(netpol["verbs"]) == {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-spark", "namespace": "ns1"}
    ]
    cj = build_compaction_cronjob(
        OWNER, spec, "http://demo.ns1.svc.cluster.local:8080", "demo-token"
    )
    assert_owned(cj)
    assert cj["spec"]["schedule"] == "*/30 * * * *" and cj["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "demo-spark" and pod["restartPolicy"] == "Never"
    c = pod["containers"][0]
    assert c["image"] == "sp:1" and c["command"] == ["/opt/spark/bin/spark-submit"]
    args = c["args"]
    assert args[args.index("--master") + 1] == "k8s://https://kubernetes.default.svc:443"
    assert args[args.index("--deploy-mode") + 1] == "cluster"
    confs = {
        args[i + 1].split("=", 1)[0]: args[i + 1].split("=", 1)[1]
        for i, a in enumerate(args)
        if a == "--conf"
    }
    assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == "demo-spark"
    assert confs["spark.kubernetes.namespace"] == "ns1"
    assert confs["spark.executor.instances"] == "3" and confs["spark.executor.memory"] == "4g"
    assert confs["spark.kubernetes.executor.request.cores"] == "300m"
    assert "spark.kubernetes.driver.request.cores" not in confs
    assert confs["spark.kubernetes.driver.secretKeyRef.MSGSTORE_TOKEN"] == "demo-token:token"
    assert args[-3].endswith("spark/jobs/compact.py")
    assert args[-2:] == ["--endpoint", "http://demo.ns1.svc.cluster.local:8080"]
    assert not any("s3cret" in a for a in args)


def test_desired_children_node_mode():
    state = desired_children(OWNER, parse_spec({}), 3, "{}", "cluster.local")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in state.objects]
    assert kinds == [
        ("ConfigMap", "demo-config"),
        ("ConfigMap", "demo-routing"),
        ("ConfigMap", "demo-spark-templates"),
        ("Service", "demo-nodes"),
        ("Service", "demo"),
        ("NetworkPolicy", "demo-nodes"),
        ("StatefulSet", "demo"),
        ("PodDisruptionBudget", "demo"),
    ]
    assert {r.kind for r in state.absent if r.kind != "Service"} == {
        "CronJob",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "Deployment",  # the web console, off by default
    }
    # Without an external listener, no node has a NodePort Service of its own.
    assert {r.name for r in state.absent if r.kind == "Service"} >= {
        "demo-0-external",
        "demo-1-external",
        "demo-2-external",
    }
    assert state.token_secret == "demo-token"
    sts = state.objects[6]
    assert (
        sts["spec"]["template"]["metadata"]["annotations"][naming.CONFIG_HASH_ANNOTATION]
        == state.config_hash
    )


def test_desired_children_spark_mode_and_user_token():
    spec = parse_spec(
        {"compaction": {"mode": "spark", "schedule": "@hourly"}, "auth": {"tokenSecret": "mine"}}
    )
    state = desired_children(OWNER, spec, 3, "{}", "cluster.local")
    assert {o["kind"] for o in state.objects} >= {
        "CronJob",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    }
    assert [r.name for r in state.absent if r.kind != "Service"] == ["demo-console"]
    assert state.token_secret == "mine"


def test_routing_change_does_not_roll_pods():
    a = desired_children(OWNER, parse_spec({}), 3, '{"generation": 1}', "cluster.local")
    b = desired_children(OWNER, parse_spec({}), 3, '{"generation": 2}', "cluster.local")
    assert a.objects[6] == b.objects[6]  # nodes reload the mounted file; no restart
    c = desired_children(OWNER, parse_spec({"flush": {"mode": "async"}}), 3, "{}", "cluster.local")
    assert c.config_hash != a.config_hash


def test_the_node_reads_every_setting_the_operator_gives_it():
    """The pod's environment, as the kubelet would expand it, is accepted by the node's own
    settings resolver, and every MSGSTORE_* name is one the node knows."""
    from storage_node.server.settings import resolve_settings

    spec = parse_spec(
        {
            "flush": {"mode": "async", "maxAgeMs": 7},
            "tiering": {"enabled": True, "url": "file:///tiers", "uploadAfterHours": 2},
            "compaction": {"mode": "spark", "schedule": "@daily"},
            "tls": {"enabled": False},
        }
    )
    sts = build_statefulset(OWNER, spec, 3, "h", "demo-token")
    env = dict(node_settings(spec))
    env["MSGSTORE_NODE_ID"] = "demo-1"
    env["MSGSTORE_NODE_IP"] = "10.1.2.3"
    env["MSGSTORE_TOKEN"] = "t0ken"
    advertise = env_of(sts)["MSGSTORE_ADVERTISE_ADDRESS"]["value"]
    env["MSGSTORE_ADVERTISE_ADDRESS"] = advertise.replace("$(MSGSTORE_NODE_ID)", "demo-1")
    settings = resolve_settings(env=env)
    assert settings.node_id == "demo-1" and settings.port == 8080 and settings.host == "0.0.0.0"
    assert settings.address == "http://demo-1.demo-nodes.ns1.svc.cluster.local:8080"
    assert settings.routing_file == naming.ROUTING_FILE and settings.token == "t0ken"
    assert settings.store["flush_mode"] == "async" and settings.store["flush_max_age_ms"] == 7
    assert settings.store["object_store_url"] == "file:///tiers"
    assert settings.store["upload_after_s"] == 7200
    assert settings.store["node_ip"] == "10.1.2.3"
    known = {f"MSGSTORE_{name.upper()}" for name in vars(settings) if name != "store"}
    known |= {f"MSGSTORE_{name.upper()}" for name in settings.store}
    known |= {"MSGSTORE_" + n.upper() for n in ("data_dir",)}
    unknown = {name for name in env if name.startswith("MSGSTORE_")} - known
    assert not unknown, f"settings the node does not read: {unknown}"


def test_external_listener_gives_every_node_its_own_node_port_and_address():
    from msgstore_operator.routing import build_routing_document

    spec = parse_spec({"external": {"enabled": True, "host": "127.0.0.1", "nodePortBase": 30081}})
    state = desired_children(OWNER, spec, 3, "{}", "cluster.local")
    services = {
        o["metadata"]["name"]: o["spec"]
        for o in state.objects
        if o["kind"] == "Service" and o["spec"].get("type") == "NodePort"
    }
    assert sorted(services) == ["demo-0-external", "demo-1-external", "demo-2-external"]
    for ordinal in range(3):
        svc = services[f"demo-{ordinal}-external"]
        assert svc["ports"][0]["nodePort"] == 30081 + ordinal
        assert svc["selector"]["statefulset.kubernetes.io/pod-name"] == f"demo-{ordinal}"
    # Nodes beyond the replicas (after a scale-down) lose their Service.
    assert "demo-3-external" in {r.name for r in state.absent if r.kind == "Service"}
    assert not {r.name for r in state.absent} & set(services)
    doc = build_routing_document("demo", "ns1", spec, 3, {}, 1, "cluster.local")
    assert [n["external_address"] for n in doc["nodes"]] == [
        "https://127.0.0.1:30081",
        "https://127.0.0.1:30082",
        "https://127.0.0.1:30083",
    ]
    plain = build_routing_document("demo", "ns1", parse_spec({}), 3, {}, 1, "cluster.local")
    assert all("external_address" not in n for n in plain["nodes"])
    # The external addresses follow the store's scheme (TLS is on by default).
    no_tls = parse_spec(
        {"tls": {"enabled": False}, "external": {"enabled": True, "nodePortBase": 30081}}
    )
    doc = build_routing_document("demo", "ns1", no_tls, 1, {}, 1, "cluster.local")
    assert doc["nodes"][0]["external_address"] == "http://127.0.0.1:30081"
