"""om4's wheel on object storage: om4.Loader on S3 and over HTTP gives the local loader's batches
bit for bit. Needs the local S3 server (`eval "$(scripts/s3-server.sh)"` sets OM4_S3_ENDPOINT;
its venv's boto3 uploads the store); skipped without it. CI runs it in its S3 step.
"""

import os
import subprocess
from pathlib import Path

import pytest

from test_loader import UPSTREAM, a_case, case_loader

ENDPOINT = os.environ.get("OM4_S3_ENDPOINT")
ROOT = Path(__file__).resolve().parents[3]
BUCKET, PREFIX = "om4-python", "upstream"

pytestmark = pytest.mark.skipif(not ENDPOINT, reason="no local S3 server (OM4_S3_ENDPOINT unset)")


@pytest.fixture(scope="module")
def uploaded():
    python = ROOT / "target" / "s3-server" / "venv" / "bin" / "python"
    upload = [str(python), str(ROOT / "scripts" / "s3-upload.py"), ENDPOINT, str(UPSTREAM / "store"), BUCKET, PREFIX]
    subprocess.run(upload, check=True)


def batches(loader, epoch):
    out = []
    for batch in loader.epoch(epoch):
        out.append([(s.model_input.tobytes(), s.label.tobytes()) for s in batch.steps])
    return out


def test_s3_and_http_stores_give_the_local_batches(uploaded):
    case = a_case()
    local = batches(case_loader(case), 1)
    s3 = lambda name: {"type": "s3", "endpoint_url": ENDPOINT, "anon": True, "bucket": BUCKET, "path": f"{PREFIX}/{name}"}
    http = lambda name: {"type": "http", "url": f"{ENDPOINT}/{BUCKET}/{PREFIX}/{name}"}
    assert local
    assert batches(case_loader(case, s3), 1) == local
    assert batches(case_loader(case, http), 1) == local


def test_a_missing_bucket_is_an_error_naming_it(uploaded):
    absent = lambda name: {"type": "s3", "endpoint_url": ENDPOINT, "anon": True, "bucket": "om4-absent", "path": name}
    with pytest.raises(RuntimeError, match="om4-absent"):
        case_loader(a_case(), absent)
