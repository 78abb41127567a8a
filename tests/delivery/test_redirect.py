"""ROLLOUT_DOWNLOADS_OFFLOAD=redirect: binaries in S3-compatible object storage, downloads a 302 to a presigned URL.

The store is moto's S3 server (``ThreadedMotoServer``) on loopback, started here. Why it, and what it
does not check (docs/operations.md#object-storage): it speaks S3's REST API to boto3 (multipart
uploads, server-side copies, object metadata) and serves GET and HEAD with ranges (suffix and 416
included), If-None-Match (304) and the object's stored Content-Type, Cache-Control and metadata, as
S3 does; but it verifies neither a presigned URL's signature nor its expiry, and ignores If-Range.
So this module checks the Location itself: its SigV4 signature, recomputed here from AWS's
published algorithm with the secret key, and its lifetime (at most 15 minutes).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, quote, urlsplit

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from rollout.models import ReleaseBinary
from rollout.registry.binaries import release_binary_store
from rollout.registry.storage import IMMUTABLE
from tests.delivery.conftest import store_release
from tests.factories import manifest, rollout_settings, signed

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BUCKET = "bcd-releases"
ACCESS_KEY, SECRET_KEY, REGION = "rollout-test", "rollout-test-secret", "us-east-1"
DATA = os.urandom(200_000)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_endpoint, settings, monkeypatch):
    """Settings as project/settings.py makes them for redirect mode, on a fresh bucket."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION)
    for existing in client.list_objects_v2(Bucket=BUCKET).get("Contents", []) if _exists(client) else []:
        client.delete_object(Bucket=BUCKET, Key=existing["Key"])
    if not _exists(client):
        client.create_bucket(Bucket=BUCKET)
    settings.ROLLOUT = rollout_settings()
    settings.ROLLOUT_DOWNLOADS_OFFLOAD = "redirect"
    settings.ROLLOUT_DOWNLOADS_PRESIGN_SECONDS = 600
    settings.ROLLOUT_S3_BUCKET = BUCKET
    settings.ROLLOUT_S3_ENDPOINT_URL = s3_endpoint
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": s3_endpoint,
                "region_name": REGION,
                "addressing_style": "path",
                "signature_version": "s3v4",
                "querystring_auth": True,
                "default_acl": None,
                "file_overwrite": True,
            },
        },
    }
    return client


def _exists(client) -> bool:
    return any(b["Name"] == BUCKET for b in client.list_buckets()["Buckets"])


def keys(client) -> list[str]:
    return sorted(item["Key"] for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def sigv4_query_valid(url: str, *, method: str, secret: str, now: datetime) -> bool:
    """AWS Signature Version 4, query-string form (docs.aws.amazon.com: "Authenticating Requests: Using Query
    Parameters"), recomputed from the URL alone: the signature matches and the URL has not expired."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    signature = query.pop("X-Amz-Signature")
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))
    assert query["X-Amz-SignedHeaders"] == "host"
    canonical = "\n".join([method, parts.path, canonical_query, f"host:{parts.netloc}\n", "host", "UNSIGNED-PAYLOAD"])
    stamp = query["X-Amz-Date"]
    scope = query["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return hmac.compare_digest(expected, signature) and now <= signed_at + timedelta(
        seconds=int(query["X-Amz-Expires"])
    )


def test_upload_streams_to_a_temporary_object_and_copies_only_checked_bytes(bucket):
    store_release("1.0.0", DATA)
    assert keys(bucket) == ["bcd/1.0.0/linux-amd64"]  # the temporary object is gone
    head = bucket.head_object(Bucket=BUCKET, Key="bcd/1.0.0/linux-amd64")
    assert head["ContentLength"] == len(DATA)
    assert head["CacheControl"] == IMMUTABLE
    assert head["ContentType"] == "application/octet-stream"
    assert head["Metadata"] == {"checksum-sha256": hashlib.sha256(DATA).hexdigest()}
    # Wrong bytes for another release: refused, nothing written, the first object untouched.
    binaries = {"linux-amd64": {"sha256": hashlib.sha256(b"x" * 100).hexdigest(), "size": 100}}
    from rollout.registry.releases import release_register

    release_register(envelope=signed(manifest("2.0.0", 2, binaries=binaries)))
    with pytest.raises(Exception, match="sha256") as refused:
        release_binary_store(version="2.0.0", platform="linux-amd64", source=io.BytesIO(b"y" * 100))
    assert getattr(refused.value, "code", None) == "sha256_mismatch"
    with pytest.raises(Exception, match="more than 100 bytes"):
        release_binary_store(version="2.0.0", platform="linux-amd64", source=io.BytesIO(b"x" * 5000))
    assert keys(bucket) == ["bcd/1.0.0/linux-amd64"]
    assert ReleaseBinary.objects.get(release__version="2.0.0").stored_at is None


def test_downloads_redirect_to_a_presigned_url_whose_target_honours_the_same_semantics(bucket, live_server):
    binary = store_release("1.0.0", DATA)
    sha = hashlib.sha256(DATA).hexdigest()
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        redirect = http.get(binary.path)
        assert redirect.status_code == 302
        assert redirect.headers["cache-control"] == "no-store"
        assert redirect.headers["x-checksum-sha256"] == sha
        location = redirect.headers["location"]
        query = dict(parse_qsl(urlsplit(location).query))
        assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
        assert int(query["X-Amz-Expires"]) == 600 <= 15 * 60
        now = datetime.now(UTC)
        assert sigv4_query_valid(location, method="GET", secret=SECRET_KEY, now=now)
        assert not sigv4_query_valid(location, method="GET", secret="another-secret", now=now)
        assert not sigv4_query_valid(location, method="GET", secret=SECRET_KEY, now=now + timedelta(seconds=601))

        whole = http.get(location)
        assert whole.status_code == 200
        assert whole.content == DATA
        assert whole.headers["cache-control"] == IMMUTABLE
        assert whole.headers["content-type"] == "application/octet-stream"
        assert whole.headers["accept-ranges"] == "bytes"
        assert whole.headers["x-amz-meta-checksum-sha256"] == sha
        assert whole.headers["content-disposition"] == 'attachment; filename="bcd-1.0.0-linux-amd64"'
        ranged = http.get(location, headers={"Range": "bytes=1000-1999"})
        assert (ranged.status_code, ranged.content) == (206, DATA[1000:2000])
        assert ranged.headers["content-range"] == f"bytes 1000-1999/{len(DATA)}"
        suffix = http.get(location, headers={"Range": "bytes=-500"})
        assert (suffix.status_code, suffix.content) == (206, DATA[-500:])
        assert http.get(location, headers={"Range": f"bytes={len(DATA)}-"}).status_code == 416
        assert http.get(location, headers={"If-None-Match": whole.headers["etag"]}).status_code == 304

        head = http.head(binary.path)
        assert head.status_code == 302
        assert sigv4_query_valid(head.headers["location"], method="HEAD", secret=SECRET_KEY, now=now)
        target = http.head(head.headers["location"])
        assert (target.status_code, target.content) == (200, b"")
        assert target.headers["content-length"] == str(len(DATA))

        assert http.get("/api/compute/downloads/bcd/9.9.9/linux-amd64").json()["code"] == "not_found"
        bucket.delete_object(Bucket=BUCKET, Key="bcd/1.0.0/linux-amd64")  # lost from the bucket
        lost = http.get(binary.path)
        assert (lost.status_code, lost.json()["code"]) == (404, "not_found")
