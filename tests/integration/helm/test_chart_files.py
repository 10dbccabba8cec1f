"""Checks of the chart, image and cluster files that need no helm binary and no cluster."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm" / "msgstore"
SCRIPTS = sorted((REPO / "scripts").glob("*.sh"))


def test_chart_crds_are_byte_identical_copies_of_the_crds():
    sources = sorted((REPO / "crds").iterdir())
    copies = sorted((CHART / "crds").iterdir())
    assert [p.name for p in copies] == [p.name for p in sources]
    assert [p.name for p in sources] == ["messagestore.yaml", "messagestoreuser.yaml"]
    for source, copy in zip(sources, copies, strict=True):
        assert copy.read_bytes() == source.read_bytes(), (
            f"helm/msgstore/crds/{copy.name} differs from crds/{source.name}: "
            f"copy it again (cp crds/{source.name} helm/msgstore/crds/)"
        )


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "msgstore"
    assert chart["type"] == "application"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"], "chart appVersion must follow the package"


def test_values_schema_is_valid_json_and_covers_every_top_level_value():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False
    assert set(values) <= set(schema["properties"]), set(values) - set(schema["properties"])
    for key, sub in values.items():
        if isinstance(sub, dict) and schema["properties"][key].get("additionalProperties") is False:
            assert set(sub) <= set(schema["properties"][key]["properties"]), key


def test_default_images_match_the_operator_defaults():
    """The chart's default images are the ones the operator falls back to without its env."""
    from msgstore_operator.spec import DEFAULT_IMAGE, DEFAULT_SPARK_IMAGE

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert f"{values['image']['repository']}:{values['image']['tag'] or version}" == DEFAULT_IMAGE
    spark = values["spark"]["image"]
    assert f"{spark['repository']}:{spark['tag'] or version}" == DEFAULT_SPARK_IMAGE


def test_spark_image_paths_match_the_job_submission_and_kind_up():
    """Where the Spark image puts spark-submit, the jobs and the sample data is where the
    submit pod, the operator and kind-up look (tests/integration/images runs the image itself)."""
    dockerfile = (REPO / "docker" / "spark.Dockerfile").read_text().replace("\\\n", " ")
    from msgstore_operator.spark_job import JOBS_DIR, SPARK_SUBMIT

    assert re.search(
        rf"^COPY jobs/ {re.escape(JOBS_DIR.removeprefix('local://'))}/$", dockerfile, re.M
    )
    assert SPARK_SUBMIT == "/opt/spark/bin/spark-submit"
    assert "SPARK_HOME=/opt/spark" in dockerfile and "/opt/spark/bin" in dockerfile
    sample = re.search(
        r'^SAMPLE_IN_IMAGE="file://(\S+)"', (REPO / "scripts" / "kind-up.sh").read_text(), re.M
    ).group(1)
    assert f"ensure_sample_file('{sample}', 100000)" in dockerfile
    compact = (REPO / "operator" / "msgstore_operator" / "children" / "spark.py").read_text()
    assert f'"{JOBS_DIR}/compact.py"' in compact or "spark_job" in compact


def test_dockerfiles_copy_only_what_the_build_script_stages():
    """The images are built from a context scripts/build-images.sh stages (wheels, the
    msgstore wheel, entrypoint, jobs), never from the repository, and need no network."""
    script = (REPO / "scripts" / "build-images.sh").read_text()
    for name in ("Dockerfile", "spark.Dockerfile"):
        text = (REPO / "docker" / name).read_text()
        assert not re.search(r"^# *syntax=", text, re.M), "a syntax line makes BuildKit pull"
        for line in text.splitlines():
            m = re.match(r"^COPY (?!--from)(.+) \S+$", line.strip())
            if m:
                for src in m.group(1).split():
                    assert f'"$CTX/{src.rstrip("/")}' in script, f"{name}: COPY {src} not staged"
        assert re.search(r"^USER \d+", text, re.M), f"{name} must end as a numeric non-root user"
        assert re.search(r"^ARG (PYTHON_IMAGE|SPARK_BASE_IMAGE)=msgstore-base:", text, re.M)
    assert "DOCKER_BUILDKIT=0" in script and "--network none" in script


def test_node_image_runs_as_the_uid_of_the_chart():
    text = (REPO / "docker" / "Dockerfile").read_text()
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    uid = re.search(r"^USER (\d+):", text, re.M).group(1)
    assert f"runAsUser: {uid}" in deployment
    assert 'CMD ["msgstore", "serve"]' in text


def test_kind_config_has_one_control_plane_two_workers_and_the_client_ports():
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker"]
    mappings = config["nodes"][0]["extraPortMappings"]
    service = yaml.safe_load((REPO / "examples" / "client-nodeport.yaml").read_text())
    node_port = service["spec"]["ports"][0]["nodePort"]
    store = yaml.safe_load((REPO / "examples" / "messagestore.yaml").read_text())
    external = store["spec"]["external"]
    # The client Service's port, then one per node of the sample store (and one to scale to),
    # then the same for the nodes' external Kafka listeners.
    nodes = range(store["spec"]["replicas"] + 1)
    wanted = [node_port] + [external["nodePortBase"] + i for i in nodes]
    wanted += [external["kafkaNodePortBase"] + i for i in nodes]
    assert [(m["containerPort"], m["hostPort"], m["listenAddress"]) for m in mappings] == [
        (port, port, "127.0.0.1") for port in wanted
    ]
    assert external["host"] == "127.0.0.1"
    assert service["spec"]["selector"]["app.kubernetes.io/instance"] == store["metadata"]["name"]


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_scripts_parse_and_pass_shellcheck(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    shellcheck = shutil.which("shellcheck") or str(
        Path(__import__("sys").executable).parent / "shellcheck"
    )
    proc = subprocess.run([shellcheck, "-x", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_make_targets_call_the_scripts():
    makefile = (REPO / "Makefile").read_text()
    for target, script in [
        ("images", "scripts/build-images.sh"),
        ("kind-up", "scripts/kind-up.sh"),
        ("kind-down", "scripts/kind-down.sh"),
    ]:
        assert re.search(rf"^{target}:.*\n\tbash {script}", makefile, re.M), target
