"""`msgstore spark-job ingest ... -o yaml`: render the Kubernetes Job that runs a Spark job.

The output goes to `kubectl apply -f -`; nothing here talks to a cluster. Bad arguments
exit with status 2 and a message naming the problem, and print nothing on stdout, so a
pipe into kubectl never applies half an object.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml
from msgstore_operator.spark_job import (
    DEFAULT_PORT,
    DEFAULT_SPARK_IMAGE,
    INGEST_FORMATS,
    IngestRequest,
    SparkResources,
    build_ingest_job,
)

from storage_node.errors import InvalidArgument


def add_spark_job_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Registers `spark-job` and its `ingest` subcommand on the CLI's subparsers."""
    parser = subparsers.add_parser(
        "spark-job",
        help="render Kubernetes Jobs that run msgstore's Spark jobs on a cluster",
        description="Render a Kubernetes Job running `spark-submit --deploy-mode cluster` of a "
        "msgstore Spark job against a MessageStore in the same cluster.",
    )
    jobs = parser.add_subparsers(dest="spark_job", metavar="JOB", required=True)
    ingest = jobs.add_parser(
        "ingest",
        help="load JSON lines, CSV or Parquet files into a topic",
        description="Render the Job that runs spark/jobs/ingest.py in cluster mode. Apply it "
        "with: msgstore spark-job ingest ... -o yaml | kubectl apply -f -",
    )
    ingest.add_argument("--store", required=True, help="MessageStore name")
    ingest.add_argument("-n", "--namespace", default="default", help="namespace of the store")
    ingest.add_argument("--topic", required=True, help="topic to write to")
    ingest.add_argument(
        "--input",
        required=True,
        help="files to load, as Spark reads them: file:///path inside the Spark image, "
        "s3a://bucket/path, hdfs://...",
    )
    ingest.add_argument("--format", choices=INGEST_FORMATS, default="jsonl")
    ingest.add_argument("--key-field", help="field whose value becomes each message's key")
    ingest.add_argument("--tag-field", help="field whose value becomes each message's tag")
    ingest.add_argument(
        "--time-field", help="field holding each message's born time (ms since epoch or a time)"
    )
    ingest.add_argument("--name", help="Job name (default: <store>-ingest-<topic>)")
    ingest.add_argument("--image", default=DEFAULT_SPARK_IMAGE, help="Spark job image")
    ingest.add_argument(
        "--image-pull-policy", default="IfNotPresent", choices=("Always", "IfNotPresent", "Never")
    )
    ingest.add_argument("--port", type=int, default=DEFAULT_PORT, help="the store's HTTP port")
    ingest.add_argument("--no-auth", action="store_true", help="the store runs without token auth")
    ingest.add_argument(
        "--no-tls", action="store_true", help="the store serves plain HTTP (spec.tls.enabled false)"
    )
    ingest.add_argument("--token-secret", help="Secret with the node token (default <store>-token)")
    ingest.add_argument("--token-key", default="token", help="key of the token in the Secret")
    ingest.add_argument(
        "--service-account", help="ServiceAccount of the Spark driver (default <store>-spark)"
    )
    ingest.add_argument("--executors", type=int, default=2)
    ingest.add_argument("--driver-cores", type=int, default=1)
    ingest.add_argument("--driver-memory", default="1g")
    ingest.add_argument("--executor-cores", type=int, default=1)
    ingest.add_argument("--executor-memory", default="2g")
    ingest.add_argument(
        "--driver-request-cores", help="CPU the driver pod requests, e.g. 250m (default: cores)"
    )
    ingest.add_argument(
        "--executor-request-cores", help="CPU each executor pod requests (default: cores)"
    )
    ingest.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    ingest.set_defaults(func=run_spark_job)
    return parser


def register_spark_job(subparsers: Any, _connection_parent: argparse.ArgumentParser) -> None:
    """`msgstore spark-job ...`: Kubernetes Jobs that submit msgstore's Spark jobs."""
    add_spark_job_parser(subparsers)


def request_from_args(args: argparse.Namespace) -> IngestRequest:
    return IngestRequest(
        store=args.store,
        namespace=args.namespace,
        topic=args.topic,
        input=args.input,
        format=args.format,
        key_field=args.key_field,
        tag_field=args.tag_field,
        time_field=args.time_field,
        name=args.name,
        image=args.image,
        port=args.port,
        auth=not args.no_auth,
        tls=not args.no_tls,
        token_secret=args.token_secret,
        token_key=args.token_key,
        service_account=args.service_account,
        image_pull_policy=args.image_pull_policy,
        resources=SparkResources(
            executors=args.executors,
            driver_cores=args.driver_cores,
            driver_memory=args.driver_memory,
            executor_cores=args.executor_cores,
            executor_memory=args.executor_memory,
            driver_request_cores=args.driver_request_cores,
            executor_request_cores=args.executor_request_cores,
        ),
    )


def render(job: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(job, indent=2) + "\n"
    return yaml.safe_dump(job, sort_keys=False, default_flow_style=False)


def run_spark_job(args: argparse.Namespace) -> int:
    """Prints the rendered Job; exit status 2 and nothing on stdout for bad arguments."""
    try:
        job = build_ingest_job(request_from_args(args))
    except InvalidArgument as exc:
        print(f"msgstore spark-job {args.spark_job}: {exc.message}", file=sys.stderr)
        return 2
    sys.stdout.write(render(job, args.output))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m storage_node.cli.spark_job`), same as `msgstore spark-job`."""
    parser = argparse.ArgumentParser(prog="msgstore")
    add_spark_job_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
