"""Local AWS (S3 + DynamoDB on moto) for s3ddb's tests, the demo and users' own tests.

In-process server, with request log and fault injection::

    from s3ddb.testing import LocalAWS

    with LocalAWS() as aws:                      # 127.0.0.1, OS-chosen port
        aws.create_bucket("bucket")
        aws.create_table("commits")
        ds = s3ddb.write_dataset(table, "s3+ddb://bucket/ds?ddbTableName=commits",
                                 storage_options=aws.storage_options())
        assert aws.count("dynamodb", "PutItem") == 1
        aws.inject_fault("dynamodb", "PutItem", "apply_then_drop")
        subprocess.run([...], env=aws.env(inherit=True))   # child processes: HTTP

Server in a separate process (complete isolation; no request log or faults)::

    with serve_in_subprocess(buckets=["bucket"]) as aws:
        ...

From a shell: ``s3ddb local-aws`` (or ``python -m s3ddb.testing``). Unlike ``LocalAWS``,
whose S3 honours conditional writes unless told otherwise, the command's S3 ignores
them unless given ``--conditional-writes``, and it creates the bucket ``my-bucket`` and
the table ``s3ddb_manifests`` the docs use unless given ``--bucket``, ``--table`` or
``--empty``.

Importing this package is cheap and needs neither moto nor werkzeug; they are imported
when a server starts and come with ``pip install 's3ddb[testing]'``.
"""

from s3ddb.testing._endpoint import DEFAULT_REGION, TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY
from s3ddb.testing._faults import FAULT_KINDS, Fault, FaultKind
from s3ddb.testing._requests import RequestRecord
from s3ddb.testing.local_aws import INSTALL_HINT, LocalAWS
from s3ddb.testing.process import LocalAWSProcess, serve_in_subprocess

__all__ = [
    "DEFAULT_REGION",
    "FAULT_KINDS",
    "INSTALL_HINT",
    "TEST_ACCESS_KEY_ID",
    "TEST_SECRET_ACCESS_KEY",
    "Fault",
    "FaultKind",
    "LocalAWS",
    "LocalAWSProcess",
    "RequestRecord",
    "serve_in_subprocess",
]
