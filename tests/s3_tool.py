"""tests/s3_tool.py — an independent S3 client for the object-store tests (issue 27): botocore
(Debian's python3-botocore), not minitrain's objstore/s3.c, so a test's setup and its corruptions
do not go through the code under test. Endpoint and credentials from MT_S3_ENDPOINT,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (tests/swift_lib.sh sets them).

  s3_tool.py mb BUCKET                 create a bucket
  s3_tool.py ls BUCKET PREFIX          every key under PREFIX with its size ("KEY SIZE" lines)
  s3_tool.py get BUCKET KEY            the object's bytes on stdout
  s3_tool.py put BUCKET KEY FILE       upload FILE as KEY
  s3_tool.py flip BUCKET KEY OFFSET    read KEY, xor the byte at OFFSET with 0x01, write it back
  s3_tool.py rm BUCKET KEY             delete KEY
  s3_tool.py verify BUCKET PREFIX STEP [DIR]   the archived step PREFIX/step_N against the commit
                                       rule: objects.json exists, every object it lists has its
                                       size and SHA-256 (hashlib over the bytes GET returns), no
                                       other key under the step, and with DIR every object equals
                                       DIR/NAME's SHA-256 (the local step it was archived from)
  s3_tool.py orphans BUCKET PREFIX     keys under PREFIX/step_N/ of a step without objects.json,
                                       and a 'latest' that names no step with one (exit 1 if any)
Exit 0, or 1 with botocore's error on stderr.
"""
import hashlib
import json
import os
import re
import sys

import botocore.session
from botocore.config import Config


def client():
    s = botocore.session.get_session()
    return s.create_client(
        "s3", endpoint_url=os.environ["MT_S3_ENDPOINT"],
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))


def keys(c, bucket, prefix):
    token = None
    while True:
        kw = {"Bucket": bucket, "Prefix": prefix}
        if token:
            kw["ContinuationToken"] = token
        r = c.list_objects_v2(**kw)
        for o in r.get("Contents", []):
            yield o["Key"], o["Size"]
        if not r.get("IsTruncated"):
            return
        token = r["NextContinuationToken"]


def step_key(prefix, step, name=""):
    return "%s%sstep_%08d/%s" % (prefix, "/" if prefix else "", int(step), name)


def verify(c, bucket, prefix, step, local=None):
    man = json.loads(c.get_object(Bucket=bucket, Key=step_key(prefix, step, "objects.json"))["Body"].read())
    if man.get("format") != "minitrain-objects" or man.get("step") != int(step):
        sys.exit("verify: objects.json of step %s: format/step %r/%r" % (step, man.get("format"), man.get("step")))
    names = set()
    for f in man["files"]:
        body = c.get_object(Bucket=bucket, Key=step_key(prefix, step, f["name"]))["Body"].read()
        sha = hashlib.sha256(body).hexdigest()
        if len(body) != f["size"] or sha != f["sha256"]:
            sys.exit("verify: %s: %d bytes %s, objects.json says %d %s" % (f["name"], len(body), sha[:16], f["size"], f["sha256"][:16]))
        if local is not None:
            with open(os.path.join(local, f["name"]), "rb") as fh:
                if hashlib.sha256(fh.read()).hexdigest() != sha:
                    sys.exit("verify: %s differs from %s" % (f["name"], local))
        names.add(f["name"])
    if local is not None and set(os.listdir(local)) != names:
        sys.exit("verify: objects.json lists %s, %s holds %s" % (sorted(names), local, sorted(os.listdir(local))))
    extra = [k for k, _ in keys(c, bucket, step_key(prefix, step)) if k.rsplit("/", 1)[1] not in names | {"objects.json"}]
    if extra:
        sys.exit("verify: keys not in objects.json: %s" % extra)
    print("step %s: %d objects verified" % (step, len(names)))


def orphans(c, bucket, prefix):
    pre = (prefix + "/" if prefix else "")
    by_step = {}
    for k, _ in keys(c, bucket, pre + "step_"):
        m = re.match(re.escape(pre) + r"step_(\d+)/(.*)$", k)
        if m:
            by_step.setdefault(int(m.group(1)), set()).add(m.group(2))
    bad = ["%s (step %d has no objects.json)" % (sorted(v), s) for s, v in by_step.items() if "objects.json" not in v]
    try:
        latest = int(c.get_object(Bucket=bucket, Key=pre + "latest")["Body"].read())
        if "objects.json" not in by_step.get(latest, ()):
            bad.append("latest names step %d without objects.json" % latest)
    except c.exceptions.NoSuchKey:
        pass
    if bad:
        sys.exit("orphans: " + "; ".join(bad))
    print("no orphans: steps %s" % sorted(by_step))


def main(argv):
    c = client()
    op = argv[1]
    if op == "mb":
        c.create_bucket(Bucket=argv[2])
    elif op == "ls":
        for k, n in keys(c, argv[2], argv[3]):
            print(k, n)
    elif op == "get":
        sys.stdout.buffer.write(c.get_object(Bucket=argv[2], Key=argv[3])["Body"].read())
    elif op == "put":
        with open(argv[4], "rb") as f:
            c.put_object(Bucket=argv[2], Key=argv[3], Body=f.read())
    elif op == "flip":
        b = bytearray(c.get_object(Bucket=argv[2], Key=argv[3])["Body"].read())
        b[int(argv[4])] ^= 1
        c.put_object(Bucket=argv[2], Key=argv[3], Body=bytes(b))
    elif op == "rm":
        c.delete_object(Bucket=argv[2], Key=argv[3])
    elif op == "verify":
        verify(c, argv[2], argv[3], argv[4], argv[5] if len(argv) > 5 else None)
    elif op == "orphans":
        orphans(c, argv[2], argv[3])
    else:
        sys.exit("s3_tool.py: unknown op " + op)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except SystemExit:
        raise
    except Exception as e:  # one line, the test prints it
        sys.exit("s3_tool.py: %s" % e)
