"""The Iceberg REST catalog's loadTable: requests to the store and latency, beside a
plain GET of the metadata file.

On the embedded local endpoint (S3 and DynamoDB on moto, in this process), a
publishing ``s3+ddb://`` dataset is registered in a registry on S3 and served by
``s3ddb.catalog_server.CatalogServer`` on 127.0.0.1. Each round:

* ``loadTable``: ``GET /v1/namespaces/bench/tables/events`` with the token; the
  store requests it made are counted from the endpoint's request log (target at
  most 2 when the newest version is published: the server keeps the registry entry
  it read in the warm-up load, and reads it again every 5 seconds);
* ``304``: the same with ``If-None-Match`` of the previous answer's ETag;
* ``plain GET``: boto3's ``GetObject`` of the newest ``vN.metadata.json``, which is
  what a reader handed the path would do (and which may lag under writers).

Every ``--commit-every`` rounds an append commits a new version (drained, so it is
published), so the loads also follow new versions. Prints the medians and the
requests per load; ``--json`` prints them as JSON.

Usage: ``python benchmarks/catalog.py [--rounds 200] [--commit-every 20] [--json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter

import pyarrow as pa
import requests

import s3ddb
import s3ddb.commit.finalizer
from s3ddb.catalog_server import CatalogRegistry, CatalogServer, parse_table_name
from s3ddb.external_store import create_table
from s3ddb.io import AwsConfig
from s3ddb.testing import LocalAWS

BUCKET = "bench-catalog"
TABLE = "bench_catalog_manifests"
TOKEN = "bench-token-0123456789abcdef"


def _ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--commit-every", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    with LocalAWS(conditional_writes=False) as aws:
        aws.create_bucket(BUCKET)
        options = aws.storage_options()
        create_table(TABLE, AwsConfig.from_storage_options(options))
        root = f"s3://{BUCKET}/lake"
        uri = f"s3+ddb://{BUCKET}/lake/events?ddbTableName={TABLE}"
        ds = s3ddb.write_dataset(
            pa.table({"id": pa.array(range(1000), pa.int64())}),
            uri,
            open_formats=["iceberg"],
            storage_options=options,
        )
        s3ddb.commit.finalizer.drain()
        registry = CatalogRegistry(root, options)
        registry.register(parse_table_name("bench.events"), uri)
        s3 = aws.boto3_client("s3")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        loads: list[float] = []
        not_modified: list[float] = []
        plain: list[float] = []
        per_load: Counter[int] = Counter()
        dataset_requests: Counter[int] = Counter()
        with CatalogServer(registry, token=TOKEN) as server:
            session = requests.Session()
            table_url = f"{server.url}/v1/namespaces/bench/tables/events"
            session.get(table_url, headers=auth, timeout=60).raise_for_status()  # warm
            for i in range(args.rounds):
                if i and i % args.commit_every == 0:
                    ds.insert(pa.table({"id": pa.array([1000 + i], pa.int64())}))
                    s3ddb.commit.finalizer.drain()
                aws.clear_requests()
                start = time.perf_counter()
                answer = session.get(table_url, headers=auth, timeout=60)
                loads.append(time.perf_counter() - start)
                answer.raise_for_status()
                made = aws.requests
                per_load[len(made)] += 1
                dataset_requests[sum("_s3ddb_catalog/" not in r.path for r in made)] += 1
                etag = answer.headers["ETag"]
                start = time.perf_counter()
                again = session.get(table_url, headers={**auth, "If-None-Match": etag}, timeout=60)
                not_modified.append(time.perf_counter() - start)
                assert again.status_code == 304, again.status_code
                key = answer.json()["metadata-location"].removeprefix(f"s3://{BUCKET}/")
                start = time.perf_counter()
                s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                plain.append(time.perf_counter() - start)
    result = {
        "rounds": args.rounds,
        "versions": ds.version,
        "load_table_ms": _ms(loads),
        "not_modified_ms": _ms(not_modified),
        "plain_get_ms": _ms(plain),
        "store_requests_per_load": dict(sorted(per_load.items())),
        "dataset_requests_per_load": dict(sorted(dataset_requests.items())),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"loadTable on s3+ddb://, {args.rounds} rounds, {ds.version} versions (local endpoint)")
    print(f"  loadTable (200)        median {result['load_table_ms']:8.3f} ms")
    print(f"  loadTable (304)        median {result['not_modified_ms']:8.3f} ms")
    print(f"  plain GET of metadata  median {result['plain_get_ms']:8.3f} ms")
    print(f"  store requests per load (count: loads): {result['store_requests_per_load']}")
    print(f"  for the dataset (registry entry aside): {result['dataset_requests_per_load']}")


if __name__ == "__main__":
    main()
