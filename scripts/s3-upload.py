#!/usr/bin/env python3
"""Uploads a folder to a bucket of the local S3 server (moto, scripts/s3-server.sh), making the
bucket and a policy that lets anyone read it. Uses boto3 from the server's virtual environment.

    target/s3-server/venv/bin/python scripts/s3-upload.py ENDPOINT DIR BUCKET PREFIX
"""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import boto3


def main():
    endpoint, local, bucket, prefix = sys.argv[1:]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                      aws_secret_access_key="test")
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*",
              "Action": ["s3:GetObject", "s3:ListBucket"],
              "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    files = [os.path.join(d, f) for d, _, fs in os.walk(local) for f in fs]

    def put(path):
        s3.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, local)}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))
    print(f"uploaded {len(files)} files of {local} to s3://{bucket}/{prefix}", file=sys.stderr)


if __name__ == "__main__":
    main()
